# lib.sh — helpers for bench/parts/*.sh (source it: . "$(dirname "$0")/../lib.sh").
#
#   bench_locked CMD...          run CMD under the machine-wide benchmark lock
#                                (/tmp/weft-bench.lock), so that no two
#                                benchmarks run at once
#   bench_runs CMD...            run CMD locked; print its output lines
#                                (one figure each) joined by spaces
#   bench_procs N CMD...         run CMD (which prints figures) N times, each
#                                in a fresh process (so address-space layout
#                                luck is sampled too); print all figures
#   bench_procs_warm N CMD...    the same, but CMD prints two figures per
#                                process and the first (a warm-up) is dropped
#   bench_stats "1 2 3"          print "min median max"
#   bench_ratio better W P       how many times better weft (median W) is
#                                than the peer (median P): P/W when lower is
#                                better, W/P when higher is better
#   bench_emit GROUP NAME UNIT BETTER "WEFT RUNS" [PEER "PEER RUNS" [NOTE]]
#                                append one JSON line to $WEFT_BENCH_JSONL
#   bench_need PART CMD...       the commands a part needs: when one is
#                                missing, install the benchmark packages
#                                (scripts/deps.sh bench); where that cannot
#                                be done, say what to run and exit 1 before
#                                the part starts anything
#   bench_header TITLE           print a part's table header
#   bench_row NAME UNIT BETTER "WEFT RUNS" [PEER "PEER RUNS" [NOTE]]
#                                print one table row (medians, ratio)
#   bench_report GROUP NAME UNIT BETTER "WEFT RUNS" [PEER "PEER RUNS" [NOTE]]
#                                bench_row + bench_emit
#
# Figures are plain numbers; runs are space-separated lists of them.

WEFT_BENCH_LOCK=${WEFT_BENCH_LOCK:-/tmp/weft-bench.lock}
_bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bench_need() {
  local part=$1 c missing=(); shift
  for c in "$@"; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$part: ${missing[*]} missing: installing the benchmark packages (scripts/deps.sh bench)" >&2
  if bash "$_bench_root/scripts/deps.sh" bench >&2; then
    missing=()
    for c in "$@"; do command -v "$c" >/dev/null || missing+=("$c"); done
    [ ${#missing[@]} -eq 0 ] && return 0
  fi
  echo "$part: ${missing[*]} still missing: run 'bash scripts/deps.sh bench' as root (make bench does), then this part again" >&2
  exit 1
}

bench_locked() { flock "$WEFT_BENCH_LOCK" "$@"; }

bench_runs() {
  local out
  out=$(bench_locked "$@") || { echo "bench: failed: $*" >&2; return 1; }
  echo $out
}

bench_procs() {
  local n=$1 i all=""; shift
  for ((i = 0; i < n; i++)); do all+="$(bench_runs "$@") " || return 1; done
  echo $all
}

bench_procs_warm() {
  local n=$1 i out all=""; shift
  for ((i = 0; i < n; i++)); do
    out=$(bench_locked "$@") || { echo "bench: failed: $*" >&2; return 1; }
    all+="$(printf '%s\n' "$out" | sed 1d) "
  done
  echo $all
}

bench_stats() {
  echo "$1" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '
    { v[NR] = $1 }
    END {
      if (NR == 0) { print "0 0 0"; exit }
      med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%s %s %s\n", v[1], med, v[NR]
    }'
}

bench_median() { local s; s=$(bench_stats "$1"); set -- $s; echo "$2"; }

bench_ratio() {
  awk -v b="$1" -v w="$2" -v p="$3" 'BEGIN {
    if (w <= 0 || p <= 0) { print ""; exit }
    printf "%.2f\n", (b == "higher") ? w / p : p / w }'
}

_bench_json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
_bench_json_arr() { printf '[%s]' "$(echo $1 | tr ' ' ',')"; }

bench_emit() {
  local group=$1 name=$2 unit=$3 better=$4 weft=$5 peer=${6:-} peer_runs=${7:-} note=${8:-}
  [ -n "${WEFT_BENCH_JSONL:-}" ] || return 0
  {
    printf '{"group":%s,"name":%s,"unit":%s,"better":%s,"weft":%s' \
      "$(_bench_json_str "$group")" "$(_bench_json_str "$name")" \
      "$(_bench_json_str "$unit")" "$(_bench_json_str "$better")" \
      "$(_bench_json_arr "$weft")"
    if [ -n "$peer" ] && [ -n "$peer_runs" ]; then
      printf ',"peer":%s,"peer_runs":%s' "$(_bench_json_str "$peer")" \
        "$(_bench_json_arr "$peer_runs")"
    fi
    [ -n "$note" ] && printf ',"note":%s' "$(_bench_json_str "$note")"
    printf '}\n'
  } >> "$WEFT_BENCH_JSONL"
}

bench_header() {
  echo
  echo "== $1"
  printf '%-27s %-12s %12s %12s  %-26s %12s %8s\n' \
    benchmark unit "weft min" "weft median" peer "peer median" ratio
}

bench_row() {
  local name=$1 unit=$2 better=$3 weft=$4 peer=${5:-} peer_runs=${6:-} note=${7:-}
  local s wmin wmed pmed="" ratio=""
  s=$(bench_stats "$weft"); set -- $s; wmin=$1; wmed=$2
  if [ -n "$peer_runs" ]; then
    pmed=$(bench_median "$peer_runs")
    ratio=$(bench_ratio "$better" "$wmed" "$pmed")
    [ -n "$ratio" ] && ratio="${ratio}x"
  fi
  printf '%-27s %-12s %12s %12s  %-26s %12s %8s\n' "$name" "$unit" "$wmin" "$wmed" \
    "${peer:--}" "${pmed:--}" "${ratio:--}"
  [ -n "$note" ] && printf '    %s\n' "$note"
  return 0
}

bench_report() {
  local group=$1; shift
  bench_row "$@"
  bench_emit "$group" "$@"
}
