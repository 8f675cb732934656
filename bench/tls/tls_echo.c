/*
 * tls_echo — TLS throughput and round trips for bench/parts/tls.sh.
 * Built by that script (it links libweft_tls and OpenSSL, which the
 * generic bench rule does not).
 *
 *   tls_echo --mode M --bulk MIB         one connection sends MIB MiB one
 *                                        way; prints MiB/s
 *   tls_echo --mode M --rtt SECS [--conns C] [--msg BYTES]
 *                                        C connections echo BYTES-byte
 *                                        messages for SECS; prints round
 *                                        trips/s and, on a second line,
 *                                        the process's CPU us per round trip
 *   tls_echo --ktls-probe                may this kernel attach the "tls"
 *                                        ULP to a TCP socket? (kTLS)
 *
 * Modes: "tls" (weft_tls), "plain" (the same weft program over TCP), and
 * for --bulk "ossl": OpenSSL on its own socket BIO with blocking threads
 * and SSL_OP_ENABLE_KTLS, the way a program without fibers would do it
 * (kernel TLS when the kernel offers it; the line "ktls: tx rx" on stderr
 * tells whether it was used). The server runs on its own thread and
 * scheduler, the client on the main thread: two cores.
 */
#include "weft.h"
#include "weft_tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

static enum { M_TLS, M_PLAIN, M_OSSL } mode;
static weft_tls_ctx_t *sctx, *cctx;
static SSL_CTX *ossl_s, *ossl_c;
static int lfd, port;
static long long bulk_bytes;
static int64_t rtt_ns;
static int conns = 100, msg = 64;

static void die(const char *what)
{
    fprintf(stderr, "tls_echo: %s: %s\n", what, weft_tls_error_string(NULL));
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* A self-signed P-256 certificate for localhost, in memory. */
static void make_identity(EVP_PKEY **key, X509 **cert)
{
    *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, *key);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, n);
    if (!*key || X509_sign(x, *key, EVP_sha256()) <= 0)
        die("certificate");
    *cert = x;
}

static void setup_tls(void)
{
    EVP_PKEY *key;
    X509 *cert;
    make_identity(&key, &cert);
    /* weft_tls reads PEM files: write them to a private temp directory. */
    char dir[] = "/tmp/tls_echo.XXXXXX", cp[64], kp[64];
    if (!mkdtemp(dir))
        die("mkdtemp");
    snprintf(cp, sizeof cp, "%s/c.pem", dir);
    snprintf(kp, sizeof kp, "%s/k.pem", dir);
    FILE *f = fopen(cp, "w");
    PEM_write_X509(f, cert);
    fclose(f);
    f = fopen(kp, "w");
    PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    weft_tls_ctx_opts_t so = {.server = 1, .cert_file = cp, .key_file = kp};
    weft_tls_ctx_opts_t co = {.ca_file = cp};
    if (weft_tls_ctx_new(&sctx, &so) < 0 || weft_tls_ctx_new(&cctx, &co) < 0)
        die("context");
    ossl_s = SSL_CTX_new(TLS_server_method());
    ossl_c = SSL_CTX_new(TLS_client_method());
    if (!ossl_s || !ossl_c || SSL_CTX_use_certificate_file(ossl_s, cp, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(ossl_s, kp, SSL_FILETYPE_PEM) != 1)
        die("OpenSSL context");
    SSL_CTX_set_options(ossl_s, SSL_OP_ENABLE_KTLS);
    SSL_CTX_set_options(ossl_c, SSL_OP_ENABLE_KTLS);
    unlink(cp);
    unlink(kp);
    rmdir(dir);
    X509_free(cert);
    EVP_PKEY_free(key);
}

/* ---- one connection's I/O, either way ------------------------------- */

typedef struct conn {
    int fd;
    weft_tls_t *t;
} conn;

static ssize_t c_read(conn *c, void *b, size_t n)
{
    return c->t ? weft_tls_read(c->t, b, n, WEFT_FOREVER) : weft_recv(c->fd, b, n, 0, WEFT_FOREVER);
}

static int c_write(conn *c, const void *b, size_t n)
{
    return c->t ? weft_tls_write_all(c->t, b, n, NULL, WEFT_FOREVER)
                : weft_write_all(c->fd, b, n, NULL, WEFT_FOREVER);
}

static void c_close(conn *c)
{
    if (c->t)
        weft_tls_close(c->t);
    else
        weft_close(c->fd);
}

/* ---- the weft server: echo (rtt) or sink (bulk) --------------------- */

static void *serve(void *arg)
{
    conn c = {.fd = (int)(long)arg};
    int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (mode == M_TLS && weft_tls_accept(&c.t, sctx, c.fd, WEFT_FOREVER) < 0)
        return NULL;
    static __thread char buf[CHUNK];
    ssize_t n;
    long long total = 0;
    while ((n = c_read(&c, buf, sizeof buf)) > 0) {
        total += n;
        if (bulk_bytes == 0 && c_write(&c, buf, (size_t)n) < 0)
            break;
        if (bulk_bytes && total == bulk_bytes && c_write(&c, "k", 1) < 0)
            break; /* the sink's receipt */
    }
    c_close(&c);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    int fd;
    while ((fd = weft_accept(lfd, NULL, NULL, WEFT_FOREVER)) >= 0)
        weft_spawn(serve, (void *)(long)fd, NULL, NULL);
    return NULL;
}

static weft_sched_t *srv_sched; /* published once the server runs */
static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t srv_cv = PTHREAD_COND_INITIALIZER;

static void *server_thread(void *arg)
{
    (void)arg;
    weft_sched_t *s;
    if (weft_sched_create(&s, NULL) < 0 || weft_spawn(acceptor, NULL, NULL, NULL) < 0)
        die("server scheduler");
    pthread_mutex_lock(&srv_mu);
    srv_sched = s;
    pthread_cond_signal(&srv_cv);
    pthread_mutex_unlock(&srv_mu);
    weft_sched_run(s);
    weft_sched_destroy(s);
    return NULL;
}

static void stop_server(void *arg)
{
    (void)arg;
    weft_close(lfd); /* the acceptor wakes with -EBADF and returns */
}

/* ---- the weft client ------------------------------------------------- */

static double now_s(void)
{
    return (double)weft_now() / 1e9;
}

static int dial(conn *c)
{
    c->t = NULL;
    c->fd = weft_tcp_connect("127.0.0.1", port, WEFT_FOREVER);
    if (c->fd < 0)
        return c->fd;
    if (mode == M_TLS)
        return weft_tls_connect(&c->t, cctx, c->fd, "localhost", WEFT_FOREVER);
    return 0;
}

static double result, result2;

static void *bulk_client(void *arg)
{
    (void)arg;
    conn c;
    if (dial(&c) < 0)
        die("connect");
    static char buf[CHUNK];
    memset(buf, 'x', sizeof buf);
    double t0 = now_s();
    for (long long sent = 0; sent < bulk_bytes; sent += CHUNK)
        if (c_write(&c, buf, CHUNK) < 0)
            die("write");
    char k;
    if (c_read(&c, &k, 1) != 1) /* everything arrived */
        die("receipt");
    result = (double)bulk_bytes / (1 << 20) / (now_s() - t0);
    c_close(&c);
    return NULL;
}

static long long round_trips;
static int64_t rtt_end;

static void *rtt_conn(void *arg)
{
    (void)arg;
    conn c;
    if (dial(&c) < 0)
        die("connect");
    char *out = malloc((size_t)msg), *in = malloc((size_t)msg);
    if (!out || !in)
        die("malloc");
    memset(out, 'r', (size_t)msg);
    while (weft_now() < rtt_end) {
        if (c_write(&c, out, (size_t)msg) < 0)
            die("write");
        for (int got = 0; got < msg;) {
            ssize_t n = c_read(&c, in + got, (size_t)(msg - got));
            if (n <= 0)
                die("read");
            got += (int)n;
        }
        round_trips++;
    }
    free(out);
    free(in);
    c_close(&c);
    return NULL;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void *rtt_client(void *arg)
{
    (void)arg;
    /* Half a second to connect (handshakes are not what this measures),
     * then count. */
    weft_fiber_t *f = calloc((size_t)conns, sizeof *f);
    int64_t start = weft_now() + WEFT_SEC / 2;
    rtt_end = start + rtt_ns;
    for (int i = 0; i < conns; i++)
        weft_spawn(rtt_conn, NULL, NULL, &f[i]);
    weft_sleep_until(start);
    long long n0 = round_trips;
    double c0 = cpu_s();
    for (int i = 0; i < conns; i++)
        weft_join(f[i], NULL, WEFT_FOREVER);
    long long n = round_trips - n0;
    result = (double)n / ((double)rtt_ns / 1e9);
    result2 = (cpu_s() - c0) * 1e6 / (double)(n ? n : 1);
    free(f);
    return NULL;
}

/* ---- OpenSSL on its own socket BIO, blocking threads ------------------ */

/* OpenSSL on socket @fd, handshake done; says on stderr whether it
 * handed the keys to the kernel (kTLS). */
static SSL *ossl_open(SSL_CTX *ctx, int fd, int server)
{
    SSL *s = SSL_new(ctx);
    if (!s || SSL_set_fd(s, fd) != 1 || (server ? SSL_accept(s) : SSL_connect(s)) != 1)
        die("OpenSSL handshake");
    fprintf(stderr, "ktls: %s tx %d rx %d\n", server ? "server" : "client",
            (int)BIO_get_ktls_send(SSL_get_wbio(s)), (int)BIO_get_ktls_recv(SSL_get_rbio(s)));
    return s;
}

static void *ossl_server(void *arg)
{
    (void)arg;
    int fd = accept(lfd, NULL, NULL);
    SSL *s = ossl_open(ossl_s, fd, 1);
    static char buf[CHUNK];
    long long total = 0;
    int n;
    while (total < bulk_bytes && (n = SSL_read(s, buf, sizeof buf)) > 0)
        total += n;
    SSL_write(s, "k", 1);
    SSL_shutdown(s);
    SSL_free(s);
    close(fd);
    return NULL;
}

static void ossl_bulk(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    SSL *s = ossl_open(ossl_c, fd, 0);
    static char buf[CHUNK];
    memset(buf, 'x', sizeof buf);
    double t0 = (double)weft_now() / 1e9;
    for (long long sent = 0; sent < bulk_bytes; sent += CHUNK)
        if (SSL_write(s, buf, CHUNK) != CHUNK)
            die("SSL_write");
    char k;
    if (SSL_read(s, &k, 1) != 1)
        die("receipt");
    result = (double)bulk_bytes / (1 << 20) / ((double)weft_now() / 1e9 - t0);
    SSL_free(s);
    close(fd);
}

/* ---- kTLS probe --------------------------------------------------------- */

static int ktls_probe(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
        connect(c, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("tls_echo: probe");
        return 1;
    }
    int rc = setsockopt(c, SOL_TCP, TCP_ULP, "tls", sizeof "tls");
    if (rc == 0)
        printf("available\n");
    else
        printf("unavailable: setsockopt(TCP_ULP, \"tls\"): %s\n", strerror(errno));
    close(c);
    close(l);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--ktls-probe"))
            return ktls_probe();
        else if (!strcmp(a, "--mode") && ++i)
            mode = !strcmp(v, "tls") ? M_TLS : !strcmp(v, "plain") ? M_PLAIN : M_OSSL;
        else if (!strcmp(a, "--bulk") && ++i)
            bulk_bytes = atoll(v) << 20;
        else if (!strcmp(a, "--rtt") && ++i)
            rtt_ns = (int64_t)(atof(v) * 1e9);
        else if (!strcmp(a, "--conns") && ++i)
            conns = atoi(v);
        else if (!strcmp(a, "--msg") && ++i)
            msg = atoi(v);
        else {
            fprintf(stderr, "usage: tls_echo --mode tls|plain|ossl (--bulk MIB | --rtt SECS "
                            "[--conns C] [--msg BYTES]) | --ktls-probe\n");
            return 2;
        }
    }
    if ((!bulk_bytes) == (!rtt_ns) || (mode == M_OSSL && !bulk_bytes) || msg < 1 || msg > 65536)
        return 2;
    setup_tls();
    weft_sched_t *s;
    if (weft_sched_create(&s, NULL) < 0)
        die("scheduler");
    if (mode == M_OSSL) {
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        if (bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4) < 0 ||
            getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
            die("listen");
        port = ntohs(a.sin_port);
        pthread_t th;
        pthread_create(&th, NULL, ossl_server, NULL);
        ossl_bulk();
        pthread_join(th, NULL);
        close(lfd);
    } else {
        lfd = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
        port = weft_local_port(lfd);
        /* The listener is the server thread's from here on. */
        pthread_t th;
        pthread_create(&th, NULL, server_thread, NULL);
        pthread_mutex_lock(&srv_mu);
        while (!srv_sched)
            pthread_cond_wait(&srv_cv, &srv_mu);
        pthread_mutex_unlock(&srv_mu);
        weft_run(bulk_bytes ? bulk_client : rtt_client, NULL, NULL);
        weft_sched_post(srv_sched, stop_server, NULL); /* closes lfd there */
        pthread_join(th, NULL);
    }
    printf("%.1f\n", result);
    if (rtt_ns)
        printf("%.2f\n", result2);
    weft_sched_destroy(s);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    SSL_CTX_free(ossl_s);
    SSL_CTX_free(ossl_c);
    return 0;
}
