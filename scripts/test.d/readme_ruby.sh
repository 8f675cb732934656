#!/usr/bin/env bash
# readme_ruby.sh — every ```ruby block of README.md, run as written on
# every backend (epoll, poll, io_uring where the kernel allows it), with
# Debian's Ruby 3.1 and with Ruby 3.3 when scripts/build-ruby-latest.sh has
# built it. A block passes when it exits 0 within the timeout.
#   * a block that uses PostgreSQL (PG.connect) runs against a throw-away
#     server (scripts/pg.sh), after a prelude below that supplies what the
#     snippet takes from its surroundings (conninfo, sql); the prelude
#     lives here, not in the README;
#   * any other block is a whole program.
# Prints "[readme_ruby] N passed, N failed"; appends "N M" to
# $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() { fail=$((fail+1)); echo "  FAIL  $1"; [ -n "${2:-}" ] && sed 's/^/        | /' "$2" | tail -n 25; }
tmp=$(mktemp -d /tmp/weft-readme-rb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The blocks, one file each: block_1.rb, block_2.rb, ...
awk -v dir="$tmp" '
  /^```ruby[[:space:]]*$/ { n++; f = dir "/block_" n ".rb"; inb = 1; next }
  /^```/ { if (inb) { inb = 0; close(f) } ; next }
  inb { print > f }' README.md
blocks=("$tmp"/block_*.rb)
if [ ! -e "${blocks[0]}" ]; then
  bad "no \`\`\`ruby block found in README.md"
fi

# prelude_for FILE — what a fragment needs; sets $prelude and $needs_pg.
prelude_for() {
  prelude=""; needs_pg=""
  if grep -q 'PG\.connect' "$1"; then
    needs_pg=1
    prelude='require "weft"
require "pg"
conninfo = ENV.fetch("WEFT_PG_CONNINFO")
sql = "select $1::int"'
  fi
}

rubies=(ruby)
mapfile -t -O 1 rubies < <(bash scripts/build-ruby-latest.sh --print-rubies)

# With --pg: only the blocks that need PostgreSQL (run by the main
# invocation under scripts/pg.sh, which sets WEFT_PG_CONNINFO).
want_pg=""
[ "${1:-}" = --pg ] && want_pg=1

for ruby in "${rubies[@]}"; do
  ver=$("$ruby" -e 'print RUBY_VERSION')
  if [ "$ruby" = ruby ]; then extdir=$(bash scripts/ruby-ext.sh); else extdir=$(bash scripts/ruby-ext.sh "$ruby"); fi || {
    bad "Ruby $ver: extension build"; continue; }
  backends=(epoll poll)
  [ "$(WEFT_BACKEND=io_uring "$ruby" -I "$extdir" -I lib -r weft -e 'print Weft::Scheduler.new.backend' 2>/dev/null)" = io_uring ] &&
    backends+=(io_uring)
  for f in "${blocks[@]}"; do
    prelude_for "$f"
    [ "$needs_pg" = "$want_pg" ] || continue
    if [ -n "$needs_pg" ] && ! "$ruby" -e 'require "pg"' 2>/dev/null; then
      # Debian's ruby-pg is built for its own Ruby only (no gem downloads here).
      echo "  (Ruby $ver has no pg library: README block ${f##*_} runs on the Ruby that has it)"
      continue
    fi
    name=$(basename "$f" .rb)
    line=$(grep -n '^```ruby' README.md | sed -n "${name#block_}p" | cut -d: -f1)
    { [ -n "$prelude" ] && printf '%s\n' "$prelude"; cat "$f"; } > "$tmp/run_$name.rb"
    for b in "${backends[@]}"; do
      log=$tmp/$name.$ver.$b.log
      if WEFT_BACKEND=$b timeout -k 5 60 "$ruby" -W0 -I "$extdir" -I lib "$tmp/run_$name.rb" >"$log" 2>&1 </dev/null; then
        ok "README.md:$line (ruby block ${name#block_}), Ruby $ver, $b"
      else
        bad "README.md:$line (ruby block ${name#block_}), Ruby $ver, $b: exit $?" "$log"
      fi
    done
  done
done

label=readme_ruby
if [ -n "$want_pg" ]; then
  label=readme_ruby_pg
elif grep -l 'PG\.connect' "${blocks[@]}" >/dev/null 2>&1; then
  if ! ruby -e 'require "pg"' 2>/dev/null; then
    bad "README ruby blocks with PostgreSQL: ruby-pg missing (scripts/deps.sh test installs it)"
  else
    # The blocks that need a database, against a throw-away server; they
    # report (and tally) on their own.
    bash scripts/pg.sh run bash "$0" --pg
    rc=$?
    if [ $rc -eq 3 ]; then
      bad "README ruby blocks with PostgreSQL: the server could not be started (scripts/pg.sh)"
    elif [ $rc -ne 0 ]; then
      echo "  (the PostgreSQL blocks failed: see above)"
    fi
  fi
fi

[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[$label] $pass passed, $fail failed"
[ "$fail" -eq 0 ]
