/*
 * core_park — memory per parked fiber.
 *
 *   core_park N   spawn N fibers that each block in weft_park(WEFT_FOREVER),
 *                 read VmRSS from /proc/self/status before spawning and once
 *                 all are parked, then unpark them all and let them exit.
 *
 * Prints one line:
 *   N rss_before rss_parked bytes_per_fiber unguarded ns_per_spawn pte_parked
 * (bytes; "unguarded" is weft_stats_t.stacks_unguarded, 0 = every stack has
 * its guard page; ns_per_spawn is the time to spawn and park one fiber;
 * pte_parked is VmPTE, the page tables, which VmRSS does not include).
 * Run one size per process so earlier runs do not inflate the figure.
 */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long n_fibers;
static long n_parked;
static weft_fiber_t *handles;
static long rss_before, rss_parked, pte_parked;
static size_t unguarded;
static int64_t spawn_ns;

/* A "Vm...:" line of /proc/self/status, in bytes. */
static long vm_status(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t klen = strlen(key);
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            kb = atol(line + klen + 1);
            break;
        }
    fclose(f);
    return kb * 1024;
}

static void *parker(void *arg)
{
    (void)arg;
    n_parked++;
    weft_park(WEFT_FOREVER);
    return NULL;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "core_park: %s: %s\n", what, strerror(-rc));
    exit(1);
}

static void *controller(void *arg)
{
    (void)arg;
    int64_t t0 = weft_now();
    for (long i = 0; i < n_fibers; i++) {
        int rc = weft_spawn(parker, NULL, NULL, &handles[i]);
        if (rc < 0)
            die("weft_spawn", rc);
    }
    /* Every parker is queued before us: they all park, then we run. */
    while (n_parked < n_fibers)
        weft_yield();
    spawn_ns = weft_now() - t0;
    rss_parked = vm_status("VmRSS");
    pte_parked = vm_status("VmPTE");
    weft_stats_t st;
    weft_sched_stats(weft_sched_self(), &st);
    unguarded = st.stacks_unguarded;
    for (long i = 0; i < n_fibers; i++) {
        int rc = weft_unpark(NULL, handles[i]);
        if (rc < 0)
            die("weft_unpark", rc);
        rc = weft_detach(handles[i]);
        if (rc < 0)
            die("weft_detach", rc);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    n_fibers = argc > 1 ? atol(argv[1]) : 100000;
    if (n_fibers <= 0) {
        fprintf(stderr, "usage: %s N\n", argv[0]);
        return 2;
    }
    /* The handle array is touched before the first reading, so it is not
     * charged to the fibers. */
    handles = calloc((size_t)n_fibers, sizeof *handles);
    if (!handles)
        return 1;
    memset(handles, 0xff, (size_t)n_fibers * sizeof *handles);
    weft_sched_t *s = weft_sched_self();
    if (!s)
        return 1;
    rss_before = vm_status("VmRSS");
    int rc = weft_spawn(controller, NULL, NULL, NULL);
    if (rc < 0)
        die("weft_spawn", rc);
    rc = weft_sched_run(s);
    if (rc < 0)
        die("weft_sched_run", rc);
    printf("%ld %ld %ld %.1f %zu %.1f %ld\n", n_fibers, rss_before, rss_parked,
           (double)(rss_parked - rss_before) / (double)n_fibers, unguarded,
           (double)spawn_ns / (double)n_fibers, pte_parked);
    free(handles);
    return weft_sched_destroy(s) < 0;
}
