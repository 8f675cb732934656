#!/usr/bin/env bash
# fetch-ruby-fiber-suite.sh [RUBY] — obtain Ruby's own test/fiber suite for RUBY
# and set it up to run against Weft::Scheduler; prints the suite's
# directory (absolute) on stdout, everything else on stderr.
#
# RUBY: a Ruby executable (default `ruby`), or 3.1 (Debian's /usr/bin/ruby)
# or 3.3 or 3.4 (the ones scripts/build-ruby-latest.sh builds).
#
# The suite comes from the upstream tarball (.orig) of Debian's
# ruby<major.minor> source package, as Ruby 3.3 itself is built:
#   3.3, 3.4  the tarball scripts/build-ruby-latest.sh downloaded into
#        ~/.cache/weft/ruby-<version>/src (WEFT_RUBY_CACHE for 3.3);
#   else `apt-get source --download-only ruby<major.minor>` into
#        ~/.cache/weft/ruby-<major.minor>/src, once (the Debian revision of
#        the installed package if the deb-src index has it, else the
#        index's). It needs a deb-src line for the machine's release:
#        scripts/build-ruby-latest.sh adds one from the machine's own apt
#        sources.
# test/fiber/, tool/lib/ and tool/test/ are extracted into
# build/ruby-fiber-suite/<version>/ (never into the repository); the
# suite's scheduler.rb becomes scheduler.reference.rb and the adapter
# test/ruby/fiber_suite/scheduler.rb is copied in its place (every run, so
# edits to the adapter take effect).
# Exits 1, loudly, when the source cannot be had.
set -u
cd "$(dirname "$0")/.."
root=$PWD
say() { echo "fetch-ruby-fiber-suite: $*" >&2; }
die() {
  echo "" >&2
  echo "fetch-ruby-fiber-suite: *** FAILED: $* ***" >&2
  echo "" >&2
  exit 1
}

arg=${1:-ruby}
case $arg in
  3.1) ruby=/usr/bin/ruby ;;
  3.3|3.4) ruby=$(bash scripts/build-ruby-latest.sh --print-ruby "$arg") ;;
  *) ruby=$arg ;;
esac
command -v "$ruby" >/dev/null || die "$ruby not found"
ver=$("$ruby" -e 'print RUBY_VERSION') || die "$ruby does not run"
mm=${ver%.*}
pkg=ruby$mm
cache_base=${XDG_CACHE_HOME:-$HOME/.cache}/weft
built=""
case $mm in 3.3|3.4) built=1 ;; esac
if [ -n "$built" ]; then
  srcdir=$(dirname "$(bash scripts/build-ruby-latest.sh --print-ruby "$mm")")/../../src
else
  srcdir=$cache_base/ruby-$mm/src
fi

# The cached upstream tarball, preferring the one of this exact version.
find_tarball() {
  local t
  t=$(ls "$srcdir/${pkg}_$ver".orig.tar.* 2>/dev/null | head -n 1)
  [ -n "$t" ] || t=$(ls "$srcdir/${pkg}"_*.orig.tar.* 2>/dev/null | sort -V | tail -n 1)
  echo "$t"
}
tarball=$(find_tarball)
if [ -z "$tarball" ]; then
  if [ -n "$built" ]; then
    die "no ${pkg} source tarball in $srcdir: run scripts/build-ruby-latest.sh $mm (make test-ruby-latest), which downloads it"
  fi
  command -v apt-get >/dev/null || die "apt-get missing: cannot fetch the $pkg source package"
  if ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q "^Package: $pkg\$"; then
    bash scripts/debsrc.sh >&2 || true
  fi
  if ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q "^Package: $pkg\$"; then
    die "no deb-src index lists $pkg: the suite for Ruby $mm cannot be fetched. Add a deb-src line for this release (scripts/build-ruby-latest.sh adds one from the machine's apt sources), run apt-get update, retry"
  fi
  mkdir -p "$srcdir" || die "cannot create $srcdir"
  # The installed interpreter's own Debian revision first (its tests match
  # it); the deb-src index may only list the release's original one.
  binpkg=$(dpkg-query -S "$(readlink -f "$(command -v "$ruby")")" 2>/dev/null | head -n 1 | cut -d: -f1)
  debver=""
  [ -n "$binpkg" ] && debver=$(dpkg-query -W -f='${Version}' "$binpkg" 2>/dev/null)
  say "fetching the $pkg source package into $srcdir (once)"
  got=false
  if [ -n "$debver" ] && ( cd "$srcdir" && apt-get source --download-only "$pkg=$debver" ) >&2 2>/dev/null; then
    got=true
  else
    [ -n "$debver" ] && say "$pkg=$debver (the installed revision) is not in the deb-src index; taking the index's $pkg"
    ( cd "$srcdir" && apt-get source --download-only "$pkg" ) >&2 && got=true
  fi
  $got || die "apt-get source --download-only $pkg failed (network? deb-src?): the suite for Ruby $mm was not run"
  tarball=$(find_tarball)
  [ -n "$tarball" ] || die "apt-get source $pkg left no .orig tarball in $srcdir"
fi

base=$(basename "$tarball")
srcver=${base#"${pkg}_"}; srcver=${srcver%%.orig.tar.*}
if [ "$srcver" != "$ver" ]; then
  say "WARNING: the suite is Ruby $srcver's, the interpreter is $ver: a test whose expectation changed between them fails under any scheduler (the runner's reference baseline shows which)"
fi

dest=$root/build/ruby-fiber-suite/$srcver
stamp=$dest/.extracted-from
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$base" ]; then
  say "extracting test/fiber and Ruby's test framework from $base"
  tmp=$dest.tmp.$$
  rm -rf "$tmp"; mkdir -p "$tmp" || die "cannot create $tmp"
  top=$(tar -tf "$tarball" 2>/dev/null | head -n 1 | cut -d/ -f1)
  [ -n "$top" ] || { rm -rf "$tmp"; die "cannot read $tarball"; }
  if ! tar -xf "$tarball" -C "$tmp" --strip-components=1 --wildcards \
      "$top/test/fiber/*" "$top/tool/lib/*" "$top/tool/test/*.rb"; then
    rm -rf "$tmp"; die "extracting from $tarball failed"
  fi
  [ -f "$tmp/test/fiber/scheduler.rb" ] && [ -f "$tmp/tool/test/runner.rb" ] \
    || { rm -rf "$tmp"; die "$base has no test/fiber/scheduler.rb or tool/test/runner.rb"; }
  mv "$tmp/test/fiber/scheduler.rb" "$tmp/test/fiber/scheduler.reference.rb"
  echo "$base" > "$tmp/.extracted-from"
  rm -rf "$dest"; mv "$tmp" "$dest" || die "cannot move $tmp to $dest"
fi
cp "$root/test/ruby/fiber_suite/scheduler.rb" "$dest/test/fiber/scheduler.rb.tmp.$$" \
  && mv -f "$dest/test/fiber/scheduler.rb.tmp.$$" "$dest/test/fiber/scheduler.rb" \
  || die "cannot install the adapter into $dest/test/fiber"
echo "$dest"
