#!/usr/bin/env bash
# public_functions.sh [--types] [HEADER] — the names of the public functions
# declared in include/weft.h (every prototype "type weft_name("), or with
# --types of its public types (every typedef name), one per line, sorted.
# Used by the tests that check each one is documented.
set -eu
types=0
[ "${1:-}" = --types ] && { types=1; shift; }
hdr=${1:-"$(dirname "$0")/../include/weft.h"}
if [ $types = 1 ]; then
  # "typedef ... weft_x_t;", "} weft_x_t;" and "typedef r (*weft_x)(...);"
  { grep -oE '^typedef [^(]*[ *]weft_[a-z0-9_]+;' "$hdr" | grep -oE 'weft_[a-z0-9_]+;$'
    grep -oE '^\} weft_[a-z0-9_]+;' "$hdr" | grep -oE 'weft_[a-z0-9_]+;$'
    grep -oE '^typedef .*\(\*weft_[a-z0-9_]+\)' "$hdr" | grep -oE 'weft_[a-z0-9_]+\)$'
  } | tr -d ';)' | sort -u
else
  grep -oE '^[a-z].*[ *]weft_[a-z0-9_]+\(' "$hdr" | grep -oE 'weft_[a-z0-9_]+\($' |
    tr -d '(' | sort -u
fi
