#!/usr/bin/env bash
# ext_replace.sh — `make` replaces lib/weft/weft.so while a Ruby server
# runs on it (issue 18). The rule used to copy the new build over the old
# file: every Ruby process that had the extension loaded then executed
# rewritten pages and died ("[BUG] Bus Error" or "Segmentation fault" in
# whatever extension code ran next, Scheduler#run included) — what
# bench/crash_hunt.sh and bench/soak.sh met when another session rebuilt
# the extension, and the likely cause of the crash the issue reports.
# Now the rule renames a new file into place. Checks: the example server
# (examples/ruby/http_server.rb) under http_load keeps answering every
# request across the replacement (make -W ext/weft/extconf.rb: the rule's
# recipe runs; nothing is recompiled), the file is a new inode, SIGINT
# still ends the server with status 0.
# Prints "[ext_replace] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
suite=ext_replace; . scripts/tally.sh
tmp=$(mktemp -d /tmp/weft-ext-replace.XXXXXX)
srv=""
trap '[ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
if ! make -s ruby build/examples/http_load >"$tmp/build.log" 2>&1 || [ ! -f lib/weft/weft.so ]; then
  bad "build (make ruby, http_load)" "$tmp/build.log"; finish
fi
ruby -I lib examples/ruby/http_server.rb --port 0 >"$tmp/srv.out" 2>"$tmp/srv.err" &
srv=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/srv.out"); [ -n "$port" ] && break; sleep 0.1
done
[ -n "$port" ] || { bad "the Ruby server did not start" "$tmp/srv.err"; finish; }
before=$(stat -c %i lib/weft/weft.so)
build/examples/http_load --port "$port" --connections 20 --duration 2 >"$tmp/load.out" 2>&1 &
load=$!
sleep 0.7
make -s -W ext/weft/extconf.rb lib/weft/weft.so >"$tmp/make.log" 2>&1
mrc=$?
wait "$load"; lrc=$?
after=$(stat -c %i lib/weft/weft.so)
if [ $mrc = 0 ] && [ "$before" != "$after" ]; then
  ok "make put a new lib/weft/weft.so in place (inode $before -> $after)"
else
  bad "make -W ext/weft/extconf.rb lib/weft/weft.so (exit $mrc, inode $before -> $after)" "$tmp/make.log"
fi
if [ $lrc = 0 ] && kill -0 "$srv" 2>/dev/null; then
  ok "the server kept answering across the replacement ($(sed -n 2p "$tmp/load.out" | awk '{print $1" requests, "$2" errors"}'))"
else
  bad "the server under load across the replacement (http_load exit $lrc, server $(kill -0 "$srv" 2>/dev/null && echo alive || echo dead))" "$tmp/srv.err"
fi
kill -INT "$srv" 2>/dev/null
rc=124
for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || { wait "$srv"; rc=$?; break; }; sleep 0.1; done
srv=""
if [ $rc = 0 ]; then ok "SIGINT: exit 0"; else bad "SIGINT: exit $rc" "$tmp/srv.err"; fi
finish
