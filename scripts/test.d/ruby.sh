#!/usr/bin/env bash
# ruby.sh — the Ruby extension's minitest suite (test/ruby) on every
# backend: epoll, poll, and io_uring when the kernel allows it.
# WEFT_RUBY=/path/to/ruby runs it on another Ruby (the extension is then
# built for that Ruby under build/ruby-<version>/).
# Prints minitest's summary per backend and "[ruby] N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
ruby=${WEFT_RUBY:-ruby}
label=ruby
if ! command -v "$ruby" >/dev/null; then
  echo "[ruby] 0 passed, 1 failed: $ruby not found"
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "0 1" >> "$WEFT_TEST_TALLY"
  exit 1
fi
ver=$("$ruby" -e 'print RUBY_VERSION')
[ -n "${WEFT_RUBY:-}" ] && label="ruby-$ver"
# The extension: lib/ for the default Ruby, build/ruby-<version>/lib for another.
if ! extdir=$(bash scripts/ruby-ext.sh ${WEFT_RUBY:+"$ruby"}); then
  echo "[$label] 0 passed, 1 failed: extension build"
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "0 1" >> "$WEFT_TEST_TALLY"; exit 1
fi
backends=(epoll poll)
if [ "$(WEFT_BACKEND=io_uring "$ruby" -I "$extdir" -I lib -r weft -e 'print Weft::Scheduler.new.backend' 2>/dev/null)" = io_uring ]; then
  backends+=(io_uring)
else
  echo "  (io_uring unavailable here: not run)"
fi
pass=0; fail=0; failed=()
logdir=build/ruby-logs; mkdir -p "$logdir"
# One process per test file and backend. A test that hangs fails by name
# (the watchdog in test/ruby/helper.rb raises in it); one that does not
# unwind ends its process, and the file's other tests run in a new one
# without the tests already run.
run_file() { # BACKEND FILE -> adds to pass/fail, names failures
  local b=$1 f=$2 base log exclude="" round=0 rc summary runs nf skips ok done_re hung
  base=$(basename "$f" .rb)
  log=$logdir/$label.$b.$base.log; : >"$log"
  while :; do
    round=$((round + 1))
    local part=$log.$round
    WEFT_BACKEND=$b timeout -k 5 "${WEFT_RUBY_TIMEOUT:-600}" "$ruby" -I "$extdir" -I lib -I test/ruby \
      "$f" -v ${exclude:+-e "$exclude"} >"$part" 2>&1
    rc=$?
    cat "$part" >>"$log"
    summary=$(grep -E '^[0-9]+ runs, ' "$part" | tail -n 1)
    # Tests that failed, by name (minitest's "Failure:"/"Error:" blocks).
    while read -r t; do
      [ -n "$t" ] && echo "  FAILED  $label $b $t   (log: $log)" && failed+=("$b:$t")
    done < <(grep -A1 -E '^ *[0-9]+\) (Failure|Error):$' "$part" | grep -oE '^[A-Za-z0-9_:]+#[A-Za-z0-9_?!]+' | sort -u)
    if [ -n "$summary" ]; then
      runs=$(echo "$summary" | sed -nE 's/^([0-9]+) runs.*/\1/p')
      nf=$(echo "$summary" | sed -nE 's/.* ([0-9]+) failures, ([0-9]+) errors.*/\1 \2/p' | awk '{print $1 + $2}')
      skips=$(echo "$summary" | sed -nE 's/.* ([0-9]+) skips.*/\1/p')
      ok=$((runs - nf - ${skips:-0}))
      pass=$((pass + ok)); fail=$((fail + nf))
      if [ $rc -ne 0 ] && [ "$nf" -eq 0 ]; then
        echo "  FAILED  $label $b $base: exit $rc after its tests   (log: $log)"
        tail -n 15 "$part" | sed 's/^/        | /'
        fail=$((fail + 1)); failed+=("$b:$base")
      fi
      return
    fi
    # No summary: the process died in a test. Count the tests that ended
    # and the one that did not, then run the rest.
    mapfile -t finished < <(grep -oE '^[A-Za-z0-9_:]+#[A-Za-z0-9_?!]+ = [0-9.]+ s = [.FES]' "$part")
    for t in "${finished[@]}"; do
      case "${t##* }" in
        .) pass=$((pass + 1)) ;;
        S) ;;
        *) fail=$((fail + 1)) ;;
      esac
    done
    hung=$(sed -nE 's/^weft watchdog: ([^ ]+) (still running|did not unwind).*/\1/p' "$part" | tail -n 1)
    if [ -z "$hung" ]; then
      # Died without the watchdog (a crash, the outer timeout): the test
      # minitest had started is the one after the last that finished.
      echo "  FAILED  $label $b $base: exit $rc with no summary   (log: $log)"
      tail -n 20 "$part" | sed 's/^/        | /'
      fail=$((fail + 1)); failed+=("$b:$base")
      return
    fi
    echo "  FAILED  $label $b $hung: hung, process ended   (log: $log)"
    fail=$((fail + 1)); failed+=("$b:$hung")
    done_re=$(printf '%s\n' "${finished[@]%% = *}" "$hung" "${exclude_names[@]}" | sort -u | grep -v '^$' |
              sed 's/[][\.*^$?+(){}|/]/\\&/g' | paste -sd '|')
    exclude_names+=("${finished[@]%% = *}" "$hung")
    exclude="/\\A(?:$done_re)\\z/"
    [ $round -lt 20 ] || return
  done
}
for b in "${backends[@]}"; do
  p0=$pass; f0=$fail
  for f in test/ruby/test_*.rb; do
    exclude_names=()
    run_file "$b" "$f"
  done
  printf '  %-9s %-8s %d passed, %d failed\n' "$label" "$b" $((pass - p0)) $((fail - f0))
done
[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[$label] $pass passed, $fail failed${failed[*]:+: ${failed[*]}}"
status=0; [ $fail -eq 0 ] || status=1
# The newer Rubies too (3.3, 3.4), when scripts/build-ruby-latest.sh has
# cached them (building one takes about ten minutes of two cores, so `make
# test` does not; CI and `make test-ruby-latest` do, once).
if [ -z "${WEFT_RUBY:-}" ]; then
  latest=$(bash scripts/build-ruby-latest.sh --print-rubies)
  for r in $latest; do
    WEFT_RUBY=$r bash "$0" || status=1
  done
  [ -n "$latest" ] || echo "  (no newer Ruby built: \`make test-ruby-latest\` builds 3.3 and 3.4 once)"
fi
exit $status
