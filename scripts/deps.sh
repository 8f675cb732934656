#!/usr/bin/env bash
# deps.sh MODE — install the Debian packages MODE needs (test, demo, bench),
# if any is missing. Runs apt-get as root (CI) or through sudo; otherwise
# prints the command to run and fails.
set -euo pipefail
mode=${1:-test}

common=(make gcc clang libclang-rt-14-dev liburing-dev)
case "$mode" in
  test)  pkgs=("${common[@]}" valgrind gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user) ;;
  demo)  pkgs=("${common[@]}") ;;
  bench) pkgs=("${common[@]}" g++ libboost-context-dev) ;;
  *) echo "deps.sh: unknown mode $mode" >&2; exit 2 ;;
esac
# Extra packages that later parts of the project add, one file per part.
for f in "$(dirname "$0")"/deps.d/*."$mode" ; do
  [ -f "$f" ] && while read -r p; do [ -n "$p" ] && pkgs+=("$p"); done < "$f"
done

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
