#!/usr/bin/env bash
# http.sh — HTTP hello world, keep-alive, loaded by wrk on loopback:
# examples/http_server against nginx (1 worker per thread), a libuv server,
# Go net/http (GOMAXPROCS = threads) and two raw C servers with no fibers
# (the floors: one on epoll, one on io_uring). 1 and 2 server threads, 100
# and 1000 connections. Beside the floors, raw_stacks
# (bench/peers/raw_stacks.c): the io_uring floor with each connection's
# loop on a stack of its own, resumed for every request — the least a
# server of stackful fibers pays, and so the floor for weft's design.
#
# Every server gets the same wrk command (wrk -t2 -cC -dS --latency), runs
# are interleaved server by server, each under the benchmark lock, and
# every server is stopped at the end (also on failure).
# WEFT_BENCH_REPS (default 5) runs of WEFT_HTTP_SECS (default 3) seconds;
# WEFT_HTTP_THREADS (default "1 2"), WEFT_HTTP_CONNS (default "100 1000"),
# WEFT_HTTP_SERVERS (default "weft weft_epoll nginx libuv go raw raw_uring
# raw_stacks").
#
# "weft" is http_server with the library's default backend (io_uring where
# the kernel allows it, else epoll; the backend is printed); "weft_epoll"
# forces WEFT_BACKEND=epoll. Each is held against the floor on its own
# backend: weft_epoll against raw (bench/peers/raw_epoll.c), weft on
# io_uring against raw_uring (bench/peers/raw_uring.c; left out, with a
# message, where the kernel refuses io_uring: weft then runs on epoll and
# raw is its floor too).
#
# Two arrangements:
#  - shared: servers and wrk share the machine's cores as the scheduler
#    sees fit. On a small machine this measures wrk as much as the
#    server: wrk spends ~8 us of CPU per request here, more than any
#    server, so a server that needs half the CPU of another gains far
#    less than 2x in requests/s.
#  - server-bound (1 server thread): every server runs in its own cgroup
#    limited to WEFT_HTTP_BOUND_CPU of a CPU (default 0.5; "0" skips it),
#    the same budget for each, and wrk gets the rest of the machine, which
#    is more than it needs to saturate any of them. Each server's measured
#    CPU use is printed next to the table: at the limit means the server,
#    not wrk, set the rate. Needs a writable cgroup cpu controller (v1 or
#    v2, i.e. root); skipped with a message otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"
reps=${WEFT_BENCH_REPS:-5}
secs=${WEFT_HTTP_SECS:-3}
threads_list=${WEFT_HTTP_THREADS:-"1 2"}
conns_list=${WEFT_HTTP_CONNS:-"100 1000"}
servers=${WEFT_HTTP_SERVERS:-"weft weft_epoll nginx libuv go raw raw_uring raw_stacks"}
G=http
bin=$root/build/bench/peers
tmp=$(mktemp -d /tmp/weft-bench-http.XXXXXX)
pids=()
cgs=() # the server-bound runs' cgroups (cg_setup below)
cg_cleanup() { local d; for d in "${cgs[@]}"; do rmdir "$d" 2>/dev/null || true; done; cgs=(); }
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
  cg_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What the chosen servers need (the floors are built here with cc).
need=(wrk curl cc)
[[ " $servers " == *" nginx "* ]] && need+=(nginx)
[[ " $servers " == *" go "* ]] && need+=(go)
bench_need http.sh "${need[@]}"
[ -x "$root/build/examples/http_server" ] || { echo "http.sh: build/examples/http_server missing (make)" >&2; exit 1; }

# Peers: built here, optimised like the library (-O2).
mkdir -p "$bin"
# The floors parse with the example server's parser (bench/peers/raw_http.h).
rawcc=(cc -std=gnu11 -O2 -g -Wall -Wextra -Werror -I"$root/contrib/http" "$root/contrib/http/http_parse.c")
"${rawcc[@]}" "$root/bench/peers/raw_epoll.c" -o "$bin/raw_epoll" -lpthread
if [[ " $servers " == *" libuv "* ]] &&
   ! cc -std=gnu11 -O2 -g -Wall -Wextra -Werror "$root/bench/peers/uv_http.c" -o "$bin/uv_http" -luv -lhttp_parser -lpthread; then
  echo "http.sh: the libuv server does not build (libuv1-dev, libhttp-parser-dev: scripts/deps.sh bench)" >&2; exit 1
fi
if [[ " $servers " == *" raw_uring "* ]]; then
  if ! { "${rawcc[@]}" "$root/bench/peers/raw_uring.c" -o "$bin/raw_uring" \
           -luring -lpthread && "$bin/raw_uring" --probe; }; then
    echo "http.sh: no io_uring here (or no liburing): the io_uring floor is left out"
    servers=$(echo " $servers " | sed 's/ raw_uring / /')
  fi
fi
if [[ " $servers " == *" raw_stacks "* ]]; then
  if ! { "${rawcc[@]}" "$root/bench/peers/raw_stacks.c" -o "$bin/raw_stacks" \
           -luring -lpthread && "$bin/raw_stacks" --probe; }; then
    echo "http.sh: no io_uring here (or not x86-64): the stackful floor is left out"
    servers=$(echo " $servers " | sed 's/ raw_stacks / /')
  fi
fi
if [[ " $servers " == *" go "* ]]; then
  (cd "$root/bench/peers" && GOCACHE="$root/build/bench/gocache" GO111MODULE=off GOPATH="$tmp/gopath" \
     go build -o "$bin/go_http" go_http.go)
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Below the ephemeral range (32768+), so no client socket holds the port.
pick_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000)); port_free $p && { echo $p; return; }; done; return 1; }
wait_port() { for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

# ---- cgroups for the server-bound runs: one per server, the same CPU
# quota for each (period 10 ms, so throttling is fine-grained).
bound_cpu=${WEFT_HTTP_BOUND_CPU:-0.5}
cg_kind="" cg_base=""
cg_setup() {
  local period=10000 quota
  quota=$(awk -v c="$bound_cpu" 'BEGIN { printf "%d", c * 10000 }')
  [ "$quota" -gt 0 ] || return 1
  if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    cg_kind=v2 cg_base=/sys/fs/cgroup
    grep -qw cpu "$cg_base/cgroup.subtree_control" 2>/dev/null ||
      echo +cpu > "$cg_base/cgroup.subtree_control" 2>/dev/null || return 1
  elif [ -w /sys/fs/cgroup/cpu/cgroup.procs ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    cg_kind=v1 cg_base=/sys/fs/cgroup/cpu
  else
    return 1
  fi
  local s d
  for s in $servers; do
    d=$cg_base/weft-bench-$s-$$
    mkdir -p "$d" 2>/dev/null || return 1
    cgs+=("$d")
    if [ $cg_kind = v2 ]; then
      echo "$quota $period" > "$d/cpu.max" || return 1
    else
      echo $period > "$d/cpu.cfs_period_us" && echo "$quota" > "$d/cpu.cfs_quota_us" || return 1
    fi
  done
}
# Start server NAME's command in the background, inside its cgroup when
# the run is server-bound ($bound_run); its pid lands in $! as usual.
in_cg=""
launch() { # NAME CMD...
  local d=""; [ -n "$in_cg" ] && d=$cg_base/weft-bench-$1-$$
  shift
  if [ -n "$d" ]; then
    ( echo $BASHPID > "$d/cgroup.procs" && exec "$@" ) &
  else
    "$@" &
  fi
}

declare -A port label spid
start_servers() { # THREADS
  local t=$1 s
  for s in $servers; do
    port[$s]=$(pick_port)
    case $s in
      weft)  launch $s "$root/build/examples/http_server" --port "${port[$s]}" --threads "$t" --quiet >"$tmp/weft.out"
             label[$s]="weft http_server" ;;
      weft_epoll) launch $s env WEFT_BACKEND=epoll "$root/build/examples/http_server" --port "${port[$s]}" \
               --threads "$t" --quiet >"$tmp/weft_epoll.out"
             label[$s]="weft http_server, epoll" ;;
      raw)   launch $s "$bin/raw_epoll" --port "${port[$s]}" --threads "$t" >/dev/null
             label[$s]="raw C epoll (floor)" ;;
      raw_uring) launch $s "$bin/raw_uring" --port "${port[$s]}" --threads "$t" >/dev/null
             label[$s]="raw C io_uring (floor)" ;;
      raw_stacks) launch $s "$bin/raw_stacks" --port "${port[$s]}" --threads "$t" >/dev/null
             label[$s]="raw C io_uring, a stack per connection (stackful floor)" ;;
      libuv) launch $s "$bin/uv_http" --port "${port[$s]}" --threads "$t" >/dev/null
             label[$s]="libuv $(dpkg-query -W -f='${Version}' libuv1-dev 2>/dev/null | cut -d- -f1)" ;;
      go)    launch $s env GOMAXPROCS="$t" "$bin/go_http" -port "${port[$s]}" >/dev/null
             label[$s]="Go $(go env GOVERSION 2>/dev/null | sed 's/^go//') net/http" ;;
      nginx) mkdir -p "$tmp/nginx$t"
             sed -e "s|@WORKERS@|$t|; s|@DIR@|$tmp/nginx$t|g; s|@PORT@|${port[$s]}|" \
               "$root/bench/peers/nginx.conf.in" > "$tmp/nginx$t/nginx.conf"
             launch $s nginx -p "$tmp/nginx$t" -c "$tmp/nginx$t/nginx.conf" -e "$tmp/nginx$t/error.log"
             label[$s]="nginx $(nginx -v 2>&1 | sed 's|.*/||')" ;;
    esac
    pids+=($!)
    spid[$s]=$!
    wait_port "${port[$s]}" || { echo "http.sh: $s did not start" >&2; exit 1; }
  done
}
stop_servers() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# CPU time (clock ticks) used so far by process PID, its threads and its
# direct children (nginx's workers): "user system".
cpu_ticks() {
  local p u=0 k=0 f
  for p in $1 $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    f=$(cut -d')' -f2 /proc/"$p"/stat 2>/dev/null) || continue
    set -- $f
    u=$((u + ${12})) k=$((k + ${13})) # utime, stime
  done
  echo $u $k
}

# One wrk run, under the lock: wrk's output, then the server's CPU ticks
# (all, and the user and system parts).
measure() { # PID PORT CONNS SECS
  local u0 k0 u1 k1 out
  read -r u0 k0 < <(cpu_ticks "$1")
  out=$(timeout $(($4 + 60)) wrk -t2 -c"$3" -d"$4"s "http://127.0.0.1:$2/") || return 1
  read -r u1 k1 < <(cpu_ticks "$1")
  echo "$out"
  echo "CPU_TICKS $((u1 - u0 + k1 - k0)) $((u1 - u0)) $((k1 - k0))"
}
export -f measure cpu_ticks

# Prints "requests/s server-CPU-us-per-request CPU-seconds-per-second
# user-us-per-request system-us-per-request". The CPU figure is the
# server's own user+system time over the run divided by the requests wrk
# counted: on a shared 2-core machine it is steadier than requests/s, which
# also depends on how the cores are split between wrk, the server and
# anything else running. Socket errors and non-2xx answers are collected
# in $tmp/errors.
hz=$(getconf CLK_TCK)
wrk_run() { # SERVER CONNS SECS
  local out
  out=$(bench_locked bash -c 'measure "$@"' _ "${spid[$1]}" "${port[$1]}" "$2" "$3") || {
    echo "http.sh: wrk failed against $1" >&2; echo "0 0 0 0 0"; return; }
  local errs
  errs=$(echo "$out" | sed -n 's/.*Socket errors: //p; s/.*Non-2xx or 3xx responses: /non-2xx /p')
  [ -n "$errs" ] && echo "$1 c$2: $errs" >> "$tmp/errors"
  echo "$out" | awk -v hz="$hz" -v secs="$3" '
    /^Requests\/sec:/ { rps = $2 }
    / requests in / { n = $1 }
    /^CPU_TICKS/ { t = $2; u = $3; k = $4 }
    END { per = n > 0 ? 1e6 / hz / n : 0
          printf "%.0f %.2f %.2f %.2f %.2f\n", rps, t * per, t / hz / secs, u * per, k * per }'
}

echo
echo "== http: keep-alive hello world, wrk -t2 -c{$conns_list} -d${secs}s, $reps runs each, runs interleaved"
echo "   command: WEFT_BENCH_REPS=$reps WEFT_HTTP_SECS=$secs bash bench/parts/http.sh (part of make bench)"
# Runs keyed "MODE,SERVER,THREADS,CONNS" (MODE: shared | bound): requests/s,
# server CPU us/request, server CPU-seconds per second.
declare -A runs cpu util ucpu kcpu
measure_all() { # MODE THREADS: start the servers, warm up, measure, stop
  local m=$1 t=$2 s c r
  start_servers "$t"
  for s in $servers; do for c in $conns_list; do wrk_run "$s" "$c" 1 >/dev/null; done; done # warm-up
  for ((r = 0; r < reps; r++)); do
    for c in $conns_list; do
      for s in $servers; do
        set -- $(wrk_run "$s" "$c" "$secs")
        runs[$m,$s,$t,$c]+="$1 "
        cpu[$m,$s,$t,$c]+="$2 "
        util[$m,$s,$t,$c]+="$3 "
        ucpu[$m,$s,$t,$c]+="$4 "
        kcpu[$m,$s,$t,$c]+="$5 "
      done
    done
  done
  stop_servers
}
for t in $threads_list; do measure_all shared "$t"; done

# Server-bound: 1 server thread, each server limited to the same CPU budget.
bound_ok=0
if [[ " $threads_list " == *" 1 "* ]] && [ "$bound_cpu" != 0 ]; then
  if cg_setup; then
    bound_ok=1
    echo "== http, server-bound: each server in its own cgroup limited to $bound_cpu CPU (cgroup $cg_kind CPU quota), wrk -t2 unconstrained"
    in_cg=1
    measure_all bound 1
    in_cg=""
  else
    echo "== http, server-bound: skipped (no writable cgroup cpu controller; run as root)"
  fi
  cg_cleanup
fi

backend=$(sed -n 's/.*, \([a-z_]*\) backend.*/\1/p' "$tmp/weft.out" 2>/dev/null | head -n1)
# The floor target holds against the floor on weft's own backend.
declare -A target=([nginx]=1.3 [libuv]=1.2 [go]=2)
if [ "$backend" = io_uring ]; then target[raw_uring]=0.95; else target[raw]=0.95; fi
has() { [[ " $servers " == *" $1 "* ]]; }
# One row per peer (and weft on epoll against the epoll floor) for THREADS
# and CONNS: NAME is the figure's name before "_epoll", ARRAY one of
# runs/cpu.
report_peers() { # MODE THREADS CONNS NAME UNIT BETTER ARRAY TARGETS(0/1) NOTE
  local m=$1 t=$2 c=$3 name=$4 unit=$5 better=$6 note=$9 s tn same
  local -n arr=$7
  for s in $servers; do
    case $s in weft|weft_epoll) continue ;; esac
    tn="" same=""
    [ "$8" = 1 ] && [ -n "${target[$s]:-}" ] && tn="target on 1 thread: >= ${target[$s]}x; "
    if [ "$s" = raw_uring ] || [ "$s" = raw_stacks ] || { [ "$s" = raw ] && [ "$backend" != io_uring ]; }; then
      same=": the same backend as the floor"
    fi
    if has weft; then
      bench_report $G "$name" "$unit" "$better" "${arr[$m,weft,$t,$c]}" \
        "${label[$s]}" "${arr[$m,$s,$t,$c]}" "$tn${note}weft on ${backend:-its default backend}$same"
    fi
    if [ "$s" = raw ] && has weft_epoll; then
      tn=""; [ "$8" = 1 ] && tn="target on 1 thread: >= 0.95x; "
      bench_report $G "${name}_epoll" "$unit" "$better" "${arr[$m,weft_epoll,$t,$c]}" \
        "${label[$s]}" "${arr[$m,$s,$t,$c]}" "$tn${note}weft forced to epoll: the same backend as the floor"
    fi
  done
}
bench_header "http, shared cores (wrk and server side by side): requests/s, higher is better; ratio = weft / peer (weft backend: ${backend:-?})"
for t in $threads_list; do
  for c in $conns_list; do
    report_peers shared "$t" "$c" "hello_${t}thr_${c}conn" req/s higher runs $([ "$t" = 1 ] && echo 1 || echo 0) ""
  done
done
bench_header "http: server CPU time per request (user+system, all its threads/workers), lower is better; ratio = peer / weft"
for t in $threads_list; do
  for c in $conns_list; do
    report_peers shared "$t" "$c" "cpu_per_req_${t}thr_${c}conn" us/req lower cpu 0 ""
  done
done
# Where each server's CPU per request goes: its own code (user) and the
# kernel's work for it (system), medians of the shared runs.
for t in $threads_list; do
  for c in $conns_list; do
    line=""
    for s in $servers; do
      line+=" $s $(bench_median "${ucpu[shared,$s,$t,$c]}") + $(bench_median "${kcpu[shared,$s,$t,$c]}"),"
    done
    echo "   user + system us/request, $t thread(s), $c connections:${line%,}"
  done
done
if [ $bound_ok = 1 ]; then
  bench_header "http, server-bound (1 thread, $bound_cpu CPU each, wrk has the rest): requests/s, higher is better; ratio = weft / peer"
  for c in $conns_list; do
    report_peers bound 1 "$c" "bound_hello_1thr_${c}conn" req/s higher runs 1 "server-bound at $bound_cpu CPU; "
  done
  # Each server's CPU use (median over the runs, CPU-seconds per second):
  # at the budget means the server was the bottleneck, as intended.
  for c in $conns_list; do
    line=""
    for s in $servers; do line+=" $s $(bench_median "${util[bound,$s,1,$c]}"),"; done
    echo "   CPU used of the $bound_cpu allowed, $c connections:${line%,}"
  done
fi
if [ -s "$tmp/errors" ]; then
  echo "   wrk reported errors:"; sed 's/^/     /' "$tmp/errors"
else
  echo "   wrk reported no socket errors and no non-2xx responses"
fi
