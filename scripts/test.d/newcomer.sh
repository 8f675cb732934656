#!/usr/bin/env bash
# newcomer.sh — what a newcomer does first, exactly as README.md says it:
# in a fresh copy of the tree (only the files git tracks, no build/, no
# lib/weft/weft.so), run `make`, then every command of the README's Ruby
# section (its indented shell lines: make, the ruby one-liner, gem build),
# each as written. Checks that `make` built the library, the examples and
# the Ruby extension, and that each command exits 0 (the one-liner must
# print its three fibers' numbers).
# Prints "[newcomer] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
suite=newcomer
. scripts/tally.sh
tmp=$(mktemp -d /tmp/weft-newcomer.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/weft
mkdir -p "$tree"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$tree"

if (cd "$tree" && make) >"$tmp/make.log" 2>&1; then ok "make in a fresh tree"; else bad "make in a fresh tree" "$tmp/make.log"; fi
for f in build/libweft.a build/libweft.so build/examples/echo_server lib/weft/weft.so; do
  if [ -e "$tree/$f" ]; then ok "make built $f"; else bad "make built $f (missing)"; fi
done

# The Ruby section's commands: indented lines between "## Ruby" and the
# next heading that start with make, ruby or gem.
mapfile -t cmds < <(awk '
  /^## / { inr = ($0 == "## Ruby") }
  inr && /^    (make|ruby|gem)( |$)/ { sub(/^    /, ""); print }' README.md)
[ ${#cmds[@]} -ge 2 ] || bad "README's Ruby section: expected its commands, found ${#cmds[@]}"
for c in "${cmds[@]}"; do
  if (cd "$tree" && timeout 300 bash -c "$c") >"$tmp/cmd.log" 2>&1; then
    case "$c" in
      *Fiber.schedule*p\ i*)
        if [ "$(sort "$tmp/cmd.log" | tr '\n' ' ')" = "0 1 2 " ]; then ok "$c"; else bad "$c: printed something else" "$tmp/cmd.log"; fi ;;
      *) ok "$c" ;;
    esac
  else
    bad "$c" "$tmp/cmd.log"
  fi
done
finish
