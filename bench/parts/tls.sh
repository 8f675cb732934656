#!/usr/bin/env bash
# tls.sh — what TLS costs with weft_tls, against the same work over plain
# TCP and against other TLS servers, in one run:
#   1. bulk: one connection sends WEFT_TLS_BULK_MIB (default 1024) MiB one
#      way (bench/tls/tls_echo --bulk): weft_tls against the same weft
#      program over plain TCP, and against OpenSSL on its own socket BIO
#      with blocking threads and SSL_OP_ENABLE_KTLS (kernel TLS whenever
#      the kernel offers it; the probe below says whether it does);
#   2. echo: 100 connections echo 64-byte messages (tls_echo --rtt):
#      round trips/s and the process's CPU per round trip, TLS against TCP;
#   3. HTTPS keep-alive: examples/http_server --tls-cert against the same
#      server over plain HTTP and against nginx with TLS (1 worker, the
#      same certificate), wrk -t2 -c100: requests/s and the server's CPU
#      time per request (steadier than requests/s on a shared machine).
# WEFT_BENCH_REPS (default 5) runs of each, interleaved, each under the
# benchmark lock; WEFT_TLS_SECS (default 3) seconds per timed run.
# Ratios (bench/run.sh): > 1 means weft_tls is better than the peer; for
# the "plain TCP" peers a ratio below 1 is what encryption costs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"
reps=${WEFT_BENCH_REPS:-5}
secs=${WEFT_TLS_SECS:-3}
mib=${WEFT_TLS_BULK_MIB:-1024}
G=tls
bin=$root/build/bench/tls
tmp=$(mktemp -d /tmp/weft-bench-tls.XXXXXX)
pids=() # the servers, stopped on any exit
trap '[ ${#pids[@]} -eq 0 ] || { kill "${pids[@]}"; wait "${pids[@]}"; } 2>/dev/null; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

bench_need tls.sh wrk nginx curl openssl cc
for f in build/libweft_tls.a build/examples/http_server; do
  [ -e "$root/$f" ] || { echo "tls.sh: $f missing (make, with libssl-dev)" >&2; exit 1; }
done
mkdir -p "$bin"
uring=""; nm "$root/build/libweft.a" 2>/dev/null | grep ' U io_uring_' >/dev/null && uring=-luring
cc -std=gnu11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I"$root/include" \
  "$root/bench/tls/tls_echo.c" -o "$bin/tls_echo" "$root/build/libweft_tls.a" \
  "$root/build/libweft.a" -lssl -lcrypto $uring -lpthread -lm

ktls=$("$bin/tls_echo" --ktls-probe)
echo
echo "== tls: kernel TLS on $(uname -r): $ktls"
if [[ $ktls == available* ]]; then
  ktls_note="kTLS available: the OpenSSL peer uses it (weft_tls cannot: memory BIO)"
else
  ktls_note="no kTLS on this kernel, so the OpenSSL peer runs in user space too"
fi

# ---- 1 and 2: tls_echo ------------------------------------------------------
declare -A bulk rt rtcpu
for ((r = 0; r < reps; r++)); do
  for m in tls plain ossl; do
    bulk[$m]+="$(bench_runs "$bin/tls_echo" --mode $m --bulk "$mib" 2>/dev/null) "
  done
  for m in tls plain; do
    set -- $(bench_runs "$bin/tls_echo" --mode $m --rtt "$secs" --conns 100 --msg 64)
    rt[$m]+="$1 "; rtcpu[$m]+="$2 "
  done
done
bench_header "tls: one connection, $mib MiB one way, MiB/s (higher is better)"
bench_report $G bulk_vs_tcp MiB/s higher "${bulk[tls]}" "weft, plain TCP" "${bulk[plain]}" \
  "the same program without TLS: below 1 is what encryption costs"
bench_report $G bulk_vs_openssl MiB/s higher "${bulk[tls]}" "OpenSSL socket BIO, threads" "${bulk[ossl]}" \
  "$ktls_note"
bench_header "tls: 100 connections echoing 64-byte messages (round trips/s higher, CPU lower is better)"
bench_report $G echo_100conn_vs_tcp rt/s higher "${rt[tls]}" "weft, plain TCP" "${rt[plain]}" \
  "client and server in one process, on two threads"
bench_report $G echo_cpu_per_rt_vs_tcp us/rt lower "${rtcpu[tls]}" "weft, plain TCP" "${rtcpu[plain]}" \
  "CPU of client and server together per round trip"

# ---- 3: HTTPS keep-alive -------------------------------------------------------
# One certificate for both TLS servers.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
  >/dev/null 2>&1
free_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 12000))
  (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }; done; return 1; }
declare -A port spid
start() { # NAME SCHEME CMD...
  local name=$1 scheme=$2; shift 2
  "$@" & spid[$name]=$!; pids+=($!)
  for _ in $(seq 100); do curl -ksf -o /dev/null "$scheme://127.0.0.1:${port[$name]}/" && return 0; sleep 0.1; done
  echo "tls.sh: $name did not start" >&2; exit 1
}
port[weft_tls]=$(free_port)
start weft_tls https "$root/build/examples/http_server" --port "${port[weft_tls]}" --quiet \
  --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" >"$tmp/weft.out"
port[weft_http]=$(free_port)
start weft_http http "$root/build/examples/http_server" --port "${port[weft_http]}" --quiet >/dev/null
port[nginx]=$(free_port)
mkdir -p "$tmp/nginx"
sed -e "s|@DIR@|$tmp/nginx|g; s|@PORT@|${port[nginx]}|; s|@CERT@|$tmp/cert.pem|; s|@KEY@|$tmp/key.pem|" \
  "$root/bench/peers/nginx_tls.conf.in" > "$tmp/nginx/nginx.conf"
start nginx https nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/error.log"
backend=$(sed -n 's/.*, \([a-z_]*\) backend.*/\1/p' "$tmp/weft.out")

# Clock ticks of user+system time of a server and its child processes
# (nginx's worker).
ticks() {
  local procs=/proc/$1/stat c
  for c in $(pgrep -P "$1"); do procs+=" /proc/$c/stat"; done
  # shellcheck disable=SC2086
  cat $procs 2>/dev/null | awk '{ sub(/^.*\) /, ""); t += $12 + $13 } END { print t + 0 }'
}
export -f ticks
hz=$(getconf CLK_TCK)
# "requests/s CPU-us-per-request" of one wrk run against NAME.
wrk_run() { # NAME SCHEME SECS
  local out
  out=$(bench_locked bash -c 'c0=$(ticks "$1"); wrk -t2 -c100 -d"$2"s "$3" || exit 1; echo "TICKS $(( $(ticks "$1") - c0 ))"' \
          _ "${spid[$1]}" "$3" "$2://127.0.0.1:${port[$1]}/") || { echo "tls.sh: wrk failed against $1" >&2; echo "0 0"; return; }
  grep -q 'Socket errors\|Non-2xx' <<<"$out" && echo "$1: $(grep 'Socket errors\|Non-2xx' <<<"$out")" >> "$tmp/errors"
  awk -v hz="$hz" '/^Requests\/sec:/ { r = $2 } / requests in / { n = $1 } /^TICKS/ { t = $2 }
    END { printf "%.0f %.2f\n", r, (n > 0 ? t * 1e6 / hz / n : 0) }' <<<"$out"
}
declare -A rps cpu
scheme() { [ "$1" = weft_http ] && echo http || echo https; }
for s in weft_tls weft_http nginx; do wrk_run $s "$(scheme $s)" 1 >/dev/null; done # warm-up
for ((r = 0; r < reps; r++)); do
  for s in weft_tls weft_http nginx; do
    set -- $(wrk_run $s "$(scheme $s)" "$secs")
    rps[$s]+="$1 "; cpu[$s]+="$2 "
  done
done
nginx_label="nginx $(nginx -v 2>&1 | sed 's|.*/||') TLS, 1 worker"
bench_header "tls: HTTPS keep-alive hello world, wrk -t2 -c100 -d${secs}s (weft on ${backend:-?}; same certificate, TLS 1.3)"
bench_report $G https_100conn req/s higher "${rps[weft_tls]}" "$nginx_label" "${rps[nginx]}" \
  "shared cores: wrk's own TLS work competes with the server"
bench_report $G https_vs_http_100conn req/s higher "${rps[weft_tls]}" "weft http_server, plain HTTP" \
  "${rps[weft_http]}" "the same server without TLS"
bench_report $G https_cpu_per_req us/req lower "${cpu[weft_tls]}" "$nginx_label" "${cpu[nginx]}" \
  "server CPU (user+system) per request"
bench_report $G https_cpu_vs_http us/req lower "${cpu[weft_tls]}" "weft http_server, plain HTTP" \
  "${cpu[weft_http]}" "server CPU per request without TLS"
if [ -s "$tmp/errors" ]; then
  echo "   wrk reported errors:"; sed 's/^/     /' "$tmp/errors"
else
  echo "   wrk reported no socket errors and no non-2xx responses"
fi
