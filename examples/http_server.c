/*
 * http_server — an HTTP/1.1 server on weft: one fiber per connection,
 * keep-alive and pipelining, "Hello, World!" on GET /, static files from
 * --root, N event loops on N threads sharing the port with SO_REUSEPORT.
 *
 *   http_server [--host ADDR] [--port P] [--threads N] [--root DIR]
 *               [--idle-timeout-ms MS] [--header-timeout-ms MS]
 *               [--drain-timeout-ms MS] [--tls-cert FILE --tls-key FILE]
 *               [--quiet]
 *
 * --port 0 picks a free port. The first line on stdout is always
 * "http_server: listening on http://ADDR:PORT/ ..." (https:// with TLS)
 * so scripts can find it.
 *
 * --tls-cert and --tls-key (PEM certificate chain and key) serve HTTPS
 * through weft_tls (contrib/http/http_tls.c), when built with OpenSSL.
 *
 * SIGINT / SIGTERM stop it gracefully: the listeners close, idle
 * connections close, requests in progress finish (up to the drain
 * timeout). A second signal kills the process at once. The weft library
 * never touches signal dispositions; this program blocks SIGINT and
 * SIGTERM in every thread (weft_signal_block() before any thread starts)
 * and a fiber of loop 0 waits for them (weft_signal_wait()).
 */
#include "weft.h"
#include "http/http_srv.h"
#ifdef WEFT_HTTP_TLS
#include "http/http_tls.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 64

typedef struct loop {
    int index;
    int lfd;
    weft_sched_t *sched;
    http_srv *srv;
    pthread_t tid;
    int rc;
} loop;

static struct {
    const char *host;
    int port;
    int threads;
    int quiet;
    const char *tls_cert, *tls_key;
    http_transport tls;
    http_srv_opts opts;
    loop loops[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
} G = {.host = "127.0.0.1", .port = 8080, .threads = 1,
       .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void usage(void)
{
    fprintf(stderr,
            "usage: http_server [--host ADDR] [--port P] [--threads N] [--root DIR]\n"
            "                   [--idle-timeout-ms MS] [--header-timeout-ms MS]\n"
            "                   [--drain-timeout-ms MS] [--tls-cert FILE --tls-key FILE]\n"
            "                   [--quiet]\n");
    exit(2);
}

static void stop_cb(void *arg)
{
    http_srv_stop(arg);
}

/* The signal fiber (loop 0): waits for SIGINT/SIGTERM, then stops every
 * loop (its own directly, the others through their schedulers' posts). */
static void *signal_main(void *arg)
{
    sigset_t *mask = arg;
    int sfd = weft_signal_open(mask);
    if (sfd < 0) {
        fprintf(stderr, "http_server: signals: %s\n", strerror(-sfd));
        return NULL;
    }
    int sig = weft_signal_wait(sfd, NULL, WEFT_FOREVER);
    weft_close(sfd);
    if (sig < 0)
        return NULL;
    if (!G.quiet)
        fprintf(stderr, "http_server: %s, draining\n", strsignal(sig));
    for (int i = 0; i < G.threads; i++) {
        if (i == 0)
            http_srv_stop(G.loops[0].srv);
        else
            weft_sched_post(G.loops[i].sched, stop_cb, G.loops[i].srv);
    }
    /* A second signal now terminates the process (default action). */
    pthread_sigmask(SIG_UNBLOCK, mask, NULL);
    return NULL;
}

static void *thread_main(void *arg)
{
    loop *l = arg;
    weft_sched_t *s;
    l->rc = weft_sched_create(&s, NULL);
    if (l->rc == 0)
        l->rc = http_srv_start(&l->srv, l->lfd, &G.opts);
    pthread_mutex_lock(&G.mu);
    l->sched = l->rc == 0 ? s : NULL;
    G.started++;
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
    if (l->rc < 0)
        return NULL;
    l->rc = weft_sched_run(s);
    weft_sched_destroy(s);
    return NULL;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) {
            G.quiet = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--host"))
            G.host = v;
        else if (!strcmp(a, "--port"))
            G.port = atoi(v);
        else if (!strcmp(a, "--threads"))
            G.threads = atoi(v);
        else if (!strcmp(a, "--root"))
            G.opts.root = v;
        else if (!strcmp(a, "--idle-timeout-ms"))
            G.opts.idle_timeout_ns = atoll(v) * 1000000LL;
        else if (!strcmp(a, "--header-timeout-ms"))
            G.opts.header_timeout_ns = atoll(v) * 1000000LL;
        else if (!strcmp(a, "--drain-timeout-ms"))
            G.opts.drain_timeout_ns = atoll(v) * 1000000LL;
        else if (!strcmp(a, "--tls-cert"))
            G.tls_cert = v;
        else if (!strcmp(a, "--tls-key"))
            G.tls_key = v;
        else
            usage();
    }
    if (G.threads < 1 || G.threads > MAX_THREADS || G.port < 0 || G.port > 65535 ||
        !G.tls_cert != !G.tls_key)
        usage();
    if (G.tls_cert) {
#ifdef WEFT_HTTP_TLS
        char err[256];
        int trc = http_tls_transport(&G.tls, G.tls_cert, G.tls_key, err, sizeof err);
        if (trc < 0) {
            fprintf(stderr, "http_server: TLS: %s\n", err);
            return 1;
        }
        G.opts.transport = &G.tls;
#else
        fprintf(stderr, "http_server: built without OpenSSL: no TLS\n");
        return 1;
#endif
    }

    /* Before any thread exists, so every thread inherits the mask. SIGPIPE
     * is blocked too: sendfile(2) has no MSG_NOSIGNAL. */
    sigset_t mask, all;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    all = mask;
    sigaddset(&all, SIGPIPE);
    weft_signal_block(&all);

    weft_sched_t *s0;
    int rc = weft_sched_create(&s0, NULL);
    if (rc < 0) {
        fprintf(stderr, "http_server: scheduler: %s\n", strerror(-rc));
        return 1;
    }
    /* One SO_REUSEPORT listener per loop; with --port 0 the first one
     * picks the port and the others join it. */
    int port = G.port;
    for (int i = 0; i < G.threads; i++) {
        int fd = weft_tcp_listen(G.host, port, 0, 1);
        if (fd < 0) {
            fprintf(stderr, "http_server: listen %s:%d: %s\n", G.host, port,
                    strerror(-fd));
            return 1;
        }
        if (port == 0)
            port = weft_local_port(fd);
        G.loops[i].lfd = fd;
        G.loops[i].index = i;
    }
    G.loops[0].sched = s0;
    rc = http_srv_start(&G.loops[0].srv, G.loops[0].lfd, &G.opts);
    if (rc < 0) {
        fprintf(stderr, "http_server: %s\n", strerror(-rc));
        return 1;
    }
    for (int i = 1; i < G.threads; i++)
        if (pthread_create(&G.loops[i].tid, NULL, thread_main, &G.loops[i]) != 0) {
            fprintf(stderr, "http_server: cannot start thread %d\n", i);
            return 1;
        }
    pthread_mutex_lock(&G.mu);
    while (G.started < G.threads - 1)
        pthread_cond_wait(&G.cv, &G.mu);
    pthread_mutex_unlock(&G.mu);
    for (int i = 1; i < G.threads; i++)
        if (G.loops[i].rc < 0) {
            fprintf(stderr, "http_server: loop %d: %s\n", i, strerror(-G.loops[i].rc));
            return 1;
        }
    weft_spawn(signal_main, &mask, NULL, NULL);

    printf("http_server: listening on %s://%s:%d/ with %d thread%s, %s backend%s%s\n",
           G.tls_cert ? "https" : "http", G.host, port, G.threads, G.threads > 1 ? "s" : "",
           weft_sched_backend(s0), G.opts.root ? ", root " : "",
           G.opts.root ? G.opts.root : "");
    fflush(stdout);

    rc = weft_sched_run(s0);
    http_srv_stats tot = {0};
    for (int i = 0; i < G.threads; i++) {
        if (i > 0)
            pthread_join(G.loops[i].tid, NULL);
        http_srv_stats st;
        http_srv_get_stats(G.loops[i].srv, &st);
        tot.accepted += st.accepted;
        tot.requests += st.requests;
        tot.status_2xx += st.status_2xx;
        tot.status_4xx += st.status_4xx;
        tot.status_5xx += st.status_5xx;
        tot.idle_closed += st.idle_closed;
        tot.timed_out += st.timed_out;
        http_srv_free(G.loops[i].srv);
    }
    if (!G.quiet)
        fprintf(stderr,
                "http_server: stopped: %llu connections, %llu responses "
                "(2xx %llu, 4xx %llu, 5xx %llu), %llu idle closed, %llu timed out\n",
                (unsigned long long)tot.accepted, (unsigned long long)tot.requests,
                (unsigned long long)tot.status_2xx, (unsigned long long)tot.status_4xx,
                (unsigned long long)tot.status_5xx, (unsigned long long)tot.idle_closed,
                (unsigned long long)tot.timed_out);
    weft_sched_destroy(s0);
#ifdef WEFT_HTTP_TLS
    if (G.tls_cert)
        http_tls_transport_free(&G.tls);
#endif
    return rc < 0 ? 1 : 0;
}
