#!/usr/bin/env bash
# pool.sh — the pool showcase job (examples/pool_demo) as a benchmark:
# fetch N items from the HTTP example server and store each in PostgreSQL
# through a weft_pool of 2 connections, with 1 (sequential), 10 and 100
# client fibers. The "peer" column is the sequential job (1 fiber: fetch,
# store, next), so the ratio is the speedup over sequential. A second
# group repeats it with 2 ms of simulated upstream latency per request
# (pool_demo --delay-ms: the client waits before each request), which is
# where concurrency pays off; on loopback the server answers at once and
# the job is bound by the 2 CPUs shared by client, server and database.
#
# Starts http_server (static files in a temp --root) and a throw-away
# PostgreSQL (scripts/pg.sh), stops both on exit. Each figure is measured
# WEFT_BENCH_REPS times (default 5) under the machine-wide benchmark lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
root=$(cd "$here/../.." && pwd)
ex=${WEFT_BENCH_EXAMPLES:-$root/build/examples}
reps=${WEFT_BENCH_REPS:-5}
G=pool
items=${WEFT_BENCH_POOL_ITEMS:-2000}
litems=${WEFT_BENCH_POOL_LATENCY_ITEMS:-300}

for p in pool_demo http_server; do
  [ -x "$ex/$p" ] || { echo "pool.sh: $ex/$p missing (make examples; libpq-dev)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/weft-bench-pool.XXXXXX)
srv=""; pgdir=""
cleanup() {
  [ -n "$srv" ] && { kill -INT "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; }
  [ -n "$pgdir" ] && bash "$root/scripts/pg.sh" stop "$pgdir"
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/www/items"
awk -v d="$tmp/www/items" -v n="$items" 'BEGIN { for (i = 1; i <= n; i++) { f = d "/" i ".txt";
  printf "item %d: the quick brown fox jumps over the lazy dog\n", i > f; close(f) } }'
"$ex/http_server" --port 0 --root "$tmp/www" --quiet >"$tmp/http.out" 2>&1 &
srv=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*listening on [a-z:/]*[0-9.]*:\([0-9][0-9]*\).*|\1|p' "$tmp/http.out" | head -n1)
  [ -n "$port" ] && break; sleep 0.1
done
[ -n "$port" ] || { echo "pool.sh: http_server did not start" >&2; cat "$tmp/http.out" >&2; exit 1; }
eval "$(bash "$root/scripts/pg.sh" start)" || { echo "pool.sh: PostgreSQL did not start" >&2; exit 1; }
pgdir=$WEFT_PG_DIR

# job C N DELAY: REPS runs of the job; prints ms per job, one per line.
job() {
  local c=$1 n=$2 d=$3
  for _ in $(seq "$reps"); do
    "$ex/pool_demo" --port "$port" --items "$n" --concurrency "$c" --pool-size 2 \
      --delay-ms "$d" --json --quiet |
      sed -nE 's/.*"seconds":([0-9.]+).*"rows":'"$n"',"distinct":'"$n"'.*/\1/p' |
      awk '{ printf "%.2f\n", $1 * 1000 }'
  done
}
export -f job; export ex port reps

bench_header "pool: fetch over HTTP + store in PostgreSQL, pool of 2 connections (peer: the same job sequentially)"
declare -A SPEED
for grp in plain latency; do
  if [ $grp = plain ]; then n=$items; d=0; g=$G; tag="$items items"
  else n=$litems; d=2; g=${G}_latency; tag="$litems items, 2 ms simulated latency"; fi
  seq_runs=$(bench_runs bash -c "job 1 $n $d")
  [ "$(echo $seq_runs | wc -w)" -eq "$reps" ] || { echo "pool.sh: sequential job failed" >&2; exit 1; }
  bench_report "$g" "job_1_fiber" ms/job lower "$seq_runs" "sequential" "$seq_runs" \
    "$tag; 1 fiber is the sequential job itself"
  for c in 10 100; do
    w=$(bench_runs bash -c "job $c $n $d")
    [ "$(echo $w | wc -w)" -eq "$reps" ] || { echo "pool.sh: job with $c fibers failed" >&2; exit 1; }
    bench_report "$g" "job_${c}_fibers" ms/job lower "$w" "sequential" "$seq_runs" \
      "$tag; $c client fibers, 2 DB connections; ratio = speedup over sequential"
    SPEED[$grp.$c]=$(bench_ratio lower "$(bench_median "$w")" "$(bench_median "$seq_runs")")
  done
done
echo
echo "speedup over sequential (median), pool of 2 PostgreSQL connections:"
printf '  loopback (server answers at once): 10 fibers %sx, 100 fibers %sx\n' "${SPEED[plain.10]}" "${SPEED[plain.100]}"
printf '  2 ms simulated upstream latency:   10 fibers %sx, 100 fibers %sx\n' "${SPEED[latency.10]}" "${SPEED[latency.100]}"
