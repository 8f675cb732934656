#!/usr/bin/env bash
# demo.sh — the `make demo` showcase: real servers on loopback, driven by
# weft client fibers. Everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { # a port nothing listens on right now
  local p
  for p in $(seq 17000 17999); do
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }
  done
}

echo "== weft demo: ping-pong"
build/examples/ping_pong 3

echo
echo "== weft demo: echo server, one fiber per connection"
port=$(free_port)
build/examples/echo_server --port "$port" > /tmp/weft-demo-echo.$$ 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q listening /tmp/weft-demo-echo.$$ 2>/dev/null && break; sleep 0.1; done
cat /tmp/weft-demo-echo.$$
for clients in 300 2000; do
  build/examples/echo_client --port "$port" --clients "$clients" --bytes 65536
done
kill -INT "${pids[0]}"; wait "${pids[0]}" || true; pids=()
cat /tmp/weft-demo-echo.$$ | tail -n +2; rm -f /tmp/weft-demo-echo.$$
