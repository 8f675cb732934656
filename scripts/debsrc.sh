#!/usr/bin/env bash
# debsrc.sh — make sure apt has a deb-src index for the machine's own
# Debian release and for trixie (source packages only: nothing from them
# is ever installed), then refresh the indexes. Used by
# scripts/build-ruby-latest.sh (ruby3.3's source) and
# scripts/fetch-ruby-fiber-suite.sh (ruby3.1's test/fiber). The mirror is the
# one this machine's apt sources already use; none is written here.
# Needs root, or sudo. Exits 1 with a message when it cannot.
set -euo pipefail
if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "debsrc: needs root once (a deb-src line in /etc/apt/sources.list.d)" >&2; exit 1
fi
list=/etc/apt/sources.list.d/weft-trixie-src.sources
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
if [ ! -f "$list" ] || ! grep -q "Suites: $codename trixie experimental" "$list"; then
  # The first Debian mirror among the configured sources (not the security
  # archive): deb822 .sources files and one-line .list files alike.
  uri=$(set +o pipefail
         { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
           cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
             | sed -n 's/^deb\(-src\)\{0,1\}[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]\{1,\}\).*/\3/p'
         } | grep -i debian | grep -v -e security -e '-ports' | head -n 1)
  if [ -z "$uri" ]; then echo "debsrc: no Debian mirror in /etc/apt sources" >&2; exit 1; fi
  printf 'Types: deb-src\nURIs: %s\nSuites: %s trixie experimental\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" "$codename" \
    | $sudo tee "$list" >/dev/null
  # A full update: restricting it to one list would drop the other indexes.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq || true
fi
