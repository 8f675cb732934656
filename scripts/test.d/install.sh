#!/usr/bin/env bash
# install.sh — `make install` as a C user meets it, into a temporary prefix
# (PREFIX, not DESTDIR: the installed weft.pc then names the directory the
# files really are in):
#   0. man weft_read finds the installed page;
#   1. the README's echo server, taken from README.md's text, built with the
#      README's own command line (pkg-config, and the rpath for a prefix
#      outside the linker's search path), runs without LD_LIBRARY_PATH and
#      echoes; started again on the same port it exits non-zero and says why;
#   2. `make uninstall` removes exactly what install added (files that were
#      in the prefix before stay);
#   3. the ldconfig rule: run for /usr and /usr/local, not with DESTDIR nor
#      for other prefixes (checked with make -n: the test does not write
#      outside its temporary directory).
# Prints "[install] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() { fail=$((fail+1)); echo "  FAIL  $1"; [ -n "${2:-}" ] && sed 's/^/        | /' "$2" | tail -n 20; }
tmp=$(mktemp -d /tmp/weft-install-test.XXXXXX)
prefix=$tmp/prefix
srv=""
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
listing() { (cd "$prefix" && find . \( -type f -o -type l \) | sort); }

# Files that belong to someone else; uninstall must leave them.
mkdir -p "$prefix/lib" "$prefix/include" "$prefix/share/man/man3"
touch "$prefix/lib/libother.so.1" "$prefix/include/other.h" "$prefix/share/man/man3/other.3"
listing > "$tmp/before"

if make -s install PREFIX="$prefix" >"$tmp/install.log" 2>&1; then
  ok "make install PREFIX=<temporary directory>"
else
  bad "make install PREFIX=<temporary directory>" "$tmp/install.log"
fi
listing > "$tmp/after"
# The man pages: man finds weft_read(3) in the prefix.
page=$(man -M "$prefix/share/man" -w weft_read 2>/dev/null)
if [ "$page" = "$prefix/share/man/man3/weft_read.3" ] &&
   MANWIDTH=80 man -M "$prefix/share/man" weft_read 2>/dev/null | grep -q 'weft_read - read up to'; then
  ok "man weft_read: the installed page ($(ls "$prefix"/share/man/man3/weft*.3 | wc -l) weft pages)"
else
  bad "man weft_read: '${page}' is not the installed page"
fi

# 1. The README's echo server, built as the README says.
awk '/^```c[ \t]*$/ { inb = 1; t = ""; next }
     inb && /^```/  { inb = 0; if (t ~ /weft_tcp_listen/ && t ~ /int main\(/) { printf "%s", t; exit } next }
     inb            { t = t $0 "\n" }' README.md > "$tmp/echo.c"
cmd=$(grep -m1 '^cc echo\.c .*pkg-config.*rpath' README.md)
if [ ! -s "$tmp/echo.c" ] || [ -z "$cmd" ]; then
  bad "README.md: no echo server block or no 'cc echo.c ... rpath' command line"
elif (cd "$tmp" && env -u LD_LIBRARY_PATH PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
        bash -c "$cmd -o echo") >"$tmp/cc.log" 2>&1; then
  ok "README echo server builds with the README's command: $cmd"
else
  bad "README echo server: $cmd" "$tmp/cc.log"
fi

if [ -x "$tmp/echo" ]; then
  lib=$(env -u LD_LIBRARY_PATH ldd "$tmp/echo" | awk '/libweft\.so/ { print $3 }')
  if [ "$lib" = "$prefix/lib/libweft.so.0" ]; then
    ok "the program loads libweft.so.0 from the prefix, without LD_LIBRARY_PATH"
  else
    env -u LD_LIBRARY_PATH ldd "$tmp/echo" > "$tmp/ldd.log" 2>&1
    bad "the program's libweft.so.0 resolves to '${lib}', not $prefix/lib" "$tmp/ldd.log"
  fi
  # A port nobody listens on: try a few, the server says when one is taken.
  port=""
  for try in 1 2 3 4 5 6 7 8; do
    p=$((20000 + (RANDOM * 7 + $$ + try * 997) % 40000))
    env -u LD_LIBRARY_PATH "$tmp/echo" "$p" >"$tmp/srv.out" 2>"$tmp/srv.err" &
    srv=$!
    for _ in $(seq 50); do
      if ! kill -0 "$srv" 2>/dev/null; then break; fi
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
      sleep 0.1
    done
    [ -n "$port" ] && break
    kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=""
  done
  if [ -z "$port" ]; then
    bad "README echo server: never accepted a connection" "$tmp/srv.err"
  else
    reply=""
    if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
      printf 'hello, weft\n' >&3
      IFS= read -r -t 5 reply <&3
      exec 3<&-
    fi
    if [ "$reply" = "hello, weft" ]; then
      ok "README echo server on port $port echoes 'hello, weft'"
    else
      bad "README echo server on port $port answered '${reply}'" "$tmp/srv.err"
    fi
    # The same port again: taken.
    timeout 10 env -u LD_LIBRARY_PATH "$tmp/echo" "$port" >"$tmp/dup.out" 2>"$tmp/dup.err"; rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -qi "port $port: .*in use" "$tmp/dup.err"; then
      ok "port taken: exits $rc with '$(head -n1 "$tmp/dup.err")'"
    else
      echo "exit status $rc" >> "$tmp/dup.err"
      bad "port taken: the second server must exit non-zero and say why" "$tmp/dup.err"
    fi
    kill -TERM "$srv"; wait "$srv" 2>/dev/null; srv=""
  fi
fi

# 2. Uninstall: back to the files that were there before.
if make -s uninstall PREFIX="$prefix" >"$tmp/uninstall.log" 2>&1 &&
   listing > "$tmp/final" && cmp -s "$tmp/before" "$tmp/final"; then
  ok "make uninstall removes the $(comm -13 "$tmp/before" "$tmp/after" | wc -l) installed files and nothing else"
else
  { cat "$tmp/uninstall.log"; echo "-- before install / after uninstall:"; diff "$tmp/before" "$tmp/final"; } > "$tmp/un.diff" 2>&1
  bad "make uninstall" "$tmp/un.diff"
fi

# 3. ldconfig only for a real install into the linker's own directories.
ld() { make -n "$@" 2>/dev/null | grep -c '^ldconfig$'; }
if [ "$(ld install PREFIX=/usr/local)" = 1 ] && [ "$(ld install PREFIX=/usr)" = 1 ] &&
   [ "$(ld install PREFIX=/usr/local DESTDIR=/tmp/stage)" = 0 ] &&
   [ "$(ld install PREFIX=/opt/weft)" = 0 ] && [ "$(ld uninstall PREFIX=/usr/local)" = 1 ]; then
  ok "ldconfig runs for PREFIX=/usr and /usr/local, not with DESTDIR or for /opt/weft"
else
  bad "the ldconfig rule of make install/uninstall"
fi

[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[install] $pass passed, $fail failed"
[ "$fail" -eq 0 ]
