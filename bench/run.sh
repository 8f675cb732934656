#!/usr/bin/env bash
# run.sh — run every benchmark part and collect the results (`make bench`).
#
# Each bench/parts/*.sh (in name order) prints its own table and appends
# one JSON object per figure to $WEFT_BENCH_JSONL:
#   {"group":..,"name":..,"unit":..,"better":"lower"|"higher",
#    "weft":[runs..], "peer":"..", "peer_runs":[runs..], "note":".."}
# (peer fields optional). This script adds min/median/max (and peer_*,
# ratio = how many times better weft is than the peer), writes
# bench/results/latest.json with the machine, kernel, compilers and date,
# prints the summary table, and, if gnuplot is installed, draws
# bench/results/ratios.png.
#
# WEFT_BENCH_PARTS: a grep -E pattern of part names to run (default all);
#   results of groups not run are kept from the previous latest.json.
# WEFT_BENCH_OUT: results directory (default bench/results).
# WEFT_BENCH_FROM: a JSON-lines file of earlier results: merge and report
#   it without running anything (to redo the table and chart).
# No python: bash, awk and coreutils only.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${WEFT_BENCH_OUT:-$here/results}
filter=${WEFT_BENCH_PARTS:-.}
mkdir -p "$out"

jsonl=$(mktemp /tmp/weft-bench.XXXXXX.jsonl)
trap 'rm -f "$jsonl"' EXIT
export WEFT_BENCH_JSONL=$jsonl

first() { "$@" 2>/dev/null | head -n1; }
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
cores=$(nproc 2>/dev/null || echo 0)
mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
kernel=$(uname -r)
gcc_v=$(first gcc --version); clang_v=$(first clang --version); gxx_v=$(first g++ --version)
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# Other work on the machine skews every figure: record the load average.
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)

echo "weft benchmarks — $date"
echo "machine: ${cpu:-unknown CPU}, $cores cores, $mem MiB; kernel $kernel"
echo "compilers: ${gcc_v:-no gcc}; ${clang_v:-no clang}; ${gxx_v:-no g++}"
echo "load average: $load_start (figures from a busy machine are pessimistic)"

failed=()
[ -n "${WEFT_BENCH_FROM:-}" ] && { cp "$WEFT_BENCH_FROM" "$jsonl"; filter='^$'; }
for part in "$here"/parts/*.sh; do
  [ -f "$part" ] || continue
  name=$(basename "$part" .sh)
  echo "$name" | grep -Eq "$filter" || continue
  if ! bash "$part"; then
    failed+=("$name")
    echo "bench: part $name FAILED" >&2
  fi
done

esc() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }

# Merge: one result object per line, with the statistics added.
results=$(awk '
  function arr(line, key,    m, s) {
    if (!match(line, "\"" key "\":\\[[^]]*\\]")) return ""
    s = substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
    gsub(/[ \t]/, "", s)
    return s
  }
  function str(line, key,    s) {
    if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
    return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
  }
  function stats(list,    n, v, i, j, t) {   # sets smin smed smax
    n = split(list, v, ",")
    for (i = 2; i <= n; i++) {               # insertion sort, numeric
      t = v[i] + 0
      for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]
      v[j + 1] = t
    }
    smin = v[1] + 0; smax = v[n] + 0
    smed = (n % 2) ? v[(n + 1) / 2] + 0 : (v[n / 2] + v[n / 2 + 1]) / 2
    return n
  }
  /^[ \t]*\{/ {
    line = $0
    sub(/[ \t]*\}[ \t]*$/, "", line)
    w = arr($0, "weft")
    if (w == "" || !stats(w)) next
    wmed = smed
    extra = sprintf(",\"min\":%g,\"median\":%g,\"max\":%g", smin, smed, smax)
    p = arr($0, "peer_runs")
    if (p != "" && stats(p)) {
      extra = extra sprintf(",\"peer_min\":%g,\"peer_median\":%g,\"peer_max\":%g",
                            smin, smed, smax)
      if (wmed > 0 && smed > 0) {
        r = (str($0, "better") == "higher") ? wmed / smed : smed / wmed
        extra = extra sprintf(",\"ratio\":%.3f", r)
      }
    }
    printf "%s%s    %s%s}", (nout++ ? ",\n" : ""), "", line, extra
  }
  END { if (nout) printf "\n" }
' "$jsonl")

# A partial run (WEFT_BENCH_PARTS) keeps the other groups' results of the
# previous latest.json, as they were.
partial=""
if [ "$filter" != . ] && [ -z "${WEFT_BENCH_FROM:-}" ] && [ -f "$out/latest.json" ]; then
  partial=$filter
  groups=$(printf '%s\n' "$results" | grep -o '"group":"[^"]*"' | sort -u)
  kept=$(grep '^    {"group":' "$out/latest.json" | sed 's/,[[:space:]]*$//' |
         { if [ -n "$groups" ]; then grep -vF "$groups"; else cat; fi; })
  if [ -n "$kept" ]; then
    kept=$(printf '%s\n' "$kept" | sed '$!s/$/,/')
    results=${results:+$results,$'\n'}$kept
  fi
fi

{
  printf '{\n  "machine": {"cpu": "%s", "cores": %s, "memory_mib": %s},\n' \
    "$(esc "$cpu")" "${cores:-0}" "${mem:-0}"
  printf '  "kernel": "%s",\n' "$(esc "$kernel")"
  printf '  "compiler": {"gcc": "%s", "clang": "%s", "g++": "%s"},\n' \
    "$(esc "$gcc_v")" "$(esc "$clang_v")" "$(esc "$gxx_v")"
  printf '  "date": "%s",\n' "$date"
  printf '  "load_average": {"start": "%s", "end": "%s"},\n' "$load_start" \
    "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
  [ -n "$partial" ] &&
    printf '  "partial": "only parts matching %s were run now; other results are older",\n' "$(esc "$partial")"
  printf '  "results": [\n%s\n  ]\n}\n' "$results"
} > "$out/latest.json.tmp" && mv "$out/latest.json.tmp" "$out/latest.json"

# Summary table, from the merged lines.
echo
echo "== summary (median of runs; ratio = times better than the peer, >1 = weft wins)"
printf '%-8s %-26s %-12s %12s  %-28s %12s %8s\n' group benchmark unit weft peer peer ratio
printf '%s\n' "$results" | awk '
  function str(line, key) {
    if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
    return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
  }
  function num(line, key) {
    if (!match(line, "\"" key "\":[-0-9.eE+]+")) return ""
    return substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
  }
  function fmt(x) {
    if (x == "") return "-"
    x += 0
    return (x < 10) ? sprintf("%.2f", x) : (x < 1000) ? sprintf("%.1f", x) : sprintf("%.0f", x)
  }
  NF {
    r = num($0, "ratio")
    printf "%-8s %-26s %-12s %12s  %-28s %12s %8s\n", str($0, "group"),
      str($0, "name"), str($0, "unit"), fmt(num($0, "median")),
      (str($0, "peer") == "" ? "-" : substr(str($0, "peer"), 1, 28)),
      fmt(num($0, "peer_median")),
      (r == "" ? "-" : sprintf("%.2fx", r))
  }'
echo
echo "results: $out/latest.json"

# Bar chart of the ratios.
if command -v gnuplot >/dev/null; then
  dat=$(mktemp /tmp/weft-bench.XXXXXX.dat)
  printf '%s\n' "$results" | awk '
    function str(line, key) {
      if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
      return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
    }
    match($0, /"ratio":[-0-9.eE+]+/) {
      r = substr($0, RSTART + 8, RLENGTH - 8)
      printf "\"%s/%s vs %s\" %s\n", str($0, "group"), str($0, "name"),
        substr(str($0, "peer"), 1, 24), r
    }' > "$dat"
  if [ -s "$dat" ]; then
    n=$(wc -l < "$dat")
    gnuplot <<GP && echo "chart: $out/ratios.png" || echo "chart: gnuplot failed" >&2
set terminal pngcairo size $((360 + 60 * n)),720 font "sans,10"
set bmargin 16
set rmargin 14
set output "$out/ratios.png"
set title "weft vs peers — times better than the peer (> 1: weft wins)\n$(esc "$cpu"), kernel $kernel, $date"
set style fill solid 0.8 border -1
set boxwidth 0.7
set yrange [0:*]
set xrange [-0.6:$n - 0.4]
set grid ytics
set xtics rotate by -35 left noenhanced
set key off
set ylabel "ratio (peer / weft for times, weft / peer for rates)"
set arrow from graph 0, first 1 to graph 1, first 1 nohead lc rgb "red" lw 2
plot "$dat" using 0:2:(\$2 >= 1 ? 0x3a8a4a : 0xc04040):xtic(1) with boxes lc rgb variable, \\
     "" using 0:2:(sprintf("%.2f", \$2)) with labels offset 0,0.7
GP
  fi
  rm -f "$dat"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "bench: failed parts: ${failed[*]}" >&2
  exit 1
fi
exit 0
