#!/usr/bin/env bash
# fault.sh — the fault-injection tests (test/fault/, src/reactor/fault.h): the
# library built with -DWEFT_FAULT under clang ASan+UBSan, each test run on
# every backend by test/c/run.sh. A test makes each allocation and each
# descriptor/mapping/thread creation its workloads reach fail once, and
# checks that the error came back and nothing was left half-linked.
set -u
cd "$(dirname "$0")/../.."
bdir=build/fault
tally=${WEFT_TEST_TALLY:-}
if ! make -s -j"${WEFT_JOBS:-2}" lib BUILD=$bdir CC=clang SAN=address,undefined CFLAGS=-DWEFT_FAULT \
     >/tmp/weft-fault-build.$$ 2>&1 ||
   ! make -s BUILD=build tests >>/tmp/weft-fault-build.$$ 2>&1; then
  cat /tmp/weft-fault-build.$$; rm -f /tmp/weft-fault-build.$$
  echo "[fault] 0 passed, 1 failed: build"; [ -n "$tally" ] && echo "0 1" >> "$tally"; exit 1
fi
rm -f /tmp/weft-fault-build.$$
mkdir -p $bdir/tests
status=0
for src in test/fault/t_*.c; do
  bin=$bdir/tests/$(basename "$src" .c)
  if ! clang -std=gnu11 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -DWEFT_FAULT \
       -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
       -Iinclude -Isrc/reactor "$src" -o "$bin" $bdir/libweft.a -lpthread -lm \
       $(grep -q '^HAVE_URING := 1' $bdir/config.mk && echo -luring) 2>/tmp/weft-fault-cc.$$; then
    cat /tmp/weft-fault-cc.$$; echo "[fault] build of $src FAILED"; [ -n "$tally" ] && echo "0 1" >> "$tally"; status=1
  fi
  rm -f /tmp/weft-fault-cc.$$
done
# The backend tools come from the plain build (run.sh needs them beside the tests).
ln -sf "$PWD/build/tests/tool_backend" "$PWD/build/tests/tool_deny_uring" $bdir/tests/
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 WEFT_TEST_TIMEOUT=${WEFT_FAULT_TIMEOUT:-900} \
  bash test/c/run.sh $bdir/tests fault || status=1
exit $status
