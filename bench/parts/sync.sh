#!/usr/bin/env bash
# sync.sh — sync and future benchmarks (issue 4) against Boost.Fiber, run
# in the same session: mutex hand-off, channel ping-pong, a 10-step then
# chain, semaphore-limited spawn. Target: weft >= 1.5x Boost.Fiber on each.
#
# Programs: build/bench/sync_bench and build/bench/boost_fiber_sync
# (make benches). Each figure is measured WEFT_BENCH_REPS times (default 5),
# every run under the machine-wide benchmark lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
bin=${WEFT_BENCH_BIN:-$here/../../build/bench}
reps=${WEFT_BENCH_REPS:-5}
G=sync

for p in sync_bench boost_fiber_sync; do
  [ -x "$bin/$p" ] || { echo "sync.sh: $bin/$p missing (make benches)" >&2; exit 1; }
done

peer="Boost.Fiber $(dpkg-query -W -f='${Version}' libboost-fiber-dev 2>/dev/null | cut -d+ -f1)"
bench_header "sync: mutex, channel, then chain, limited spawn (peer: $peer)"

declare -A N=([mutex]=1000000 [chan]=500000 [then]=200000 [limit]=500000)
declare -A UNIT=([mutex]=ns/lock [chan]=ns/roundtrip [then]=ns/chain [limit]=ns/task)
declare -A NAME=([mutex]=mutex_handoff [chan]=chan_pingpong [then]=then_chain_10
                 [limit]=limited_spawn_16)
declare -A NOTE=(
  [mutex]="2 fibers: lock, yield, unlock; every acquisition is handed over (FIFO)"
  [chan]="unbuffered int channels, one echo fiber"
  [then]="promise, 10 then steps, set, get; Boost: each step an async fiber (no then())"
  [limit]="tasks yield once, <= 16 running; Boost: mutex+condvar semaphore, pooled stacks")
declare -A RATIO
for m in mutex chan then limit; do
  w=$(bench_runs "$bin/sync_bench" "$m" "${N[$m]}" "$reps")
  p=$(bench_runs "$bin/boost_fiber_sync" "$m" "${N[$m]}" "$reps")
  bench_report $G "${NAME[$m]}" "${UNIT[$m]}" lower "$w" "$peer" "$p" "${NOTE[$m]}"
  RATIO[$m]=$(bench_ratio lower "$(bench_median "$w")" "$(bench_median "$p")")
done

echo
echo "targets (issue 4): weft >= 1.5x Boost.Fiber"
for m in mutex chan then limit; do
  r=${RATIO[$m]}
  v=$(awk -v r="$r" 'BEGIN { print (r >= 1.5) ? "met" : "MISSED" }')
  printf '  %-18s %6sx  %s\n' "${NAME[$m]}" "$r" "$v"
done
