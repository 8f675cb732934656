#!/usr/bin/env bash
# ab_micro.sh — the micro rows of make bench for two or more builds,
# interleaved, for A/B work on a noisy machine. Not part of make bench.
#
#   bash bench/ab_micro.sh ROUNDS BUILD_DIR BUILD_DIR...
#   WEFT_AB_ROWS="core_spawn join 1000000 5,core_switch yield 10000000 5" ...
#
# Each BUILD_DIR is a build directory with its bench/ programs built
# (make BUILD=dir benches; another version's tree: git worktree add). In
# every round each row runs once per build, pinned to CPU 1, so drift in
# the machine's speed hits every build alike. A row's figure per run is
# the median of the program's repetitions; the table gives, per row and
# build, the median of the rounds and [min-max].
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS BUILD_DIR BUILD_DIR..." >&2; exit 2; }
rounds=$1; shift
IFS=, read -ra rows <<< "${WEFT_AB_ROWS:-core_spawn warm 1000000 5,core_spawn wg 1000000 5,core_spawn join 1000000 5,sync_bench chan 1000000 5,core_switch yield 10000000 5}"
out=$(mktemp /tmp/weft-ab.XXXXXX); trap 'rm -f "$out"' EXIT
exec 9>"$WEFT_BENCH_LOCK"; flock 9 # take turns with other benchmarks
for _ in $(seq "$rounds"); do
  for row in "${rows[@]}"; do
    for d in "$@"; do
      # shellcheck disable=SC2086
      v=$(taskset -c 1 "$d/bench/"$row | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
      echo "$row|$d|$v" >> "$out"
    done
  done
done
for row in "${rows[@]}"; do
  printf '%s\n' "$row"
  for d in "$@"; do
    grep -F "$row|$d|" "$out" | cut -d'|' -f3 | sort -n |
      awk -v d="$d" '{a[NR]=$1} END {printf "  %-40s %8s ns [%s-%s]\n", d, a[int((NR+1)/2)], a[1], a[NR]}'
  done
done
