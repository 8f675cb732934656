#!/usr/bin/env bash
# run.sh BINDIR LABEL [BACKEND...] — run every test program in BINDIR once
# per backend, each in its own process under a timeout. Appends
# "passed failed" to $WEFT_TEST_TALLY when set. Exit 1 on any failure.
#
# Backends: io_uring, epoll, poll, and uring-denied (io_uring_setup refused
# by a seccomp filter: every test must pass on the epoll fallback). Default:
# all four. Each run checks it really ran on the backend it is named for;
# where io_uring is unavailable on this machine its runs are reported as
# SKIPPED, loudly.
#
# WEFT_TEST_FILTER: a grep -E pattern of test names to run (default all).
# WEFT_TEST_RUNNER: a command prefix (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu").
# WEFT_TEST_TIMEOUT: seconds per test (default 120).
set -u
bindir=$1; label=$2; shift 2
backends=("$@"); [ ${#backends[@]} -eq 0 ] && backends=(io_uring epoll poll uring-denied)
filter=${WEFT_TEST_FILTER:-.}
runner=${WEFT_TEST_RUNNER:-}
tmo=${WEFT_TEST_TIMEOUT:-120}
pass=0; fail=0; skip=0; failed=()
logdir=${WEFT_TEST_LOGS:-$bindir/logs}; mkdir -p "$logdir"

have_uring=0
if [ -x "$bindir/tool_backend" ]; then
  # shellcheck disable=SC2086
  [ "$(WEFT_BACKEND=io_uring $runner "$bindir/tool_backend" 2>/dev/null)" = io_uring ] && have_uring=1
fi

for t in "$bindir"/t_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  echo "$name" | grep -Eq "$filter" || continue
  for b in "${backends[@]}"; do
    prefix=$runner; env_backend=$b; expect=$b
    case "$b" in
      io_uring)
        if [ $have_uring = 0 ]; then
          skip=$((skip+1)); printf '  SKIP  %-24s %-12s %-10s io_uring unavailable here\n' "$name" "$b" "$label"; continue
        fi ;;
      uring-denied)
        env_backend=io_uring; expect=epoll
        prefix="$runner $bindir/tool_deny_uring" ;;
    esac
    log="$logdir/$name.$b.log"
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    WEFT_BACKEND=$env_backend WEFT_EXPECT_BACKEND=$expect timeout -k 5 "$tmo" $prefix "$t" >"$log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 )); secs=$((ms/1000)).$(printf '%03d' $((ms%1000)))
    if [ $rc -eq 0 ]; then
      pass=$((pass+1)); printf '  ok    %-24s %-12s %-10s %6ss\n' "$name" "$b" "$label" "$secs"
    else
      fail=$((fail+1)); failed+=("$name/$b")
      printf '  FAIL  %-24s %-12s %-10s rc=%s (log: %s)\n' "$name" "$b" "$label" "$rc" "$log"
      tail -n 20 "$log" | sed 's/^/        | /'
    fi
  done
done
[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[$label] $pass passed, $fail failed${skip:+, $skip skipped}${failed:+: ${failed[*]}}"
[ $fail -eq 0 ]
