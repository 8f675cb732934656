#!/usr/bin/env bash
# rack_threads.sh — one Weft::Server thread per process against two (each
# with its own scheduler, bench/ruby/rack_threads.rb): req/s and server CPU
# per request under wrk (hello world, 50 keep-alive connections, 3 s), 5
# interleaved rounds, medians and the ratio two/one. Run under the
# benchmark lock: flock /tmp/weft-bench.lock bash bench/rack_threads.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "rack_threads.sh: wrk missing (scripts/deps.sh bench)" >&2; exit 1; }
rounds=${WEFT_BENCH_REPS:-5}
declare -A rps cpu
for round in $(seq "$rounds"); do
  for n in 1 2; do
    port=$((29000 + RANDOM % 1000))
    ruby -W0 -I lib bench/ruby/rack_threads.rb "$n" "$port" 2>/dev/null &
    p=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
    t0=$(awk '{print $14+$15}' /proc/$p/stat)
    out=$(wrk -t2 -c50 -d3s "http://127.0.0.1:$port/")
    t1=$(awk '{print $14+$15}' /proc/$p/stat)
    kill -TERM "$p"; wait "$p" 2>/dev/null || true
    req=$(echo "$out" | awk '/requests in/ {print $1}')
    rps[$n]+="$(echo "$out" | awk '/Requests\/sec/ {print $2}') "
    cpu[$n]+="$(awk -v a="$t0" -v b="$t1" -v r="$req" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) * 1e6 / hz / r}') "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
r1=$(echo "${rps[1]}" | median); r2=$(echo "${rps[2]}" | median)
c1=$(echo "${cpu[1]}" | median); c2=$(echo "${cpu[2]}" | median)
echo "one thread:  $r1 req/s, $c1 us CPU/request   (runs: ${rps[1]}/ ${cpu[1]})"
echo "two threads: $r2 req/s, $c2 us CPU/request   (runs: ${rps[2]}/ ${cpu[2]})"
awk -v a="$r1" -v b="$r2" -v c="$c1" -v d="$c2" 'BEGIN {printf "two/one: req/s %.2fx, CPU per request %.2fx\n", b / a, d / c}'
