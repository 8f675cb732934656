#!/usr/bin/env bash
# loadrun.sh — soak the HTTP example: 8,000 concurrent keep-alive
# connections for 60 s (wrk on loopback), then check that there was not a
# single socket error or non-2xx answer, that all 8,000 connections were
# established at once, and that the server released every descriptor
# afterwards. Not a CI test (it needs a quiet machine and a minute).
#
#   bash bench/loadrun.sh            # after `make`
# LOADRUN_CONNS (8000), LOADRUN_SECS (60), LOADRUN_THREADS (server threads, 1),
# LOADRUN_CLIENT (wrk | weft: build/examples/http_load instead of wrk).
# Runs under the benchmark lock; exit status 0 only when every check holds.
set -uo pipefail
cd "$(dirname "$0")/.."
conns=${LOADRUN_CONNS:-8000}
secs=${LOADRUN_SECS:-60}
threads=${LOADRUN_THREADS:-1}
client=${LOADRUN_CLIENT:-wrk}
tmp=$(mktemp -d /tmp/weft-loadrun.XXXXXX)
srv=""
cleanup() { [ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
fail=0
check() { if eval "$2"; then echo "  ok    $1"; else echo "  FAIL  $1"; fail=1; fi; }

[ -x build/examples/http_server ] || { echo "loadrun: run make first" >&2; exit 1; }
need=$((conns + 100))
[ "$(ulimit -n)" -ge "$need" ] || ulimit -n "$need" 2>/dev/null || {
  echo "loadrun: need $need descriptors, ulimit -n is $(ulimit -n)" >&2; exit 1; }

build/examples/http_server --port 0 --threads "$threads" >"$tmp/srv.out" 2>"$tmp/srv.err" &
srv=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$tmp/srv.out"); [ -n "$port" ] && break; sleep 0.1
done
[ -n "$port" ] || { echo "loadrun: server did not start" >&2; cat "$tmp/srv.err" >&2; exit 1; }
fds_before=$(ls /proc/$srv/fd | wc -l)
echo "loadrun: $conns keep-alive connections for ${secs}s against http_server --threads $threads (port $port, $fds_before fds open), client $client"

# Sample the number of established server-side connections mid-run.
( sleep $((secs / 2)); ss -Htn state established "( sport = :$port )" | wc -l > "$tmp/mid" ) &
sampler=$!
if [ "$client" = weft ]; then
  cmd=(build/examples/http_load --port "$port" --connections "$conns" --threads 2 --duration "$secs")
else
  cmd=(wrk -t2 -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$port/")
fi
echo "loadrun: ${cmd[*]}"
flock /tmp/weft-bench.lock timeout $((secs + 120)) "${cmd[@]}" >"$tmp/load.out" 2>&1
load_rc=$?
wait $sampler
cat "$tmp/load.out"
mid=$(cat "$tmp/mid" 2>/dev/null || echo 0)

# Descriptors: every connection closed by the clients must be closed by the
# server too (allow it a few seconds to see the FINs).
fds_after=-1
for _ in $(seq 100); do
  fds_after=$(ls /proc/$srv/fd | wc -l)
  [ "$fds_after" -le "$fds_before" ] && break; sleep 0.1
done
kill -TERM "$srv"
rc=124
for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || { wait "$srv"; rc=$?; break; }; sleep 0.1; done
[ $rc = 124 ] || srv=""

echo
if [ "$client" = weft ]; then
  check "load generator finished with zero errors" "[ $load_rc = 0 ]"
else
  check "wrk finished" "[ $load_rc = 0 ]"
  check "zero socket errors (connect, read, write, timeout)" "! grep -q 'Socket errors' '$tmp/load.out'"
  check "zero non-2xx responses" "! grep -q 'Non-2xx' '$tmp/load.out'"
fi
check "all $conns connections established at once (mid-run: $mid)" "[ $mid -ge $conns ]"
check "server descriptors back to $fds_before after the run (now $fds_after)" "[ $fds_after -le $fds_before ]"
check "SIGTERM: server exits 0" "[ $rc = 0 ]"
sed 's/^/  /' "$tmp/srv.err"
exit $fail
