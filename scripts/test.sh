#!/usr/bin/env bash
# test.sh — every configuration of the test suite; `make test` runs this.
# Prints one summary line at the end: "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
tally=$(mktemp); export WEFT_TEST_TALLY=$tally
status=0
step() { echo; echo "== $*"; }
# build ARGS...: make, and count a failed build as a failed test.
build() {
  if ! make -s -j"$jobs" "$@" >/tmp/weft-build.$$ 2>&1; then
    cat /tmp/weft-build.$$; echo "BUILD FAILED: make $*"
    echo "0 1" >> "$tally"; status=1
  fi
  rm -f /tmp/weft-build.$$
}
jobs=${WEFT_JOBS:-2}

step "gcc build, all backends"
build all CC=gcc BUILD=build
bash test/c/run.sh build/tests gcc || status=1

step "clang ASan+UBSan build, all backends"
build tests CC=clang BUILD=build/asan SAN=address,undefined
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  bash test/c/run.sh build/asan/tests asan || status=1

step "clang TSan build: tests that cross threads"
build tests CC=clang BUILD=build/tsan SAN=thread
WEFT_TEST_FILTER='thread|t_programs$|t_std_nowait$' TSAN_OPTIONS=halt_on_error=1 \
  bash test/c/run.sh build/tsan/tests tsan io_uring epoll || status=1

step "ucontext fallback context switch"
build tests CC=gcc BUILD=build/ucontext CTX=ucontext
bash test/c/run.sh build/ucontext/tests ucontext epoll || status=1

step "Valgrind memcheck (stacks registered, kernel-written ring buffers marked; the HTTP example without openat2, which Valgrind lacks)"
if command -v valgrind >/dev/null; then
  WEFT_TEST_RUNNER="valgrind -q --error-exitcode=9" WEFT_TEST_TIMEOUT=600 \
    WEFT_TEST_FILTER='t_(pipe|close_wait|cancel|timer|socket|sched|fls|drained|write_behind|http_server|programs)$' \
    bash test/c/run.sh build/tests valgrind io_uring epoll || status=1
else
  echo "valgrind missing: FAILED to run the memcheck stage"; echo "0 1" >> "$tally"; status=1
fi

if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
  # Not under qemu: t_spawn (100,000 stacks exceed qemu-user's guest address
  # space), t_thread_offload (qemu asserts on fork from a threaded guest),
  # t_http_server (a server child process; covered natively), t_subproc
  # (qemu-user's vfork-style clone loses posix_spawn's exec error: a missing
  # program "starts"), t_enomem (RLIMIT_AS counts qemu's own reservations).
  step "aarch64 (cross-compiled, run under qemu-user)"
  build tests CC=aarch64-linux-gnu-gcc BUILD=build/aarch64
  WEFT_TEST_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" WEFT_TEST_TIMEOUT=300 \
    WEFT_TEST_FILTER="${WEFT_AARCH64_FILTER:-t_(switch|bufread|cancel|cancel_race|chan|close_wait|dial|echo|fls|future|http_parse|join_detach|ops|overflow|pipe|proc|ring_tiny|sched|scope|signal|socket|spawn_cache|sync_mutex|sync_prims|thread_sync|thread_wakeup|timer|udp)\$}" \
    bash test/c/run.sh build/aarch64/tests aarch64 epoll || status=1
else
  echo "aarch64 cross toolchain or qemu-user missing: FAILED to run aarch64 tests"
  echo "0 1" >> "$tally"; status=1
fi

# Further suites (io_uring, Ruby, servers) hook in here.
for extra in scripts/test.d/*.sh; do
  [ -f "$extra" ] || continue
  step "$(basename "$extra" .sh)"
  bash "$extra" || status=1
done

passed=0; failed=0
while read -r p f; do passed=$((passed+p)); failed=$((failed+f)); done < "$tally"
rm -f "$tally"
echo
echo "$passed passed, $failed failed"
[ $status -eq 0 ] && [ $failed -eq 0 ]
