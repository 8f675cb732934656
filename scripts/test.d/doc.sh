#!/usr/bin/env bash
# doc.sh — the reference made from include/weft.h (make doc):
#   1. doxygen reads the header without a warning;
#   2. every public function and every public type of weft.h has its own
#      man page, whose NAME line is about it;
#   3. man renders every page without a warning (man --warnings -l), and
#      weft_read(3) has its synopsis, description and return value;
#   4. the HTML reference is there.
# Prints "[doc] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() { fail=$((fail+1)); echo "  FAIL  $1"; [ -n "${2:-}" ] && sed 's/^/        | /' "$2" | tail -n 20; }
tmp=$(mktemp -d /tmp/weft-doc-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
doc=build/doc
man3=$doc/man/man3

if make -s doc >"$tmp/make.log" 2>&1; then
  ok "make doc: $(ls "$man3" | wc -l) man pages, HTML in $doc/html"
else
  bad "make doc" "$tmp/make.log"
fi
if [ -f "$doc/warnings.log" ] && [ ! -s "$doc/warnings.log" ]; then
  ok "doxygen: no warning about include/weft.h"
else
  bad "doxygen warnings ($doc/warnings.log)" "$doc/warnings.log"
fi

# 2. A page per function and per type, each named in its NAME section.
check_pages() {  # KIND NAME...
  local kind=$1 n=0 f; shift
  : > "$tmp/missing.$kind"
  for f in "$@"; do
    n=$((n+1))
    if [ ! -f "$man3/$f.3" ]; then
      echo "$f: no $man3/$f.3" >> "$tmp/missing.$kind"
    elif ! sed -n '/^\.SH NAME/{n;p;}' "$man3/$f.3" | grep -q "^$(printf '%s' "$f" | sed 's/_/\\\\\\?_/g') \\\\- "; then
      echo "$f: NAME line is not about $f" >> "$tmp/missing.$kind"
    fi
  done
  if [ "$n" -gt 0 ] && [ ! -s "$tmp/missing.$kind" ]; then
    ok "every public $kind of weft.h ($n) has its man page"
  else
    bad "public ${kind}s without a man page (of $n)" "$tmp/missing.$kind"
  fi
}
mapfile -t funcs < <(bash scripts/public_functions.sh include/weft.h)
mapfile -t types < <(bash scripts/public_functions.sh --types include/weft.h)
check_pages function "${funcs[@]}"
check_pages type "${types[@]}"

# 3. Rendering.
: > "$tmp/warn"
for p in "$man3"/*.3; do
  MANWIDTH=80 man --warnings -l "$p" 2>"$tmp/one" >/dev/null || echo "$p: man failed" >> "$tmp/warn"
  [ -s "$tmp/one" ] && sed "s|^|$p: |" "$tmp/one" >> "$tmp/warn"
done
if [ -s "$tmp/warn" ]; then
  bad "man --warnings -l: warnings" "$tmp/warn"
else
  ok "man --warnings -l renders all $(ls "$man3"/*.3 | wc -l) pages without a warning"
fi
MANWIDTH=80 man -l "$man3/weft_read.3" > "$tmp/weft_read.txt" 2>&1
if grep -q '^NAME' "$tmp/weft_read.txt" && grep -q 'weft_read - read up to' "$tmp/weft_read.txt" &&
   grep -q 'ssize_t weft_read(int fd, void \*buf, size_t len, int64_t deadline);' "$tmp/weft_read.txt" &&
   grep -q '^RETURN VALUE' "$tmp/weft_read.txt" && grep -q -- '-ECONNRESET' "$tmp/weft_read.txt"; then
  ok "man -l weft_read.3: NAME, SYNOPSIS (the header's prototype), RETURN VALUE"
else
  bad "man -l weft_read.3" "$tmp/weft_read.txt"
fi

# 4. HTML.
if [ -s "$doc/html/index.html" ] && ls "$doc"/html/group__*.html >/dev/null 2>&1 &&
   grep -q 'weft_read' "$doc/html/group__io.html"; then
  ok "HTML reference: $doc/html/index.html, $(ls "$doc"/html/group__*.html | wc -l) group pages"
else
  bad "HTML reference in $doc/html"
fi

[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[doc] $pass passed, $fail failed"
[ "$fail" -eq 0 ]
