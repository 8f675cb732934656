#!/usr/bin/env bash
# demo.sh — the `make demo` showcase (make demo installs the packages and
# builds first): real servers on loopback, driven by weft client fibers.
#   1. the HTTP server (one fiber per connection) under the weft load
#      generator: live progress, then requests / errors / req/s / p50 p90 p99;
#   2. ping-pong, and the echo server with a few hundred client fibers;
#   3. [hook] the Ruby server under Weft::Scheduler, once the extension exists.
# Everything started here is stopped on exit, also on failure or Ctrl-C.
# WEFT_DEMO_SECS sets the HTTP load duration (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${WEFT_DEMO_SECS:-10}
tmp=$(mktemp -d /tmp/weft-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for b in http_server http_load ping_pong echo_server echo_client; do
  [ -x "build/examples/$b" ] || { echo "demo: build/examples/$b missing: run 'make demo'" >&2; exit 1; }
done

# Start a server that prints "... listening on ...:PORT ..."; sets $port.
# (Not run in a subshell: $pids must see the new process.)
start_server() { # name, command...
  local name=$1; shift
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  port=""
  for _ in $(seq 100); do
    port=$(sed -n 's|.*listening on [a-z:/]*[0-9.]*:\([0-9][0-9]*\).*|\1|p' "$tmp/$name.out" | head -n1)
    [ -n "$port" ] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo: $name did not start:" >&2; cat "$tmp/$name.out" "$tmp/$name.err" >&2; return 1
}
stop_last() { # SIGINT the last server started, wait for it, show its report
  local p=${pids[-1]}
  kill -INT "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  unset 'pids[-1]'
}

echo "== weft demo 1: HTTP/1.1 server, one fiber per connection"
start_server http build/examples/http_server --port 0 --threads 1
cat "$tmp/http.out"
conns=256
echo "load: build/examples/http_load --port $port --connections $conns --duration $secs"
echo "      ($conns client fibers on one thread, keep-alive, GET / -> \"Hello, World!\")"
load_rc=0
build/examples/http_load --port "$port" --connections "$conns" --duration "$secs" --progress || load_rc=$?
stop_last
sed 's/^/  /' "$tmp/http.err"
[ $load_rc -eq 0 ] || echo "  (the load generator reported errors: see the table above)"

echo
echo "== weft demo 2: ping-pong"
build/examples/ping_pong 3

echo
echo "== weft demo 3: echo server, one fiber per connection"
start_server echo build/examples/echo_server --port 0
cat "$tmp/echo.out"
for clients in 300 2000; do
  build/examples/echo_client --port "$port" --clients "$clients" --bytes 65536
done
stop_last
sed 's/^/  /' "$tmp/echo.err"

# ---- HOOK: Ruby server under Weft::Scheduler --------------------------------
# The Ruby engineer adds scripts/demo.d/ruby.sh: it receives the load
# generator's path and duration, starts the Ruby HTTP server on loopback,
# drives it with the same load and prints the same table. Until it exists
# this part is skipped.
if [ -f scripts/demo.d/ruby.sh ]; then
  echo
  echo "== weft demo 4: Ruby HTTP server under Weft::Scheduler"
  WEFT_DEMO_SECS=$secs WEFT_HTTP_LOAD=build/examples/http_load bash scripts/demo.d/ruby.sh
fi
# ---------------------------------------------------------------------------

# ---- POOL SHOWCASE (connection pool part: examples/pool_demo, scripts/pg.sh)
# Hundreds of client fibers fetch items from the HTTP server (static files
# in a temp --root) and store each one in a throw-away PostgreSQL through a
# pool of 2 connections; the same job sequentially for comparison; then
# once more with simulated upstream latency. scripts/pg.sh stops the
# database when it returns; the HTTP server is stopped here.
pool_rc=0
if [ -x build/examples/pool_demo ]; then
  echo
  echo "== weft demo 5: 200 concurrent requests, 2 PostgreSQL connections (weft_pool)"
  mkdir -p "$tmp/www/items"
  awk -v d="$tmp/www/items" 'BEGIN { for (i = 1; i <= 2000; i++) { f = d "/" i ".txt";
    printf "item %d: the quick brown fox jumps over the lazy dog\n", i > f; close(f) } }'
  start_server pool_http build/examples/http_server --port 0 --root "$tmp/www" --quiet
  echo "PostgreSQL: a throw-away cluster on 127.0.0.1 (scripts/pg.sh)"
  POOL_PORT=$port bash scripts/pg.sh run bash -c '
    build/examples/pool_demo --port "$POOL_PORT" --items 2000 --concurrency 200 --pool-size 2 --compare &&
    echo && build/examples/pool_demo --port "$POOL_PORT" --items 200 --concurrency 200 \
      --pool-size 2 --delay-ms 10 --compare' || pool_rc=$?
  stop_last
  [ $pool_rc -eq 3 ] && echo "  PostgreSQL could not be started: the pool showcase did NOT run"
fi
# ---------------------------------------------------------------------------

echo
echo "demo done: every process it started has been stopped."
[ $load_rc -eq 0 ] && [ $pool_rc -eq 0 ]
