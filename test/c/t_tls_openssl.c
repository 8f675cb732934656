/* weft_tls against the openssl command: a weft client against
 * `openssl s_server` (TLS 1.3 and 1.2, ALPN, a wrong name refused), and
 * `openssl s_client` against a weft server (verification of our
 * certificate by OpenSSL's own client, ALPN, session resumption with
 * -reconnect, a wrong host name refused by s_client). The certificates
 * are the test's throw-away CA (tls_util.h). Fails when the openssl
 * command is missing (scripts/deps.sh installs it for make test). */
#include "tls_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

static tls_pki pki;
static weft_tls_ctx_t *sctx, *cctx;

typedef struct child {
    pid_t pid;
    int in;   /* its stdin, -1 if /dev/null */
    int out;  /* its stdout and stderr */
    char text[8192];
    size_t len;
} child;

static void spawn(child *c, char *const argv[], int want_stdin)
{
    int out[2], in[2] = {-1, -1};
    CHECK_EQ(pipe2(out, O_CLOEXEC), 0);
    if (want_stdin)
        CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (want_stdin)
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    else
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    CHECK_EQ(posix_spawnp(&c->pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (want_stdin)
        close(in[0]);
    c->out = out[0];
    c->in = in[1];
    c->len = 0;
    c->text[0] = '\0';
}

/* Read the child's output until @needle appears (1) or it ends (0). */
static int wait_for(child *c, const char *needle, int64_t deadline)
{
    while (!strstr(c->text, needle)) {
        if (c->len + 1 >= sizeof c->text)
            return 0;
        ssize_t n = weft_read(c->out, c->text + c->len, sizeof c->text - 1 - c->len, deadline);
        if (n <= 0)
            return 0;
        c->len += (size_t)n;
        c->text[c->len] = '\0';
    }
    return 1;
}

/* Read to the end and reap; returns the exit status (128+sig if killed). */
static int finish(child *c, int kill_it)
{
    if (kill_it)
        kill(c->pid, SIGTERM);
    if (c->in >= 0)
        weft_close(c->in);
    wait_for(c, "\x01never\x01", weft_deadline_in(10 * TLS_SEC));
    weft_close(c->out);
    int st = 0;
    CHECK_EQ(weft_proc_wait(c->pid, &st, weft_deadline_in(10 * TLS_SEC)), 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int accept_port(child *c)
{
    if (!wait_for(c, "ACCEPT", weft_deadline_in(10 * TLS_SEC)))
        fprintf(stderr, "s_server said: %s\n", c->text);
    const char *a = strstr(c->text, "ACCEPT");
    CHECK(a != NULL);
    const char *colon = strchr(a, ':');
    CHECK(colon != NULL);
    /* The line may still be arriving. */
    CHECK(wait_for(c, "\n", weft_deadline_in(TLS_SEC)));
    return atoi(colon + 1);
}

/* ---- a weft client against openssl s_server -------------------------- */

static void against_s_server(const char *version_flag, const char *want_version)
{
    child srv;
    char *argv[] = {"openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", pki.srv,
                    "-key", pki.srv_key, "-rev", "-naccept", "2", "-alpn", "http/1.1",
                    (char *)version_flag, NULL};
    spawn(&srv, argv, 0);
    int port = accept_port(&srv);

    weft_tls_ctx_opts_t co = {.ca_file = pki.ca, .alpn = "h2,http/1.1"};
    weft_tls_ctx_t *ctx;
    CHECK_EQ(weft_tls_ctx_new(&ctx, &co), 0);
    weft_tls_t *t = tls_dial_local(ctx, port, "localhost", weft_deadline_in(5 * TLS_SEC));
    CHECK(strcmp(weft_tls_version(t), want_version) == 0);
    CHECK(weft_tls_alpn(t) && strcmp(weft_tls_alpn(t), "http/1.1") == 0);
    /* -rev: every line comes back reversed. */
    CHECK_EQ(weft_tls_write_all(t, "hello weft\n", 11, NULL, weft_deadline_in(5 * TLS_SEC)), 0);
    tls_expect(t, "tfew olleh\n", weft_deadline_in(5 * TLS_SEC));
    CHECK_EQ(weft_tls_shutdown(t, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(t), 0);

    /* The same server under a name its certificate does not carry. */
    int fd = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(5 * TLS_SEC));
    CHECK(fd >= 0);
    CHECK_EQ(weft_tls_connect(&t, ctx, fd, "not-localhost.example", weft_deadline_in(5 * TLS_SEC)),
             -EKEYREJECTED);
    CHECK(strstr(weft_tls_error_string(NULL), "hostname mismatch") != NULL);
    weft_tls_ctx_free(ctx);
    finish(&srv, 1);
}

/* ---- openssl s_client against a weft server -------------------------- */

typedef struct server_job {
    int lfd;
    int conns;       /* connections to take            */
    int handshakes;  /* completed                      */
    int resumed;     /* of which resumed               */
    int refused;     /* -EKEYREJECTED from the client  */
    int echo;        /* answer "ping" with "pong"      */
} server_job;

static void *weft_server(void *arg)
{
    server_job *j = arg;
    for (int i = 0; i < j->conns; i++) {
        int fd = weft_accept(j->lfd, NULL, NULL, weft_deadline_in(20 * TLS_SEC));
        CHECK(fd >= 0);
        weft_tls_t *t;
        int rc = weft_tls_accept(&t, sctx, fd, weft_deadline_in(20 * TLS_SEC));
        if (rc == -EKEYREJECTED) {
            j->refused++;
            continue;
        }
        if (rc < 0)
            fprintf(stderr, "accept: %s\n", weft_tls_error_string(NULL));
        CHECK_EQ(rc, 0);
        j->handshakes++;
        j->resumed += weft_tls_resumed(t);
        if (j->echo) {
            CHECK(weft_tls_alpn(t) && strcmp(weft_tls_alpn(t), "http/1.1") == 0);
            tls_expect(t, "ping\n", weft_deadline_in(10 * TLS_SEC));
            CHECK_EQ(weft_tls_write_all(t, "pong\n", 5, NULL, weft_deadline_in(10 * TLS_SEC)), 0);
            /* s_client ends when its stdin does: close_notify, or not. */
            char buf[16];
            ssize_t n = weft_tls_read(t, buf, sizeof buf, weft_deadline_in(10 * TLS_SEC));
            CHECK(n == 0 || n == -ECONNABORTED);
        }
        weft_tls_close(t);
    }
    return NULL;
}

static void against_s_client(void)
{
    weft_tls_ctx_opts_t so = {.server = 1, .cert_file = pki.srv, .key_file = pki.srv_key,
                              .alpn = "h2,http/1.1"};
    CHECK_EQ(weft_tls_ctx_new(&sctx, &so), 0);
    int l = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    CHECK(l >= 0);
    char connect[32];
    snprintf(connect, sizeof connect, "127.0.0.1:%d", weft_local_port(l));

    /* Echo, with OpenSSL's client verifying our certificate and name. */
    server_job j = {.lfd = l, .conns = 1, .echo = 1};
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(weft_server, &j, NULL, &f), 0);
    child cl;
    char *argv[] = {"openssl", "s_client", "-connect", connect, "-servername", "localhost",
                    "-CAfile", pki.ca, "-verify_return_error", "-verify_hostname", "localhost",
                    "-alpn", "http/1.1", "-quiet", "-no_ign_eof", NULL};
    spawn(&cl, argv, 1);
    CHECK_EQ(weft_write_all(cl.in, "ping\n", 5, NULL, weft_deadline_in(5 * TLS_SEC)), 0);
    if (!wait_for(&cl, "pong", weft_deadline_in(10 * TLS_SEC)))
        fprintf(stderr, "s_client said: %s\n", cl.text);
    CHECK(strstr(cl.text, "pong") != NULL);
    CHECK_EQ(finish(&cl, 0), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j.handshakes, 1);

    /* Resumption: s_client -reconnect connects 6 times with one session
     * (TLS 1.2: with 1.3 it drops each connection before the tickets
     * arrive); our server resumes the last 5. */
    j = (server_job){.lfd = l, .conns = 6};
    CHECK_EQ(weft_spawn(weft_server, &j, NULL, &f), 0);
    char *rargv[] = {"openssl", "s_client", "-connect", connect, "-servername", "localhost",
                     "-CAfile", pki.ca, "-verify_return_error", "-reconnect", "-tls1_2", NULL};
    spawn(&cl, rargv, 0);
    CHECK_EQ(finish(&cl, 0), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    if (j.handshakes != 6 || j.resumed != 5)
        fprintf(stderr, "reconnect: %d handshakes, %d resumed\n%s\n", j.handshakes, j.resumed,
                cl.text);
    CHECK_EQ(j.handshakes, 6);
    CHECK_EQ(j.resumed, 5);
    CHECK(strstr(cl.text, "Reused") != NULL);

    /* s_client refuses our certificate under another name; we hear why. */
    j = (server_job){.lfd = l, .conns = 1};
    CHECK_EQ(weft_spawn(weft_server, &j, NULL, &f), 0);
    char *wargv[] = {"openssl", "s_client", "-connect", connect, "-servername", "other.example",
                     "-CAfile", pki.ca, "-verify_return_error", "-verify_hostname",
                     "other.example", NULL};
    spawn(&cl, wargv, 0);
    CHECK(finish(&cl, 0) != 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j.refused, 1);
    CHECK_EQ(j.handshakes, 0);

    CHECK_EQ(weft_close(l), 0);
    weft_tls_ctx_free(sctx);
}

static void *body(void *arg)
{
    cctx = tls_client_ctx(pki.ca);
    against_s_server("-tls1_3", "TLSv1.3");
    against_s_server("-tls1_2", "TLSv1.2");
    against_s_client();
    weft_tls_ctx_free(cctx);
    return arg;
}

int main(void)
{
    h_begin("tls_openssl");
    if (system("openssl version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "no openssl command (apt-get install openssl)\n");
        return 1;
    }
    tls_pki_make(&pki);
    h_run(body, NULL);
    tls_pki_remove(&pki);
    return h_end();
}
