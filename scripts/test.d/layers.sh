#!/usr/bin/env bash
# layers.sh — the layers point one way (docs/ARCHITECTURE.md, "Layers";
# a layer is a folder of src/, the Makefile's LAYERS their order):
#   0. a file of the reactor layer cannot include a higher layer's header:
#      a probe that includes the fiber layer's internal.h does not compile
#      with the reactor layer's include path (make probe-layer), one that
#      includes reactor.h does, and no reactor file names a header by a
#      path that leaves its folder;
#   1. the reactor layer links and runs on its own: build/tests/layer_reactor
#      is linked with libweft_reactor.a alone, and runs on every backend;
#   2. no object of the reactor layer refers to a symbol that only a higher
#      layer defines (nm: every weft symbol it needs is defined inside it);
#   3. the Ruby extension is built from the reactor layer only: none of the
#      fiber layer's symbols (weft_spawn, weft__block, the context switch)
#      is in it.
# Prints "[layers] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() { fail=$((fail+1)); echo "  FAIL  $1"; [ -n "${2:-}" ] && echo "$2" | sed 's/^/        | /' | head -n 20; }
finish() {
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
  echo "[layers] $pass passed, $fail failed"
  [ "$fail" -eq 0 ]; exit
}

# 0. Includes, at compile time.
probe_dir=$(mktemp -d /tmp/weft-layers.XXXXXX)
trap 'rm -rf "$probe_dir"' EXIT
probe() { # HEADER -> compiles as a reactor file that includes HEADER?
  printf '#include "%s"\nint weft__layer_probe(void);\nint weft__layer_probe(void) { return 0; }\n' "$1" \
    > "$probe_dir/probe.c"
  make -s --no-print-directory BUILD=build probe-layer LAYER=reactor PROBE="$probe_dir/probe.c" 2>&1
}
if out=$(probe reactor.h); then
  ok "a reactor-layer file that includes reactor.h compiles"
else
  bad "a reactor-layer file that includes reactor.h does not compile" "$out"
fi
if out=$(probe internal.h); then
  bad "a reactor-layer file can include the fiber layer's internal.h"
elif echo "$out" | grep -q "internal.h"; then
  ok "a reactor-layer file that includes the fiber layer's internal.h does not compile"
else
  bad "the internal.h probe failed for another reason" "$out"
fi
if out=$(grep -n '#[[:space:]]*include[[:space:]]*"[^"]*/' src/reactor/*.[ch]); then
  bad "a reactor file includes a header by a path outside its folder" "$out"
else
  ok "no reactor file includes a header by a path outside its folder"
fi

if ! out=$(make -s BUILD=build build/tests/layer_reactor 2>&1); then
  bad "the reactor layer does not link on its own (make build/tests/layer_reactor)" "$out"
  finish
fi
ok "layer_reactor links with libweft_reactor.a alone"

backends=(epoll poll)
[ "$(WEFT_BACKEND=io_uring build/tests/tool_backend 2>/dev/null)" = io_uring ] && backends+=(io_uring)
for b in "${backends[@]}"; do
  if out=$(WEFT_BACKEND=$b timeout 60 build/tests/layer_reactor 2>&1) && echo "$out" | grep -q "backend $b"; then
    ok "layer_reactor runs on $b"
  else
    bad "layer_reactor on $b" "$out"
  fi
done

# 2. Symbols: what the reactor objects need, against what they define.
reactor_objs=$(make -s --no-print-directory BUILD=build print-REACTOR_OBJ 2>/dev/null)
all_objs=$(ls build/obj/*/*.o 2>/dev/null)
if [ -z "$reactor_objs" ]; then
  bad "REACTOR_OBJ not found in the Makefile"
else
  defined=$(nm -g --defined-only $reactor_objs 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
  needed=$(nm -g --undefined-only $reactor_objs 2>/dev/null | awk '{ print $NF }' | grep -E '^weft' | sort -u)
  upward=$(comm -23 <(echo "$needed") <(echo "$defined"))
  if [ -z "$upward" ]; then
    ok "the reactor layer's objects need no weft symbol from above ($(echo "$reactor_objs" | wc -w) objects)"
  else
    who=""
    for sym in $upward; do
      who+="$sym (defined in $(nm -g --defined-only $all_objs 2>/dev/null | awk -v s="$sym" '/^[^ ]+\.o:$/ { f = $1 } $3 == s { print f }' | tr -d ':' | head -n 1))"$'\n'
    done
    bad "the reactor layer calls up" "$who"
  fi
fi

# 3. The Ruby extension (when built).
if [ -f lib/weft/weft.so ] || make -s ruby >/dev/null 2>&1; then
  objs=$(ls build/ruby/*.o 2>/dev/null)
  if [ -z "$objs" ]; then
    bad "the Ruby extension's objects are not in build/ruby"
  else
    names=$(for o in $objs; do basename "$o" .o; done | sort | tr '\n' ' ')
    extra=$(nm -g --defined-only $objs 2>/dev/null | awk 'NF == 3 { print $3 }' |
            grep -E '^(weft_spawn|weft__block|weft__ctx_switch|weft_read|weft__stack_get)$')
    if [ -z "$extra" ]; then
      ok "the Ruby extension is the reactor layer and ext/weft only ($names)"
    else
      bad "the Ruby extension carries fiber-layer code" "$extra"
    fi
  fi
fi
finish
