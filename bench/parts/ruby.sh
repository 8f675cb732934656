#!/usr/bin/env bash
# ruby.sh — the Ruby extension against its peers (part of `make bench`).
#
#  1. HTTP/1.1 keep-alive hello world in Ruby (examples/ruby/http_server.rb,
#     the same connection code in every mode), loaded by wrk on loopback:
#       weft     one fiber per connection under Weft::Scheduler
#       async    one task per connection under Async 1.30 (Debian's
#                ruby-async, nio4r selector)
#       threads  one Ruby Thread per connection
#       weft_epoll  weft forced to epoll (WEFT_BACKEND=epoll): the ratio of
#                weft on its default backend to it says what io_uring
#                brings Ruby (issue 15: <= 0.8x the CPU per request)
#     and, when Ruby 3.3 has been built (make test-ruby-latest; the
#     benchmark does not build it), weft and weft_epoll again under Ruby
#     3.3 (rb33, rb33_epoll; Async is not run there: Debian's nio4r is
#     built for 3.1);
#     requests/s (ratio = weft / peer) and the server's CPU time per request
#     (user+system of the server process over the run / requests; ratio =
#     peer / weft), runs interleaved server by server, each under the lock.
#  2. Fiber churn (bench/ruby/churn.rb): sleep(0) among 100, 10,000 and
#     30,000 fibers, against Async, the smallest scheduler that runs it and
#     Fiber#transfer with no scheduler; fibers started and finished,
#     against Async.
#  3. Round trips between two fibers (bench/ruby/roundtrip.rb) over a pipe
#     and a UNIX socket pair, against Async.
#  4. The longest stall of a 1 ms ticker while another task reads a 64 MiB
#     file (bench/ruby/file_stall.rb), against Async and plain threads.
# WEFT_BENCH_REPS (default 5) runs; WEFT_RUBY_SECS (default 3) seconds per
# wrk run; WEFT_RUBY_CONNS (default 50) connections.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"
reps=${WEFT_BENCH_REPS:-5}
secs=${WEFT_RUBY_SECS:-3}
conns=${WEFT_RUBY_CONNS:-50}
G=ruby
cd "$root"
tmp=$(mktemp -d /tmp/weft-bench-ruby.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_need ruby.sh ruby wrk curl
ruby -I lib -r weft -e '' || { echo "ruby.sh: the extension is not built (make ruby)" >&2; exit 1; }
ruby -r async -e '' 2>/dev/null || { echo "ruby.sh: ruby-async missing (scripts/deps.sh bench)" >&2; exit 1; }
async_v=$(ruby -r async -e 'print Async::VERSION')
nio_v=$(ruby -r nio -e 'print NIO::VERSION' 2>/dev/null || echo "?")
backend=$(ruby -I lib -r weft -e 'print Weft::Scheduler.new.backend')
ruby_v=$(ruby -e 'print RUBY_VERSION')
RB=(ruby -W0 -I lib)

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000)); port_free $p && { echo $p; return; }; done; return 1; }
wait_port() { for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

servers="weft async threads weft_epoll"
# Ruby 3.3, when scripts/build-ruby-latest.sh has built it.
rb33=$(bash scripts/build-ruby-latest.sh --print-ruby 2>/dev/null || true)
rb33_ext=""
if [ -n "$rb33" ] && [ -x "$rb33" ] && rb33_ext=$(bash scripts/ruby-ext.sh "$rb33" 2>/dev/null); then
  rb33_v=$("$rb33" -e 'print RUBY_VERSION')
  servers+=" rb33 rb33_epoll"
else
  echo "ruby.sh: Ruby 3.3 not built (make test-ruby-latest): its rows are left out" >&2
fi
declare -A port spid label
label[async]="Async $async_v (nio4r $nio_v)"
label[threads]="Ruby Thread per connection"
label[weft_epoll]="Weft::Scheduler on epoll"
label[rb33_epoll]="Weft::Scheduler on epoll, Ruby ${rb33_v:-3.3}"
for s in $servers; do
  port[$s]=$(pick_port)
  case $s in
    weft_epoll) cmd=(env WEFT_BACKEND=epoll "${RB[@]}" examples/ruby/http_server.rb --mode weft) ;;
    rb33)       cmd=("$rb33" -W0 -I "$rb33_ext" -I lib examples/ruby/http_server.rb --mode weft) ;;
    rb33_epoll) cmd=(env WEFT_BACKEND=epoll "$rb33" -W0 -I "$rb33_ext" -I lib examples/ruby/http_server.rb --mode weft) ;;
    *)          cmd=("${RB[@]}" examples/ruby/http_server.rb --mode "$s") ;;
  esac
  "${cmd[@]}" --port "${port[$s]}" >"$tmp/$s.out" 2>"$tmp/$s.err" &
  spid[$s]=$!
  pids+=($!)
  wait_port "${port[$s]}" || { echo "ruby.sh: the $s server did not start:" >&2; cat "$tmp/$s.err" >&2; exit 1; }
done

# CPU time (clock ticks) used so far by process PID (all its threads).
cpu_ticks() {
  local f
  f=$(cut -d')' -f2 /proc/"$1"/stat 2>/dev/null) || { echo 0; return; }
  set -- $f
  echo $((${12} + ${13}))
}
measure() { # PID PORT CONNS SECS: wrk's output, then the server's CPU ticks
  local c0 c1 out
  c0=$(cpu_ticks "$1")
  out=$(timeout $(($4 + 60)) wrk -t2 -c"$3" -d"$4"s "http://127.0.0.1:$2/") || return 1
  c1=$(cpu_ticks "$1")
  echo "$out"
  echo "CPU_TICKS $((c1 - c0))"
}
export -f measure cpu_ticks
hz=$(getconf CLK_TCK)
wrk_run() { # SERVER SECS -> "req/s cpu-us-per-request"
  local out errs
  out=$(bench_locked bash -c 'measure "$@"' _ "${spid[$1]}" "${port[$1]}" "$conns" "$2") || {
    echo "ruby.sh: wrk failed against $1" >&2; echo "0 0"; return; }
  errs=$(echo "$out" | sed -n 's/.*Socket errors: //p; s/.*Non-2xx or 3xx responses: /non-2xx /p')
  [ -n "$errs" ] && echo "$1: $errs" >> "$tmp/errors"
  echo "$out" | awk -v hz="$hz" '
    /^Requests\/sec:/ { rps = $2 }
    / requests in / { n = $1 }
    /^CPU_TICKS/ { t = $2 }
    END { printf "%.0f %.2f\n", rps, (n > 0 ? t * 1e6 / hz / n : 0) }'
}

echo
echo "== ruby: Ruby $ruby_v; HTTP hello world (examples/ruby/http_server.rb), wrk -t2 -c$conns -d${secs}s, $reps runs each, interleaved"
echo "   command: WEFT_BENCH_REPS=$reps WEFT_RUBY_SECS=$secs bash bench/parts/ruby.sh (part of make bench)"
declare -A rps cpu
for s in $servers; do wrk_run "$s" 1 >/dev/null; done # warm-up
for ((r = 0; r < reps; r++)); do
  for s in $servers; do
    set -- $(wrk_run "$s" "$secs")
    rps[$s]+="$1 "
    cpu[$s]+="$2 "
  done
done
for s in $servers; do kill -TERM "${spid[$s]}" 2>/dev/null || true; wait "${spid[$s]}" 2>/dev/null || true; done
pids=()

echo "   micro-benchmarks: $reps processes each"
churn() { bench_procs "$reps" "${RB[@]}" bench/ruby/churn.rb "$@"; }
# sleep(0) among N fibers that all exist, against Async, against the
# smallest scheduler that runs it (churn.rb minimal) and against the
# no-scheduler floor (Fiber#transfer round-robin among N live fibers),
# interleaved.
declare -A SL_W SL_A SL_F SL_M
for n in 100 10000 30000; do
  rounds=10; [ "$n" -le 100 ] && rounds=1000
  for ((r = 0; r < reps; r++)); do
    SL_W[$n]+="$(bench_runs "${RB[@]}" bench/ruby/churn.rb weft sleep0 "$n" "$rounds") "
    SL_F[$n]+="$(bench_runs "${RB[@]}" bench/ruby/churn.rb floor sleep0 "$n" "$rounds") "
    SL_M[$n]+="$(bench_runs "${RB[@]}" bench/ruby/churn.rb minimal sleep0 "$n" "$rounds") "
    SL_A[$n]+="$(bench_runs "${RB[@]}" bench/ruby/churn.rb async sleep0 "$n" "$rounds") "
  done
done
sleep_w=${SL_W[10000]}; sleep_a=${SL_A[10000]}
# Resident memory per parked fiber holding an idle connection (5,000).
idle_w=""; idle_a=""; idle_f=""
for ((r = 0; r < reps; r++)); do
  idle_w+="$(bench_runs "${RB[@]}" bench/ruby/idle_rss.rb weft 5000) "
  idle_f+="$(bench_runs "${RB[@]}" bench/ruby/idle_rss.rb floor 5000) "
  idle_a+="$(bench_runs "${RB[@]}" bench/ruby/idle_rss.rb async 5000) "
done
spawn_w=$(churn weft spawn); spawn_a=$(churn async spawn)
rt() { bench_procs "$reps" env ASYNC="$1" "${RB[@]}" bench/ruby/roundtrip.rb "$2" 20000; }
pipe_w=$(rt 0 pipe); pipe_a=$(rt 1 pipe)
unix_w=$(rt 0 unix); unix_a=$(rt 1 unix)
stall() { bench_procs "$reps" "${RB[@]}" bench/ruby/file_stall.rb "$1" "$tmp/64m" 64; }
stall_w=$(stall weft); stall_a=$(stall async); stall_t=$(stall threads)

bench_header "ruby: Weft::Scheduler (backend $backend) vs Async $async_v and threads, Ruby $ruby_v"
bench_report $G "http_hello_${conns}conn" req/s higher "${rps[weft]}" "${label[async]}" "${rps[async]}" \
  "target >= 2x; ratio = weft / peer"
bench_report $G "http_hello_${conns}conn_vs_threads" req/s higher "${rps[weft]}" "${label[threads]}" "${rps[threads]}" \
  "target >= 2x"
bench_report $G "http_cpu_per_req" us/req lower "${cpu[weft]}" "${label[async]}" "${cpu[async]}" \
  "server CPU time per request; ratio = peer / weft"
bench_report $G "http_cpu_per_req_vs_threads" us/req lower "${cpu[weft]}" "${label[threads]}" "${cpu[threads]}"
bench_report $G "http_cpu_per_req_vs_epoll" us/req lower "${cpu[weft]}" "${label[weft_epoll]}" "${cpu[weft_epoll]}" \
  "weft on $backend against weft forced to epoll, Ruby $ruby_v; target: <= 0.8x the epoll figure (ratio >= 1.25)"
if [[ " $servers " == *" rb33 "* ]]; then
  bench_report $G "http_cpu_per_req_vs_epoll_rb33" us/req lower "${cpu[rb33]}" "${label[rb33_epoll]}" "${cpu[rb33_epoll]}" \
    "Ruby $rb33_v: weft on $backend against weft forced to epoll; target: <= 0.8x the epoll figure (ratio >= 1.25)"
  bench_report $G "http_hello_${conns}conn_rb33" req/s higher "${rps[rb33]}" "${label[rb33_epoll]}" "${rps[rb33_epoll]}" \
    "Ruby $rb33_v: weft on $backend against weft forced to epoll"
fi
bench_report $G "sleep0_10k_fibers" ns/op lower "$sleep_w" "${label[async]}" "$sleep_a" \
  "10,000 fibers x 10 sleep(0)"
bench_report $G "rss_per_idle_fiber" bytes lower "$idle_w" "${label[async]}" "$idle_a" \
  "VmRSS growth per fiber waiting to read an idle socket, 5,000 of them (bench/ruby/idle_rss.rb)"
bench_report $G "rss_per_idle_fiber_vs_floor" bytes lower "$idle_w" "Fiber.yield floor" "$idle_f" \
  "the same 5,000 fibers parked in Fiber.yield, no scheduler; target <= 1.15x (ratio >= 0.87)"
for n in 100 10000 30000; do
  k=$(awk -v n="$n" 'BEGIN { print (n >= 1000) ? n / 1000 "k" : n }')
  [ "$n" = 10000 ] || bench_report $G "sleep0_${k}_fibers" ns/op lower "${SL_W[$n]}" "${label[async]}" "${SL_A[$n]}" \
    "$n fibers x sleep(0)"
  bench_report $G "sleep0_${k}_fibers_vs_floor" ns/op lower "${SL_W[$n]}" "Fiber#transfer floor" "${SL_F[$n]}" \
    "$n live fibers, no scheduler: each transfers to the next (bench/ruby/churn.rb floor)"
  bench_report $G "sleep0_${k}_fibers_vs_minimal" ns/op lower "${SL_W[$n]}" "minimal scheduler" "${SL_M[$n]}" \
    "the same under the smallest Fiber::Scheduler that runs it (bench/ruby/churn.rb minimal): the floor for a scheduler; target <= 1.2x (ratio >= 0.83)"
done
bench_report $G "fiber_spawn" ns/fiber lower "$spawn_w" "${label[async]}" "$spawn_a" \
  "Fiber.schedule {} x 10,000, started and finished"
bench_report $G "pipe_roundtrip" ns/op lower "$pipe_w" "${label[async]}" "$pipe_a" \
  "1 byte each way between two fibers, IO#write/#readpartial"
bench_report $G "unix_roundtrip" ns/op lower "$unix_w" "${label[async]}" "$unix_a"
bench_report $G "file_read_64m_stall" ms lower "$stall_w" "${label[async]}" "$stall_a" \
  "longest gap of a 1 ms ticker while another task reads a 64 MiB file 5 times (bench/ruby/file_stall.rb)"
bench_report $G "file_read_64m_stall_vs_threads" ms lower "$stall_w" "${label[threads]}" "$stall_t"
if [ -s "$tmp/errors" ]; then
  echo "   wrk reported errors:"; sed 's/^/     /' "$tmp/errors"
else
  echo "   wrk reported no socket errors and no non-2xx responses"
fi
