#!/usr/bin/env bash
# readme_c.sh — every ```c block of README.md, compiled against the
# library in build/ (gcc, -Wall -Wextra -Werror):
#   * a block with main() is a whole program: built as written, then run
#     for 2 s (a server still running then passes; so does exit 0);
#   * any other block is a fragment: its #include lines and one-line
#     `static ... { ... }` definitions go to file scope, the rest becomes
#     the body of a function, after a prelude below that declares what the
#     fragment takes from its surroundings (a deadline, the caller's own
#     functions). The prelude lives here, not in the README.
# Then: every public function of include/weft.h is named in README.md.
# Prints "[readme_c] N passed, N failed"; appends "N M" to $WEFT_TEST_TALLY.
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok    $1"; }
bad() { fail=$((fail+1)); echo "  FAIL  $1"; [ -n "${2:-}" ] && sed 's/^/        | /' "$2" | tail -n 30; }
tmp=$(mktemp -d /tmp/weft-readme-c.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
CC=${CC:-gcc}
lib=build/libweft.a
uring=""
printf '#include <liburing.h>\nint main(void){struct io_uring r;return io_uring_queue_init(1,&r,0);}\n' |
  "$CC" -x c - -o /dev/null -luring >/dev/null 2>&1 && uring=-luring
if [ ! -f "$lib" ]; then
  bad "build/libweft.a missing (make lib)"
  [ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
  exit 1
fi

# prelude_for TEXT — sets $prelude (file-scope declarations) and $args (a
# whole program's command line) for the block TEXT; fails for a block no
# case knows, so that a new snippet needs its prelude here.
prelude_for() {
  prelude=""; args=""; tls_libs=""; tls_ldlibs=""; norun=""
  case "$1" in
    *weft_tls_dial*"int main("*)
      # The TLS client: libweft_tls and OpenSSL; it needs an HTTPS server,
      # so it is built here and run by scripts/test.d/tls.sh.
      tls_libs=build/libweft_tls.a; tls_ldlibs="-lssl -lcrypto"; norun=1 ;;
    *weft_tcp_listen*"int main("*)
      args="0" ;;                                   # port 0: any free port
    *weft_proc_spawn*"int main("*) ;;               # runs ls, exits 0
    *weft_signal_open*) ;;
    *weft_dial*weft_recvfrom*)
      prelude='static int64_t deadline;' ;;
    *weft_cond_wait*)
      prelude='static weft_mutex_t m = WEFT_MUTEX_INIT;
static int64_t deadline;
static int queue_empty(void) { return 0; }' ;;
    *weft_mutex_lock*) ;;
    *weft_notification_wait*)
      prelude='static int64_t deadline;' ;;
    *weft_sem_acquire*)
      prelude='static int64_t deadline;
static void use_connection(void) {}' ;;
    *weft_limiter_spawn*)
      prelude='static int n;
static const char *urls[4];
static void *fetch_one(void *url) { return url; }' ;;
    *weft_waitgroup_wait*)
      prelude='static int64_t deadline;' ;;
    *weft_chan_select*)
      prelude='static void handle(int job) { (void)job; }' ;;
    *weft_promise_create*)
      prelude='static int64_t deadline;' ;;
    *weft_offload*weft_getaddrinfo*weft_proc_wait*)
      prelude='static int64_t deadline;
static char buf[64];
static pid_t pid;
static void *compress(void *in) { return in; }
static void free_result(void *in, void *out) { (void)in; (void)out; }' ;;
    *weft_scope_run*)
      prelude='static void *conn;' ;;
    *weft_pool_acquire*)
      # wpg_exec stands for contrib/pg/wpg.h (same signature, no libpq).
      prelude='typedef struct wpg wpg;
typedef struct pg_result PGresult;
static int wpg_exec(wpg *c, const char *sql, int nparams, const char *const *params,
                    PGresult **res, int64_t deadline)
{ (void)c; (void)sql; (void)nparams; (void)params; (void)res; (void)deadline; return 0; }
static char conninfo[] = "dbname=app";
static const char *params[2];
static int db_connect(void *ctx, void **res, int64_t deadline)
{ (void)ctx; (void)deadline; *res = NULL; return 0; }
static void db_close(void *ctx, void *res) { (void)ctx; (void)res; }
static int db_check(void *ctx, void *res) { (void)ctx; (void)res; return 0; }' ;;
    *) return 1 ;;
  esac
}

# Split README.md's ```c blocks into $tmp/block_N.txt (N from 1), with the
# README line each starts on in $tmp/block_N.line.
awk -v dir="$tmp" '
  /^```c[ \t]*$/ { n++; f = dir "/block_" n ".txt"; print NR + 1 > (dir "/block_" n ".line"); inb = 1; next }
  inb && /^```/  { inb = 0; close(f); next }
  inb            { print > f }
' README.md
nblocks=$(ls "$tmp"/block_*.txt 2>/dev/null | wc -l)
[ "$nblocks" -gt 0 ] || bad "no \`\`\`c block found in README.md"

for ((i = 1; i <= nblocks; i++)); do
  blk=$tmp/block_$i.txt
  line=$(cat "$tmp/block_$i.line")
  what="README.md:$line ($(grep -o 'weft_[a-z_]*' "$blk" | head -n1))"
  if ! prelude_for "$(cat "$blk")"; then
    bad "$what: no prelude for this block in scripts/test.d/readme_c.sh" "$blk"
    continue
  fi
  src=$tmp/snippet_$i.c
  if grep -q 'int main(' "$blk"; then
    cp "$blk" "$src"
    # shellcheck disable=SC2086
    if ! "$CC" -std=gnu11 -Wall -Wextra -Werror -Iinclude "$src" -o "$tmp/prog_$i" \
         $tls_libs "$lib" $uring -lpthread -lm $tls_ldlibs >"$tmp/cc_$i.log" 2>&1; then
      bad "$what: whole program does not build" "$tmp/cc_$i.log"; continue
    fi
    if [ -n "$norun" ]; then
      ok "$what: whole program builds (run by scripts/test.d/tls.sh)"; continue
    fi
    # shellcheck disable=SC2086
    timeout 2 "$tmp/prog_$i" $args >"$tmp/run_$i.log" 2>&1; rc=$?
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
      ok "$what: whole program builds and runs ($([ "$rc" = 124 ] && echo 'still serving after 2 s' || echo 'exit 0'))"
    else
      bad "$what: whole program exited $rc" "$tmp/run_$i.log"
    fi
    continue
  fi
  {
    echo "#include <weft.h>"
    grep '^#' "$blk"
    printf '%s\n' "$prelude"
    grep -E '^static .*\(.*\).*\{.*\}[[:space:]]*$' "$blk"
    echo "void readme_snippet_$i(void);"
    echo "void readme_snippet_$i(void) {"
    echo "#line $line \"README.md\""
    # Hoisted lines stay as blank lines, so README line numbers hold.
    sed -E -e 's/^#.*$//' -e 's/^static .*\(.*\).*\{.*\}[[:space:]]*$//' "$blk"
    echo "}"
  } > "$src"
  # The fragments' results are often left unused on purpose.
  if "$CC" -std=gnu11 -Wall -Wextra -Werror -Wno-unused-variable \
       -Wno-unused-but-set-variable -Wno-unused-parameter -Wno-unused-function \
       -D_GNU_SOURCE -Iinclude -c "$src" -o "$tmp/snippet_$i.o" >"$tmp/cc_$i.log" 2>&1 &&
     printf 'int main(void){return 0;}\n' > "$tmp/main_$i.c" &&
     "$CC" "$tmp/main_$i.c" "$tmp/snippet_$i.o" -o "$tmp/link_$i" "$lib" $uring \
       -lpthread -lm >>"$tmp/cc_$i.log" 2>&1; then
    ok "$what: fragment compiles and links"
  else
    bad "$what: fragment does not compile (wrapped source: scripts/test.d/readme_c.sh)" "$tmp/cc_$i.log"
  fi
done

# Every public function is named somewhere in the README.
missing=$(bash scripts/public_functions.sh include/weft.h | while read -r f; do grep -q "\b$f\b" README.md || echo "$f"; done)
if [ -z "$missing" ]; then
  ok "every public function of include/weft.h is named in README.md"
else
  echo "$missing" > "$tmp/missing"
  bad "public functions named nowhere in README.md: $(echo $missing | wc -w)" "$tmp/missing"
fi

[ -n "${WEFT_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$WEFT_TEST_TALLY"
echo "[readme_c] $pass passed, $fail failed"
[ "$fail" -eq 0 ]
