#!/usr/bin/env bash
# deps.sh MODE — install the Debian packages MODE (test, demo, bench) needs,
# if any is missing. The packages and the modes that need them are listed
# once, in scripts/deps.list. Runs apt-get as root (CI) or through sudo;
# otherwise prints the command to run and fails.
set -euo pipefail
mode=${1:-test}
case "$mode" in
  test|demo|bench) ;;
  *) echo "deps.sh: unknown mode $mode (test, demo or bench)" >&2; exit 2 ;;
esac
list="$(dirname "$0")/deps.list"
mapfile -t pkgs < <(awk -v m="$mode" '
  { sub(/#.*/, "") }
  NF >= 2 { n = split($2, ms, ","); for (i = 1; i <= n; i++) if (ms[i] == m) print $1 }' "$list")
[ ${#pkgs[@]} -gt 0 ] || { echo "deps.sh: no packages for $mode in $list" >&2; exit 1; }

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "weft: installing missing packages: ${missing[*]}"
if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "weft: run as root: apt-get install -y ${missing[*]}" >&2; exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq || true
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
