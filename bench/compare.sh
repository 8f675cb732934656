#!/usr/bin/env bash
# compare.sh BEFORE.json AFTER.json — two `make bench` results side by side
# (bench/results/latest.json of two runs), one line per row both have:
# weft's median before and after, the change, and whether the after
# median lies beyond the before run's own spread (its min..max over the
# runs) in the worse direction ("slower" / "faster"), else "within".
# Where the row has a peer measured in the same run, the ratio before and
# after is shown too: it is the figure to trust when the two runs had
# different machine load, since the peer shared that load.
#
#   bash bench/compare.sh <(git show REV:bench/results/latest.json) bench/results/latest.json
# No python: bash and awk.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: compare.sh BEFORE.json AFTER.json" >&2; exit 2; }
awk '
  function str(line, key) {
    if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
    return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
  }
  function num(line, key) {
    if (!match(line, "\"" key "\":[-0-9.eE+]+")) return ""
    return substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0
  }
  FNR == 1 { file++ }
  /^ *\{"group":/ {
    k = str($0, "group") "/" str($0, "name") "/" str($0, "peer")
    if (file == 1) {
      bmed[k] = num($0, "median"); bmin[k] = num($0, "min"); bmax[k] = num($0, "max")
      brat[k] = num($0, "ratio"); better[k] = str($0, "better"); unit[k] = str($0, "unit")
    } else if (k in bmed) {
      order[++n] = k
      amed[k] = num($0, "median"); arat[k] = num($0, "ratio")
    }
  }
  END {
    printf "%-44s %-10s %11s %11s %8s  %-7s %7s %7s\n", "row (group/name/peer)", "unit", "before", "after", "change", "verdict", "ratio<", "ratio>"
    for (i = 1; i <= n; i++) {
      k = order[i]
      lower = better[k] == "lower"
      ch = bmed[k] ? (amed[k] - bmed[k]) / bmed[k] * 100 : 0
      v = "within"
      if (lower ? amed[k] > bmax[k] : amed[k] < bmin[k]) v = "slower"
      else if (lower ? amed[k] < bmin[k] : amed[k] > bmax[k]) v = "faster"
      cnt[v]++
      name = k; if (length(name) > 44) name = substr(name, 1, 44)
      printf "%-44s %-10s %11.4g %11.4g %+7.1f%%  %-7s %7s %7s\n", name, unit[k], bmed[k], amed[k], ch, v,
        brat[k] == "" ? "-" : sprintf("%.2f", brat[k]), arat[k] == "" ? "-" : sprintf("%.2f", arat[k])
    }
    printf "\n%d rows: %d within the before run'"'"'s spread, %d faster, %d slower\n", n, cnt["within"], cnt["faster"], cnt["slower"]
  }' "$1" "$2"
