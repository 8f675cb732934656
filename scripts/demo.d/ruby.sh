#!/usr/bin/env bash
# demo.d/ruby.sh — demo 4 of `make demo` (called by scripts/demo.sh's hook):
# the Ruby HTTP/1.1 hello-world server (examples/ruby/http_server.rb, one
# fiber per connection under Weft::Scheduler) driven by the same weft load
# generator as demo 1, printing the same table. Stops the server it started.
# Environment: WEFT_DEMO_SECS (load duration; this part uses at most 5 s),
# WEFT_HTTP_LOAD (the load generator).
set -uo pipefail
cd "$(dirname "$0")/../.."
load=${WEFT_HTTP_LOAD:-build/examples/http_load}
secs=${WEFT_DEMO_SECS:-10}
[ "$secs" -gt 5 ] && secs=5
conns=100
if ! ruby -I lib -r weft -e '' 2>/dev/null; then
  echo "  (the Ruby extension is not built: apt-get install ruby-dev, then make; skipped)"
  exit 0
fi
tmp=$(mktemp -d /tmp/weft-demo-ruby.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ruby -I lib examples/ruby/http_server.rb --port 0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*listening on [a-z:/]*[0-9.]*:\([0-9][0-9]*\).*|\1|p' "$tmp/out" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "demo: the Ruby server did not start:" >&2; cat "$tmp/out" "$tmp/err" >&2; exit 1
fi
cat "$tmp/out"
echo "load: $load --port $port --connections $conns --duration $secs"
echo "      ($conns client fibers on one thread, keep-alive, GET / -> \"Hello, World!\")"
rc=0
"$load" --port "$port" --connections "$conns" --duration "$secs" --progress || rc=$?
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=""
sed 's/^/  /' "$tmp/err"
# Like demo 1: load errors are reported, and the rest of the demo runs.
[ $rc -eq 0 ] || echo "  (the load generator reported errors: see the table above)"
exit 0
