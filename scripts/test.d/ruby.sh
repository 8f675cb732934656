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
for b in "${backends[@]}"; do
  log=$logdir/$label.$b.log
  WEFT_BACKEND=$b timeout -k 5 "${WEFT_RUBY_TIMEOUT:-600}" "$ruby" -I "$extdir" -I lib -I test/ruby \
    -e 'Dir["test/ruby/test_*.rb"].sort.each { |f| require File.expand_path(f) }' -- -v >"$log" 2>&1
  rc=$?
  summary=$(grep -E '^[0-9]+ runs, ' "$log" | tail -n 1)
  runs=$(echo "$summary" | sed -nE 's/^([0-9]+) runs.*/\1/p'); runs=${runs:-0}
  bad=$(echo "$summary" | sed -nE 's/.* ([0-9]+) failures, ([0-9]+) errors.*/\1 \2/p')
  nf=0; for x in $bad; do nf=$((nf + x)); done
  skips=$(echo "$summary" | sed -nE 's/.* ([0-9]+) skips.*/\1/p'); skips=${skips:-0}
  ok=$((runs - nf - skips))
  if [ $rc -ne 0 ] && [ $nf -eq 0 ]; then nf=1; fi
  pass=$((pass + ok)); fail=$((fail + nf))
  printf '  %-9s %-8s %s%s\n' "$label" "$b" "${summary:-no summary (rc=$rc)}" "$([ $rc -ne 0 ] && echo "  (log: $log)")"
  if [ $rc -ne 0 ]; then
    failed+=("$b")
    grep -E -A12 '(Failure|Error):$' "$log" | head -n 60 | sed 's/^/        | /'
    [ -z "$summary" ] && tail -n 20 "$log" | sed 's/^/        | /'
  fi
done
[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[$label] $pass passed, $fail failed${failed:+: ${failed[*]}}"
status=0; [ $fail -eq 0 ] || status=1
# The newer Ruby too, when scripts/build-ruby-latest.sh has cached it
# (building it takes about ten minutes of two cores, so `make test` does
# not do it; `make test-ruby-latest` does, once).
if [ -z "${WEFT_RUBY:-}" ]; then
  latest=$(bash scripts/build-ruby-latest.sh --print-ruby)
  if [ -x "$latest" ]; then
    WEFT_RUBY=$latest bash "$0" || status=1
  else
    echo "  (Ruby 3.3 not built: \`make test-ruby-latest\` builds it once into $(dirname "$(dirname "$(dirname "$latest")")"))"
  fi
fi
exit $status
