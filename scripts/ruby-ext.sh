#!/usr/bin/env bash
# ruby-ext.sh [RUBY] — build the Ruby extension and print the directory
# that holds weft/weft.so (put it on the load path before lib/).
#
#   no RUBY  `make ruby` for the Makefile's Ruby: lib/weft/weft.so; prints "lib"
#   RUBY     another Ruby (a path): built under build/ruby-<version>/obj,
#            copied to build/ruby-<version>/lib/weft/weft.so; prints
#            "build/ruby-<version>/lib"
#
# Paths are relative to the repository root. Compiler errors go to stderr;
# exits 1 when the build fails. Used by scripts/test.d/ruby.sh and
# scripts/test.d/ruby_fiber_suite.sh.
set -u
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  make -s ruby >/dev/null || exit 1
  echo lib
  exit 0
fi
ruby=$1
if ! command -v "$ruby" >/dev/null; then
  echo "ruby-ext: $ruby not found" >&2; exit 1
fi
ver=$("$ruby" -e 'print RUBY_VERSION') || exit 1
bdir=build/ruby-$ver
mkdir -p "$bdir/obj" "$bdir/lib/weft"
# One build at a time per Ruby (test runs may overlap in a shared checkout).
if command -v flock >/dev/null; then
  exec 9>"$bdir/.build.lock"
  flock -w 900 9 || { echo "ruby-ext: $bdir is locked by another build" >&2; exit 1; }
fi
ext=$PWD/ext/weft/extconf.rb
# extconf again when it or the set of files changed (directory mtimes).
for d in src/reactor include ext/weft "$ext"; do
  [ "$bdir/obj/Makefile" -nt "$d" ] || rm -f "$bdir/obj/Makefile"
done
( cd "$bdir/obj" && { [ -f Makefile ] || "$ruby" "$ext" >/dev/null; } && make -s V=0 >/dev/null ) || exit 1
cp "$bdir/obj/weft.so" "$bdir/lib/weft/weft.so.tmp.$$" && mv -f "$bdir/lib/weft/weft.so.tmp.$$" "$bdir/lib/weft/weft.so" || exit 1
echo "$bdir/lib"
