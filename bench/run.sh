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
# prints the summary table, and, if gnuplot is installed, draws one chart
# per group, bench/results/ratios_GROUP.png (core, sync, io, http, churn,
# ruby, pool, sys, tls): horizontal bars from 1 (parity) to each ratio, one row per peer
# under each benchmark's name, on a log scale where a group's ratios span
# 4x or more.
#
# bash bench/run.sh --plot: only redraw the charts from latest.json.
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

# plot_charts JSON — ratios_GROUP.png beside JSON for every group with
# ratios (pool_latency is drawn with pool).
plot_charts() {
  local json=$1 dir g dat gp rows info
  dir=$(dirname "$json")
  command -v gnuplot >/dev/null || { echo "charts: gnuplot missing (apt-get install gnuplot-nox)"; return 0; }
  info=$(awk 'function val(key) { match($0, "\"" key "\": *\"[^\"]*\""); s = substr($0, RSTART, RLENGTH)
                                    sub(/^[^:]*: *"/, "", s); sub(/"$/, "", s); return s }
              /"cpu":/ { cpu = val("cpu") } /^ *"kernel":/ { k = val("kernel") } /^ *"date":/ { d = val("date") }
              END { printf "%s, kernel %s, %s", cpu, k, d }' "$json")
  dat=$(mktemp /tmp/weft-chart.XXXXXX.dat); gp=$(mktemp /tmp/weft-chart.XXXXXX.gp)
  for g in core sync io http churn ruby pool sys tls; do
    # Rows: a benchmark's name (a label), then its peers' bars, then a gap;
    # NAME_epoll (weft forced to epoll) joins NAME's rows. dat columns:
    # y ratio xlow xhigh colour "peer" "value"; gp: the labels, the x range
    # (log when the ratios span 4x or more) and the number of rows.
    awk -v g="$g" -v dat="$dat" -v gp="$gp" '
      function str(line, key) {
        if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
        return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
      }
      /^ *\{"group":/ && match($0, /"ratio":[-0-9.eE+]+/) {
        r = substr($0, RSTART + 8, RLENGTH - 8) + 0
        grp = str($0, "group"); if (grp != g && !(g == "pool" && grp ~ /^pool/)) next
        name = str($0, "name"); if (g == "pool") name = grp "_" name
        peer = str($0, "peer")
        if (name ~ /_epoll$/) { sub(/_epoll$/, "", name); peer = "weft on epoll vs " peer }
        if (!(name in nrows)) order[++nnames] = name
        k = ++nrows[name]; ratio[name, k] = r; peers[name, k] = peer
        lo = (n++ == 0 || r < lo) ? r : lo; hi = (r > hi) ? r : hi
      }
      END {
        if (!n) exit 1
        for (i = 1; i <= nnames; i++) {
          name = order[i]; y += (i > 1) ? 0.6 : 1
          printf "set label %d \"%s\" at graph 0.01, first %g left font \"sans:Bold,9\" noenhanced\n", i, name, y > gp
          y++
          for (k = 1; k <= nrows[name]; k++) {
            r = ratio[name, k]
            printf "%g %g %g %g %s \"%s\" \"%.2fx\"\n", y, r, (r < 1 ? r : 1), (r < 1 ? 1 : r),
              (r >= 1 ? "0x3a8a4a" : "0xc04040"), peers[name, k], r > dat
            y++
          }
        }
        if (lo > 1) lo = 1; if (hi < 1) hi = 1
        if (hi / lo >= 4) {
          printf "set logscale x\nset xrange [%g:%g]\nset xtics (\"0.5\" 0.5, \"1\" 1, \"2\" 2, \"5\" 5, \"10\" 10, \"20\" 20, \"50\" 50)\n", lo / 1.6, hi * 2.2 > gp
        } else {
          span = hi - lo
          printf "set xrange [%g:%g]\n", lo - 0.12 * span - 0.05, hi + 0.3 * span + 0.15 > gp
        }
        printf "rows = %g\n", y > gp
      }' "$json" >/dev/null 2>&1 && : > /dev/null || { rm -f "$dat" "$gp"; dat=$(mktemp /tmp/weft-chart.XXXXXX.dat); gp=$(mktemp /tmp/weft-chart.XXXXXX.gp); continue; }
    rows=$(sed -n 's/^rows = //p' "$gp")
    gnuplot <<GP && echo "chart: $dir/ratios_$g.png" || echo "chart: gnuplot failed for $g" >&2
set terminal pngcairo size 800,$(awk -v r="$rows" 'BEGIN { printf "%d", 110 + 17 * r }') font "sans,9"
set output "$dir/ratios_$g.png"
set title "weft vs peers: $g — how many times better weft is (> 1: weft wins)\n{/*0.85 $(printf '%s' "$info" | sed 's/"/\\"/g')}"
load "$gp"
set yrange [rows + 0.1 : 0.3]
set ytics scale 0 noenhanced
set grid xtics lc rgb "#d0d0d0"
set xlabel "ratio (peer time / weft time, or weft rate / peer rate)"
set style fill solid 0.85 noborder
set key off
set lmargin 30
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb "#404040" lw 1.5 front
plot "$dat" using 2:1:3:4:(\$1 - 0.36):(\$1 + 0.36):5:ytic(6) with boxxyerror lc rgb variable, \
     "" using (\$2 >= 1 ? \$2 : NaN):1:7 with labels left offset 0.6,0 noenhanced, \
     "" using (\$2 < 1 ? \$2 : NaN):1:7 with labels right offset -0.6,0 noenhanced
GP
    : > "$dat"; : > "$gp"
  done
  rm -f "$dat" "$gp"
}
if [ "${1:-}" = --plot ]; then
  plot_charts "$out/latest.json"
  exit 0
fi

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

# Charts of the ratios, one per group, from the merged latest.json.
plot_charts "$out/latest.json"

if [ ${#failed[@]} -gt 0 ]; then
  echo "bench: failed parts: ${failed[*]}" >&2
  exit 1
fi
exit 0
