#!/usr/bin/env bash
# churn.sh — connection churn: every request on a new connection (wrk with
# "Connection: close"), so each one pays for an accept, a first read, a
# fiber (task, thread) start, a response and a close (issue 15).
#
# Sections (WEFT_CHURN_SECTIONS, default "c1 c2 rb_http rb_churn0 rb_churn1"):
#   c1         examples/http_server, 1 thread: "weft" (the library's default
#              backend, io_uring where the kernel allows it) and "weft_epoll"
#              (WEFT_BACKEND=epoll) against nginx with 1 worker
#              (bench/peers/nginx.conf.in) and the raw C floors with no
#              fibers (bench/peers/raw_epoll.c, raw_uring.c: they close after
#              a request without keep-alive, as weft's server does)
#   c2         the same server with --threads 2 against nginx with 2 workers
#              and Go net/http with GOMAXPROCS=2 (bench/peers/go_http.go)
#   rb_http    examples/ruby/http_server.rb, the keep-alive example server,
#              here answering "Connection: close"
#   rb_churn0  bench/ruby/churn_http.rb, the classic Fiber-scheduler
#              benchmark server (accept, gets the head, write, close)
#   rb_churn1  the same with --latency 1 (a 1 ms sleep in the handler)
# The Ruby sections run each server as weft (Weft::Scheduler on its default
# backend), weft_epoll (WEFT_BACKEND=epoll), async (Async 1.x, nio4r),
# threads (a Ruby Thread per connection) and blocking (plain Ruby, no
# scheduler, one connection at a time).
#
# Figures: the server's CPU time per request — user+system of the server
# process (all its threads and direct children: nginx's workers) over the
# run divided by the requests wrk counted, in us, the figure of record
# (steadier than requests/s on a shared machine) — and requests/s. Ratios:
# weft against every peer, weft on its default backend against weft on
# epoll (io_uring must not cost more per connection), weft on epoll against
# the epoll floor.
#
# Arrangement: one-thread sections pin the server to CPU 1 and wrk
# (-t1 -cWEFT_CHURN_CONNS) to CPU 0 (WEFT_CHURN_PIN=0 to leave placement to
# the kernel, or when the machine has one CPU); c2 runs wrk -t2 unpinned.
# Runs are interleaved server by server, each under the benchmark lock
# (bench/lib.sh), after a 1 s warm-up; every server is stopped on exit,
# also on failure. wrk's socket errors and non-2xx answers are collected
# and printed; the machine's TCP passive opens per request
# (/proc/net/snmp, over the run) check that wrk really opened a new
# connection for every request (1.00, printed per section; connections
# other programs open on the machine during a run count too, so a figure
# above 1 says the machine was not quiet, one below 0.95 that connections
# were reused).
#
# WEFT_BENCH_REPS (default 5) runs of WEFT_CHURN_SECS (default 3) seconds;
# WEFT_CHURN_CONNS (default 50); WEFT_CHURN_SERVER_BIN, another build of
# the example server (A/B work; default build/examples/http_server). These
# are benchmarks, not tests: ratios are printed and recorded, never
# checked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"
reps=${WEFT_BENCH_REPS:-5}
secs=${WEFT_CHURN_SECS:-3}
conns=${WEFT_CHURN_CONNS:-50}
sections=${WEFT_CHURN_SECTIONS:-"c1 c2 rb_http rb_churn0 rb_churn1"}
pin=${WEFT_CHURN_PIN:-1}
srv=${WEFT_CHURN_SERVER_BIN:-build/examples/http_server}
[ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] || pin=0
G=churn
bin=$root/build/bench/peers
tmp=$(mktemp -d /tmp/weft-bench-churn.XXXXXX)
pids=()
stop_servers() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_servers; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
cd "$root"

has_section() { [[ " $sections " == *" $1 "* ]]; }
need=(wrk curl)
{ has_section c1 || has_section c2; } && need+=(nginx cc)
has_section c2 && need+=(go)
[[ "$sections" == *rb_* ]] && need+=(ruby)
[ "$pin" = 1 ] && need+=(taskset)
bench_need churn.sh "${need[@]}"

# ---- servers -------------------------------------------------------------
if has_section c1 || has_section c2; then
  [ -x "$srv" ] || { echo "churn.sh: $srv missing (make)" >&2; exit 1; }
  mkdir -p "$bin"
  # The floors parse with the example server's parser, as in http.sh.
  rawcc=(cc -std=gnu11 -O2 -g -Wall -Wextra -Werror -Icontrib/http contrib/http/http_parse.c)
  "${rawcc[@]}" bench/peers/raw_epoll.c -o "$bin/raw_epoll" -lpthread
  c1_servers="weft weft_epoll nginx raw raw_uring"
  if ! { "${rawcc[@]}" bench/peers/raw_uring.c -o "$bin/raw_uring" -luring -lpthread &&
         "$bin/raw_uring" --probe; }; then
    echo "churn.sh: no io_uring here (or no liburing): the io_uring floor is left out"
    c1_servers="weft weft_epoll nginx raw"
  fi
  if has_section c2; then
    (cd bench/peers && GOCACHE="$root/build/bench/gocache" GO111MODULE=off GOPATH="$tmp/gopath" \
       go build -o "$bin/go_http" go_http.go)
  fi
fi
rb_servers="weft weft_epoll async threads blocking"
if [[ "$sections" == *rb_* ]]; then
  ruby -I lib -r weft -e '' || { echo "churn.sh: the extension is not built (make ruby)" >&2; exit 1; }
  ruby -r async -e '' 2>/dev/null || { echo "churn.sh: ruby-async missing (scripts/deps.sh bench)" >&2; exit 1; }
  async_v=$(ruby -r async -e 'print Async::VERSION')
  ruby_v=$(ruby -e 'print RUBY_VERSION')
  rb_backend=$(ruby -I lib -r weft -e 'print Weft::Scheduler.new.backend')
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Below the ephemeral range (32768+), so no client socket holds the port.
pick_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000)); port_free $p && { echo $p; return; }; done; return 1; }
wait_port() { for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

declare -A port spid label
# start SECTION THREADS SERVER: start it in the background on a free port.
start() {
  local sec=$1 t=$2 s=$3 k=$1,$3 pre=() rb=() dir
  [ "$pin" = 1 ] && [ "$t" = 1 ] && pre=(taskset -c 1)
  port[$k]=$(pick_port)
  case $sec in
    c1|c2)
      case $s in
        weft) "${pre[@]}" "$srv" --port "${port[$k]}" --threads "$t" --quiet \
                >"$tmp/$sec.weft.out" &
              label[$k]="weft http_server" ;;
        weft_epoll) "${pre[@]}" env WEFT_BACKEND=epoll "$srv" --port "${port[$k]}" \
                --threads "$t" --quiet >"$tmp/$sec.weft_epoll.out" &
              label[$k]="weft http_server, epoll" ;;
        raw)  "${pre[@]}" "$bin/raw_epoll" --port "${port[$k]}" --threads "$t" >/dev/null &
              label[$k]="raw C epoll (floor)" ;;
        raw_uring) "${pre[@]}" "$bin/raw_uring" --port "${port[$k]}" --threads "$t" >/dev/null &
              label[$k]="raw C io_uring (floor)" ;;
        go)   "${pre[@]}" env GOMAXPROCS="$t" "$bin/go_http" -port "${port[$k]}" >/dev/null &
              label[$k]="Go $(go env GOVERSION 2>/dev/null | sed 's/^go//') net/http, GOMAXPROCS=$t" ;;
        nginx) dir=$tmp/nginx.$sec; mkdir -p "$dir"
              sed -e "s|@WORKERS@|$t|; s|@DIR@|$dir|g; s|@PORT@|${port[$k]}|" \
                bench/peers/nginx.conf.in > "$dir/nginx.conf"
              "${pre[@]}" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
              label[$k]="nginx $(nginx -v 2>&1 | sed 's|.*/||'), $t worker$([ "$t" = 1 ] || echo s)" ;;
      esac ;;
    rb_*)
      case $sec in
        rb_http)   rb=(examples/ruby/http_server.rb) ;;
        rb_churn0) rb=(bench/ruby/churn_http.rb --latency 0) ;;
        rb_churn1) rb=(bench/ruby/churn_http.rb --latency 1) ;;
      esac
      local mode=$s env=()
      [ "$s" = weft_epoll ] && { mode=weft; env=(WEFT_BACKEND=epoll); }
      "${pre[@]}" env "${env[@]}" ruby -W0 -I lib "${rb[@]}" --mode "$mode" --port "${port[$k]}" \
        >"$tmp/$sec.$s.out" 2>"$tmp/$sec.$s.err" &
      case $s in
        weft) label[$k]="Weft::Scheduler ($rb_backend)" ;;
        weft_epoll) label[$k]="Weft::Scheduler on epoll" ;;
        async) label[$k]="Async $async_v" ;;
        threads) label[$k]="Ruby Thread per connection" ;;
        blocking) label[$k]="plain Ruby, no scheduler" ;;
      esac ;;
  esac
  pids+=($!)
  spid[$k]=$!
  wait_port "${port[$k]}" || {
    echo "churn.sh: $sec $s did not start" >&2; cat "$tmp/$sec.$s.err" 2>/dev/null >&2; exit 1; }
}

# CPU time (clock ticks) used so far by process PID, its threads (also
# the ones that ended) and its direct children (nginx's workers).
cpu_ticks() {
  local p t=0 f
  for p in $1 $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    f=$(cut -d')' -f2 /proc/"$p"/stat 2>/dev/null) || continue
    set -- $f
    t=$((t + ${12} + ${13})) # utime, stime
  done
  echo $t
}
# The machine's TCP passive opens (connections accepted) so far.
passive_opens() { awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "PassiveOpens") c = i; h = 1 } else print $c }' /proc/net/snmp; }
# One wrk run, under the lock: wrk's output, the server's CPU ticks, the
# passive opens.
measure() { # PID PORT CONNS SECS WRK_THREADS PIN
  local c0 c1 o0 o1 out pre=()
  [ "$6" = 1 ] && pre=(taskset -c 0)
  c0=$(cpu_ticks "$1"); o0=$(passive_opens)
  out=$(timeout $(($4 + 60)) "${pre[@]}" wrk -t"$5" -c"$3" -d"$4"s -H "Connection: close" \
          "http://127.0.0.1:$2/") || return 1
  c1=$(cpu_ticks "$1"); o1=$(passive_opens)
  echo "$out"
  echo "CPU_TICKS $((c1 - c0))"
  echo "OPENS $((o1 - o0))"
}
export -f measure cpu_ticks passive_opens

# Prints "requests/s cpu-us-per-request opens-per-request".
hz=$(getconf CLK_TCK)
wrk_run() { # SECTION SERVER THREADS SECS
  local k=$1,$2 out errs wt=1 p=0
  [ "$3" = 1 ] || wt=2
  [ "$pin" = 1 ] && [ "$3" = 1 ] && p=1
  out=$(bench_locked bash -c 'measure "$@"' _ "${spid[$k]}" "${port[$k]}" "$conns" "$4" "$wt" "$p") || {
    echo "churn.sh: wrk failed against $1 $2" >&2; echo "0 0 0"; return; }
  errs=$(echo "$out" | sed -n 's/.*Socket errors: //p; s/.*Non-2xx or 3xx responses: /non-2xx /p')
  [ -n "$errs" ] && echo "$1 $2: $errs" >> "$tmp/errors"
  echo "$out" | awk -v hz="$hz" '
    /^Requests\/sec:/ { rps = $2 }
    / requests in / { n = $1 }
    /^CPU_TICKS/ { t = $2 }
    /^OPENS/ { o = $2 }
    END { printf "%.0f %.2f %.2f\n", rps, (n > 0 ? t * 1e6 / hz / n : 0), (n > 0 ? o / n : 0) }'
}

declare -A rps cpu opens
run_section() { # SECTION THREADS SERVERS...
  local sec=$1 t=$2 s r a b c; shift 2
  for s in "$@"; do start "$sec" "$t" "$s"; done
  for s in "$@"; do wrk_run "$sec" "$s" "$t" 1 >/dev/null; done # warm-up
  for ((r = 0; r < reps; r++)); do
    for s in "$@"; do
      read -r a b c <<< "$(wrk_run "$sec" "$s" "$t" "$secs")"
      rps[$sec,$s]+="$a "; cpu[$sec,$s]+="$b "; opens[$sec,$s]+="$c "
    done
  done
  stop_servers
  local line="" o
  for s in "$@"; do
    o=$(bench_median "${opens[$sec,$s]}")
    line+=" $s $o,"
    awk -v o="$o" 'BEGIN { exit !(o < 0.95) }' &&
      echo "$sec $s: only $o new connections per request (connections reused?)" >> "$tmp/errors"
  done
  echo "   $sec: TCP connections accepted per request (median):${line%,}"
}

echo
echo "== churn: a new connection per request, wrk -c$conns -d${secs}s -H 'Connection: close', $reps runs each, interleaved"
echo "   command: WEFT_BENCH_REPS=$reps WEFT_CHURN_SECS=$secs bash bench/parts/churn.sh (part of make bench)"
[ "$pin" = 1 ] && echo "   one-thread servers pinned to CPU 1, wrk -t1 to CPU 0; two-thread servers and wrk -t2 unpinned"
for sec in $sections; do
  case $sec in
    c1) run_section c1 1 $c1_servers ;;
    c2) run_section c2 2 weft nginx go ;;
    rb_http|rb_churn0|rb_churn1) run_section "$sec" 1 $rb_servers ;;
    *) echo "churn.sh: unknown section $sec" >&2; exit 1 ;;
  esac
done
backend=$(cat "$tmp"/c*.weft.out 2>/dev/null | sed -n 's/.*, \([a-z_]*\) backend.*/\1/p' | head -n1 || true)

# row SECTION NAME METRIC WEFT PEER [NOTE]: weft's runs against the peer's.
row() {
  local sec=$1 name=$2 m=$3 w=$4 p=$5 note=${6:-} unit better
  local -n a=$m
  [ -n "${a[$sec,$w]:-}" ] && [ -n "${a[$sec,$p]:-}" ] || return 0
  if [ "$m" = cpu ]; then unit=us/req better=lower; else unit=req/s better=higher; fi
  bench_report $G "$name" "$unit" "$better" "${a[$sec,$w]}" "${label[$sec,$p]}" "${a[$sec,$p]}" "$note"
}
if has_section c1 || has_section c2; then
  bench_header "churn, C: examples/http_server (weft on ${backend:-?}) — CPU us/request (ratio = peer / weft) and requests/s (ratio = weft / peer)"
  for m in cpu rps; do
    row c1 "c_${m}_1thr" $m weft nginx
    row c1 "c_${m}_1thr" $m weft raw_uring "the floor on weft's backend"
    row c1 "c_${m}_1thr" $m weft weft_epoll "$([ $m = cpu ] && echo "target: >= 1x, io_uring costs no more than epoll per connection")"
    row c1 "c_${m}_1thr_epoll" $m weft_epoll raw "weft forced to epoll against the epoll floor"
    row c1 "c_${m}_1thr_epoll" $m weft_epoll nginx "weft forced to epoll"
    row c2 "c_${m}_2thr" $m weft nginx
    row c2 "c_${m}_2thr" $m weft go
  done
fi
for sec in rb_http rb_churn0 rb_churn1; do
  has_section $sec || continue
  case $sec in
    rb_http)   what="examples/ruby/http_server.rb"; nm=rb_http; tgt="" ;;
    rb_churn0) what="bench/ruby/churn_http.rb --latency 0"; nm=rb_churn; tgt=1.1 ;;
    rb_churn1) what="bench/ruby/churn_http.rb --latency 1"; nm=rb_churn_1ms; tgt=10 ;;
  esac
  bench_header "churn, Ruby $ruby_v: $what — CPU us/request (ratio = peer / weft) and requests/s (ratio = weft / peer)"
  for m in cpu rps; do
    note=""; [ "$m" = rps ] && [ -n "$tgt" ] && note="target: >= ${tgt}x plain Ruby"
    row $sec "${nm}_${m}" $m weft blocking "$note"
    row $sec "${nm}_${m}" $m weft threads
    row $sec "${nm}_${m}" $m weft async
    row $sec "${nm}_${m}" $m weft weft_epoll "$([ $m = cpu ] && echo "target: >= 1x, io_uring costs no more than epoll")"
    row $sec "${nm}_${m}_epoll" $m weft_epoll blocking "weft forced to epoll"
  done
done
if [ -s "$tmp/errors" ]; then
  echo "   wrk reported errors:"; sed 's/^/     /' "$tmp/errors"
else
  echo "   wrk reported no socket errors and no non-2xx responses"
fi
