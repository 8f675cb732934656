#!/usr/bin/env bash
# build-ruby-latest.sh [--print-ruby | --print-rubies] [VERSION] — build a
# newer Ruby than Debian 12's (VERSION 3.3, the default, or 3.4) from
# Debian's ruby<VERSION> source package (3.3 from trixie, 3.4 from
# experimental; deb-src lines from scripts/debsrc.sh) into a cache
# directory outside the repository, once. `make test` then runs the Ruby
# suite, Ruby's own test/fiber and the README's Ruby examples on every
# Ruby built, so each version's hook signatures and scheduler changes are
# exercised (3.3: io_read offset, io_pread(io, buffer, from, length,
# offset), io_select; 3.4: the work it would offload, run in place).
#
#   --print-ruby     print where VERSION's ruby is (or will be), build nothing
#   --print-rubies   print every newer Ruby built so far, one per line
#
# Cache: ~/.cache/weft/ruby-VERSION (XDG_CACHE_HOME respected);
# WEFT_RUBY_CACHE overrides it for 3.3. Needs root (or sudo) once, to add
# the deb-src lines and the build packages.
set -euo pipefail
versions=(3.3 3.4)
cache_of() {
  local base=${XDG_CACHE_HOME:-$HOME/.cache}/weft/ruby-$1
  if [ "$1" = 3.3 ] && [ -n "${WEFT_RUBY_CACHE:-}" ]; then base=$WEFT_RUBY_CACHE; fi
  echo "$base"
}
print=""
case "${1:-}" in --print-ruby|--print-rubies) print=$1; shift ;; esac
want=${1:-3.3}
case " ${versions[*]} " in *" $want "*) ;; *) echo "build-ruby-latest: unknown version $want (${versions[*]})" >&2; exit 2 ;; esac
if [ "$print" = --print-rubies ]; then
  for v in "${versions[@]}"; do
    r=$(cache_of "$v")/prefix/bin/ruby
    [ -x "$r" ] && echo "$r"
  done
  exit 0
fi
cache=$(cache_of "$want")
prefix=$cache/prefix
if [ "$print" = --print-ruby ]; then echo "$prefix/bin/ruby"; exit 0; fi
if [ -x "$prefix/bin/ruby" ] && "$prefix/bin/ruby" -e "exit(RUBY_VERSION.start_with?('$want.') ? 0 : 1)"; then
  echo "weft: Ruby $("$prefix/bin/ruby" -e 'print RUBY_VERSION') cached in $prefix"
  exit 0
fi

if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "build-ruby-latest: needs root once (deb-src line, build packages)" >&2; exit 1
fi
export DEBIAN_FRONTEND=noninteractive
bash "$(dirname "$0")/debsrc.sh"
$sudo apt-get install -y -qq --no-install-recommends dpkg-dev gcc make \
  libssl-dev libyaml-dev zlib1g-dev libffi-dev libgmp-dev >/dev/null

mkdir -p "$cache/src"
cd "$cache/src"
if ! ls ruby${want}_*.orig.tar.* >/dev/null 2>&1; then
  # The index's newest first; a mirror that does not (or no longer) serve
  # it answers 404 at once, and the next one listed is tried.
  got=false
  for v in $(apt-cache showsrc "ruby$want" 2>/dev/null | sed -n 's/^Version: //p' | sort -rV | uniq); do
    if apt-get source --download-only "ruby$want=$v"; then got=true; break; fi
    echo "build-ruby-latest: ruby$want=$v could not be fetched; trying an older one" >&2
  done
  $got || { echo "build-ruby-latest: no ruby$want source package could be fetched" >&2; exit 1; }
fi
tarball=$(ls ruby${want}_*.orig.tar.* | sort -V | tail -n 1)
rm -rf build && mkdir build
tar -xf "$tarball" -C build --strip-components=1
cd build
# The upstream release tarball (Debian's .orig) builds without a base ruby.
./configure --prefix="$prefix" --disable-install-doc --disable-install-rdoc \
  --with-ruby-version=full >/dev/null
make -j"${WEFT_JOBS:-2}" >/dev/null
# HAVE_BASERUBY=no: install the bundled gems the tarball has (minitest is
# one) instead of trying to refresh them from rubygems.org (offline CI).
make install HAVE_BASERUBY=no >/dev/null
"$prefix/bin/ruby" -v
