#!/usr/bin/env bash
# ab_http.sh — compare HTTP servers *at the same time*, for A/B work on a
# noisy machine. Not part of make bench.
#
#   bash bench/ab_http.sh NAME CMD [ARGS...] -- NAME CMD [ARGS...] -- ...
#
# Each CMD is started with "--port P" appended, inside its own cgroup
# limited to WEFT_AB_CPU of a CPU (default 0.3), and every server is loaded
# by its own wrk (-t1 -cWEFT_AB_CONNS, default 1000) *simultaneously*, for
# WEFT_AB_SECS (default 3) seconds, WEFT_AB_REPS times (default 6). Drift
# in the machine's speed (on this VM ±15% from one minute to the next)
# then hits all of them alike, and the ratio to the first server, printed
# for every round, is steady where sequential runs are not. The servers'
# budgets plus the wrks must fit the machine: 3 servers at 0.3 CPU and
# their wrks use ~1.7 of 2 cores at ~35k requests/s each.
#
# Example (old and new build of the example server against the floor):
#   bash bench/ab_http.sh raw build/bench/peers/raw_uring -- \
#        new build/examples/http_server --quiet -- old /tmp/old/http_server --quiet --
# Needs root (cgroups) and wrk. Takes the benchmark lock like make bench.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cpu=${WEFT_AB_CPU:-0.3}
conns=${WEFT_AB_CONNS:-1000}
secs=${WEFT_AB_SECS:-3}
reps=${WEFT_AB_REPS:-6}
quota=$(awk -v c="$cpu" 'BEGIN { printf "%d", c * 10000 }')
command -v wrk >/dev/null || { echo "ab_http.sh: wrk missing" >&2; exit 1; }

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  cg_kind=v2 cg_base=/sys/fs/cgroup
  grep -qw cpu "$cg_base/cgroup.subtree_control" 2>/dev/null || echo +cpu > "$cg_base/cgroup.subtree_control"
elif [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
  cg_kind=v1 cg_base=/sys/fs/cgroup/cpu
else
  echo "ab_http.sh: no writable cgroup cpu controller (run as root)" >&2; exit 1
fi

names=() pids=() ports=() cgs=() tmp=$(mktemp -d /tmp/weft-ab.XXXXXX)
cleanup() {
  local p d
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for d in "${cgs[@]}"; do rmdir "$d" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000)); port_free $p && { echo $p; return; }; done; return 1; }

while [ $# -gt 0 ]; do
  name=$1; shift
  cmd=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  [ ${#cmd[@]} -gt 0 ] || { echo "ab_http.sh: no command for $name" >&2; exit 2; }
  d=$cg_base/weft-ab-$name-$$
  mkdir -p "$d"; cgs+=("$d")
  if [ $cg_kind = v2 ]; then echo "$quota 10000" > "$d/cpu.max"
  else echo 10000 > "$d/cpu.cfs_period_us"; echo "$quota" > "$d/cpu.cfs_quota_us"; fi
  port=$(pick_port)
  ( echo $BASHPID > "$d/cgroup.procs" && exec "${cmd[@]}" --port "$port" ) >/dev/null 2>&1 &
  pids+=($!) names+=("$name") ports+=("$port")
done
[ ${#names[@]} -ge 2 ] || { echo "usage: ab_http.sh NAME CMD... -- NAME CMD... [-- ...]" >&2; exit 2; }
for p in "${ports[@]}"; do
  for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.1; done
done

# One round: every wrk at once; prints the requests/s of each server.
round() { # SECS
  local i ws=()
  for i in "${!names[@]}"; do
    wrk -t1 -c"$conns" -d"$1"s "http://127.0.0.1:${ports[$i]}/" > "$tmp/out.$i" & ws+=($!)
  done
  wait "${ws[@]}"
  for i in "${!names[@]}"; do awk '/^Requests\/sec/ { printf "%d ", $2 }' "$tmp/out.$i"; done
}

echo "== ab_http: ${names[*]} at $cpu CPU each, wrk -t1 -c$conns -d${secs}s against all at once, $reps rounds"
bench_locked bash -c "$(declare -p names ports conns tmp); $(declare -f round); round 1" >/dev/null # warm-up
declare -A all
for ((r = 1; r <= reps; r++)); do
  res=($(bench_locked bash -c "$(declare -p names ports conns tmp); $(declare -f round); round $secs"))
  line="round $r:"
  base=${res[0]}
  for i in "${!names[@]}"; do
    v=${res[$i]}
    all[$i]+="$v "
    line+=" ${names[$i]} $v ($(awk -v a="$v" -v b="$base" 'BEGIN { printf "%.2f", b ? a / b : 0 }'))"
  done
  echo "$line"
done
base=$(bench_median "${all[0]}")
for i in "${!names[@]}"; do
  m=$(bench_median "${all[$i]}")
  echo "   ${names[$i]}: median $m requests/s, $(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.2f", b ? a / b : 0 }')x ${names[0]}"
done
