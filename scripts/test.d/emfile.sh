#!/usr/bin/env bash
# emfile.sh — out of descriptors (issue 18): the HTTP example
# (build/examples/http_server) and the Ruby example
# (examples/ruby/http_server.rb) each run with `ulimit -n 256` in a child
# shell, on every backend, while build/tests/tool_http_flood (a process
# without that limit) opens 50 resident keep-alive connections, then 1,000
# clients at once (2 requests each), then 200 more. Checks, per server and
# backend:
#   - every request of every client is answered (the servers keep serving
#     the connections they have and back off on EMFILE instead of dying or
#     spinning; every resident is answered while the flood goes on);
#   - the limit was really reached (the server's descriptor count peaked at
#     the limit);
#   - the server's own count of connections and responses equals the
#     client's: no accepted connection lost;
#   - its descriptors are back to where they started once the clients have
#     left, and SIGTERM ends it with status 0.
# WEFT_RUBY=/path/to/ruby runs the Ruby server on another Ruby (default:
# ruby, and Ruby 3.3 too when scripts/build-ruby-latest.sh has built it).
# Prints "[emfile] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
suite=emfile; . scripts/tally.sh
tmp=$(mktemp -d /tmp/weft-emfile.XXXXXX)
srv=""; sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  [ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
LIMIT=256
lock=${WEFT_BENCH_LOCK:-/tmp/weft-bench.lock}

if ! make -s -j"${WEFT_JOBS:-2}" build/examples/http_server build/tests/tool_http_flood \
     build/tests/tool_backend >"$tmp/build.log" 2>&1; then
  bad "build http_server / tool_http_flood" "$tmp/build.log"; finish
fi
rubies=()
if command -v "${WEFT_RUBY:-ruby}" >/dev/null && extdir=$(bash scripts/ruby-ext.sh ${WEFT_RUBY:+"$WEFT_RUBY"} 2>"$tmp/ext.log"); then
  rubies+=("${WEFT_RUBY:-ruby}:$extdir")
else
  bad "Ruby extension build" "$tmp/ext.log"
fi
if [ -z "${WEFT_RUBY:-}" ]; then
  while read -r latest; do
    if extdir=$(bash scripts/ruby-ext.sh "$latest" 2>"$tmp/ext.log"); then
      rubies+=("$latest:$extdir")
    fi
  done < <(bash scripts/build-ruby-latest.sh --print-rubies)
fi
backends=(epoll poll)
[ "$(WEFT_BACKEND=io_uring build/tests/tool_backend 2>/dev/null)" = io_uring ] && backends=(io_uring "${backends[@]}")

fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# run_one LABEL KIND CMD... — one server under the limit, the flood, the checks.
run_one() {
  local label=$1 kind=$2; shift 2
  : >"$tmp/srv.out"; : >"$tmp/srv.err"
  ( ulimit -n $LIMIT && exec "$@" >"$tmp/srv.out" 2>"$tmp/srv.err" ) &
  srv=$!
  local port="" i
  for i in $(seq 150); do
    port=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/srv.out")
    [ -n "$port" ] && break; kill -0 "$srv" 2>/dev/null || break; sleep 0.1
  done
  if [ -z "$port" ]; then
    bad "$label: server did not start" "$tmp/srv.err"; kill -KILL "$srv" 2>/dev/null; srv=""; return
  fi
  local base; base=$(fd_count "$srv")
  ( peak=0
    while kill -0 "$srv" 2>/dev/null; do
      n=$(fd_count "$srv"); [ "$n" -gt "$peak" ] && { peak=$n; echo "$peak" > "$tmp/peak"; }
      sleep 0.02
    done ) &
  sampler=$!
  local cpu0; cpu0=$(cpu_ticks "$srv")
  flock -w 1200 "$lock" timeout 180 build/tests/tool_http_flood --port "$port" \
    --clients 1000 --residents 50 --recovery 200 --timeout-s 60 >"$tmp/flood.out" 2>&1
  local rc=$? cpu1; cpu1=$(cpu_ticks "$srv")
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; sampler=""
  local peak; peak=$(cat "$tmp/peak" 2>/dev/null || echo 0); rm -f "$tmp/peak"
  local summary; summary=$(grep '^connections ' "$tmp/flood.out")
  local conns reqs; read -r _ conns _ reqs _ <<<"$summary"
  if [ $rc = 0 ]; then
    ok "$label: 1,000 clients + 50 residents + 200 after, all answered ($(sed -n 's/^flood: //p' "$tmp/flood.out" | sed 's/, errors 0//'); residents' slowest $(sed -n 's/.*slowest //p' "$tmp/flood.out"))"
  else
    bad "$label: clients (exit $rc)" "$tmp/flood.out"
  fi
  if [ "$peak" -ge $((LIMIT - 2)) ]; then
    ok "$label: descriptors reached the limit (peak $peak of $LIMIT), server CPU $(( (cpu1 - cpu0) * 10 )) ms"
  else
    bad "$label: descriptors peaked at $peak, the limit $LIMIT was never reached"
  fi
  local now=-1
  for i in $(seq 100); do now=$(fd_count "$srv"); [ "$now" -le "$base" ] && break; sleep 0.1; done
  if kill -0 "$srv" 2>/dev/null && [ "$now" -le "$base" ]; then
    ok "$label: descriptors back to $base after the clients left"
  else
    bad "$label: descriptors $now after the clients left (started with $base), alive: $(kill -0 "$srv" 2>/dev/null && echo yes || echo no)" "$tmp/srv.err"
  fi
  kill -TERM "$srv" 2>/dev/null
  local src=124
  for i in $(seq 150); do kill -0 "$srv" 2>/dev/null || { wait "$srv"; src=$?; break; }; sleep 0.1; done
  [ $src = 124 ] && kill -KILL "$srv" 2>/dev/null
  srv=""
  local sconns sreqs
  if [ "$kind" = c ]; then
    read -r sconns sreqs < <(sed -n 's/.*stopped: \([0-9]*\) connections, \([0-9]*\) responses.*/\1 \2/p' "$tmp/srv.err")
  else
    read -r sreqs sconns < <(sed -n 's/^served \([0-9]*\) requests on \([0-9]*\) connections.*/\1 \2/p' "$tmp/srv.err")
  fi
  if [ $src = 0 ] && [ -n "${conns:-}" ] && [ "${sconns:-x}" = "$conns" ] && [ "${sreqs:-x}" = "$reqs" ]; then
    ok "$label: server counted $sconns connections and $sreqs responses, as the clients did; SIGTERM: exit 0"
  else
    bad "$label: server exit $src, counted ${sconns:-?} connections / ${sreqs:-?} responses, clients ${conns:-?} / ${reqs:-?}" "$tmp/srv.err"
  fi
}

for b in "${backends[@]}"; do
  run_one "http_server [$b]" c env WEFT_BACKEND="$b" build/examples/http_server --port 0
  for r in "${rubies[@]}"; do
    rb=${r%%:*}; dir=${r#*:}
    v=$("$rb" -e 'print RUBY_VERSION')
    run_one "ruby $v http_server.rb [$b]" ruby "$rb" -I "$dir" -I lib examples/ruby/http_server.rb --port 0 --backend "$b"
  done
done

finish
