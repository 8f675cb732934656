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
 *
 *   core_park N detail   the same, then where the memory goes, read while
 *                        all are parked (one "name value" per line):
 *                        resident pages per stack (mincore over every
 *                        stack: how many have 0, 1, 2, more), the bytes
 *                        of its top page a parked fiber uses (the record
 *                        and its frames, from the top down to its saved
 *                        stack pointer: min, mean, max), and the sizes of
 *                        the fiber record and the handle slot. The first
 *                        line is as above, without ns_per_spawn.
 */
#include "internal.h" /* detail: the fibers' records and stacks */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* A parked fiber's saved stack pointer (0 where unknown: ucontext). */
static uintptr_t saved_sp(const weft__fiber *f)
{
#if defined(WEFT_CTX_UCONTEXT)
    (void)f;
    return 0;
#elif defined(__x86_64__)
    return (uintptr_t)f->ctx.r[1];
#else
    return (uintptr_t)f->ctx.r[12];
#endif
}

/* Where the memory of the parked fibers is (see the usage above). */
static void detail(void)
{
    weft_sched_t *s = weft_sched_self();
    size_t page = weft__page_size();
    long pages[4] = {0}; /* stacks with 0, 1, 2, 3 or more resident pages */
    long used_min = -1, used_max = 0;
    double used_sum = 0;
    unsigned char *vec = NULL;
    for (long i = 0; i < n_fibers; i++) {
        weft__fiber *f = s->slots[(uint32_t)handles[i].id - 1].u.fiber;
        char *top = f->stack.base + f->stack.map_size;
        size_t n = f->stack.map_size / page;
        if (!vec && !(vec = malloc(n)))
            exit(1);
        if (mincore(f->stack.base, f->stack.map_size, vec) != 0)
            exit(1);
        long r = 0;
        for (size_t p = 0; p < n; p++)
            r += vec[p] & 1;
        pages[r < 3 ? r : 3]++;
        uintptr_t sp = saved_sp(f);
        long used = sp ? (long)((uintptr_t)top - sp) : -1;
        used_min = used_min < 0 || used < used_min ? used : used_min;
        used_max = used > used_max ? used : used_max;
        used_sum += (double)used;
    }
    free(vec);
    printf("stacks_with_0_resident_pages %ld\n", pages[0]);
    printf("stacks_with_1_resident_page %ld\n", pages[1]);
    printf("stacks_with_2_resident_pages %ld\n", pages[2]);
    printf("stacks_with_more_resident_pages %ld\n", pages[3]);
    printf("top_page_bytes_used_min %ld\n", used_min);
    printf("top_page_bytes_used_mean %.0f\n", used_sum / (double)n_fibers);
    printf("top_page_bytes_used_max %ld\n", used_max);
    printf("fiber_record_bytes %zu\n", sizeof(weft__fiber));
    printf("handle_slot_bytes %zu\n", sizeof(weft__slot));
}

static int want_detail;

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
    if (want_detail) {
        printf("%ld %ld %ld %.1f %zu - %ld\n", n_fibers, rss_before, rss_parked,
               (double)(rss_parked - rss_before) / (double)n_fibers, unguarded,
               pte_parked);
        detail();
    }
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
    want_detail = argc > 2 && !strcmp(argv[2], "detail");
    if (n_fibers <= 0 || (argc > 2 && !want_detail)) {
        fprintf(stderr, "usage: %s N [detail]\n", argv[0]);
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
    if (!want_detail)
        printf("%ld %ld %ld %.1f %zu %.1f %ld\n", n_fibers, rss_before,
               rss_parked, (double)(rss_parked - rss_before) / (double)n_fibers,
               unguarded, (double)spawn_ns / (double)n_fibers, pte_parked);
    free(handles);
    return weft_sched_destroy(s) < 0;
}
