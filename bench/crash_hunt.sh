#!/usr/bin/env bash
# crash_hunt.sh — hunt the Ruby crash of issue 18: once, a Ruby HTTP server
# under Weft::Scheduler died with "[BUG] Segmentation fault" in
# Scheduler#run on SIGINT right after a load run (Ruby 3.1, io_uring).
#
# Each run starts bench/ruby/crash_server.rb (examples/ruby/http_server.rb
# under a GC variant), loads it with build/examples/http_load for 0.5-3 s,
# and sends SIGINT or SIGTERM (or SIGINT twice) at a random moment during
# the load or up to 0.5 s after it; then the server must exit with status
# 0 (or, after a second signal, by that signal) within 30 s (60 s under
# GC.stress). Chosen at random per run, from a seed:
#   backend   io_uring (where the kernel allows it), epoll, poll
#   build     release  lib/weft/weft.so as `make` builds it (-O2), copied
#             O0       the extension at -O0 -g3 (gcc)
#             asan     the extension at -O0 -g with clang's ASan on heap
#                      and globals, the runtime preloaded into Debian's
#                      Ruby (stack instrumentation off: Ruby switches fiber
#                      stacks without telling ASan, which then reports
#                      stale redzones of frames left on them; and a
#                      thread that keeps Ruby 3.1's cached native thread
#                      in use, see bench/ruby/crash_server.rb)
#   gc        none (60%), stress (GC.stress, 20%), compact (GC.compact
#             every 20 ms from a thread plus GC.auto_compact, 20%)
#   load      20-200 keep-alive connections, pipelining 1 or 4
# Core dumps are on (ulimit -c unlimited; the core lands in the run's
# directory when kernel.core_pattern is a plain name, as on this machine).
# A run fails on: death by SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE, "[BUG]",
# an ASan or UBSan report, a core file, any other exit status, or a hang
# (then SIGQUIT for the server's threads and scheduler state, and SIGABRT
# for a core). A failed run's directory is kept under
# OUT/failed/N with the server's output, the parameters, the core and a
# gdb backtrace of every thread.
#
#   bash bench/crash_hunt.sh                  # 1,000 runs, about 1.5 hours
#   bash bench/crash_hunt.sh --runs 20        # a short check that it works
# Options: --runs N (1000), --seed S (the date), --out DIR
# (build/crash-hunt), --backends "io_uring epoll poll", --builds "release
# O0 asan", --gc "none stress compact" (restrict the draw).
# Each run holds the benchmark lock (/tmp/weft-bench.lock) while it loads
# the machine, so other benchmarks can run between runs.
# Writes OUT/results.tsv (one line per run) and prints a summary: runs per
# backend, build and GC variant, and every failure. Exit status 0 only when
# no run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=1000; seed=$(date +%s); out=build/crash-hunt
want_backends="io_uring epoll poll"; want_builds="release O0 asan"; want_gc="none stress compact"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --backends) want_backends=$2; shift 2 ;;
    --builds) want_builds=$2; shift 2 ;;
    --gc) want_gc=$2; shift 2 ;;
    *) echo "usage: crash_hunt.sh [--runs N] [--seed S] [--out DIR] [--backends L] [--builds L] [--gc L]" >&2; exit 2 ;;
  esac
done
lock=${WEFT_BENCH_LOCK:-/tmp/weft-bench.lock}
mkdir -p "$out"; out=$(cd "$out" && pwd)
rm -rf "$out/runs"; mkdir -p "$out/runs" "$out/failed"
log() { echo "crash_hunt: $*"; }

# ---- what the runs need -------------------------------------------------
make -s build/examples/http_load >/dev/null || { log "make build/examples/http_load failed"; exit 1; }
bash scripts/ruby-ext.sh >/dev/null || { log "the Ruby extension does not build"; exit 1; }
asan_rt=$(clang -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null)
# build_ext NAME CC CFLAGS LDFLAGS ARCH_FLAG: the extension into OUT/ext-NAME/lib
build_ext() {
  local d=$out/ext-$1
  rm -rf "$d"; mkdir -p "$d/obj" "$d/lib/weft"
  ( cd "$d/obj" && ruby "$root/ext/weft/extconf.rb" --with-cflags="$3" --with-ldflags="$4" >/dev/null &&
    make -s V=0 CC="$2" LDSHARED="$2 -shared" ARCH_FLAG="$5" >/dev/null 2>"$d/build.log" ) &&
    cp "$d/obj/weft.so" "$d/lib/weft/weft.so"
}
builds=()
for b in $want_builds; do
  case "$b" in
    release) # a copy of make's build, so that a rebuild during the hunt
      # (another session's make) changes nothing under the runs
      mkdir -p "$out/ext-release/lib/weft"
      cp lib/weft/weft.so "$out/ext-release/lib/weft/weft.so.tmp" &&
        mv -f "$out/ext-release/lib/weft/weft.so.tmp" "$out/ext-release/lib/weft/weft.so" &&
        builds+=(release) ;;
    O0) build_ext O0 gcc "-O0 -g3 -fPIC -fno-omit-frame-pointer" "" "" && builds+=(O0) ||
          log "the -O0 build failed (see $out/ext-O0/build.log)" ;;
    asan)
      if [ -f "$asan_rt" ] && build_ext asan clang "-O0 -g -fPIC -fsanitize=address -fno-omit-frame-pointer" \
           "-fsanitize=address" "-mllvm -asan-stack=0 -fno-sanitize-address-use-after-scope"; then
        builds+=(asan)
      else
        log "no ASan build (clang and libclang-rt-14-dev needed): runs without it"
      fi ;;
  esac
done
extdir() { echo "$out/ext-$1/lib"; }
backends=()
for b in $want_backends; do
  if [ "$b" = io_uring ] &&
     [ "$(WEFT_BACKEND=io_uring ruby -I lib -r weft -e 'print Weft::Scheduler.new.backend' 2>/dev/null)" != io_uring ]; then
    log "io_uring unavailable here: not drawn"; continue
  fi
  backends+=("$b")
done
gcs=($want_gc)
[ ${#builds[@]} -gt 0 ] && [ ${#backends[@]} -gt 0 ] && [ ${#gcs[@]} -gt 0 ] || { log "nothing to run"; exit 1; }
pattern=$(cat /proc/sys/kernel/core_pattern)
case "$pattern" in
  "|"*) log "kernel.core_pattern pipes cores to ${pattern#|}: look for them there" ;;
esac

# ---- one run ------------------------------------------------------------
RANDOM=$seed
pick() { local a=("$@"); echo "${a[RANDOM % ${#a[@]}]}"; }
results=$out/results.tsv
printf 'run\tbackend\tbuild\tgc\tconns\tpipeline\tload_s\twhen\tsignal_at_s\tsignals\tserved\texit\tverdict\tseconds\n' >"$results"
declare -A count
failures=0

one_run() { # N — sets $verdict, appends to results.tsv
  local n=$1 backend build gc conns pipeline load_ds when at_ms sig
  backend=$(pick "${backends[@]}"); build=$(pick "${builds[@]}")
  local r=$((RANDOM % 10))
  if [ "${gcs[*]}" = "none stress compact" ]; then  # 60% none, 20% each other
    if [ $r -lt 6 ]; then gc=none; elif [ $r -lt 8 ]; then gc=stress; else gc=compact; fi
  else
    gc=$(pick "${gcs[@]}")
  fi
  conns=$((20 + RANDOM % 181)); pipeline=$(pick 1 1 1 4)
  load_ds=$((5 + RANDOM % 26))                       # 0.5 .. 3.0 s
  if [ $((RANDOM % 10)) -lt 6 ]; then
    when=during; at_ms=$((100 + RANDOM % (load_ds * 100 - 99)))
  else
    when=after; at_ms=$((load_ds * 100 + RANDOM % 501))
  fi
  sig=$(pick INT INT TERM TERM TERM INT,INT)
  local dir=$out/runs/$n; mkdir -p "$dir"
  local ext; ext=$(extdir "$build")
  local envs=(WEFT_HUNT_GC="$gc")
  [ "$build" = asan ] && envs+=(LD_PRELOAD="$asan_rt" ASAN_OPTIONS=detect_leaks=0 WEFT_HUNT_ASAN=1)
  local t0; t0=$(date +%s%N)
  ( cd "$dir" && ulimit -c unlimited && exec env "${envs[@]}" ruby -I "$ext" -I "$root/lib" \
      "$root/bench/ruby/crash_server.rb" --backend "$backend" >srv.out 2>srv.err ) &
  local srv=$! port="" i
  for i in $(seq 600); do
    port=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$dir/srv.out" 2>/dev/null)
    [ -n "$port" ] && break; kill -0 $srv 2>/dev/null || break; sleep 0.05
  done
  local loader=""
  if [ -n "$port" ]; then
    build/examples/http_load --port "$port" --connections "$conns" --pipeline "$pipeline" \
      --duration "$((load_ds / 10)).$((load_ds % 10))" >"$dir/load.out" 2>&1 &
    loader=$!
    sleep "$((at_ms / 1000)).$(printf '%03d' $((at_ms % 1000)))"
    kill -"${sig%%,*}" $srv 2>/dev/null
    if [ "$sig" = INT,INT ]; then
      sleep "0.0$(printf '%02d' $((1 + RANDOM % 50)))"; kill -INT $srv 2>/dev/null
    fi
  fi
  local limit=300; [ "$gc" = stress ] && limit=600
  local rc=124
  for i in $(seq $limit); do
    kill -0 $srv 2>/dev/null || { wait $srv; rc=$?; break; }; sleep 0.1
  done
  local hung=0
  if [ $rc = 124 ] && kill -0 $srv 2>/dev/null; then
    # where it is (crash_server.rb's QUIT trap), then a core
    hung=1; kill -QUIT $srv 2>/dev/null; sleep 3
    kill -ABRT $srv 2>/dev/null; sleep 2; kill -KILL $srv 2>/dev/null; wait $srv 2>/dev/null
  fi
  [ -n "$loader" ] && { kill $loader 2>/dev/null; wait $loader 2>/dev/null; }
  local secs; secs=$(( ($(date +%s%N) - t0) / 1000000 ))
  local served; served=$(sed -n 's/^served \([0-9]*\) requests.*/\1/p' "$dir/srv.err" | tail -n 1)
  verdict=ok
  if [ -z "$port" ]; then verdict="no-start"
  elif [ $hung = 1 ]; then verdict=hang
  elif grep -q '\[BUG\]' "$dir/srv.err"; then verdict="bug"
  elif grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error:' "$dir/srv.err"; then verdict="asan"
  elif [ $rc -gt 128 ] && [[ " 4 6 7 8 11 " == *" $((rc - 128)) "* ]]; then verdict="signal-$((rc - 128))"
  elif ls "$dir"/core* >/dev/null 2>&1; then verdict="core"
  elif [ $rc = 0 ]; then verdict=ok
  elif [ "$sig" = INT,INT ] && [ $rc = 130 ]; then verdict=ok   # the second SIGINT, as Ruby exits on it
  else verdict="exit-$rc"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$backend" "$build" "$gc" \
    "$conns" "$pipeline" "$((load_ds / 10)).$((load_ds % 10))" "$when" \
    "$((at_ms / 1000)).$(printf '%03d' $((at_ms % 1000)))" "$sig" "${served:--}" "$rc" "$verdict" \
    "$((secs / 1000)).$(printf '%03d' $((secs % 1000)))" >>"$results"
  count["$backend $build $gc"]=$(( ${count["$backend $build $gc"]:-0} + 1 ))
  if [ "$verdict" != ok ]; then
    failures=$((failures + 1))
    local keep=$out/failed/$n
    rm -rf "$keep"; mv "$dir" "$keep"
    tail -n 1 "$results" >"$keep/params.tsv"
    local core; core=$(ls "$keep"/core* 2>/dev/null | head -n 1)
    if [ -n "$core" ] && command -v gdb >/dev/null; then
      gdb -batch -ex 'info sharedlibrary' -ex 'thread apply all bt' "$(command -v ruby)" "$core" \
        >"$keep/gdb.txt" 2>&1
    fi
    log "run $n FAILED: $verdict ($backend, $build, GC $gc, $sig at ${at_ms} ms, load ${load_ds}00 ms): $keep"
    grep -m 5 '\[BUG\]\|ERROR\|Error\|error' "$keep/srv.err" | sed 's/^/    | /'
  else
    rm -rf "$dir"
  fi
}

log "tree $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src ext lib 2>/dev/null || echo ' (with uncommitted changes in src, ext or lib)')"
log "$runs runs, seed $seed, backends: ${backends[*]}; builds: ${builds[*]}; GC: ${gcs[*]}; results in $results"
start=$(date +%s)
exec 9>"$lock"
for ((n = 1; n <= runs; n++)); do
  flock 9
  one_run "$n"
  flock -u 9
  if (( n % 25 == 0 )) || (( n == runs )); then
    log "$n/$runs runs, $failures failed, $(( $(date +%s) - start )) s"
  fi
done

# ---- summary --------------------------------------------------------------
echo
echo "== crash hunt: $runs runs (seed $seed) in $(( $(date +%s) - start )) s, $failures failed"
awk -F'\t' 'NR > 1 { v[$13]++; b[$2]++; k[$3]++; g[$4]++; s[$10]++; w[$8]++ }
  END {
    printf "verdicts:"; for (x in v) printf " %s %d", x, v[x]; print ""
    printf "backends:"; for (x in b) printf " %s %d", x, b[x]; print ""
    printf "builds:  "; for (x in k) printf " %s %d", x, k[x]; print ""
    printf "GC:      "; for (x in g) printf " %s %d", x, g[x]; print ""
    printf "signals: "; for (x in s) printf " %s %d", x, s[x]; print ""
    printf "moment:  "; for (x in w) printf " %s %d", x, w[x]; print ""
  }' "$results"
echo "combinations (backend build gc: runs):"
for k in "${!count[@]}"; do echo "  $k: ${count[$k]}"; done | sort
if [ $failures -gt 0 ]; then
  echo "failed runs:"
  awk -F'\t' 'NR > 1 && $13 != "ok" { printf "  run %s: %s (%s %s GC %s, %s at %s s, exit %s)\n", $1, $13, $2, $3, $4, $10, $9, $12 }' "$results"
  echo "their directories: $out/failed/"
fi
[ $failures -eq 0 ]
