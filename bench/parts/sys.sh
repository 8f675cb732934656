#!/usr/bin/env bash
# sys.sh — the system-facing helpers of issue 16 against plain C doing the
# same in the same run: starting a program and waiting for it
# (weft_proc_spawn + weft_proc_join vs posix_spawn + waitpid), and a
# signal's delivery to the code waiting for it (weft_signal_wait in a
# fiber, on io_uring and on epoll, vs a blocking read of a signalfd).
# Each figure is WEFT_BENCH_REPS processes (default 5), interleaved weft
# and peer so that drift hits both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
bin=${WEFT_BENCH_BIN:-$here/../../build/bench}
reps=${WEFT_BENCH_REPS:-5}
nspawn=${WEFT_BENCH_SPAWNS:-500}
nsig=${WEFT_BENCH_SIGNALS:-50000}
G=sys
for p in proc_spawn signal_latency; do
  [ -x "$bin/$p" ] || { echo "sys.sh: $bin/$p missing (make benches)" >&2; exit 1; }
done

bench_header "sys: subprocesses and signals (peer: the same in plain C, blocking)"

w=""; p=""
for ((i = 0; i < reps; i++)); do
  w+="$(bench_runs "$bin/proc_spawn" weft "$nspawn" 1) "
  p+="$(bench_runs "$bin/proc_spawn" plain "$nspawn" 1) "
done
bench_report $G spawn_wait us/process lower "$w" "posix_spawn + waitpid" "$p" \
  "/bin/true, $nspawn per run: weft_proc_spawn + weft_proc_join (pidfd through the loop) + weft_proc_close"

u=""; e=""; p=""
for ((i = 0; i < reps; i++)); do
  u+="$(WEFT_BACKEND=io_uring bench_runs "$bin/signal_latency" weft "$nsig" 1) "
  e+="$(WEFT_BACKEND=epoll bench_runs "$bin/signal_latency" weft "$nsig" 1) "
  p+="$(bench_runs "$bin/signal_latency" plain "$nsig" 1) "
done
bench_report $G signal_delivery us/signal lower "$u" "blocking signalfd read" "$p" \
  "pthread_kill ping-pong between two threads, $nsig round trips per run; weft_signal_wait on io_uring"
bench_report $G signal_delivery_epoll us/signal lower "$e" "blocking signalfd read" "$p" \
  "the same with weft on epoll"
