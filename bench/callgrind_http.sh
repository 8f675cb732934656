#!/usr/bin/env bash
# callgrind_http.sh — user-space instructions per HTTP keep-alive request:
# weft's example server (examples/http_server, io_uring) against the raw
# io_uring floor (bench/peers/raw_uring.c, the same parser), each run under
# callgrind for WEFT_CG_SECS (default 5) of wrk -t1 -c100; and for scale
# the stackful floor (bench/peers/raw_stacks.c: the same, each connection
# on a stack of its own).
#
#   bash bench/callgrind_http.sh [CONNS]      (needs valgrind, wrk)
#   WEFT_BUILD_DIR=build-x ...                (build there instead of build/)
#
# The example is built for this (in BUILD/nvg) without Valgrind's client
# requests (-DWEFT_NO_VALGRIND): natively weft skips them (it asks
# RUNNING_ON_VALGRIND once), but under callgrind they would run, and be
# counted as if the native path made them.
#
# Prints instructions per request for each, the ratio, and weft's costliest
# functions (self cost, per request). Instruction counts do not depend on
# the machine's load, so this is the stable figure behind the HTTP rows of
# make bench. Valgrind runs the server ~50x slower: the request counts are
# small, the per-request figure is not.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
bench_need callgrind_http.sh valgrind callgrind_annotate wrk curl cc
conns=${1:-100}
secs=${WEFT_CG_SECS:-5}
build=${WEFT_BUILD_DIR:-$root/build}
bin=$build/bench
tmp=$(mktemp -d /tmp/weft-cg.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
make -s -C "$root" -j2 BUILD="$build/nvg" CFLAGS=-DWEFT_NO_VALGRIND examples >/dev/null
mkdir -p "$bin"
for f in raw_uring raw_stacks; do
  cc -std=gnu11 -O2 -g -Wall -Wextra -Werror -I"$root/contrib/http" "$root/contrib/http/http_parse.c" \
    "$root/bench/peers/$f.c" -o "$bin/$f" -luring -lpthread
done

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000)); port_free $p && { echo $p; return; }; done; return 1; }

# measure NAME CMD... -> $tmp/NAME.res: "instructions requests" for the
# server run as CMD (in this shell, so that the trap sees its pid)
measure() {
  local name=$1 port out reqs ir; shift
  port=$(pick_port)
  valgrind --tool=callgrind --callgrind-out-file="$tmp/$name.cg" "$@" --port "$port" >/dev/null 2>"$tmp/$name.vg" &
  pid=$!
  for _ in $(seq 300); do curl -fs -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  out=$(wrk -t1 -c"$conns" -d"${secs}s" "http://127.0.0.1:$port/")
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  reqs=$(echo "$out" | awk '/ requests in / { print $1 }')
  ir=$(callgrind_annotate "$tmp/$name.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }')
  echo "$ir $reqs" > "$tmp/$name.res"
}

echo "== user-space instructions per request, wrk -t1 -c$conns -d${secs}s under callgrind"
exec 9>"$WEFT_BENCH_LOCK"; flock 9 # take turns with other benchmarks
measure weft "$build/nvg/examples/http_server" --quiet
measure floor "$bin/raw_uring"
measure stacks "$bin/raw_stacks"
read -r w_ir w_req < "$tmp/weft.res"
read -r f_ir f_req < "$tmp/floor.res"
read -r s_ir s_req < "$tmp/stacks.res"
awk -v wi="$w_ir" -v wr="$w_req" -v fi="$f_ir" -v fr="$f_req" -v si="$s_ir" -v sr="$s_req" 'BEGIN {
  w = wi / wr; f = fi / fr; s = si / sr
  printf "  weft http_server   %9.0f instructions/request (%d requests)\n", w, wr
  printf "  raw io_uring floor %9.0f instructions/request (%d requests)\n", f, fr
  printf "  stackful floor     %9.0f instructions/request (%d requests; raw_stacks: the floor, a stack per connection)\n", s, sr
  printf "  ratio weft / floor %9.2fx\n", w / f }'
# costliest NAME REQS ROWS: NAME's costliest functions, self instructions
# per request
costliest() {
  callgrind_annotate "$tmp/$1.cg" 2>/dev/null | awk -v n="$2" -v rows="$3" '
    /^-+$/ { sep++ ; next }
    sep >= 3 && /^ *[0-9,]+ / { ir = $1; gsub(",", "", ir); $1 = ""; if (k++ < rows) printf "  %7.0f %s\n", ir / n, $0 }'
}
echo
echo "weft's costliest functions (self instructions per request):"
costliest weft "$w_req" 40
echo
echo "the floor's costliest functions (self instructions per request):"
costliest floor "$f_req" 15
