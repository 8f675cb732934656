#!/usr/bin/env bash
# pg.sh — database tests (test/c/t_pg*.c, built into BUILD/tests-pg/)
# against a real PostgreSQL that this script starts (scripts/pg.sh: a
# throw-away cluster on loopback) and stops: the gcc build and, when
# scripts/test.sh has built it, the clang ASan+UBSan build, on every
# backend. Then the Ruby pool tests that need the server
# (test/ruby/test_pool_pg*.rb) when the Ruby extension is built.
# If the server truly cannot be started this says so loudly and counts
# nothing (0 passed, 0 failed).
set -u
cd "$(dirname "$0")/../.."
tally=${WEFT_TEST_TALLY:-}
count() { [ -n "$tally" ] && echo "$1 $2" >> "$tally"; return 0; }

if ! make -s -j"${WEFT_JOBS:-2}" tests BUILD=build >/tmp/weft-pg-build.$$ 2>&1; then
  cat /tmp/weft-pg-build.$$; rm -f /tmp/weft-pg-build.$$
  echo "[pg] 0 passed, 1 failed: build"; count 0 1; exit 1
fi
rm -f /tmp/weft-pg-build.$$
if ! ls build/tests-pg/t_pg* >/dev/null 2>&1; then
  echo "[pg] 0 passed, 1 failed: no database tests built (libpq missing? apt-get install libpq-dev)"
  count 0 1; exit 1
fi

# Everything below runs with the server up (scripts/pg.sh stops it on exit).
inner() {
  local status=0 sub
  sub=$(mktemp); export WEFT_TEST_TALLY=$sub
  for cfg in "build gcc" "build/asan pg-asan"; do
    set -- $cfg
    ls "$1"/tests-pg/t_pg* >/dev/null 2>&1 && [ -x "$1/tests/tool_backend" ] || continue
    bin=$(mktemp -d)
    ln -s "$PWD/$1"/tests/tool_backend "$PWD/$1"/tests/tool_deny_uring "$PWD/$1"/tests-pg/t_pg* "$bin"/
    WEFT_TEST_LOGS=$PWD/$1/tests-pg/logs ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
      bash test/c/run.sh "$bin" "pg-$2" || status=1
    rm -rf "$bin"
  done
  if ls test/ruby/test_pool_pg*.rb >/dev/null 2>&1 && [ -f lib/weft/weft.so ]; then
    for f in test/ruby/test_pool_pg*.rb; do
      log=build/ruby-logs/$(basename "$f" .rb).log; mkdir -p build/ruby-logs
      for b in epoll io_uring; do
        WEFT_BACKEND=$b timeout -k 5 300 ruby -I lib -I test/ruby "$f" >"$log.$b" 2>&1
        rc=$?
        summary=$(grep -E '^[0-9]+ runs, ' "$log.$b" | tail -n 1)
        runs=$(echo "$summary" | sed -nE 's/^([0-9]+) runs.*/\1/p'); runs=${runs:-0}
        bad=$(echo "$summary" | sed -nE 's/.* ([0-9]+) failures, ([0-9]+) errors.*/\1 \2/p')
        nf=0; for x in $bad; do nf=$((nf + x)); done
        [ $rc -ne 0 ] && [ $nf -eq 0 ] && nf=1
        printf '  %-24s %-12s %s\n' "$(basename "$f")" "$b" "${summary:-no summary (rc=$rc, log: $log.$b)}"
        [ $rc -ne 0 ] && { status=1; tail -n 25 "$log.$b" | sed 's/^/        | /'; }
        echo "$((runs - nf)) $nf" >> "$sub"
      done
    done
  fi
  p=0 f=0
  while read -r a b; do p=$((p+a)); f=$((f+b)); done < "$sub"
  rm -f "$sub"
  echo "$p $f" > "$PG_RESULT"
  return $status
}
export -f inner
export PG_RESULT; PG_RESULT=$(mktemp)
bash scripts/pg.sh run bash -c inner
rc=$?
if [ $rc -eq 3 ]; then
  echo
  echo "**************************************************************"
  echo "*** [pg] SKIPPED: PostgreSQL could not be started (see above)."
  echo "*** The database tests did NOT run."
  echo "**************************************************************"
  echo "[pg] 0 passed, 0 failed (SKIPPED)"
  rm -f "$PG_RESULT"; count 0 0; exit 0
fi
read -r p f < "$PG_RESULT" 2>/dev/null || { p=0; f=1; }
rm -f "$PG_RESULT"
[ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
count "$p" "$f"
echo "[pg] $p passed, $f failed"
[ "$f" = 0 ]
