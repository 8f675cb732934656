#!/usr/bin/env bash
# rack.sh — Weft::Server (`weft serve`) against Debian 12's Rack servers
# (part of `make bench`, group "rack"). Every server runs the same app
# (bench/ruby/rack_*.ru; async-http its native handler,
# bench/ruby/async_http_server.rb, as 0.59 has no Rack adapter), one
# process unless said, loaded by wrk on loopback, runs interleaved server
# by server, each under the benchmark lock:
#   hello      hello world, 50 keep-alive connections: req/s and server CPU
#              per request (user+system of the server's processes over the
#              run / requests) against Puma 5.6 (default 0:5 threads), Thin
#              1.8 and async-http 0.59 (Async 1.30)
#   sleep      the handler waits 50 ms (an upstream call), 200 connections:
#              req/s (200 x 50 ms allow 4,000), p99 latency, CPU per
#              request; against Puma default, Puma -t 16:16, async-http
#   close      a new connection per request (Connection: close), hello:
#              CPU per request against Puma, and against weft serving each
#              connection without a fiber (WEFT_SERVER_INLINE=1, the floor:
#              what the fiber per connection adds)
#   workers    -w 2 against Puma -w 2, hello, 50 connections: CPU/request
#   pg         a PostgreSQL query per request, 5 connections (a Weft::Pool
#              of 5; Puma -t 5:5 with one per thread), 100 connections
#              (scripts/pg.sh's throw-away server; skipped without one)
#   idle       10,000 idle keep-alive connections held by one process: its
#              RSS, and the latency of requests on another connection
# WEFT_BENCH_REPS (default 3) runs; WEFT_RACK_SECS (default 3) seconds per
# wrk run; WEFT_RACK_IDLE (default 10000) idle connections.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"
reps=${WEFT_BENCH_REPS:-3}
secs=${WEFT_RACK_SECS:-3}
idle_n=${WEFT_RACK_IDLE:-10000}
G=rack
cd "$root"
tmp=$(mktemp -d /tmp/weft-bench-rack.XXXXXX)
pids=()
pgdir=""
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "$pgdir" ] && bash scripts/pg.sh stop "$pgdir"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_need rack.sh ruby wrk curl puma thin
ruby -I lib -r weft -e 'Weft::HTTP' || { echo "rack.sh: the extension is not built (make ruby)" >&2; exit 1; }
ruby -r async/http/server -e '' 2>/dev/null || { echo "rack.sh: ruby-async-http missing (scripts/deps.sh bench)" >&2; exit 1; }
puma_v=$(puma --version | grep -o '[0-9][0-9.]*' | head -1)
thin_v=$(thin --version | grep -o '[0-9][0-9.]*' | head -1)
ahttp_v=$(ruby -r async/http/version -e 'print Async::HTTP::VERSION')
async_v=$(ruby -r async/version -e 'print Async::VERSION')
backend=$(ruby -I lib -r weft -e 'print Weft::Scheduler.new.backend')
ruby_v=$(ruby -e 'print RUBY_VERSION')
RB=(ruby -W0 -I lib)
WEFT=("${RB[@]}" bin/weft serve -q)

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000)); port_free $p && { echo $p; return; }; done; return 1; }
wait_port() { for _ in $(seq 200); do curl -fs -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

declare -A port spid label
# start NAME CMD... — CMD may use @PORT@ for the port.
start() {
  local name=$1; shift
  local p; p=$(pick_port)
  port[$name]=$p
  local args=() a
  for a in "$@"; do args+=("${a//@PORT@/$p}"); done
  "${args[@]}" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  spid[$name]=$!
  pids+=($!)
  wait_port "$p" || { echo "rack.sh: the $name server did not start:" >&2; tail -n 20 "$tmp/$name.err" >&2; exit 1; }
}
stop() { kill -TERM "${spid[$1]}" 2>/dev/null || true; wait "${spid[$1]}" 2>/dev/null || true; }

# CPU time (clock ticks) of PID and its descendants (workers).
cpu_ticks() {
  local t=0 p f kids
  for p in "$@"; do
    f=$(cut -d')' -f2 /proc/"$p"/stat 2>/dev/null) || continue
    set -- $f
    t=$((t + ${12} + ${13}))
    kids=$(pgrep -P "$p" || true)
    [ -n "$kids" ] && t=$((t + $(cpu_ticks $kids)))
  done
  echo $t
}
measure() { # PID PORT CONNS SECS [wrk args...]
  local pid=$1 port=$2 conns=$3 s=$4 c0 c1 out; shift 4
  c0=$(cpu_ticks "$pid")
  out=$(timeout $((s + 60)) wrk -t2 -c"$conns" -d"$s"s --latency "$@" "http://127.0.0.1:$port/") || return 1
  c1=$(cpu_ticks "$pid")
  echo "$out"
  echo "CPU_TICKS $((c1 - c0))"
}
export -f measure cpu_ticks
hz=$(getconf CLK_TCK)
# wrk_run NAME CONNS SECS [wrk args] -> "req/s cpu-us-per-request p99-ms"
wrk_run() {
  local name=$1 conns=$2 s=$3 out errs; shift 3
  out=$(bench_locked bash -c 'measure "$@"' _ "${spid[$name]}" "${port[$name]}" "$conns" "$s" "$@") || {
    echo "rack.sh: wrk failed against $name" >&2; echo "0 0 0"; return; }
  errs=$(echo "$out" | sed -n 's/.*Socket errors: //p; s/.*Non-2xx or 3xx responses: /non-2xx /p')
  [ -n "$errs" ] && echo "$name: $errs" >> "$tmp/errors"
  echo "$out" | awk -v hz="$hz" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /^Requests\/sec:/ { rps = $2 }
    / requests in / { n = $1 }
    /^ +99%/ { p99 = ms($2) }
    /^CPU_TICKS/ { t = $2 }
    END { printf "%.0f %.2f %.2f\n", rps, (n > 0 ? t * 1e6 / hz / n : 0), p99 }'
}
declare -A rps cpu p99
# rounds CONNS "NAMES" [wrk args]: warm-up, then $reps interleaved runs.
rounds() {
  local conns=$1 names=$2 n r out; shift 2
  local extra=("$@")
  for n in $names; do wrk_run "$n" "$conns" 1 "${extra[@]}" >/dev/null; done
  for ((r = 0; r < reps; r++)); do
    for n in $names; do
      out=$(wrk_run "$n" "$conns" "$secs" "${extra[@]}")
      set -- $out
      rps[$n]+="$1 "; cpu[$n]+="$2 "; p99[$n]+="$3 "
    done
  done
}

echo
echo "== rack: Ruby $ruby_v, weft on $backend; wrk -t2, ${secs}s runs, $reps runs each, interleaved"
echo "   command: WEFT_BENCH_REPS=$reps WEFT_RACK_SECS=$secs bash bench/parts/rack.sh (part of make bench)"

# hello world, 50 keep-alive connections; and a connection per request.
label[puma]="Puma $puma_v (0:5 threads)"; label[thin]="Thin $thin_v"
label[async]="async-http $ahttp_v (Async $async_v)"; label[inline]="weft, no fiber per connection"
start weft "${WEFT[@]}" -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_hello.ru
start puma puma -q -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_hello.ru
start thin thin start -q -a 127.0.0.1 -p @PORT@ -R bench/ruby/rack_hello.ru
start async "${RB[@]}" bench/ruby/async_http_server.rb @PORT@ hello
start inline env WEFT_SERVER_INLINE=1 "${WEFT[@]}" -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_hello.ru
rounds 50 "weft puma thin async"
hello_rps=${rps[weft]}; hello_cpu=${cpu[weft]}
declare -A peer_rps peer_cpu
for s in puma thin async; do peer_rps[$s]=${rps[$s]}; peer_cpu[$s]=${cpu[$s]}; rps[$s]=""; cpu[$s]=""; done
rps[weft]=""; cpu[weft]=""
rounds 50 "weft puma inline" -H "Connection: close"
close_cpu=${cpu[weft]}; close_puma=${cpu[puma]}; close_inline=${cpu[inline]}
for s in weft puma thin async inline; do stop $s; done

# 50 ms handler, 200 connections.
label[puma16]="Puma $puma_v (-t 16:16)"
start weft_s "${WEFT[@]}" -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_sleep.ru
start puma_s puma -q -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_sleep.ru
start puma16_s puma -q -t 16:16 -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_sleep.ru
start async_s "${RB[@]}" bench/ruby/async_http_server.rb @PORT@ sleep
rounds 200 "weft_s puma_s puma16_s async_s"
for s in weft_s puma_s puma16_s async_s; do stop $s; done

# -w 2 against Puma -w 2.
label[puma_w2]="Puma $puma_v -w 2 (0:5 threads)"
start weft_w2 "${WEFT[@]}" -w 2 -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_hello.ru
start puma_w2 puma -q -w 2 -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_hello.ru
sleep 2 # both clusters' workers up
rounds 50 "weft_w2 puma_w2"
for s in weft_w2 puma_w2; do stop $s; done

# A PostgreSQL query per request.
pg_ok=""
if ruby -r pg -e '' 2>/dev/null && pgenv=$(bash scripts/pg.sh start 2>"$tmp/pg.err"); then
  eval "$pgenv"; pgdir=$WEFT_PG_DIR; pg_ok=1
  label[puma_pg]="Puma $puma_v (-t 5:5, a connection per thread)"
  start weft_pg env RACK_PG_POOL=weft WEFT_PG_CONNINFO="$WEFT_PG_CONNINFO" "${WEFT[@]}" -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_pg.ru
  start puma_pg env WEFT_PG_CONNINFO="$WEFT_PG_CONNINFO" puma -q -t 5:5 -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_pg.ru
  rounds 100 "weft_pg puma_pg"
  for s in weft_pg puma_pg; do stop $s; done
else
  echo "rack.sh: no PostgreSQL (ruby-pg or scripts/pg.sh): the pg row is left out" >&2
fi

# 10,000 idle keep-alive connections.
idle=""
for ((r = 0; r < reps; r++)); do # a fresh server each time: Ruby keeps freed fiber stacks
  start weft_idle "${WEFT[@]}" --max-concurrency $((idle_n + 100)) --idle-timeout 600 -b tcp://127.0.0.1:@PORT@ bench/ruby/rack_hello.ru
  idle+="$(bench_locked ruby bench/ruby/rack_idle.rb "${port[weft_idle]}" "${spid[weft_idle]}" "$idle_n")"$'\n'
  stop weft_idle
done
idle_rss=$(echo "$idle" | awk 'NF { print $1 }' | tr '\n' ' ')
idle_p50=$(echo "$idle" | awk 'NF { print $2 }' | tr '\n' ' ')
idle_max=$(echo "$idle" | awk 'NF { print $3 }' | tr '\n' ' ')

bench_header "rack: weft serve (Weft::Server on $backend) vs Debian 12's Rack servers, Ruby $ruby_v"
bench_report $G hello_50conn req/s higher "$hello_rps" "${label[puma]}" "${peer_rps[puma]}" "target: >= Puma; ratio = weft / peer"
bench_report $G hello_50conn_vs_async req/s higher "$hello_rps" "${label[async]}" "${peer_rps[async]}"
bench_report $G hello_50conn_vs_thin req/s higher "$hello_rps" "${label[thin]}" "${peer_rps[thin]}"
bench_report $G hello_cpu_per_req us/req lower "$hello_cpu" "${label[puma]}" "${peer_cpu[puma]}" \
  "server CPU per request; target <= 0.6x Puma's (ratio >= 1.67); ratio = peer / weft"
bench_report $G hello_cpu_per_req_vs_async us/req lower "$hello_cpu" "${label[async]}" "${peer_cpu[async]}" \
  "target <= 0.8x async-http's (ratio >= 1.25)"
bench_report $G sleep50_200conn req/s higher "${rps[weft_s]}" "${label[puma]}" "${rps[puma_s]}" \
  "50 ms handler, 200 connections: 4,000 req/s at most; target >= 3,800 and >= 30x Puma default"
bench_report $G sleep50_200conn_vs_puma16 req/s higher "${rps[weft_s]}" "${label[puma16]}" "${rps[puma16_s]}"
bench_report $G sleep50_200conn_vs_async req/s higher "${rps[weft_s]}" "${label[async]}" "${rps[async_s]}"
bench_report $G sleep50_p99 ms lower "${p99[weft_s]}" "${label[async]}" "${p99[async_s]}" "wrk's 99th percentile latency; target <= 80 ms"
bench_report $G sleep50_cpu_per_req us/req lower "${cpu[weft_s]}" "${label[async]}" "${cpu[async_s]}" \
  "target <= 0.6x async-http's (ratio >= 1.67)"
bench_report $G close_cpu_per_req us/req lower "$close_cpu" "${label[puma]}" "$close_puma" \
  "Connection: close, a new connection per request; target <= 0.7x Puma's (ratio >= 1.43)"
bench_report $G close_fiber_cost us/req lower "$close_cpu" "${label[inline]}" "$close_inline" \
  "the same server serving each connection inline (the floor); target: weft <= 1.15x it (ratio >= 0.87)"
bench_report $G workers2_cpu_per_req us/req lower "${cpu[weft_w2]}" "${label[puma_w2]}" "${cpu[puma_w2]}" \
  "-w 2, hello, 50 connections; target <= 0.6x Puma -w 2 (ratio >= 1.67)"
bench_report $G workers2_rps req/s higher "${rps[weft_w2]}" "${label[puma_w2]}" "${rps[puma_w2]}"
if [ -n "$pg_ok" ]; then
  bench_report $G pg_100conn req/s higher "${rps[weft_pg]}" "${label[puma_pg]}" "${rps[puma_pg]}" \
    "a query per request, 5 PostgreSQL connections each, 100 client connections; target >= 1.5x"
fi
bench_report $G idle_${idle_n}_rss MiB lower "$idle_rss" "" "" "resident memory holding $idle_n idle keep-alive connections; target <= 150 MiB"
bench_report $G idle_${idle_n}_latency_p50 ms lower "$idle_p50" "" "" "a request on another connection meanwhile (median of 50); target <= 10 ms"
bench_report $G idle_${idle_n}_latency_max ms lower "$idle_max"
if [ -s "$tmp/errors" ]; then
  echo "   wrk reported errors:"; sed 's/^/     /' "$tmp/errors"
else
  echo "   wrk reported no socket errors and no non-2xx responses"
fi
