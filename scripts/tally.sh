# tally.sh — the counting every scripts/test.d/*.sh suite does; source it
# from the repository root after setting $suite (the name it reports):
#   ok NAME          one check passed
#   bad NAME [LOG]   one check failed; LOG's last lines are shown, indented
#                    ($tally_lines of them, 20; lines matching the grep -E
#                    pattern $tally_skip are left out)
#   fuzz_summary LOG INPUT...
#                    what a failed libFuzzer run needs to be replayed, short
#                    enough to survive a truncated CI log: the failure's
#                    own lines (an oracle's message, a sanitizer's ERROR),
#                    each kept INPUT as base64, then LOG's last lines
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
fuzz_summary() {
  local log=$1 f; shift
  grep -E "^[a-z_]+: [^ ]+:[0-9]+: |ERROR: |runtime error|SUMMARY: " "$log" | head -n 6
  for f in "$@"; do
    [ -e "$f" ] && echo "input $(basename "$f"), as base64: $(base64 -w0 "$f")"
  done
  echo "--- the log's last lines:"
  grep -Ev '^#|NEW_FUNC|Uses:|^ +#[0-9]+ 0x' "$log" | tail -n 20
}
finish() {
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
  echo "[$suite] $pass passed, $fail failed"
  [ "$fail" -eq 0 ]; exit
}
