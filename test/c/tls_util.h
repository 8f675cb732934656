/*
 * tls_util.h — throw-away certificates for the TLS tests, made at run time
 * with OpenSSL's API into a temporary directory (never committed), and
 * small helpers the TLS tests share.
 *
 *   ca          the test CA (trusted by the tests' contexts)
 *   srv         "localhost" + 127.0.0.1 + ::1, signed by ca
 *   cli         a client certificate signed by ca
 *   self        a self-signed "localhost" certificate (no CA knows it)
 *   expired     "localhost" signed by ca, expired yesterday
 *   other_ca    a second CA that signed nothing the servers use
 *
 * Keys are EC P-256: a handshake signs in microseconds, so a thousand
 * connections take a fraction of a second.
 */
#ifndef WEFT_TEST_TLS_UTIL_H
#define WEFT_TEST_TLS_UTIL_H

#include "harness.h"
#include "weft_tls.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdint.h>

typedef struct tls_pki {
    char dir[64];
    char ca[128], other_ca[128];
    char srv[128], srv_key[128];
    char cli[128], cli_key[128];
    char self[128], self_key[128];
    char expired[128], expired_key[128];
} tls_pki;

static inline void tls_add_ext(X509 *x, X509V3_CTX *v3, int nid, const char *value)
{
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, v3, nid, value);
    CHECK(e != NULL);
    CHECK(X509_add_ext(x, e, -1) == 1);
    X509_EXTENSION_free(e);
}

/* A certificate for @key named @cn, signed by @issuer (NULL: itself),
 * valid from @from to @to seconds relative to now. */
static inline X509 *tls_make_cert(EVP_PKEY *key, const char *cn, X509 *issuer,
                           EVP_PKEY *issuer_key, int ca, const char *san,
                           long from, long to)
{
    static long serial = 1000;
    X509 *x = X509_new();
    CHECK(x != NULL);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++ + (long)getpid() * 100000L);
    X509_gmtime_adj(X509_getm_notBefore(x), from);
    X509_gmtime_adj(X509_getm_notAfter(x), to);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"weft tests", -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
    tls_add_ext(x, &v3, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
    tls_add_ext(x, &v3, NID_key_usage,
                ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
    tls_add_ext(x, &v3, NID_subject_key_identifier, "hash");
    if (issuer)
        tls_add_ext(x, &v3, NID_authority_key_identifier, "keyid:always");
    if (!ca)
        tls_add_ext(x, &v3, NID_ext_key_usage, "serverAuth,clientAuth");
    if (san)
        tls_add_ext(x, &v3, NID_subject_alt_name, san);
    CHECK(X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) > 0);
    return x;
}

static inline void tls_write_pem(const char *path, X509 *x, EVP_PKEY *key)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (x)
        CHECK(PEM_write_X509(f, x) == 1);
    if (key)
        CHECK(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) == 1);
    CHECK(fclose(f) == 0);
}

/* Make a leaf signed by @ca and write it (and its key) under @p->dir. */
static inline void tls_leaf(const tls_pki *p, const char *name, const char *cn,
                     const char *san, X509 *ca, EVP_PKEY *ca_key, long from,
                     long to, char *cert_path, char *key_path)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    CHECK(k != NULL);
    X509 *x = tls_make_cert(k, cn, ca, ca_key, 0, san, from, to);
    snprintf(cert_path, 128, "%s/%s.pem", p->dir, name);
    snprintf(key_path, 128, "%s/%s.key", p->dir, name);
    tls_write_pem(cert_path, x, NULL);
    tls_write_pem(key_path, NULL, k);
    X509_free(x);
    EVP_PKEY_free(k);
}

static inline void tls_pki_make(tls_pki *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "/tmp/weft-tls-test.XXXXXX");
    CHECK(mkdtemp(p->dir) != NULL);
    const long day = 86400;
    EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *other_key = EVP_EC_gen("P-256");
    CHECK(ca_key && other_key);
    X509 *ca = tls_make_cert(ca_key, "weft test CA", NULL, NULL, 1, NULL, -day, 30 * day);
    X509 *other = tls_make_cert(other_key, "weft other CA", NULL, NULL, 1, NULL, -day, 30 * day);
    snprintf(p->ca, sizeof p->ca, "%s/ca.pem", p->dir);
    snprintf(p->other_ca, sizeof p->other_ca, "%s/other_ca.pem", p->dir);
    tls_write_pem(p->ca, ca, NULL);
    tls_write_pem(p->other_ca, other, NULL);
    const char *san = "DNS:localhost,IP:127.0.0.1,IP:::1";
    tls_leaf(p, "srv", "localhost", san, ca, ca_key, -day, 30 * day, p->srv, p->srv_key);
    tls_leaf(p, "cli", "weft test client", NULL, ca, ca_key, -day, 30 * day, p->cli, p->cli_key);
    tls_leaf(p, "expired", "localhost", san, ca, ca_key, -10 * day, -day, p->expired,
             p->expired_key);
    /* Self-signed: its own issuer. */
    EVP_PKEY *sk = EVP_EC_gen("P-256");
    X509 *sx = tls_make_cert(sk, "localhost", NULL, NULL, 0, san, -day, 30 * day);
    snprintf(p->self, sizeof p->self, "%s/self.pem", p->dir);
    snprintf(p->self_key, sizeof p->self_key, "%s/self.key", p->dir);
    tls_write_pem(p->self, sx, NULL);
    tls_write_pem(p->self_key, NULL, sk);
    X509_free(sx);
    EVP_PKEY_free(sk);
    X509_free(ca);
    X509_free(other);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(other_key);
}

static inline void tls_pki_remove(tls_pki *p)
{
    const char *files[] = {"ca.pem", "other_ca.pem", "srv.pem", "srv.key", "cli.pem",
                           "cli.key", "self.pem", "self.key", "expired.pem", "expired.key"};
    char path[160];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", p->dir, files[i]);
        unlink(path);
    }
    CHECK(rmdir(p->dir) == 0);
}

/* Contexts: a server with @cert/@key, a client trusting @ca. */
static inline weft_tls_ctx_t *tls_ctx(const weft_tls_ctx_opts_t *o)
{
    weft_tls_ctx_t *c = NULL;
    int rc = weft_tls_ctx_new(&c, o);
    if (rc != 0)
        fprintf(stderr, "context: %s\n", weft_tls_error_string(NULL));
    CHECK_EQ(rc, 0);
    return c;
}

static inline weft_tls_ctx_t *tls_server_ctx(const char *cert, const char *key)
{
    return tls_ctx(&(weft_tls_ctx_opts_t){.server = 1, .cert_file = cert, .key_file = key});
}

static inline weft_tls_ctx_t *tls_client_ctx(const char *ca)
{
    return tls_ctx(&(weft_tls_ctx_opts_t){.ca_file = ca});
}

/* Read exactly strlen(@want) bytes; they must be @want. */
static inline void tls_expect(weft_tls_t *t, const char *want, int64_t deadline)
{
    size_t n = strlen(want), got = 0;
    char buf[256];
    CHECK(n <= sizeof buf);
    while (got < n) {
        ssize_t k = weft_tls_read(t, buf + got, n - got, deadline);
        if (k <= 0)
            fprintf(stderr, "read: %zd %s\n", k, weft_tls_error_string(t));
        CHECK(k > 0);
        got += (size_t)k;
    }
    CHECK(memcmp(buf, want, n) == 0);
}

/* A TLS client connection to 127.0.0.1:@port verified as @name. */
static inline weft_tls_t *tls_dial_local(weft_tls_ctx_t *ctx, int port, const char *name,
                                         int64_t deadline)
{
    int fd = weft_tcp_connect("127.0.0.1", port, deadline);
    CHECK(fd >= 0);
    weft_tls_t *t;
    int rc = weft_tls_connect(&t, ctx, fd, name, deadline);
    if (rc < 0)
        fprintf(stderr, "connect: %s\n", weft_tls_error_string(NULL));
    CHECK_EQ(rc, 0);
    return t;
}

/* A deterministic byte stream for transfers that must arrive intact. */
static inline uint8_t tls_pattern(uint64_t i)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ULL;
    return (uint8_t)(x >> 56 ^ x >> 29);
}

#define TLS_SEC 1000000000LL

#endif
