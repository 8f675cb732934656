/* weft_fibers_each / weft_dump: one fiber per wait kind, each named, its
 * kind, object, descriptor and deadline reported exactly, in the iterator
 * and in the text; a dump on a signal, written by the loop; a dump of
 * 10,000 fibers that lists every one. */
#include "harness.h"
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
static int on_valgrind(void) { return RUNNING_ON_VALGRIND != 0; }
#else
static int on_valgrind(void) { return 0; }
#endif

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

static weft_mutex_t mtx, cmtx;
static weft_cond_t cnd;
static weft_sem_t sem;
static weft_notification_t note;
static weft_waitgroup_t wg;
static weft_chan_t *rch, *sch;
static weft_promise_t *prom;
static weft_future_t *fut;
static int rpipe[2], wpipe[2], sfd;
static pid_t child;
static int64_t sleep_until, mutex_deadline;
static weft_fiber_t parked_h;
static atomic_int release_job;

/* Not static, not inlined: named in the backtrace (-rdynamic). */
__attribute__((noinline)) void *k_sleep(void *a)
{
    CHECK_EQ(weft_sleep_until(sleep_until), -ECANCELED); /* ended by the test */
    return a;
}
static void *k_park(void *a) { CHECK_EQ(weft_park(WEFT_FOREVER), 0); return a; }
static void *k_mutex(void *a)
{
    CHECK_EQ(weft_mutex_lock(&mtx, mutex_deadline), 0);
    CHECK_EQ(weft_mutex_unlock(&mtx), 0);
    return a;
}
static void *k_cond(void *a)
{
    CHECK_EQ(weft_mutex_lock(&cmtx, WEFT_FOREVER), 0);
    CHECK_EQ(weft_cond_wait(&cnd, &cmtx, WEFT_FOREVER), 0);
    CHECK_EQ(weft_mutex_unlock(&cmtx), 0);
    return a;
}
static void *k_sem(void *a) { CHECK_EQ(weft_sem_acquire(&sem, WEFT_FOREVER), 0); return a; }
static void *k_note(void *a) { CHECK_EQ(weft_notification_wait(&note, WEFT_FOREVER), 0); return a; }
static void *k_wg(void *a) { CHECK_EQ(weft_waitgroup_wait(&wg, WEFT_FOREVER), 0); return a; }
static void *k_recv(void *a)
{
    int v;
    CHECK_EQ(weft_chan_recv(rch, &v, WEFT_FOREVER), 0);
    return a;
}
static void *k_send(void *a)
{
    int v = 7;
    CHECK_EQ(weft_chan_send(sch, &v, WEFT_FOREVER), 0);
    return a;
}
static void *k_future(void *a)
{
    void *v;
    CHECK_EQ(weft_future_get(fut, &v, WEFT_FOREVER), 0);
    return a;
}
static void *k_join(void *a) { CHECK_EQ(weft_join(parked_h, NULL, WEFT_FOREVER), 0); return a; }
static void *k_read(void *a)
{
    char c;
    CHECK_EQ(weft_read(rpipe[0], &c, 1, WEFT_FOREVER), 1);
    return a;
}
static void *k_write(void *a)
{
    char buf[4096] = {0};
    /* The pipe is full: this write waits for room. */
    CHECK_EQ(weft_write(wpipe[1], buf, 1, WEFT_FOREVER), 1);
    return a;
}
static void *k_proc(void *a)
{
    int st;
    CHECK_EQ(weft_proc_wait(child, &st, WEFT_FOREVER), 0);
    CHECK(WIFSIGNALED(st));
    return a;
}
static void *k_signal(void *a)
{
    CHECK_EQ(weft_signal_wait(sfd, NULL, WEFT_FOREVER), -ECANCELED);
    return a;
}
static void *job(void *a)
{
    while (!atomic_load(&release_job))
        usleep(1000);
    return a;
}
static void *k_offload(void *a)
{
    void *r;
    CHECK_EQ(weft_offload(job, a, NULL, &r, WEFT_FOREVER), 0);
    return a;
}

typedef struct expect {
    const char *name;
    weft_fn_t fn;
    weft_wait_kind_t kind;
    const void *object;
    int fd, events;
    uint64_t target;
    int64_t deadline;
    const char *text;   /* what the dump's line says of the wait */
    weft_fiber_t h;
    int seen;
} expect;

static expect ex[20];
static int nex;

static int check_one(const weft_fiber_info_t *in, void *arg)
{
    (void)arg;
    if (!in->name)
        return 0;
    for (int i = 0; i < nex; i++) {
        expect *e = &ex[i];
        if (strcmp(in->name, e->name) != 0)
            continue;
        H_CASE(e->name);
        e->seen++;
        CHECK_EQ(in->handle.id, e->h.id);
        CHECK_EQ(in->state, WEFT_FIBER_WAITING);
        CHECK_EQ(in->wait, e->kind);
        CHECK(in->object == e->object);
        if (e->fd == -2)
            CHECK(in->fd >= -1); /* a process: its pidfd, -1 without one */
        else
            CHECK_EQ(in->fd, e->fd);
        CHECK_EQ(in->events, e->events);
        CHECK_EQ(in->target, e->target);
        CHECK_EQ(in->deadline, e->deadline);
        CHECK(in->fn == e->fn);
        CHECK(in->since > 0 && in->since <= weft_now());
        CHECK(in->spawn_caller != NULL);
        if (e->fn == k_sleep) {
            /* The saved stack leads back into the fiber's function. */
            int found = 0;
            for (int k = 0; k < in->nframes; k++) {
                Dl_info di;
                if (dladdr((char *)in->frames[k] - 1, &di) && di.dli_sname &&
                    !strcmp(di.dli_sname, "k_sleep"))
                    found = 1;
            }
            /* No frames: a ucontext switch without libunwind. Under
             * Valgrind the library keeps away from libunwind, and a
             * library built for it has no frame pointers to follow. */
#if !defined(WEFT_CTX_UCONTEXT) || defined(WEFT_HAVE_UNWIND)
            CHECK(found || on_valgrind());
#else
            (void)found;
#endif
        }
        h_case_name = NULL;
    }
    return 0;
}

static char *dump_text(size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    CHECK(f != NULL);
    CHECK_EQ(weft_dump(f), 0);
    fclose(f);
    return buf;
}

static int waiting;
static int count_waiting(const weft_fiber_info_t *in, void *arg)
{
    (void)arg;
    if (in->state == WEFT_FIBER_WAITING)
        waiting++;
    return 0;
}

__attribute__((noinline)) void spawn_kind(const char *name, weft_fn_t fn, weft_wait_kind_t kind, const void *obj,
                int fd, int events, uint64_t target, int64_t deadline, const char *text)
{
    expect *e = &ex[nex++];
    *e = (expect){name, fn, kind, obj, fd, events, target, deadline, text, {0}, 0};
    CHECK_EQ(weft_spawn(fn, NULL, NULL, &e->h), 0);
    CHECK_EQ(weft_fiber_set_name(e->h, name), 0);
}

static void every_kind(void)
{
    CHECK_EQ(weft_mutex_init(&mtx), 0);
    CHECK_EQ(weft_mutex_init(&cmtx), 0);
    CHECK_EQ(weft_cond_init(&cnd), 0);
    CHECK_EQ(weft_sem_init(&sem, 0), 0);
    CHECK_EQ(weft_notification_init(&note), 0);
    CHECK_EQ(weft_waitgroup_init(&wg), 0);
    CHECK_EQ(weft_waitgroup_add(&wg, 1), 0);
    CHECK_EQ(weft_chan_create(&rch, sizeof(int), 0), 0);
    CHECK_EQ(weft_chan_create(&sch, sizeof(int), 0), 0);
    CHECK_EQ(weft_promise_create(&prom), 0);
    fut = weft_promise_future(prom);
    CHECK(fut != NULL);
    CHECK_EQ(pipe2(rpipe, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(wpipe, O_CLOEXEC), 0);
    CHECK_EQ(fcntl(wpipe[1], F_SETFL, O_NONBLOCK), 0);
    char fill[4096] = {0};
    while (write(wpipe[1], fill, sizeof fill) > 0)
        ;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    sfd = weft_signal_open(&set);
    CHECK(sfd >= 0);
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    CHECK_EQ(weft_mutex_lock(&mtx, WEFT_FOREVER), 0); /* k_mutex waits */
    sleep_until = weft_now() + 3600 * WEFT_SEC;
    mutex_deadline = weft_now() + 1800 * WEFT_SEC;

    weft_fiber_t ph;
    CHECK_EQ(weft_spawn(k_park, NULL, NULL, &ph), 0);
    parked_h = ph;
    expect *pe = &ex[nex++];
    *pe = (expect){"k-park", k_park, WEFT_WAIT_PARK, NULL, -1, 0, 0, WEFT_FOREVER, "park", ph, 0};
    CHECK_EQ(weft_fiber_set_name(ph, "k-park"), 0);
    spawn_kind("k-sleep", k_sleep, WEFT_WAIT_SLEEP, NULL, -1, 0, 0, sleep_until, "sleep");
    spawn_kind("k-mutex", k_mutex, WEFT_WAIT_MUTEX, &mtx, -1, 0, 0, mutex_deadline, "mutex");
    spawn_kind("k-cond", k_cond, WEFT_WAIT_COND, &cnd, -1, 0, 0, WEFT_FOREVER, "cond");
    spawn_kind("k-sem", k_sem, WEFT_WAIT_SEM, &sem, -1, 0, 0, WEFT_FOREVER, "semaphore");
    spawn_kind("k-note", k_note, WEFT_WAIT_NOTIFICATION, &note, -1, 0, 0, WEFT_FOREVER, "notification");
    spawn_kind("k-wg", k_wg, WEFT_WAIT_WAITGROUP, &wg, -1, 0, 0, WEFT_FOREVER, "waitgroup");
    spawn_kind("k-recv", k_recv, WEFT_WAIT_CHAN, rch, -1, WEFT_READABLE, 0, WEFT_FOREVER, "(receive)");
    spawn_kind("k-send", k_send, WEFT_WAIT_CHAN, sch, -1, WEFT_WRITABLE, 0, WEFT_FOREVER, "(send)");
    spawn_kind("k-future", k_future, WEFT_WAIT_FUTURE, fut, -1, 0, 0, WEFT_FOREVER, "future");
    spawn_kind("k-join", k_join, WEFT_WAIT_JOIN, NULL, -1, 0, ph.id, WEFT_FOREVER, "join fiber");
    spawn_kind("k-read", k_read, WEFT_WAIT_FD, NULL, rpipe[0], WEFT_READABLE, 0, WEFT_FOREVER, "readable");
    spawn_kind("k-write", k_write, WEFT_WAIT_FD, NULL, wpipe[1], WEFT_WRITABLE, 0, WEFT_FOREVER, "writable");
    spawn_kind("k-signal", k_signal, WEFT_WAIT_SIGNAL, NULL, sfd, 0, 0, WEFT_FOREVER, "signalfd");
    spawn_kind("k-offload", k_offload, WEFT_WAIT_OFFLOAD, (const void *)(uintptr_t)job, -1, 0, 0,
        WEFT_FOREVER, "offload");
    /* the process wait: its pidfd is known only in the fiber */
    spawn_kind("k-proc", k_proc, WEFT_WAIT_PROCESS, NULL, -2, 0, (uint64_t)child,
        WEFT_FOREVER, "process");

    /* Let every one of them block (each does at its first run). */
    for (int round = 0; round < 100; round++) {
        waiting = 0;
        weft_fibers_each(weft_sched_self(), count_waiting, NULL);
        if (waiting == nex)
            break;
        CHECK_EQ(weft_yield(), 0);
    }
    CHECK_EQ(waiting, nex);

    CHECK(weft_fibers_each(weft_sched_self(), check_one, NULL) >= nex + 1);
    for (int i = 0; i < nex; i++) {
        H_CASE(ex[i].name);
        CHECK_EQ(ex[i].seen, 1);
    }
    h_case_name = NULL;

    size_t len;
    char *text = dump_text(&len);
    fputs(text, stdout);
    CHECK(strstr(text, "running (the caller)") != NULL);
    for (int i = 0; i < nex; i++) {
        expect *e = &ex[i];
        H_CASE(e->name);
        char want[256];
        snprintf(want, sizeof want, "fiber %u \"%s\": waiting for ", (unsigned)(uint32_t)e->h.id,
                 e->name);
        char *line = strstr(text, want);
        CHECK(line != NULL);
        char *eol = strchr(line, '\n');
        CHECK(eol != NULL);
        *eol = '\0';
        CHECK(strstr(line, e->text) != NULL);
        if (e->object) {
            snprintf(want, sizeof want, "%p", e->object);
            CHECK(strstr(line, want) != NULL);
        }
        if (e->fd >= 0) {
            snprintf(want, sizeof want, e->kind == WEFT_WAIT_FD ? "fd %d " : "signalfd %d", e->fd);
            CHECK(strstr(line, want) != NULL);
        }
        if (e->kind == WEFT_WAIT_PROCESS) {
            snprintf(want, sizeof want, "process %d", (int)child);
            CHECK(strstr(line, want) != NULL);
        }
        if (e->kind == WEFT_WAIT_JOIN) {
            snprintf(want, sizeof want, "join fiber %u", (unsigned)(uint32_t)ph.id);
            CHECK(strstr(line, want) != NULL);
        }
        if (e->deadline != WEFT_FOREVER) {
            snprintf(want, sizeof want, "deadline %lld (in ", (long long)e->deadline);
            CHECK(strstr(line, want) != NULL);
        } else {
            CHECK(strstr(line, ", no deadline") != NULL);
        }
        *eol = '\n';
    }
    h_case_name = NULL;
    CHECK(strstr(text, "runs k_sleep+0x0 (") != NULL);
    CHECK(strstr(text, "spawned at spawn_kind+0x") != NULL);
    free(text);

    /* Release every one. */
    CHECK_EQ(weft_cancel(ex[13].h), 0); /* k-signal */
    CHECK_EQ(weft_cancel(ex[1].h), 0);  /* k-sleep */
    CHECK_EQ(weft_unpark(NULL, ph), 0);
    CHECK_EQ(weft_mutex_unlock(&mtx), 0);
    CHECK_EQ(weft_mutex_lock(&cmtx, WEFT_FOREVER), 0);
    CHECK_EQ(weft_cond_signal(&cnd), 0);
    CHECK_EQ(weft_mutex_unlock(&cmtx), 0);
    CHECK_EQ(weft_sem_release(&sem), 0);
    CHECK_EQ(weft_notification_set(&note), 0);
    CHECK_EQ(weft_waitgroup_done(&wg), 0);
    int v = 1;
    CHECK_EQ(weft_chan_send(rch, &v, WEFT_FOREVER), 0);
    CHECK_EQ(weft_chan_recv(sch, &v, WEFT_FOREVER), 0);
    CHECK_EQ(weft_promise_set_value(prom, NULL), 0);
    CHECK_EQ(weft_write(rpipe[1], "x", 1, WEFT_FOREVER), 1);
    static char drain[65536];
    CHECK(read(wpipe[0], drain, sizeof drain) > 0); /* room for k-write */
    CHECK_EQ(kill(child, SIGKILL), 0);
    atomic_store(&release_job, 1);
    for (int i = 0; i < nex; i++)
        if (ex[i].fn != k_park)
            CHECK_EQ(weft_join(ex[i].h, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_waitgroup_destroy(&wg), 0);
    CHECK_EQ(weft_notification_destroy(&note), 0);
    CHECK_EQ(weft_sem_destroy(&sem), 0);
    CHECK_EQ(weft_cond_destroy(&cnd), 0);
    CHECK_EQ(weft_mutex_destroy(&mtx), 0);
    CHECK_EQ(weft_mutex_destroy(&cmtx), 0);
    CHECK_EQ(weft_chan_destroy(rch), 0);
    CHECK_EQ(weft_chan_destroy(sch), 0);
    weft_future_release(fut);
    weft_promise_release(prom);
    CHECK_EQ(weft_close(rpipe[0]), 0);
    CHECK_EQ(weft_close(rpipe[1]), 0);
    CHECK_EQ(weft_close(wpipe[0]), 0);
    CHECK_EQ(weft_close(wpipe[1]), 0);
    CHECK_EQ(weft_close(sfd), 0);
    CHECK_EQ(weft_signal_block(&set), 0);
}

/* A dump on a signal: the handler wakes the loop, which writes it. */
static void on_signal(void)
{
    h_capture cap = h_stderr_begin();
    CHECK_EQ(weft_dump_on_signal(SIGUSR1), 0);
    CHECK_EQ(weft_dump_on_signal(SIGUSR2), -EINVAL); /* one signal at a time */
    weft_fiber_t p;
    CHECK_EQ(weft_spawn(k_park, NULL, NULL, &p), 0);
    CHECK_EQ(weft_fiber_set_name(p, "parked-for-the-signal"), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(pthread_kill(pthread_self(), SIGUSR1), 0);
    /* The loop writes it at its next iteration: a sleep lets it turn. */
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
    CHECK_EQ(weft_dump_on_signal(0), 0);
    char buf[8192];
    (void)h_stderr_end(cap, buf, sizeof buf);
    CHECK(strstr(buf, "weft: 2 fibers") != NULL);
    CHECK(strstr(buf, "\"parked-for-the-signal\": waiting for ") != NULL);
    CHECK(strstr(buf, "weft: end of dump") != NULL);
    CHECK_EQ(weft_unpark(NULL, p), 0);
    CHECK_EQ(weft_join(p, NULL, WEFT_FOREVER), 0);
}

/* 10,000 parked fibers: the dump finishes and names every one. */
#define MANY 10000
static int listed[MANY + 1];
static int mark(const weft_fiber_info_t *in, void *arg)
{
    (void)arg;
    if (in->name && !strncmp(in->name, "many-", 5))
        listed[atoi(in->name + 5)]++;
    return 0;
}

/* A dump from a fiber with the smallest stack weft_spawn allows: the walk
 * of every other fiber's stack runs on it. */
static void *small_dumper(void *arg)
{
    size_t len;
    char *text = dump_text(&len);
    CHECK(strstr(text, "\"small\": running (the caller)") != NULL);
    CHECK(strstr(text, "    #0 ") != NULL); /* the parked fiber's frames */
    free(text);
    return arg;
}

static void small_stack(void)
{
    H_CASE("small stack");
    weft_spawn_opts_t o = {.stack_size = 16 * 1024};
    weft_fiber_t h, p;
    CHECK_EQ(weft_spawn(k_park, NULL, NULL, &p), 0);
    CHECK_EQ(weft_yield(), 0); /* parked, with a stack to unwind */
    CHECK_EQ(weft_spawn(small_dumper, NULL, &o, &h), 0);
    CHECK_EQ(weft_fiber_set_name(h, "small"), 0);
    CHECK_EQ(weft_join(h, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_unpark(NULL, p), 0);
    CHECK_EQ(weft_join(p, NULL, WEFT_FOREVER), 0);
    h_case_name = NULL;
}

static void many(void)
{
    static weft_fiber_t h[MANY];
    char name[32];
    for (int i = 0; i < MANY; i++) {
        CHECK_EQ(weft_spawn(k_park, NULL, NULL, &h[i]), 0);
        snprintf(name, sizeof name, "many-%d", i);
        CHECK_EQ(weft_fiber_set_name(h[i], name), 0);
    }
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_fibers_each(weft_sched_self(), mark, NULL), MANY + 1);
    for (int i = 0; i < MANY; i++)
        CHECK_EQ(listed[i], 1);
    size_t len;
    char *text = dump_text(&len);
    size_t lines = 0;
    for (char *p = text; (p = strstr(p, "\nfiber ")); p++)
        lines++;
    CHECK_EQ(lines, MANY + 1);
    for (int i = 0; i < MANY; i += 997) {
        snprintf(name, sizeof name, "\"many-%d\": ", i);
        CHECK(strstr(text, name) != NULL);
    }
    free(text);
    for (int i = 0; i < MANY; i++)
        CHECK_EQ(weft_unpark(NULL, h[i]), 0);
    for (int i = 0; i < MANY; i++)
        CHECK_EQ(weft_join(h[i], NULL, WEFT_FOREVER), 0);
}

static void *body(void *arg)
{
    CHECK_EQ(weft_fiber_set_name(weft_self(), "body"), 0);
    CHECK_EQ(weft_fiber_set_name((weft_fiber_t){12345}, "x"), -ESRCH);
    CHECK_EQ(weft_fibers_each(NULL, mark, NULL), -EINVAL);
    CHECK_EQ(weft_dump(NULL), -EINVAL);
    every_kind();
    small_stack();
    on_signal();
    many();
    return arg;
}

int main(void)
{
    h_load_unwinder();
    h_begin("dump");
    h_raise_nofile(4096);
    h_run(body, NULL);
    return h_end();
}
