#!/usr/bin/env bash
# core.sh — the core runtime's benchmarks (issues 2 and 15): context
# switches, spawn + run + exit, memory per parked fiber.
#
# Programs: build/bench/core_* and boost_* (make benches). The peers are
# Boost.Context (bare switches, stacks) and, for the scheduler switch and
# spawn under a scheduler (wait group, join), Boost.Fiber (a scheduler
# built on Boost.Context); no C fiber scheduler is packaged in Debian 12.
# Each figure is measured WEFT_BENCH_REPS times (default 5; the
# 1,000,000-fiber case 3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
bin=${WEFT_BENCH_BIN:-$here/../../build/bench}
reps=${WEFT_BENCH_REPS:-5}
big_reps=${WEFT_BENCH_BIG_REPS:-3}
nswitch=${WEFT_BENCH_SWITCHES:-10000000}
G=core

for p in core_switch core_spawn core_park timer_storm boost_switch boost_spawn boost_fiber_yield boost_fiber_spawn; do
  [ -x "$bin/$p" ] || { echo "core.sh: $bin/$p missing (make benches)" >&2; exit 1; }
done

bench_header "core: context switch, spawn, parked fibers (peer: Boost.Context $(
  dpkg-query -W -f='${Version}' libboost-context-dev 2>/dev/null | cut -d+ -f1))"

# One process per run (code and stack placement move these figures by up
# to ~1 ns from one process to the next), each measuring twice and keeping
# the second: Boost's first fiber has a freshly mmap'd stack and switches
# at ~10 ns, later ones (heap stacks) at ~5.5 ns; the peer gets its best.
boost=$(bench_procs_warm "$reps" "$bin/boost_switch" "$nswitch" 2)
raw=$(bench_procs_warm "$reps" "$bin/core_switch" raw "$nswitch" 2)
sym=$(bench_procs_warm "$reps" "$bin/core_switch" sym "$nswitch" 2)
yield=$(bench_procs_warm "$reps" "$bin/core_switch" yield "$nswitch" 2)
bfiber=$(bench_procs_warm "$reps" "$bin/boost_fiber_yield" "$nswitch" 2)
bench_report $G switch_raw ns/switch lower "$raw" "Boost.Context fiber" "$boost" \
  "weft__ctx_switch between two contexts, each from its own loop"
bench_report $G switch_raw_same_site ns/switch lower "$sym" "Boost.Context fiber" "$boost" \
  "weft__ctx_switch, both contexts switching from one call site (as in the scheduler)"
bench_report $G switch_yield ns/switch lower "$yield" "Boost.Context fiber" "$boost" \
  "weft_yield ping-pong of two fibers through the scheduler"
bench_report $G switch_yield_vs_scheduler ns/switch lower "$yield" "Boost.Fiber yield" "$bfiber" \
  "the same against a scheduler: boost::this_fiber::yield, round-robin"

w=$(bench_runs "$bin/core_spawn" warm 1000000 "$reps")
p=$(bench_runs "$bin/boost_spawn" warm 1000000 "$reps")
bench_report $G spawn_run_exit ns/fiber lower "$w" "Boost.Context pooled stack" "$p" \
  "weft: batches of 100 spawned from the loop, stacks from its cache (guarded); Boost: one at a time, stacks from a pool (unguarded)"
wg=$(bench_runs "$bin/core_spawn" wg 1000000 "$reps")
p=$(bench_runs "$bin/boost_fiber_spawn" batch 1000000 "$reps")
bench_report $G spawn_run_exit_wg ns/fiber lower "$wg" "Boost.Fiber, joined" "$p" \
  "from a fiber: 100 spawned, each ends with weft_waitgroup_done, the spawner waits; Boost.Fiber: 100 created, then joined"
j=$(bench_runs "$bin/core_spawn" join 1000000 "$reps")
p=$(bench_runs "$bin/boost_fiber_spawn" join 1000000 "$reps")
bench_report $G spawn_join ns/fiber lower "$j" "Boost.Fiber" "$p" \
  "one at a time: spawn a fiber, weft_join it, repeat (Boost.Fiber: construct, join)"
warm=$w
w=$(bench_runs "$bin/core_spawn" cold 20000 "$reps")
p=$(bench_runs "$bin/boost_spawn" cold 20000 "$reps")
bench_report $G spawn_run_exit_cold ns/fiber lower "$w" "Boost.Context protected stack" "$p" \
  "20,000 at once: every stack a fresh mmap with a guard page"

# Parked fibers: one process per run and per size.
park() { # N RUNS -> sets per, total (MiB), spawn, pte (MiB), guard
  local n=$1 runs=$2 i line
  per=""; total=""; spawn=""; pte=""; guard="every stack has a guard page"
  for ((i = 0; i < runs; i++)); do
    line=$(bench_locked "$bin/core_park" "$n")
    set -- $line
    per+="$4 "
    total+="$(awk -v b="$3" 'BEGIN { printf "%.1f", b / 1048576 }') "
    spawn+="$6 "
    pte+="$(awk -v b="$7" 'BEGIN { printf "%.1f", b / 1048576 }') "
    [ "$5" = 0 ] || guard="$5 stacks WITHOUT a guard page"
  done
}
park 100000 "$reps"
bench_report $G parked_100k bytes/fiber lower "$per" "" "" "guards: $guard"
bench_report $G parked_100k_rss MiB lower "$total" "" "" \
  "VmRSS with 100,000 parked; page tables (VmPTE, not in RSS): $(bench_median "$pte") MiB"
park 1000000 "$big_reps"
bench_report $G parked_1m bytes/fiber lower "$per" "" "" "guards: $guard"
bench_report $G parked_1m_rss MiB lower "$total" "" "" \
  "VmRSS with 1,000,000 parked; page tables (VmPTE, not in RSS): $(bench_median "$pte") MiB"
bench_report $G parked_1m_spawn ns/fiber lower "$spawn" "" "" \
  "time to spawn a fiber and have it park, with 1,000,000 live"
rss1m=$(bench_median "$total")
guard1m=$guard

# Timer storm: N fibers sleeping until one deadline against the same N
# woken by one condition-variable broadcast (the floor: no timer at all).
# One process per run, the two kinds interleaved.
declare -A STORM
for n in 10000 100000 1000000; do
  r=$reps; [ "$n" -ge 1000000 ] && r=$big_reps
  s=""; b=""
  for ((i = 0; i < r; i++)); do
    s+="$(bench_runs "$bin/timer_storm" sleep "$n" 1) "
    b+="$(bench_runs "$bin/timer_storm" broadcast "$n" 1) "
  done
  label=$(awk -v n="$n" 'BEGIN { print (n >= 1000000) ? n / 1000000 "m" : n / 1000 "k" }')
  bench_report $G "timer_storm_$label" ns/fiber lower "$s" "broadcast floor" "$b" \
    "$n fibers: spawn, weft_sleep_until(one deadline), wake; floor: weft_cond_wait, one broadcast (active time only)"
  STORM[$label]=$(bench_ratio lower "$(bench_median "$s")" "$(bench_median "$b")")
done

# Targets of issue 2 (benchmarks, not tests).
ymed=$(bench_median "$yield"); bmed=$(bench_median "$boost"); smed=$(bench_median "$sym")
verdict() { awk "BEGIN { exit !($1) }" && echo met || echo MISSED; }
echo
echo "targets (issue 2):"
printf '  scheduler switch <= 8 ns (2x the jmp switch of design.md): %s ns  %s\n' \
  "$ymed" "$(verdict "$ymed <= 8")"
printf '  scheduler switch faster than Boost.Context (%s ns): %s ns  %s\n' \
  "$bmed" "$ymed" "$(verdict "$ymed < $bmed")"
printf '  raw switch (same call site) vs Boost.Context: %s vs %s ns  %s\n' \
  "$smed" "$bmed" "$(verdict "$smed < $bmed")"
printf '  1,000,000 parked fibers with guard pages < 4096 MiB RSS: %s MiB, %s  %s\n' \
  "$rss1m" "$guard1m" "$(verdict "$rss1m < 4096")"
echo
echo "targets (issue 15):"
wmed=$(bench_median "$warm"); gmed=$(bench_median "$wg"); jmed=$(bench_median "$j")
printf '  spawn + run + exit in batches <= 25 ns: %s ns (from the loop), %s ns (wait group)  %s\n' \
  "$wmed" "$gmed" "$(verdict "$wmed <= 25 && $gmed <= 25")"
printf '  spawn + join one at a time <= 45 ns: %s ns  %s\n' "$jmed" "$(verdict "$jmed <= 45")"
printf '  1,000,000 parked fibers with guard pages <= 2048 MiB RSS: %s MiB  %s\n' \
  "$rss1m" "$(verdict "$rss1m <= 2048")"
echo "    (floor: one 4 KiB stack page per parked fiber, 3,906 MiB; docs/PERFORMANCE.md, 'A parked fiber costs one page')"
echo
echo "targets (issue 25): timer storm within 1.1x its broadcast floor (ratio >= 0.91)"
for label in 10k 100k 1m; do
  printf '  timer_storm_%-5s %6sx  %s\n' "$label" "${STORM[$label]}" "$(verdict "${STORM[$label]:-0} >= 0.909")"
done
