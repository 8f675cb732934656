#!/usr/bin/env bash
# build-ruby-latest.sh [--print-ruby] — build Ruby 3.3 from Debian's
# ruby3.3 source package (trixie deb-src) into a cache directory outside
# the repository, once; `make test-ruby-latest` then runs test/ruby on it so
# the 3.2+/3.3 hook signatures (io_read offset, io_pread(io, buffer, from,
# length, offset), io_select) are exercised.
#
# WEFT_RUBY_CACHE: cache directory (default ~/.cache/weft/ruby-3.3).
# Needs root (or sudo) once, to add a deb-src line and the build packages.
set -euo pipefail
cache=${WEFT_RUBY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft/ruby-3.3}
prefix=$cache/prefix
if [ "${1:-}" = --print-ruby ]; then echo "$prefix/bin/ruby"; exit 0; fi
if [ -x "$prefix/bin/ruby" ] && "$prefix/bin/ruby" -e 'exit(RUBY_VERSION >= "3.3" ? 0 : 1)'; then
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
if ! ls ruby3.3_*.orig.tar.* >/dev/null 2>&1; then
  apt-get source --download-only ruby3.3
fi
tarball=$(ls ruby3.3_*.orig.tar.* | head -n 1)
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
