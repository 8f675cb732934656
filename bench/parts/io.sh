#!/usr/bin/env bash
# io.sh — the io_uring backend against epoll (issue 3), same program, same
# run: loopback echo ping-pong with 1 and 1000 connections, and a TCP
# stream. Each figure is WEFT_BENCH_REPS runs (default 5) of
# WEFT_BENCH_IO_SECS seconds (default 2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
bin=${WEFT_BENCH_BIN:-$here/../../build/bench}
reps=${WEFT_BENCH_REPS:-5}
secs=${WEFT_BENCH_IO_SECS:-2}
G=io
[ -x "$bin/io_echo" ] || { echo "io.sh: $bin/io_echo missing (make benches)" >&2; exit 1; }
if [ "$(WEFT_BACKEND=io_uring "$bin/io_echo" pingpong 1 0.01 8 2>&1 >/dev/null | sed -n 's/.*backend=//p')" != io_uring ]; then
  echo "io.sh: io_uring is not available on this machine: part skipped"; exit 0
fi

bench_header "io: io_uring backend vs epoll backend (same program, loopback, one loop)"

runs() { # BACKEND ARGS... -> REPS figures, io_uring and epoll interleaved by caller
  local b=$1; shift
  WEFT_BACKEND=$b bench_locked "$bin/io_echo" "$@" 2>/dev/null
}
measure() { # NAME UNIT NOTE ARGS...
  local name=$1 unit=$2 note=$3; shift 3
  local u="" e="" i
  for ((i = 0; i < reps; i++)); do  # interleaved, so drift hits both
    u+="$(runs io_uring "$@") "
    e+="$(runs epoll "$@") "
  done
  bench_report $G "$name" "$unit" higher "$u" "weft on epoll" "$e" "$note"
}
measure pingpong_1conn round-trips/s "1 connection, 64-byte messages" pingpong 1 "$secs" 64
measure pingpong_1000conn round-trips/s "1000 connections, 64-byte messages" pingpong 1000 "$secs" 64
measure stream_1conn MB/s "1 connection, 64 KiB writes" stream 1 "$secs" 65536
