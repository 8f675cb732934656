#!/usr/bin/env bash
# tls.sh — the TLS programs as processes (the API itself is tested by
# test/c/t_tls*.c, on every backend, by test/c/run.sh):
#   1. `make install` into a temporary prefix; the README's TLS client,
#      taken from README.md's text, builds with the README's command line
#      (pkg-config weft-tls) and fetches the status line from a local
#      HTTPS server, trusting the test CA through SSL_CERT_FILE (it uses
#      the system store); without that it refuses the certificate;
#   2. on each backend, examples/http_server --tls-cert/--tls-key against
#      examples/https_get (by name and by IP address, an untrusted CA
#      refused; wrong names: test/c/t_tls*.c), curl, and wrk over HTTPS (1 s of keep-alive
#      load, no errors); SIGTERM then ends the server cleanly.
# The CA and certificates are made here with the openssl command, in a
# temporary directory. Prints "[tls] N passed, N failed" and appends
# "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/weft-tls-test.XXXXXX) srv="" # srv: the server running, if any
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() { fail=$((fail+1)); echo "  FAIL  $1"; [ -n "${2:-}" ] && sed 's/^/        | /' "$2" | tail -n 20; }
finish() {
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
  echo "[tls] $pass passed, $fail failed"
  [ "$fail" -eq 0 ]; exit
}

for p in build/examples/http_server build/examples/https_get build/libweft_tls.a; do
  [ -e "$p" ] || { bad "$p missing (make all, with libssl-dev)"; finish; }
done
command -v openssl >/dev/null || { bad "openssl command missing (apt-get install openssl)"; finish; }

# A throw-away CA and a certificate for localhost / 127.0.0.1 signed by it,
# and a second CA that signed nothing.
(
  cd "$tmp" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=weft tls.sh CA" -keyout ca.key -out ca.pem &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=weft other CA" -keyout other.key -out other.pem &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout srv.key -out srv.csr &&
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > ext &&
  openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile ext -out srv.pem
) >"$tmp/pki.log" 2>&1 || { bad "making the test certificates" "$tmp/pki.log"; finish; }

# start_server BACKEND: http_server over TLS on a free port; sets $srv, $port.
start_server() {
  WEFT_BACKEND=$1 build/examples/http_server --port 0 --tls-cert "$tmp/srv.pem" \
    --tls-key "$tmp/srv.key" >"$tmp/srv.out" 2>"$tmp/srv.err" &
  srv=$!; port=""
  for _ in $(seq 100); do
    port=$(sed -n 's|.*https://127.0.0.1:\([0-9]*\)/.*|\1|p' "$tmp/srv.out")
    [ -n "$port" ] && return 0; sleep 0.05
  done
  return 1
}
stop_server() { # LABEL
  kill -TERM "$srv"; local rc=124
  for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || { wait "$srv"; rc=$?; break; }; sleep 0.05; done
  if [ "$rc" = 0 ] && grep -q "stopped:" "$tmp/srv.err"; then ok "$1: SIGTERM ends it, exit 0"
  else kill -KILL "$srv" 2>/dev/null; bad "$1: SIGTERM (exit $rc)" "$tmp/srv.err"; fi
  srv=""
}

# 1. The README's client, built as the README says against an installed prefix.
prefix=$tmp/prefix
if make -s install PREFIX="$prefix" >"$tmp/install.log" 2>&1 &&
   [ -f "$prefix/lib/pkgconfig/weft-tls.pc" ] && [ -f "$prefix/include/weft_tls.h" ]; then
  ok "make install puts libweft_tls, weft_tls.h and weft-tls.pc in the prefix"
else
  bad "make install (TLS part)" "$tmp/install.log"
fi
awk '/^```c[ \t]*$/ { inb = 1; t = ""; next }
     inb && /^```/  { inb = 0; if (t ~ /weft_tls_dial/) { printf "%s", t; exit } next }
     inb            { t = t $0 "\n" }' README.md > "$tmp/https_head.c"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
if [ -s "$tmp/https_head.c" ] &&
   cc "$tmp/https_head.c" -o "$tmp/https_head" $(pkg-config --cflags --libs weft-tls) \
     -Wl,-rpath,"$(pkg-config --variable=libdir weft-tls)" >"$tmp/cc.log" 2>&1; then
  ok "README TLS client builds with: cc https_head.c \$(pkg-config --cflags --libs weft-tls)"
else
  bad "README TLS client build" "$tmp/cc.log"
fi
if start_server ""; then
  out=$(SSL_CERT_FILE=$tmp/ca.pem "$tmp/https_head" localhost "$port" 2>&1)
  if [ "$out" = "HTTP/1.1 200 OK" ]; then ok "README TLS client: '$out' from https://localhost:$port/"
  else echo "$out" > "$tmp/out"; bad "README TLS client against the local server" "$tmp/out"; fi
  if ! "$tmp/https_head" localhost "$port" >"$tmp/out" 2>&1 && grep -q "certificate verify failed" "$tmp/out"; then
    ok "README TLS client: the test CA is not in the system store, so it refuses"
  else
    bad "README TLS client accepted a certificate it cannot verify" "$tmp/out"
  fi
  stop_server "http_server (default backend)"
else
  bad "http_server --tls-cert did not start" "$tmp/srv.err"
fi

# 2. http_server over TLS with https_get, curl and wrk, per backend.
for b in io_uring epoll poll; do
  if ! start_server "$b"; then bad "$b: http_server --tls-cert did not start" "$tmp/srv.err"; continue; fi
  be=$(sed -n 's/.* \([a-z_]*\) backend.*/\1/p' "$tmp/srv.out")
  g=build/examples/https_get
  if [ "$($g --ca "$tmp/ca.pem" "https://localhost:$port/" 2>"$tmp/get.err")" = "Hello, World!" ] &&
     [ "$($g --ca "$tmp/ca.pem" "https://127.0.0.1:$port/" 2>>"$tmp/get.err")" = "Hello, World!" ]; then
    ok "$be: https_get https://localhost:$port/ and https://127.0.0.1:$port/"
  else
    bad "$be: https_get" "$tmp/get.err"
  fi
  if ! $g --ca "$tmp/other.pem" "https://localhost:$port/" >/dev/null 2>"$tmp/get.err" &&
     grep -q "certificate verify failed" "$tmp/get.err"; then
    ok "$be: https_get refuses a certificate from a CA it does not trust"
  else
    bad "$be: https_get accepted what it must refuse" "$tmp/get.err"
  fi
  if command -v curl >/dev/null; then
    if [ "$(curl -s --cacert "$tmp/ca.pem" "https://localhost:$port/" "https://localhost:$port/")" = "Hello, World!Hello, World!" ]; then
      ok "$be: curl, two requests on one connection"
    else
      bad "$be: curl"
    fi
  fi
  if command -v wrk >/dev/null; then
    wrk -t1 -c20 -d1 "https://localhost:$port/" >"$tmp/wrk.out" 2>&1
    reqs=$(awk '/requests in/ { print $1 }' "$tmp/wrk.out")
    if [ "${reqs:-0}" -gt 0 ] && ! grep -q "Socket errors\|Non-2xx" "$tmp/wrk.out"; then
      ok "$be: wrk over HTTPS, 20 connections, 1 s: $reqs requests, no errors"
    else
      bad "$be: wrk over HTTPS" "$tmp/wrk.out"
    fi
  fi
  stop_server "$be: http_server --tls-cert"
done
finish
