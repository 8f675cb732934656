#!/usr/bin/env bash
# run.sh BINDIR LABEL [BACKEND...] — run every test program in BINDIR once
# per backend, each in its own process under a timeout. Appends
# "passed failed" to $WEFT_TEST_TALLY when set. Exit 1 on any failure.
#
# WEFT_TEST_FILTER: a grep -E pattern of test names to run (default all).
# WEFT_TEST_RUNNER: a command prefix (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu").
# WEFT_TEST_TIMEOUT: seconds per test (default 120).
set -u
bindir=$1; label=$2; shift 2
backends=("$@"); [ ${#backends[@]} -eq 0 ] && backends=(io_uring epoll poll)
filter=${WEFT_TEST_FILTER:-.}
runner=${WEFT_TEST_RUNNER:-}
tmo=${WEFT_TEST_TIMEOUT:-120}
pass=0; fail=0; failed=()
logdir=${WEFT_TEST_LOGS:-$bindir/logs}; mkdir -p "$logdir"
for t in "$bindir"/t_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  echo "$name" | grep -Eq "$filter" || continue
  for b in "${backends[@]}"; do
    log="$logdir/$name.$b.log"
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    WEFT_BACKEND=$b timeout -k 5 "$tmo" $runner "$t" >"$log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 )); secs=$((ms/1000)).$(printf '%03d' $((ms%1000)))
    if [ $rc -eq 0 ]; then
      pass=$((pass+1)); printf '  ok    %-24s %-8s %-10s %6ss\n' "$name" "$b" "$label" "$secs"
    else
      fail=$((fail+1)); failed+=("$name/$b")
      printf '  FAIL  %-24s %-8s %-10s rc=%s (log: %s)\n' "$name" "$b" "$label" "$rc" "$log"
      tail -n 20 "$log" | sed 's/^/        | /'
    fi
  done
done
[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[$label] $pass passed, $fail failed${failed:+: ${failed[*]}}"
[ $fail -eq 0 ]
