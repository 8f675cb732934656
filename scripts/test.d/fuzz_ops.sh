#!/usr/bin/env bash
# fuzz_ops.sh — the op-sequence fuzzer (fuzz/ops_fuzz.c, issue 18): a
# libFuzzer target (clang, ASan + UBSan) that runs its input as a program
# of weft calls across a few fibers and checks weft's promises while and
# after it runs.
#   1. the seed corpus (fuzz/corpus/ops) replayed on every backend: epoll,
#      poll and io_uring where the kernel allows it;
#   2. fuzzing on one backend (io_uring here, else epoll): 15,000 programs
#      (about a minute) mutated from a fixed seed, so that every run of the
#      suite tries the same programs and a failure here is one a rerun
#      shows again, not a find of the day. WEFT_FUZZ_RUNS and
#      WEFT_FUZZ_SEED change them; WEFT_FUZZ_SECS=N fuzzes N seconds from
#      a random seed instead (exploring: fuzz/README.md has longer runs);
#      WEFT_FUZZ_BACKEND picks the backend. New inputs go to a scratch
#      directory, not the repository.
# A failing input is kept as build/fuzz/ops-crash-* and printed as base64
# with the oracle's message; replay it with `build/fuzz/ops_fuzz FILE`.
# Prints "[fuzz_ops] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
suite=fuzz_ops; tally_skip='^#|NEW_FUNC|Uses:'; tally_lines=40; . scripts/tally.sh
tmp=$(mktemp -d /tmp/weft-fuzz-ops.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${WEFT_FUZZ_SECS:-}" ]; then
  budget=(-max_total_time="$WEFT_FUZZ_SECS"); what="${WEFT_FUZZ_SECS} s"
else
  budget=(-runs="${WEFT_FUZZ_RUNS:-15000}" -seed="${WEFT_FUZZ_SEED:-1}"); what="seed ${WEFT_FUZZ_SEED:-1}"
fi
bin=build/fuzz/ops_fuzz

# Build: the fuzzer with the library's sources, as the Ruby extension is
# built (io_uring when liburing links).
mkdir -p build/fuzz
uring=-DWEFT_NO_URING
printf '#include <liburing.h>\nint main(void){struct io_uring r;return io_uring_queue_init(1,&r,0);}\n' |
  clang -x c - -o /dev/null -luring >/dev/null 2>&1 && uring=-luring
case "$(uname -m)" in
  x86_64) ctx=src/arch/ctx_x86_64.S ;;
  aarch64) ctx=src/arch/ctx_aarch64.S ;;
  *) ctx=""; uring="$uring -DWEFT_CTX_UCONTEXT=1" ;;
esac
# shellcheck disable=SC2086
if ! clang -std=gnu11 -g -O1 -Wall -Wextra -Werror -Wshadow -D_GNU_SOURCE \
     -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
     -Iinclude $(make -s print-INC_ALL) -Itest/c fuzz/ops_fuzz.c $(make -s print-LIB_SRC) $ctx \
     -o "$bin" -lpthread -lm $uring >"$tmp/build.log" 2>&1; then
  bad "ops_fuzz: build (clang with libclang-rt-14-dev needed)" "$tmp/build.log"
  finish
fi

backends=(epoll poll)
if [ -x build/tests/tool_backend ] || make -s build/tests/tool_backend >/dev/null 2>&1; then
  [ "$(WEFT_BACKEND=io_uring build/tests/tool_backend 2>/dev/null)" = io_uring ] && backends=(io_uring "${backends[@]}")
fi

# Failing inputs are written to $tmp/<backend>-crash-* and kept in build/fuzz.
keep() { for f in "$tmp/$1"-crash-* "$tmp/$1"-timeout-* "$tmp/$1"-leak-*; do
           [ -e "$f" ] && cp "$f" "build/fuzz/ops-$(basename "$f")"; done; }

# 1. The corpus on every backend.
nseeds=$(ls fuzz/corpus/ops | wc -l)
for b in "${backends[@]}"; do
  if WEFT_BACKEND=$b "$bin" -runs=0 -timeout=30 -artifact_prefix="$tmp/$b-" \
       fuzz/corpus/ops >"$tmp/seeds.$b.log" 2>&1; then
    ok "ops_fuzz [$b]: the $nseeds corpus programs run clean"
  else
    fuzz_summary "$tmp/seeds.$b.log" "$tmp/$b"-* >"$tmp/summary"
    bad "ops_fuzz [$b]: a corpus program fails (kept in build/fuzz/)" "$tmp/summary"
    keep "$b"
  fi
done

# 2. Fuzzing on one backend.
fb=${WEFT_FUZZ_BACKEND:-${backends[0]}}
mkdir -p "$tmp/corpus"
if WEFT_BACKEND=$fb "$bin" "${budget[@]}" -timeout=30 -max_len=1024 \
     -rss_limit_mb=2048 -artifact_prefix="$tmp/$fb-" -print_final_stats=1 \
     "$tmp/corpus" fuzz/corpus/ops >"$tmp/fuzz.log" 2>&1; then
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/fuzz.log")
  cov=$(grep -o 'cov: [0-9]*' "$tmp/fuzz.log" | tail -n 1)
  ok "ops_fuzz [$fb]: ${what}, ${runs:-?} programs, ${cov:-cov: ?} edges, no failure"
else
  fuzz_summary "$tmp/fuzz.log" "$tmp/$fb"-* >"$tmp/summary"
  bad "ops_fuzz [$fb]: a program failed (input kept in build/fuzz/)" "$tmp/summary"
  keep "$fb"
fi
finish
