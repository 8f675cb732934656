/*
 * http.c — Weft::HTTP: the request-head parser of contrib/http (the C
 * example server's, fuzzed, with its request-smuggling rules) bound to
 * Ruby for Weft::Server, writing a Rack environment Hash directly; and
 * Weft::HTTP itself (weft__http_init), with its other parts in
 * http_chunked.c (chunked request bodies) and http_poller.c (parked
 * connections).
 *
 *   parser = Weft::HTTP::Parser.new(max_head: 16384, ...)
 *   n = parser.parse(buffer, env)   # Integer > 0: head length
 *                                   # nil: head incomplete, read more
 *                                   # Integer < 0: -status (400, 413, ...)
 *
 * Why C: a Ruby parser costs regular expressions and a String per line;
 * this one looks at each byte about twice and allocates only the env's
 * values (keys of common headers are interned once).
 */
#include <ruby.h>
#include <ruby/encoding.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "http.h"
#include "http_parse.h"

static VALUE cParser;

/* Frozen, interned env keys and method names, made once (marked forever). */
static VALUE k_request_method, k_path_info, k_query_string, k_request_uri,
    k_server_protocol, k_server_name, k_server_port, k_http_host,
    k_content_length, k_content_type, k_script_name, k_request_path,
    k_http_version;
static VALUE v_http10, v_http11, v_empty, v_star, v_slash;

static VALUE fstr(const char *s)
{
    VALUE v = rb_enc_interned_str(s, (long)strlen(s), rb_utf8_encoding());
    rb_gc_register_mark_object(v);
    return v;
}

/* Common request header names and their env keys (the key made once). */
static struct known_header {
    const char *name; /* lower case */
    size_t len;
    VALUE key;
} known[] = {
    {"host", 0, 0}, {"user-agent", 0, 0}, {"accept", 0, 0},
    {"accept-encoding", 0, 0}, {"accept-language", 0, 0},
    {"connection", 0, 0}, {"cookie", 0, 0}, {"referer", 0, 0},
    {"cache-control", 0, 0}, {"origin", 0, 0}, {"authorization", 0, 0},
    {"if-none-match", 0, 0}, {"if-modified-since", 0, 0},
    {"x-forwarded-for", 0, 0}, {"x-forwarded-proto", 0, 0},
    {"x-forwarded-host", 0, 0}, {"x-request-id", 0, 0},
    {"x-real-ip", 0, 0}, {"upgrade", 0, 0}, {"expect", 0, 0},
    {"transfer-encoding", 0, 0}, {"pragma", 0, 0}, {"dnt", 0, 0},
    {"sec-websocket-key", 0, 0}, {"sec-websocket-version", 0, 0},
    {"sec-websocket-protocol", 0, 0}, {"sec-websocket-extensions", 0, 0},
    {"sec-fetch-site", 0, 0}, {"sec-fetch-mode", 0, 0},
    {"sec-fetch-dest", 0, 0}, {"upgrade-insecure-requests", 0, 0},
    {"x-requested-with", 0, 0}, {"x-csrf-token", 0, 0}, {"range", 0, 0},
    {"if-match", 0, 0}, {"keep-alive", 0, 0}, {"te", 0, 0},
};
#define NKNOWN (sizeof known / sizeof known[0])

/* Standard methods, interned; extension tokens get a new String. */
static struct known_method {
    const char *name;
    size_t len;
    VALUE str;
} methods[] = {
    {"GET", 3, 0}, {"HEAD", 4, 0}, {"POST", 4, 0}, {"PUT", 3, 0},
    {"DELETE", 6, 0}, {"OPTIONS", 7, 0}, {"PATCH", 5, 0},
    {"CONNECT", 7, 0}, {"TRACE", 5, 0},
};
#define NMETHODS (sizeof methods / sizeof methods[0])

static inline unsigned char lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static int name_eq(const char *a, size_t n, const char *lowered)
{
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)a[i]) != (unsigned char)lowered[i])
            return 0;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Parser                                                              */

typedef struct parser {
    http_limits lim;
    http_scan scan;
    http_req req;
    VALUE server_name; /* when the request has no Host */
    VALUE server_port;
    VALUE default_port; /* for a Host without a port ("80"/"443") */
    /* The last Host seen and the SERVER_NAME/PORT made from it (frozen),
     * reused while clients keep sending the same Host. */
    VALUE last_host, last_name, last_port;
    int expect_continue;
    int has_length; /* a Content-Length field was sent */
} parser;

static void parser_mark(void *p)
{
    parser *ps = p;
    rb_gc_mark(ps->server_name);
    rb_gc_mark(ps->server_port);
    rb_gc_mark(ps->default_port);
    rb_gc_mark(ps->last_host);
    rb_gc_mark(ps->last_name);
    rb_gc_mark(ps->last_port);
}

static size_t parser_memsize(const void *p)
{
    (void)p;
    return sizeof(parser);
}

static const rb_data_type_t parser_type = {
    .wrap_struct_name = "Weft::HTTP::Parser",
    .function = {.dmark = parser_mark, .dfree = RUBY_TYPED_DEFAULT_FREE,
                 .dsize = parser_memsize},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE parser_alloc(VALUE klass)
{
    parser *ps;
    VALUE obj = TypedData_Make_Struct(klass, parser, &parser_type, ps);
    ps->lim = http_default_limits;
    ps->lim.accept_chunked = 1;
    ps->server_name = rb_str_new_cstr("localhost");
    ps->server_port = rb_str_new_cstr("80");
    ps->default_port = ps->server_port;
    ps->last_host = ps->last_name = ps->last_port = Qnil;
    http_scan_reset(&ps->scan);
    return obj;
}

static parser *get_parser(VALUE self)
{
    return rb_check_typeddata(self, &parser_type);
}

uint64_t weft__http_opt_u64(VALUE opts, const char *name, uint64_t dflt)
{
    VALUE v = rb_hash_aref(opts, ID2SYM(rb_intern(name)));
    if (NIL_P(v))
        return dflt;
    long long n = NUM2LL(v);
    if (n <= 0)
        rb_raise(rb_eArgError, "%s must be a positive Integer", name);
    return (uint64_t)n;
}

/*
 * Parser.new(max_request_line: 8192, max_header_line: 8192,
 *            max_head: 16384, max_headers: 64, max_body: 1 MiB,
 *            server_name: "localhost", server_port: "80",
 *            default_port: server_port)
 *
 * The limits are http_parse.h's (max_headers at most 100). max_body bounds
 * a Content-Length (-413 beyond it); chunked bodies are accepted and the
 * caller bounds them (Weft::HTTP::Chunked). server_name/server_port fill
 * SERVER_NAME/SERVER_PORT when a request has no Host; default_port is the
 * SERVER_PORT of a Host without one ("80" for http, "443" for https).
 */
static VALUE parser_initialize(int argc, VALUE *argv, VALUE self)
{
    parser *ps = get_parser(self);
    VALUE opts = Qnil;
    rb_scan_args(argc, argv, "0:", &opts);
    if (NIL_P(opts))
        return self;
    ps->lim.max_request_line = (size_t)weft__http_opt_u64(opts, "max_request_line", ps->lim.max_request_line);
    ps->lim.max_header_line = (size_t)weft__http_opt_u64(opts, "max_header_line", ps->lim.max_header_line);
    ps->lim.max_head = (size_t)weft__http_opt_u64(opts, "max_head", ps->lim.max_head);
    uint64_t mh = weft__http_opt_u64(opts, "max_headers", ps->lim.max_headers);
    if (mh > HTTP_MAX_HEADERS)
        rb_raise(rb_eArgError, "max_headers must be at most %d", HTTP_MAX_HEADERS);
    ps->lim.max_headers = (unsigned)mh;
    ps->lim.max_body = weft__http_opt_u64(opts, "max_body", ps->lim.max_body);
    VALUE v;
    if (!NIL_P(v = rb_hash_aref(opts, ID2SYM(rb_intern("server_name")))))
        ps->server_name = rb_str_new_frozen(StringValue(v));
    if (!NIL_P(v = rb_hash_aref(opts, ID2SYM(rb_intern("server_port")))))
        ps->server_port = rb_str_new_frozen(rb_obj_as_string(v));
    ps->default_port = ps->server_port;
    if (!NIL_P(v = rb_hash_aref(opts, ID2SYM(rb_intern("default_port")))))
        ps->default_port = rb_str_new_frozen(rb_obj_as_string(v));
    return self;
}

/* The env key of header @h: "HTTP_" + upper case with '-' -> '_', or
 * CONTENT_LENGTH / CONTENT_TYPE. Qnil for a name with '_' (it would be
 * indistinguishable from the same name with '-': a proxy that strips or
 * sets X-Forwarded-For would not see X_Forwarded_For, and the app could
 * not tell them apart), and for Version, whose key HTTP_VERSION holds the
 * request's protocol (as Puma 6 has it; Rails and Sinatra read it so, and
 * a client's Version field must not pass for HTTP/1.0 or 1.1). */
static VALUE header_key(const http_header *h)
{
    size_t n = h->name_len;
    if (n == 14 && name_eq(h->name, n, "content-length"))
        return k_content_length;
    if (n == 12 && name_eq(h->name, n, "content-type"))
        return k_content_type;
    for (size_t i = 0; i < NKNOWN; i++)
        if (known[i].len == n && name_eq(h->name, n, known[i].name))
            return known[i].key;
    if (memchr(h->name, '_', n))
        return Qnil;
    if (n == 7 && name_eq(h->name, n, "version"))
        return Qnil; /* HTTP_VERSION is the request's protocol */
    char buf[5 + 256];
    char *key = n + 5 <= sizeof buf ? buf : ALLOCA_N(char, n + 5);
    memcpy(key, "HTTP_", 5);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h->name[i];
        key[5 + i] = c == '-' ? '_' : (c >= 'a' && c <= 'z') ? (char)(c - 32) : (char)c;
    }
    return rb_enc_interned_str(key, (long)(n + 5), rb_utf8_encoding());
}

/* SERVER_NAME and SERVER_PORT from a Host value ("h", "h:p", "[v6]:p"). */
static void host_split(parser *ps, VALUE env, const char *v, size_t n)
{
    if (!NIL_P(ps->last_host) && (size_t)RSTRING_LEN(ps->last_host) == n &&
        memcmp(RSTRING_PTR(ps->last_host), v, n) == 0) {
        rb_hash_aset(env, k_server_name, ps->last_name);
        rb_hash_aset(env, k_server_port, ps->last_port);
        return;
    }
    size_t name_end = n;
    const char *port = NULL;
    size_t port_len = 0;
    if (n > 0 && v[0] == '[') {
        const char *rb = memchr(v, ']', n);
        if (rb) {
            name_end = (size_t)(rb - v) + 1;
            if (name_end < n && v[name_end] == ':') {
                port = v + name_end + 1;
                port_len = n - name_end - 1;
            }
        }
    } else {
        const char *colon = memchr(v, ':', n);
        if (colon) {
            name_end = (size_t)(colon - v);
            port = colon + 1;
            port_len = n - name_end - 1;
        }
    }
    VALUE name = rb_obj_freeze(rb_str_new(v, (long)name_end));
    VALUE pv = port && port_len ? rb_obj_freeze(rb_str_new(port, (long)port_len)) : ps->default_port;
    rb_hash_aset(env, k_server_name, name);
    rb_hash_aset(env, k_server_port, pv);
    ps->last_host = rb_obj_freeze(rb_str_new(v, (long)n));
    ps->last_name = name;
    ps->last_port = pv;
}

/* PATH_INFO (and REQUEST_PATH, the same String), QUERY_STRING and
 * REQUEST_URI from the request-target; an absolute-form target's
 * authority replaces Host (RFC 9112 3.2.2). */
static void set_path(VALUE env, VALUE path)
{
    rb_hash_aset(env, k_path_info, path);
    rb_hash_aset(env, k_request_path, path);
}

static void target_split(VALUE env, const http_req *r)
{
    const char *t = r->target;
    size_t n = r->target_len;
    rb_hash_aset(env, k_request_uri, rb_str_new(t, (long)n));
    if (n == 1 && t[0] == '*') {
        set_path(env, v_star);
        rb_hash_aset(env, k_query_string, v_empty);
        return;
    }
    if (t[0] != '/') {
        size_t skip = 0;
        if (n > 7 && name_eq(t, 7, "http://"))
            skip = 7;
        else if (n > 8 && name_eq(t, 8, "https://"))
            skip = 8;
        if (skip == 0) { /* authority-form (CONNECT host:port) */
            set_path(env, v_empty);
            rb_hash_aset(env, k_query_string, v_empty);
            return;
        }
        size_t a = skip;
        while (a < n && t[a] != '/' && t[a] != '?' && t[a] != '#')
            a++;
        rb_hash_aset(env, k_http_host, rb_str_new(t + skip, (long)(a - skip)));
        t += a;
        n -= a;
    }
    const char *hash = memchr(t, '#', n);
    if (hash)
        n = (size_t)(hash - t);
    const char *q = memchr(t, '?', n);
    size_t plen = q ? (size_t)(q - t) : n;
    set_path(env, plen ? rb_str_new(t, (long)plen) : v_slash);
    rb_hash_aset(env, k_query_string,
                 q ? rb_str_new(q + 1, (long)(n - plen - 1)) : v_empty);
}

static VALUE method_string(const http_req *r)
{
    for (size_t i = 0; i < NMETHODS; i++)
        if (methods[i].len == r->method_len &&
            memcmp(methods[i].name, r->method_str, r->method_len) == 0)
            return methods[i].str;
    return rb_str_new(r->method_str, (long)r->method_len);
}

/* Fill @env from the parsed request (the header values point into the
 * caller's buffer, which no Ruby code can change meanwhile). */
static void fill_env(parser *ps, VALUE env)
{
    const http_req *r = &ps->req;
    rb_hash_aset(env, k_request_method, method_string(r));
    VALUE protocol = r->version_minor ? v_http11 : v_http10;
    rb_hash_aset(env, k_server_protocol, protocol);
    rb_hash_aset(env, k_http_version, protocol);
    ps->expect_continue = 0;
    ps->has_length = 0;
    for (unsigned i = 0; i < r->nheaders; i++) {
        const http_header *h = &r->headers[i];
        VALUE key = header_key(h);
        if (NIL_P(key))
            continue;
        if (key == k_content_length)
            ps->has_length = 1;
        else if (h->name_len == 6 && r->version_minor &&
                 name_eq(h->name, 6, "expect") && h->value_len == 12 &&
                 name_eq(h->value, 12, "100-continue"))
            ps->expect_continue = 1;
        VALUE old = rb_hash_lookup2(env, key, Qundef);
        if (old == Qundef) {
            rb_hash_aset(env, key, rb_str_new(h->value, (long)h->value_len));
        } else {
            /* Repeated fields are one comma-separated list (RFC 9110
             * 5.3); Cookie's pairs are joined as HTTP/2 joins them. */
            VALUE joined = rb_str_dup(old);
            if (h->name_len == 6 && name_eq(h->name, 6, "cookie"))
                rb_str_cat(joined, "; ", 2);
            else
                rb_str_cat(joined, ", ", 2);
            rb_str_cat(joined, h->value, (long)h->value_len);
            rb_hash_aset(env, key, joined);
        }
    }
    target_split(env, r);
    VALUE host = rb_hash_lookup2(env, k_http_host, Qundef);
    if (host != Qundef && RSTRING_LEN(host) > 0) {
        host_split(ps, env, RSTRING_PTR(host), (size_t)RSTRING_LEN(host));
    } else {
        rb_hash_aset(env, k_server_name, ps->server_name);
        rb_hash_aset(env, k_server_port, ps->server_port);
    }
}

/*
 * parser.parse(buffer, env) -> Integer or nil
 *
 * Parse the request head at the start of +buffer+ (a String). Returns the
 * length of the head in bytes (the body starts there) after storing the
 * request in +env+ (SERVER_NAME and SERVER_PORT are frozen Strings,
 * shared by requests with the same Host): REQUEST_METHOD, SCRIPT_NAME "", PATH_INFO,
 * REQUEST_PATH (the same String as PATH_INFO, as in Puma), QUERY_STRING,
 * REQUEST_URI, SERVER_PROTOCOL and HTTP_VERSION (both "HTTP/1.0" or
 * "HTTP/1.1", frozen), SERVER_NAME, SERVER_PORT, CONTENT_LENGTH,
 * CONTENT_TYPE and HTTP_* (repeated fields joined with ", ", Cookie with
 * "; "; names containing '_', and Version, are dropped). Returns nil
 * when the head is incomplete: append more bytes to the same buffer and
 * call again (the scan resumes where it stopped). Returns -status for a
 * request to refuse (-400 malformed or smuggling-prone, -413, -414, -431,
 * -501, -505), after which the connection must be closed. After an
 * Integer answer the parser is ready for the next request.
 */
static VALUE parser_parse(VALUE self, VALUE buf, VALUE env)
{
    parser *ps = get_parser(self);
    StringValue(buf);
    Check_Type(env, T_HASH);
    int rc = http_parse(&ps->scan, RSTRING_PTR(buf), (size_t)RSTRING_LEN(buf),
                        &ps->lim, &ps->req);
    if (rc == 0)
        return Qnil;
    http_scan_reset(&ps->scan);
    if (rc < 0)
        return INT2FIX(rc);
    rb_hash_aset(env, k_script_name, v_empty);
    fill_env(ps, env);
    RB_GC_GUARD(buf);
    return INT2FIX(rc);
}

/* parser.reset -> self: forget a partly scanned head. */
static VALUE parser_reset(VALUE self)
{
    http_scan_reset(&get_parser(self)->scan);
    return self;
}

/* Facts about the last request parsed (undefined before the first). */

/* parser.keep_alive? -> true when the connection persists after it. */
static VALUE parser_keep_alive_p(VALUE self)
{
    return get_parser(self)->req.keep_alive ? Qtrue : Qfalse;
}

/* parser.chunked? -> true when the body is chunked (decode it with
 * Weft::HTTP::Chunked). */
static VALUE parser_chunked_p(VALUE self)
{
    return get_parser(self)->req.chunked ? Qtrue : Qfalse;
}

/* parser.content_length -> Integer (0 without a body or when chunked). */
static VALUE parser_content_length(VALUE self)
{
    return ULL2NUM(get_parser(self)->req.content_length);
}

/* parser.expect_continue? -> true for HTTP/1.1 with Expect: 100-continue. */
static VALUE parser_expect_continue_p(VALUE self)
{
    return get_parser(self)->expect_continue ? Qtrue : Qfalse;
}

/* parser.version_minor -> 0 (HTTP/1.0) or 1 (HTTP/1.1 and later 1.x). */
static VALUE parser_version_minor(VALUE self)
{
    return INT2FIX(get_parser(self)->req.version_minor);
}

/* parser.head? -> true when the method is HEAD (no body in the answer). */
static VALUE parser_head_p(VALUE self)
{
    return get_parser(self)->req.method == HTTP_M_HEAD ? Qtrue : Qfalse;
}

/* ------------------------------------------------------------------ */

/* Weft::HTTP.reason(status) -> the reason phrase ("Not Found"). */
static VALUE http_reason_phrase(VALUE mod, VALUE status)
{
    (void)mod;
    return rb_str_new_cstr(http_reason(NUM2INT(status)));
}

/* Defines Weft::HTTP; called once by Init_weft (scheduler.c). */
void weft__http_init(void)
{
    VALUE mWeft = rb_define_module("Weft");
    VALUE mHTTP = rb_define_module_under(mWeft, "HTTP");

    k_request_method = fstr("REQUEST_METHOD");
    k_path_info = fstr("PATH_INFO");
    k_query_string = fstr("QUERY_STRING");
    k_request_uri = fstr("REQUEST_URI");
    k_server_protocol = fstr("SERVER_PROTOCOL");
    k_server_name = fstr("SERVER_NAME");
    k_server_port = fstr("SERVER_PORT");
    k_http_host = fstr("HTTP_HOST");
    k_content_length = fstr("CONTENT_LENGTH");
    k_content_type = fstr("CONTENT_TYPE");
    k_script_name = fstr("SCRIPT_NAME");
    k_request_path = fstr("REQUEST_PATH");
    k_http_version = fstr("HTTP_VERSION");
    v_http10 = fstr("HTTP/1.0");
    v_http11 = fstr("HTTP/1.1");
    v_empty = fstr("");
    v_star = fstr("*");
    v_slash = fstr("/");
    for (size_t i = 0; i < NKNOWN; i++) {
        struct known_header *k = &known[i];
        char buf[64];
        k->len = strlen(k->name);
        memcpy(buf, "HTTP_", 5);
        for (size_t j = 0; j < k->len; j++)
            buf[5 + j] = k->name[j] == '-' ? '_' : (char)(k->name[j] - 32);
        buf[5 + k->len] = '\0';
        k->key = fstr(buf);
    }
    for (size_t i = 0; i < NMETHODS; i++)
        methods[i].str = fstr(methods[i].name);

    static const weft__rb_method methods[] = {
        {"initialize", RUBY_METHOD_FUNC(parser_initialize), -1},
        {"parse", RUBY_METHOD_FUNC(parser_parse), 2},
        {"reset", RUBY_METHOD_FUNC(parser_reset), 0},
        {"keep_alive?", RUBY_METHOD_FUNC(parser_keep_alive_p), 0},
        {"chunked?", RUBY_METHOD_FUNC(parser_chunked_p), 0},
        {"content_length", RUBY_METHOD_FUNC(parser_content_length), 0},
        {"expect_continue?", RUBY_METHOD_FUNC(parser_expect_continue_p), 0},
        {"version_minor", RUBY_METHOD_FUNC(parser_version_minor), 0},
        {"head?", RUBY_METHOD_FUNC(parser_head_p), 0},
        {NULL, NULL, 0},
    };
    cParser = weft__rb_define_class(mHTTP, "Parser", parser_alloc, methods);
    weft__http_chunked_init(mHTTP);
    rb_define_module_function(mHTTP, "reason", http_reason_phrase, 1);
    weft__http_poller_init(mHTTP);
}
