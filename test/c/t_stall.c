/* The stall detector: a fiber that spins 200 ms with the limit at 50 ms is
 * reported exactly once, with its name, function and spawn site — through
 * the callback, and as a line on stderr (WEFT_STALL_MS). Fibers that
 * switch often are never reported. */
#include "harness.h"

#include <dlfcn.h>

static int reports;
static weft_stall_info_t last;
static char last_name[64];

static void on_stall(const weft_stall_info_t *in, void *arg)
{
    (void)arg;
    reports++;
    last = *in;
    snprintf(last_name, sizeof last_name, "%s", in->name ? in->name : "");
    last.name = last_name;
}

__attribute__((noinline)) void *spinner(void *arg)
{
    int64_t end = weft_now() + 200 * WEFT_MS;
    while (weft_now() < end)
        ;
    return arg;
}

static void *yielder(void *arg)
{
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(weft_yield(), 0);
    return arg;
}


/* The spawn site the report must name. */
__attribute__((noinline)) weft_fiber_t spawn_spinner(const char *name)
{
    weft_fiber_t h;
    CHECK_EQ(weft_spawn(spinner, NULL, NULL, &h), 0);
    CHECK_EQ(weft_fiber_set_name(h, name), 0);
    return h;
}

static const char *sym(const void *pc)
{
    Dl_info di;
    if (dladdr(pc, &di) && di.dli_sname)
        return di.dli_sname;
    return "?";
}

static void *body(void *arg)
{
    weft_sched_t *s = weft_sched_self();
    weft_stats_t st;

    /* 1. WEFT_STALL_MS=50 (set by main): one line on stderr. */
    H_CASE("stderr");
    h_capture cap = h_stderr_begin();
    weft_fiber_t h = spawn_spinner("spin-stderr");
    CHECK_EQ(weft_join(h, NULL, WEFT_FOREVER), 0);
    /* The loop reports at its next iteration. */
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
    char buf[4096];
    (void)h_stderr_end(cap, buf, sizeof buf);
    printf("%s", buf);
    char *line = strstr(buf, "weft: stall: fiber ");
    CHECK(line != NULL);
    CHECK(strstr(line + 1, "weft: stall:") == NULL); /* once */
    CHECK(strstr(line, "\"spin-stderr\" ran ") != NULL);
    CHECK(strstr(line, "runs spinner+0x0 (") != NULL);
    CHECK(strstr(line, "spawned at spawn_spinner+0x") != NULL);
    CHECK_EQ(weft_sched_stats(s, &st), 0);
    CHECK_EQ(st.stalls, 1);

    /* 2. The callback. */
    H_CASE("callback");
    CHECK_EQ(weft_sched_set_stall(s, 50, on_stall, NULL), 0);
    weft_fiber_t y[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_spawn(yielder, NULL, NULL, &y[i]), 0);
    int64_t t0 = weft_now();
    h = spawn_spinner("spin-cb");
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_join(y[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(h, NULL, WEFT_FOREVER), 0);
    int64_t t1 = weft_now();
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
    CHECK_EQ(reports, 1);
    CHECK(strcmp(last.name, "spin-cb") == 0);
    CHECK_EQ(last.handle.id, h.id);
    CHECK(last.fn == spinner);
    CHECK(strcmp(sym((const char *)last.spawn_caller - 1), "spawn_spinner") == 0);
    /* it ran over the limit, and no longer than the whole spawn-to-join
     * (a loaded machine stretches both, so no tighter bound holds) */
    CHECK(last.ran_ns >= 50 * WEFT_MS && last.ran_ns <= t1 - t0);
    CHECK_EQ(last.suppressed, 0);
    CHECK_EQ(weft_sched_stats(s, &st), 0);
    CHECK_EQ(st.stalls, 2);

    /* 3. Off: nothing more. */
    H_CASE("off");
    CHECK_EQ(weft_sched_set_stall(s, 0, NULL, NULL), 0);
    h = spawn_spinner("spin-off");
    CHECK_EQ(weft_join(h, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
    CHECK_EQ(reports, 1);
    CHECK_EQ(weft_sched_set_stall(NULL, 5, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_sched_set_stall(s, -1, NULL, NULL), -EINVAL);
    return arg;
}

int main(void)
{
    h_begin("stall");
    setenv("WEFT_STALL_MS", "50", 1);
    h_run(body, NULL);
    return h_end();
}
