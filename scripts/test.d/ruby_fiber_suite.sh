#!/usr/bin/env bash
# ruby_fiber_suite.sh [RUBY...] — runs Ruby's own test/fiber suite (from
# Debian's Ruby source packages, fetched by scripts/fetch-ruby-fiber-suite.sh) against
# Weft::Scheduler, through the adapter in test/ruby/fiber_suite/, on every
# backend: epoll, poll, and io_uring when the kernel allows it.
#
# RUBY...: Ruby executables (default: `ruby`, i.e. Debian's 3.1, and the
# Ruby 3.3 of scripts/build-ruby-latest.sh when it has been built).
# Each test file runs in its own process under a timeout, so a hang or a
# crash costs one file, not the run.
#
# Environment:
#   WEFT_FIBER_SUITE_TIMEOUT    seconds per test file (default 300)
#   WEFT_FIBER_SUITE_BACKENDS   backends to run (default: all available)
#   WEFT_FIBER_SUITE_FILES      test files to run, e.g. "test_io test_mutex"
#   WEFT_FIBER_SUITE_TESTOPTS   extra options for Ruby's test runner
#                               (e.g. "-n test_read")
#   WEFT_FIBER_SUITE_SCHEDULER=reference  run the suite's own scheduler
#                               instead of weft's, once per Ruby (a baseline)
# Prints one line per (ruby, backend) and the failing tests, appends
# "passed failed" to $WEFT_TEST_TALLY, ends with
# "[ruby-fiber-suite] N passed, N failed". Logs: build/ruby-logs/fiber-suite/.
#
# `make test` runs it (scripts/test.sh runs every scripts/test.d/*.sh); by
# hand: bash scripts/test.d/ruby_fiber_suite.sh [RUBY...].
set -u
cd "$(dirname "$0")/../.."
root=$PWD
tmo=${WEFT_FIBER_SUITE_TIMEOUT:-300}
mode=${WEFT_FIBER_SUITE_SCHEDULER:-weft}
excludes=$root/test/ruby/fiber_suite/excludes
logroot=$root/build/ruby-logs/fiber-suite
mkdir -p "$logroot"
tally() { [ -n "${WEFT_TEST_TALLY:-}" ] && echo "$1 $2" >> "$WEFT_TEST_TALLY"; return 0; }

if [ $# -gt 0 ]; then
  rubies=("$@")
else
  rubies=(ruby)
  mapfile -t -O 1 rubies < <(bash scripts/build-ruby-latest.sh --print-rubies)
  [ ${#rubies[@]} -gt 1 ] || echo "  (no newer Ruby built: \`make test-ruby-latest\` builds 3.3 and 3.4 once; their suites not run)"
fi

# The tests excluded (tool/lib's -X format), with their reasons, once.
# The reference scheduler runs them all.
xopt=""
if [ "$mode" != reference ] && compgen -G "$excludes/*.rb" >/dev/null; then
  xopt="-X $excludes"
  echo "  excluded (reads the reference scheduler's private state):"
  for f in "$excludes"/*.rb; do
    sed -nE "s/^[[:space:]]*exclude\(:([a-z0-9_]+), *\"(.*)\"\).*/    $(basename "$f" .rb)#\1: \2/p" "$f"
  done
fi

total_pass=0; total_fail=0; status=0
for ruby in "${rubies[@]}"; do
  if ! command -v "$ruby" >/dev/null; then
    echo "[ruby-fiber-suite] $ruby not found: FAILED"; tally 0 1; total_fail=$((total_fail + 1)); status=1; continue
  fi
  ver=$("$ruby" -e 'print RUBY_VERSION')
  label=ruby-$ver
  # The extension for this Ruby (shared with scripts/test.d/ruby.sh).
  if [ "$ruby" = ruby ]; then extdir=$(bash scripts/ruby-ext.sh); else extdir=$(bash scripts/ruby-ext.sh "$ruby"); fi
  if [ $? -ne 0 ] || [ -z "$extdir" ]; then
    echo "[$label] fiber suite: extension build FAILED"; tally 0 1; total_fail=$((total_fail + 1)); status=1; continue
  fi
  extdir=$root/$extdir
  errs=$logroot/$label.fetch.log
  suite=$(bash scripts/fetch-ruby-fiber-suite.sh "$ruby" 2>"$errs"); rc=$?
  sed 's/^/  /' "$errs"
  if [ $rc -ne 0 ] || [ -z "$suite" ]; then
    echo "[$label] *** fiber suite NOT RUN: its source could not be obtained (see above); counted as a failure ***"
    tally 0 1; total_fail=$((total_fail + 1)); status=1; continue
  fi

  # A suite older than its interpreter: the tests whose expected output
  # changed between the two versions are left out (listed with reasons).
  vxopt=$xopt
  older=$root/test/ruby/fiber_suite/excludes-older-suite
  if [ "$mode" != reference ] && [ "$(basename "$suite")" != "$ver" ] && compgen -G "$older/*.rb" >/dev/null; then
    vxopt="$xopt -X $older"
    echo "  suite $(basename "$suite") on Ruby $ver: also excluded (expected output changed between the versions):"
    for f in "$older"/*.rb; do
      sed -nE "s/^[[:space:]]*exclude\(:([a-z0-9_]+), *\"(.*)\"\).*/    $(basename "$f" .rb)#\1: \2/p" "$f"
    done
  fi

  # Tests of one version's suite that call the reference scheduler's own
  # methods (excludes-<major.minor>/, with reasons).
  mine=$root/test/ruby/fiber_suite/excludes-${ver%.*}
  if [ "$mode" != reference ] && compgen -G "$mine/*.rb" >/dev/null; then
    vxopt="$vxopt -X $mine"
    echo "  suite of Ruby ${ver%.*}: also excluded (calls the reference scheduler's own methods):"
    for f in "$mine"/*.rb; do
      sed -nE "s/^[[:space:]]*exclude\(:([a-z0-9_]+), *\"(.*)\"\).*/    $(basename "$f" .rb)#\1: \2/p" "$f"
    done
  fi

  if [ "$mode" = reference ]; then
    backends=(reference)
  elif [ -n "${WEFT_FIBER_SUITE_BACKENDS:-}" ]; then
    read -r -a backends <<< "$WEFT_FIBER_SUITE_BACKENDS"
  else
    backends=(epoll poll)
    if [ "$(WEFT_BACKEND=io_uring "$ruby" -I "$extdir" -I lib -r weft -e 'print Weft::Scheduler.new.backend' 2>/dev/null)" = io_uring ]; then
      backends+=(io_uring)
    else
      echo "  (io_uring unavailable here: not run)"
    fi
  fi

  files=()
  if [ -n "${WEFT_FIBER_SUITE_FILES:-}" ]; then
    for f in $WEFT_FIBER_SUITE_FILES; do files+=("$suite/test/fiber/${f%.rb}.rb"); done
  else
    files=("$suite"/test/fiber/test_*.rb)
  fi

  for b in "${backends[@]}"; do
    logdir=$logroot/$label.$b; rm -rf "$logdir"; mkdir -p "$logdir"
    pass=0; fail=0; skip=0; tests=0; bad=()
    for f in "${files[@]}"; do
      name=$(basename "$f" .rb)
      log=$logdir/$name.log
      if [ ! -f "$f" ]; then
        echo "no such test file: $f" > "$log"; fail=$((fail + 1)); bad+=("$name: no such file"); continue
      fi
      # RUBYOPT: child processes of assert_in_out_err / assert_separately
      # (which `require 'scheduler'`) find weft too. The suite's own runner,
      # cwd the suite's root.
      # shellcheck disable=SC2086
      { ( cd "$suite" && WEFT_BACKEND=$([ "$b" = reference ] && echo "${WEFT_BACKEND:-}" || echo "$b") \
          WEFT_FIBER_SUITE_SCHEDULER=$mode \
          RUBYOPT="-I$extdir -I$root/lib${RUBYOPT:+ $RUBYOPT}" \
          timeout -k 10 "$tmo" "$ruby" tool/test/runner.rb -v --show-skip $vxopt \
            ${WEFT_FIBER_SUITE_TESTOPTS:-} "$f" ) >"$log" 2>&1 </dev/null; } 2>>"$log"
      rc=$?
      summary=$(grep -E '^[0-9]+ tests, [0-9]+ assertions, ' "$log" | tail -n 1)
      if [ -n "$summary" ]; then
        read -r nt _ _ _ nf _ ne _ ns _ <<< "$(echo "$summary" | tr -d ',')"
        tests=$((tests + nt)); skip=$((skip + ns))
        pass=$((pass + nt - nf - ne - ns)); fail=$((fail + nf + ne))
        # "  1) Failure:" / "  2) Error:" then "Class#test [file:line]:" or
        # "Class#test:" and, for errors, the exception and the first frame
        # in the suite; "Skipped:" entries too (--show-skip).
        while IFS= read -r line; do bad+=("$line"); done < <(awk '
          /^ *[0-9]+\) (Failure|Error|Skipped):$/ { kind = $2; getline; t = $0
            sub(/:$/, "", t); gsub(/\[[^]]*\/test\/fiber\//, "[", t)
            if (kind == "Skipped:") { getline; print "(skipped) " t ": " $0; next }
            if (kind == "Error:") { getline; msg = $0; where = ""
              while ((getline l) > 0 && l ~ /^    /) if (where == "" && l ~ /test\/fiber\/test_/) { where = l; sub(/^ */, "", where); sub(/^.*\/test\/fiber\//, "", where) }
              print t (where != "" ? " [" where "]" : "") ": " msg } else { getline; print t ": " $0 } }' "$log")
        [ $rc -ne 0 ] && [ $((nf + ne)) -eq 0 ] && { fail=$((fail + 1)); bad+=("$name: exit status $rc with no failure reported"); }
      else
        fail=$((fail + 1))
        done_n=$(grep -cE '^\[ *[0-9]+/[0-9]+\] .* = [0-9.]+ s' "$log")
        pass=$((pass + done_n)); tests=$((tests + done_n + 1))
        last=$(grep -oE '^\[ *[0-9]+/[0-9]+\] [A-Za-z0-9_:]+#[A-Za-z0-9_?!]+' "$log" | tail -n 1 | sed 's/^.*\] //')
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
          bad+=("$name: TIMEOUT after ${tmo}s in ${last:-?} (the rest of the file not run)")
        else
          why=$(grep -m1 -oE '\[BUG\].*' "$log" || grep -m1 -E 'Error|error|Abort|Segmentation' "$log")
          bad+=("$name: died (exit $rc) in ${last:-?}: $(echo "$why" | cut -c1-160)")
        fi
      fi
    done
    total_pass=$((total_pass + pass)); total_fail=$((total_fail + fail))
    tally "$pass" "$fail"
    printf '  %-12s %-9s %3d tests: %3d passed, %3d failed, %d skipped%s\n' "$label" "$b" "$tests" "$pass" "$fail" "$skip" \
      "$([ $fail -ne 0 ] && echo "  (logs: ${logdir#"$root"/})")"
    for x in "${bad[@]}"; do echo "        | $x"; done
    [ $fail -eq 0 ] || status=1
  done
done
echo "[ruby-fiber-suite] $total_pass passed, $total_fail failed"
exit $status
