# tally.sh — the counting every scripts/test.d/*.sh suite does; source it
# from the repository root after setting $suite (the name it reports):
#   ok NAME          one check passed
#   bad NAME [LOG]   one check failed; LOG's last lines are shown, indented
#                    ($tally_lines of them, 20; lines matching the grep -E
#                    pattern $tally_skip are left out)
#   finish           append "passed failed" to $WEFT_TEST_TALLY, print
#                    "[suite] N passed, N failed" and exit, 0 only without
#                    a failure
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() {
  fail=$((fail+1)); echo "  FAIL  $1"
  [ -n "${2:-}" ] || return 0
  if [ -n "${tally_skip:-}" ]; then grep -Ev "$tally_skip" "$2"; else cat "$2"; fi |
    sed 's/^/        | /' | tail -n "${tally_lines:-20}"
  return 0
}
finish() {
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
  echo "[$suite] $pass passed, $fail failed"
  [ "$fail" -eq 0 ]; exit
}
