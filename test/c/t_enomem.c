/*
 * Spawning when memory runs out: weft_spawn() returns -ENOMEM (never
 * crashes, never leaks a slot or a handle), the scheduler keeps running its
 * other fibers, and spawning works again once memory is back.
 *
 * Two ways to run out, each in a forked child so the limits never touch
 * the test process:
 *   1. the address-space limit (ulimit -v, RLIMIT_AS) a few MiB above what
 *      the child already maps;
 *   2. the map count (vm.max_map_count) exhausted: the child fills it with
 *      one-page mappings of alternating protection (they cannot merge), as a
 *      program with very many mappings would, instead of lowering the
 *      machine-wide sysctl.
 * A parent that sees a child fail prints the child's output.
 */
#include "harness.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* A bound on the fibers spawned while waiting for -ENOMEM (a few MiB of
 * memory touched at worst). */
#define MAX_FIBERS 20000

static int parked_n;
static weft_fiber_t parked[MAX_FIBERS];
static int ended;

/* Parks until cancelled: holds its stack while the test exhausts memory. */
static void *parker(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_park(WEFT_FOREVER), -ECANCELED);
    ended++;
    return NULL;
}

static void *ticker(void *arg)
{
    int *ticks = arg;
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(weft_sleep(WEFT_MS), 0);
        (*ticks)++;
    }
    return NULL;
}

/* Spawn parked fibers until weft_spawn fails (or @limit): the error. */
static int spawn_until_failure(int limit)
{
    while (parked_n < limit) {
        int rc = weft_spawn(parker, NULL, NULL, &parked[parked_n]);
        if (rc < 0)
            return rc;
        parked_n++;
    }
    return 0;
}

/* What must hold right after a failed spawn: the counters are those of the
 * fibers that exist, and the loop still runs fibers and timers. */
static void check_still_working(int live_before)
{
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    /* the parked fibers, this one; and a handle each */
    CHECK_EQ(st.fibers, (size_t)live_before + 1);
    CHECK_EQ(st.handles, (size_t)parked_n + 1);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
}

/* Cancel and join every parked fiber, check the books balance. */
static void release_all(void)
{
    for (int i = 0; i < parked_n; i++)
        CHECK_EQ(weft_cancel(parked[i]), 0);
    for (int i = 0; i < parked_n; i++)
        CHECK_EQ(weft_join(parked[i], NULL, weft_deadline_in(10 * WEFT_SEC)), 0);
    CHECK_EQ(ended, parked_n);
    parked_n = ended = 0;
}

/* After memory is back: spawning works, including a fiber that needs a
 * fresh stack mapping of another size. */
static void check_recovered(void)
{
    int ticks = 0;
    weft_fiber_t t, big;
    weft_spawn_opts_t o = {.stack_size = 1024 * 1024};
    CHECK_EQ(weft_spawn(ticker, &ticks, NULL, &t), 0);
    CHECK_EQ(weft_spawn(ticker, &ticks, &o, &big), 0);
    CHECK_EQ(weft_join(t, NULL, weft_deadline_in(10 * WEFT_SEC)), 0);
    CHECK_EQ(weft_join(big, NULL, weft_deadline_in(10 * WEFT_SEC)), 0);
    CHECK_EQ(ticks, 10);
}

static long vm_size_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* ---- 1. RLIMIT_AS ---------------------------------------------------- */

static void *as_main(void *arg)
{
    (void)arg;
    /* A few fibers first: the slot table and stack cache exist. */
    CHECK_EQ(spawn_until_failure(16), 0);
    CHECK_EQ(weft_yield(), 0);
    struct rlimit old, lim;
    CHECK_EQ(getrlimit(RLIMIT_AS, &old), 0);
    long kib = vm_size_kib();
    CHECK(kib > 0);
    lim.rlim_cur = (rlim_t)(kib + 8 * 1024) * 1024; /* 8 MiB of room */
    lim.rlim_max = old.rlim_max;
    CHECK_EQ(setrlimit(RLIMIT_AS, &lim), 0);

    int before = parked_n;
    int rc = spawn_until_failure(MAX_FIBERS);
    CHECK_EQ(rc, -ENOMEM);
    CHECK(parked_n > before); /* the room was used first */
    CHECK_EQ(weft_spawn(parker, NULL, NULL, &(weft_fiber_t){0}), -ENOMEM);
    check_still_working(parked_n);

    CHECK_EQ(setrlimit(RLIMIT_AS, &old), 0);
    check_recovered();
    printf("  RLIMIT_AS %ld KiB: %d more fibers, then -ENOMEM; recovered\n",
           kib + 8 * 1024, parked_n - before);
    release_all();
    return NULL;
}

/* ---- 2. the map count -------------------------------------------------- */

static void *fill_base[1 << 20];
static long fill_n;

/* Map one-page regions until the kernel refuses: alternating protections
 * keep neighbours from merging, so each costs one map entry. */
static void fill_map_count(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    while (fill_n < (long)(sizeof fill_base / sizeof fill_base[0])) {
        void *p = mmap(NULL, page, (fill_n & 1) ? PROT_READ : PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            CHECK_EQ(errno, ENOMEM);
            return;
        }
        fill_base[fill_n++] = p;
    }
    CHECK(!"vm.max_map_count not reached");
}

static void unfill(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    while (fill_n > 0)
        CHECK_EQ(munmap(fill_base[--fill_n], page), 0);
}

static void *maps_main(void *arg)
{
    (void)arg;
    CHECK_EQ(spawn_until_failure(16), 0);
    CHECK_EQ(weft_yield(), 0);
    /* stdout's buffer now: nothing the test prints needs a mapping later */
    printf("  filling the map count\n");
    fill_map_count();

    int before = parked_n;
    int rc = spawn_until_failure(MAX_FIBERS);
    CHECK_EQ(rc, -ENOMEM);
    CHECK(parked_n >= before);
    check_still_working(parked_n);
    long filled = fill_n;
    unfill();
    check_recovered();
    printf("  map count exhausted (%ld fillers): %d more fibers, then -ENOMEM; recovered\n",
           filled, parked_n - before);
    release_all();
    return NULL;
}

/* Run @fn as the main fiber of a child process with its own scheduler;
 * the child checks the teardown oracle itself. */
static void in_child(const char *what, weft_fn_t fn)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        h_begin(what);
        h_run(fn, NULL);
        h_check_idle();
        CHECK_EQ(weft_sched_destroy(weft_sched_self()), 0);
        printf("  %s: ok\n", what);
        fflush(stdout);
        _exit(0);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s: child failed (status 0x%x)\n", what, st);
        exit(1);
    }
}

int main(void)
{
    h_begin("t_enomem");
    /* ASan maps its own allocator regions as it goes and aborts, by
     * design, when the kernel refuses one ("Failed to mmap"): under ASan
     * the children would test ASan. The other builds run them. */
    if (!UNDER_ASAN) {
        in_child("RLIMIT_AS", as_main);
        in_child("vm.max_map_count", maps_main);
    } else {
        printf("  skipped under ASan (it needs mappings of its own)\n");
    }
    /* The parent's own scheduler (for h_end), untouched by either. */
    CHECK(weft_sched_self() != NULL);
    return h_end();
}
