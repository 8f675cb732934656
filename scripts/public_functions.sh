#!/usr/bin/env bash
# public_functions.sh [HEADER] — the names of the public functions declared
# in include/weft.h (every prototype "type weft_name("), one per line,
# sorted. Used by the tests that check each one is documented.
set -eu
hdr=${1:-"$(dirname "$0")/../include/weft.h"}
grep -oE '^[a-z].*[ *]weft_[a-z0-9_]+\(' "$hdr" | grep -oE 'weft_[a-z0-9_]+\($' |
  tr -d '(' | sort -u
