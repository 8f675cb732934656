#!/usr/bin/env bash
# http.sh — the HTTP example's suites that are not test/c/t_*.c programs:
#   1. a libFuzzer run of the request parser: 5,000,000 inputs (under a
#      minute) mutated from a fixed seed, so every run of the suite tries
#      the same ones (WEFT_FUZZ_RUNS, WEFT_FUZZ_SEED; WEFT_FUZZ_SECS=N
#      explores N seconds from a random seed instead);
#   2. the http_server program as a process: 2 threads, load from http_load
#      with zero errors, then SIGTERM ends it cleanly;
#   3. the benchmark's C floors (bench/peers/raw_*.c) answer the same load
#      without an error: a floor that fails requests would flatter itself.
# Prints "[http] N passed, N failed" and appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
suite=http; tally_lines=40; . scripts/tally.sh
tmp=$(mktemp -d /tmp/weft-http-test.XXXXXX)
srv=""
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# 1. Fuzzing. New corpus entries go to the scratch directory, not the repo.
if [ -n "${WEFT_FUZZ_SECS:-}" ]; then
  budget=(-max_total_time="$WEFT_FUZZ_SECS"); what="${WEFT_FUZZ_SECS} s"
else
  budget=(-runs="${WEFT_FUZZ_RUNS:-5000000}" -seed="${WEFT_FUZZ_SEED:-1}"); what="seed ${WEFT_FUZZ_SEED:-1}"
fi
mkdir -p build/fuzz "$tmp/corpus"
if clang -std=gnu11 -g -O1 -Wall -Wextra -Werror \
     -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
     -Icontrib fuzz/http_parse_fuzz.c contrib/http/http_parse.c \
     -o build/fuzz/http_parse_fuzz >"$tmp/fuzz-build.log" 2>&1; then
  if build/fuzz/http_parse_fuzz "${budget[@]}" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$tmp/" -print_final_stats=1 \
       "$tmp/corpus" fuzz/corpus/http_parse >"$tmp/fuzz.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/fuzz.log")
    ok "http_parse_fuzz: ${what}, ${runs:-?} inputs, no failure"
  else
    fuzz_summary "$tmp/fuzz.log" "$tmp"/crash-* "$tmp"/leak-* "$tmp"/timeout-* >"$tmp/summary"
    bad "http_parse_fuzz (crash input kept in build/fuzz/)" "$tmp/summary"
    cp "$tmp"/crash-* "$tmp"/leak-* "$tmp"/timeout-* build/fuzz/ 2>/dev/null
  fi
else
  bad "http_parse_fuzz: build (clang with libclang-rt-14-dev needed)" "$tmp/fuzz-build.log"
fi

# 2. The server program: threads, load, signal.
if [ -x build/examples/http_server ] && [ -x build/examples/http_load ]; then
  build/examples/http_server --port 0 --threads 2 >"$tmp/srv.out" 2>"$tmp/srv.err" &
  srv=$!
  port=""
  for _ in $(seq 100); do
    port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$tmp/srv.out")
    [ -n "$port" ] && break; sleep 0.1
  done
  if [ -n "$port" ] && build/examples/http_load --port "$port" --connections 64 \
       --threads 2 --duration 2 --pipeline 4 >"$tmp/load.out" 2>&1; then
    ok "http_server --threads 2 under http_load: $(sed -n 2p "$tmp/load.out" | awk '{print $1" requests, "$2" errors"}')"
  else
    bad "http_server under http_load (port '${port}')" "$tmp/load.out"
  fi
  kill -TERM "$srv"
  rc=124
  for _ in $(seq 150); do kill -0 "$srv" 2>/dev/null || { wait "$srv"; rc=$?; break; }; sleep 0.1; done
  srv_pid=$srv; srv=""
  if [ "$rc" = 0 ] && grep -q "stopped:" "$tmp/srv.err"; then
    ok "http_server: SIGTERM drains and exits 0"
  else
    kill -KILL "$srv_pid" 2>/dev/null
    bad "http_server: SIGTERM (exit $rc)" "$tmp/srv.err"
  fi
else
  bad "http_server / http_load not built (make all)"
fi

# 3. The floors, as bench/parts/http.sh builds them.
floor_ok() { # NAME BINARY
  local p=""
  "$2" --port 0 --threads 2 >"$tmp/$1.out" 2>&1 &
  srv=$!
  for _ in $(seq 100); do
    p=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$tmp/$1.out")
    [ -n "$p" ] && break; sleep 0.05
  done
  if [ -n "$p" ] && build/examples/http_load --port "$p" --connections 64 --threads 2 \
       --duration 1 --pipeline 4 >"$tmp/$1.load" 2>&1; then
    ok "$1 under http_load: $(sed -n 2p "$tmp/$1.load" | awk '{print $1" requests, "$2" errors"}')"
  else
    local log="$tmp/$1.load"; [ -n "$p" ] || log="$tmp/$1.out"
    bad "$1 under http_load (port '$p')" "$log"
  fi
  kill -KILL "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=""
}
rawcc=(cc -std=gnu11 -O2 -Wall -Wextra -Werror -Icontrib/http contrib/http/http_parse.c)
for f in raw_epoll raw_uring raw_stacks; do
  lib=(-lpthread); [ $f = raw_epoll ] || lib=(-luring -lpthread)
  if ! "${rawcc[@]}" "bench/peers/$f.c" -o "$tmp/$f" "${lib[@]}" >"$tmp/$f.build" 2>&1; then
    bad "$f: build" "$tmp/$f.build"
  elif [ $f != raw_epoll ] && ! "$tmp/$f" --probe; then
    echo "  skip  $f: no io_uring here$([ $f = raw_stacks ] && echo ', or not x86-64')"
  elif [ -x build/examples/http_load ]; then
    floor_ok "$f" "$tmp/$f"
  fi
done

finish
