#!/usr/bin/env bash
# net_examples.sh — the examples of issue 16's helpers run as programs, on
# every backend (WEFT_BACKEND): udp_echo (--both; a server on "localhost"
# and a client by name, then SIGTERM ends the server with status 0),
# run_cmd (lines of both streams, a line longer than --max-line in pieces,
# the program's exit status, a timeout that ends a sleeping program) and
# echo_server on "localhost" with echo_client by name, ended by SIGINT.
# Prints "[net_examples] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
ex=build/examples tmp=$(mktemp -d /tmp/weft-net-examples.XXXXXX) srv="" pass=0 fail=0
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
ok() { pass=$((pass+1)); echo "  ok    $1"; }
# bad WHAT FILES... — a failure, with the end of what the programs said.
bad() {
  local what=$1; shift; fail=$((fail+1)); echo "  FAIL  $what"
  cat "$@" 2>/dev/null | tail -n 20 | sed 's/^/        | /'
}

# start NAME CMD... — a server in the background; sets $srv and $port from
# its first line ("... listening on HOST:PORT ...").
start() {
  local name=$1; shift
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  srv=$!; port=""
  for _ in $(seq 50); do
    port=$(sed -n 's|.*listening on [^ ]*:\([0-9][0-9]*\).*|\1|p' "$tmp/$name.out" | head -n1)
    [ -n "$port" ] && return 0; sleep 0.1
  done
  return 1
}
# stop SIGNAL — signal the server, wait for it; its status in $rc.
stop() { kill -"$1" "$srv" 2>/dev/null; wait "$srv"; rc=$?; srv=""; }

for b in io_uring epoll poll; do
  export WEFT_BACKEND=$b
  if timeout 20 $ex/udp_echo --both --count 200 >"$tmp/both.out" 2>&1 &&
     grep -q '200/200 echoed' "$tmp/both.out"; then
    ok "[$b] udp_echo --both: $(grep -o '200/200 echoed.*' "$tmp/both.out")"
  else
    bad "[$b] udp_echo --both" "$tmp/both.out"
  fi
  if start udp $ex/udp_echo --host localhost --port 0 &&
     timeout 20 $ex/udp_echo --client --host localhost --port "$port" --count 100 >"$tmp/cli.out" 2>&1 &&
     grep -q '100/100 echoed' "$tmp/cli.out" && stop TERM && [ "$rc" = 0 ] &&
     grep -q 'stopped after 100 datagrams' "$tmp/udp.err"; then
    ok "[$b] udp_echo on localhost:$port, a client by name, SIGTERM: exit 0"
  else
    [ -n "$srv" ] && stop KILL
    bad "[$b] udp_echo server and client" "$tmp/udp.out" "$tmp/udp.err" "$tmp/cli.out"
  fi
  timeout 20 $ex/run_cmd --max-line 8 -- sh -c 'echo one; echo two >&2; echo 0123456789abcdef; exit 7' \
    >"$tmp/run.out" 2>"$tmp/run.err"; rc=$?
  if [ "$rc" = 7 ] && grep -q 'out| one$' "$tmp/run.out" && grep -q 'err| two$' "$tmp/run.out" &&
     grep -q 'out| 01234567$' "$tmp/run.out" && grep -q 'out+| 89abcdef$' "$tmp/run.out"; then
    ok "[$b] run_cmd: both streams line by line, a long line in pieces, exit status 7"
  else
    bad "[$b] run_cmd (exit $rc)" "$tmp/run.out" "$tmp/run.err"
  fi
  timeout 20 $ex/run_cmd --timeout-ms 100 -- sleep 10 >"$tmp/run.out" 2>"$tmp/run.err"; rc=$?
  if [ "$rc" = 143 ] && grep -q 'SIGTERM' "$tmp/run.err"; then
    ok "[$b] run_cmd --timeout-ms 100 -- sleep 10: stopped with SIGTERM (143)"
  else
    bad "[$b] run_cmd timeout (exit $rc)" "$tmp/run.err"
  fi
  if start echo $ex/echo_server --host localhost --port 0 &&
     timeout 20 $ex/echo_client --host localhost --port "$port" --clients 20 --bytes 20000 >"$tmp/ec.out" 2>&1 &&
     grep -q '20 ok, 0 failed' "$tmp/ec.out" && stop INT && [ "$rc" = 0 ]; then
    ok "[$b] echo_server on localhost, echo_client by name, SIGINT: exit 0"
  else
    [ -n "$srv" ] && stop KILL
    bad "[$b] echo_server and echo_client by name" "$tmp/echo.out" "$tmp/echo.err" "$tmp/ec.out"
  fi
done

[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[net_examples] $pass passed, $fail failed"
[ "$fail" -eq 0 ]
