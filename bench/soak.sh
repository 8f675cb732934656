#!/usr/bin/env bash
# soak.sh — an hour of mixed load (issue 18), not part of `make test`:
#   build/bench/soak_server (bench/soak/soak_server.c): the example HTTP
#     server, an echo server and a pool of 4 PostgreSQL connections kept
#     busy by 16 fibers (recycled after 200 uses, closed after 2 s idle), on
#     one weft scheduler;
#   bench/ruby/soak_server.rb: the Ruby example server under
#     Weft::Scheduler;
# and, for the whole load phase: keep-alive HTTP (http_load, 64
# connections to the C server, 32 to the Ruby one), churn (batches of 100
# clients of two requests each, connect to close, on both:
# tool_http_flood), echo (echo_client, 20 clients x 256 KiB, over and
# over), the database fibers inside the C server. Then a quiet phase (60 s)
# with no load, then SIGTERM.
#
# Every --interval seconds (10) it samples each server's RSS, descriptor
# count and VMA count (/proc/PID/status, fd, maps); the servers print their
# own counters at the same interval (weft_sched_stats: fibers, handles,
# timers, waits, descriptor waits, ring ops; Weft::Scheduler#stats: waits,
# timers, waiting fibers, ring ops in flight; Ruby's live heap slots and
# live fibers). At the end, for every series, the least-squares slope over
# the load phase after a warm-up (the first 10% or two intervals), and the
# rise it amounts to over that window. A series fails when that rise
# exceeds its tolerance (max(an absolute floor, a share of its median):
# RSS 8 MiB or 10%, descriptors and VMAs 16 or 10%, counters 16 or 20%),
# or when, after the quiet phase, descriptors, waits or timers are not
# back to what they were before the load. Also fails when a server exits
# with a status other than 0 or stops answering.
#
#   bash bench/soak.sh                      # one hour (60 min load + quiet)
#   bash bench/soak.sh --minutes 3 --interval 5    # a short check
# Options: --minutes M (60), --interval S (10), --out DIR (build/soak),
# --backend B (the default one), --docs (copy the plot to docs/soak.png and
# the summary to docs/soak.txt), --replot (no run: draw OUT's last run again).
# Writes OUT/samples.tsv (time, process, metric, value), OUT/summary.txt
# (the slopes), OUT/soak.png (gnuplot). Holds the benchmark lock
# (/tmp/weft-bench.lock) for the whole run. Exit status 0 only when every
# series is flat.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
minutes=60; interval=10; out=build/soak; backend=""; docs=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --docs) docs=1; shift ;;
    --replot) replot=1; shift ;;
    --locked) locked=1; shift ;;
    *) echo "usage: soak.sh [--minutes M] [--interval S] [--out DIR] [--backend B] [--docs]" >&2; exit 2 ;;
  esac
done
log() { echo "soak: $*"; }
# ---- plot (OUT/samples.tsv and OUT/meta.env) ------------------------------
plot() {
if command -v gnuplot >/dev/null; then
  for k in c.rss_kb ruby.rss_kb c.fds ruby.fds c.vmas ruby.vmas c.timers c.waits c.fd_waits c.fibers \
           ruby.timers ruby.waits ruby.fd_waits ruby.waiting_fibers ruby.live_slots c.db_queries \
           c.http_requests ruby.requests; do
    awk -F'\t' -v p="${k%%.*}" -v m="${k#*.}" '$2 == p && $3 == m { print $1, $4 }' "$out/samples.tsv" >"$out/$k.dat"
  done
  gnuplot <<GP
set terminal pngcairo size 1100,1000 font "sans,9"
set termoption noenhanced
set output "$out/soak.png"
set multiplot layout 3,2 title "weft soak: ${minutes} min of mixed load (t=${load_start}..${load_end} s, then quiet), sampled every ${interval} s"
set grid; set key top right opaque box; set xlabel "s"; set xrange [0:*]; set autoscale xfixmax
set yrange [0:*]
set arrow 1 from ${load_end}, graph 0 to ${load_end}, graph 1 nohead dt 2
set title "RSS (MiB)"
plot "$out/c.rss_kb.dat" u 1:(\$2/1024) w l lw 2 t "C server", "$out/ruby.rss_kb.dat" u 1:(\$2/1024) w l lw 2 t "Ruby server"
set title "open descriptors"
plot "$out/c.fds.dat" u 1:2 w l lw 2 t "C server", "$out/ruby.fds.dat" u 1:2 w l lw 2 t "Ruby server"
set title "VMAs (lines of /proc/PID/maps)"
plot "$out/c.vmas.dat" u 1:2 w l lw 2 t "C server", "$out/ruby.vmas.dat" u 1:2 w l lw 2 t "Ruby server"
set title "Ruby heap: live slots (thousands)"
plot "$out/ruby.live_slots.dat" u 1:(\$2/1000) w l lw 2 t "Ruby server"
set title "C server: weft_sched_stats"
plot "$out/c.fibers.dat" u 1:2 w l t "fibers", "$out/c.timers.dat" u 1:2 w l t "timers", "$out/c.waits.dat" u 1:2 w l t "waits", "$out/c.fd_waits.dat" u 1:2 w l t "fd waits"
set title "Ruby server: Weft::Scheduler#stats"
plot "$out/ruby.waiting_fibers.dat" u 1:2 w l t "waiting fibers", "$out/ruby.timers.dat" u 1:2 w l t "timers", "$out/ruby.waits.dat" u 1:2 w l t "waits", "$out/ruby.fd_waits.dat" u 1:2 w l t "fd waits"
unset multiplot
GP
  rm -f "$out"/*.dat
  log "plot: $out/soak.png"
  if [ $docs = 1 ]; then cp "$out/soak.png" docs/soak.png; cp "$out/summary.txt" docs/soak.txt; log "copied to docs/soak.png and docs/soak.txt"; fi
fi
}
if [ -n "${replot:-}" ]; then
  out=$(cd "$out" && pwd); . "$out/meta.env"; plot; exit
fi
# The whole run under the benchmark lock.
if [ -z "${locked:-}" ]; then
  exec flock "${WEFT_BENCH_LOCK:-/tmp/weft-bench.lock}" bash "$0" "$@" --locked \
    --minutes "$minutes" --interval "$interval" --out "$out" ${backend:+--backend "$backend"} \
    $([ $docs = 1 ] && echo --docs)
fi
mkdir -p "$out"; out=$(cd "$out" && pwd)
rm -f "$out"/*.log "$out"/samples.tsv "$out"/summary.txt "$out"/soak.png
pids=(); pgdir=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$pgdir" ] && bash scripts/pg.sh stop "$pgdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build ----------------------------------------------------------------
make -s lib build/examples/http_load build/examples/echo_client build/tests/tool_http_flood \
  >"$out/build.log" 2>&1 || { log "make failed:"; cat "$out/build.log"; exit 1; }
mkdir -p build/bench
# shellcheck disable=SC2046
cc -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -D_GNU_SOURCE -Iinclude -Icontrib \
  $(pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql) \
  bench/soak/soak_server.c contrib/http/http_parse.c contrib/http/http_srv.c contrib/pg/wpg.c \
  -o build/bench/soak_server build/libweft.a -lpq \
  $(grep -q -- '-DWEFT_NO_URING' build/config.mk 2>/dev/null || echo -luring) -lpthread -lm \
  >>"$out/build.log" 2>&1 || { log "soak_server does not build:"; cat "$out/build.log"; exit 1; }
bash scripts/ruby-ext.sh >/dev/null || { log "the Ruby extension does not build"; exit 1; }
# A copy: another session's make must not replace it under the server.
extdir=$out/ext/lib; mkdir -p "$extdir/weft"
cp lib/weft/weft.so "$extdir/weft/weft.so.tmp" && mv -f "$extdir/weft/weft.so.tmp" "$extdir/weft/weft.so"
command -v gnuplot >/dev/null || log "gnuplot missing (apt-get install gnuplot-nox): no plot"

# ---- PostgreSQL -------------------------------------------------------------
if env=$(bash scripts/pg.sh start 2>"$out/pg.log"); then
  eval "$env"; pgdir=$WEFT_PG_DIR
else
  log "PostgreSQL did not start (see $out/pg.log): the pool part is off"
  unset WEFT_PG_CONNINFO
fi

# ---- servers ------------------------------------------------------------------
benv=(); [ -n "$backend" ] && benv=(WEFT_BACKEND="$backend")
env "${benv[@]}" build/bench/soak_server --http-port 0 --echo-port 0 --interval "$interval" \
  >"$out/c.log" 2>"$out/c.err" &
cpid=$!; pids+=("$cpid")
env "${benv[@]}" ruby -I "$extdir" -I lib bench/ruby/soak_server.rb --port 0 --interval "$interval" \
  >"$out/ruby.log" 2>"$out/ruby.err" &
rpid=$!; pids+=("$rpid")
chttp=""; cecho=""; rport=""
for _ in $(seq 300); do
  read -r chttp cecho < <(sed -n 's/^soak_server: ready: http \([0-9]*\), echo \([0-9]*\),.*/\1 \2/p' "$out/c.log")
  rport=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$out/ruby.log")
  [ -n "$chttp" ] && [ -n "$rport" ] && break; sleep 0.1
done
if [ -z "$chttp" ] || [ -z "$rport" ]; then
  log "servers did not start"; tail -n 5 "$out/c.err" "$out/ruby.err"; exit 1
fi
log "tree $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src ext lib contrib 2>/dev/null || echo ' (with uncommitted changes)')"
log "C server pid $cpid ($(sed -n 's/^soak_server: ready: //p' "$out/c.log")), Ruby server pid $rpid (port $rport)"

# ---- sampling -----------------------------------------------------------------
t0=$(date +%s%N)
sample() {
  local t=$(( ($(date +%s%N) - t0) / 1000000 )) name pid
  for name in c ruby; do
    [ $name = c ] && pid=$cpid || pid=$rpid
    [ -d "/proc/$pid" ] || continue
    printf '%d.%03d\t%s\trss_kb\t%s\n' $((t / 1000)) $((t % 1000)) $name \
      "$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")"
    printf '%d.%03d\t%s\tfds\t%s\n' $((t / 1000)) $((t % 1000)) $name "$(ls "/proc/$pid/fd" | wc -l)"
    printf '%d.%03d\t%s\tvmas\t%s\n' $((t / 1000)) $((t % 1000)) $name "$(wc -l < "/proc/$pid/maps")"
  done >>"$out/samples.tsv"
}
# The servers' own lines, with their times moved onto the sampler's clock
# (each server counts from its own start, which is within a second of t0).
server_lines() {
  awk -v p=c '/^stats / { for (i = 3; i < NF; i += 2) printf "%s\t%s\t%s\t%s\n", $2, p, $i, $(i+1) }' "$out/c.log"
  awk -v p=ruby '/^stats / { for (i = 3; i < NF; i += 2) printf "%s\t%s\t%s\t%s\n", $2, p, $i, $(i+1) }' "$out/ruby.log"
}

# Before the load: a baseline (two intervals, so the pool has warmed up).
sample; sleep "$interval"; sample; sleep "$interval"; sample
load_start=$(( ($(date +%s%N) - t0) / 1000000000 ))
secs=$((minutes * 60))
log "load for ${minutes} min from t=${load_start}s, sampling every ${interval}s"

# ---- load -------------------------------------------------------------------
loop_until() { # END CMD...: run CMD over and over until the time END (epoch s)
  local end=$1 o; shift
  o=$(mktemp "$out/loop.XXXXXX")
  while [ "$(date +%s)" -lt "$end" ]; do
    if ! "$@" >"$o" 2>&1; then
      { echo "t=$(( ($(date +%s%N) - t0) / 1000000000 ))s: $*"; tail -n 3 "$o" | sed 's/^/    /'; } >>"$out/load_failures.log"
    fi
    sleep 0.5
  done
  rm -f "$o"
}
end=$(( $(date +%s) + secs ))
build/examples/http_load --port "$chttp" --connections 64 --duration "$secs" >"$out/load_c.log" 2>&1 &
lc=$!; pids+=("$lc")
build/examples/http_load --port "$rport" --connections 32 --duration "$secs" >"$out/load_ruby.log" 2>&1 &
lr=$!; pids+=("$lr")
loop_until "$end" build/tests/tool_http_flood --port "$chttp" --clients 100 --residents 0 --recovery 0 --hold-ms 0 &
pids+=($!)
loop_until "$end" build/tests/tool_http_flood --port "$rport" --clients 100 --residents 0 --recovery 0 --hold-ms 0 &
pids+=($!)
loop_until "$end" build/examples/echo_client --port "$cecho" --clients 20 --bytes 262144 &
pids+=($!)
while [ "$(date +%s)" -lt "$end" ]; do
  sleep "$interval"; sample
  for p in $cpid $rpid; do kill -0 "$p" 2>/dev/null || { log "a server died during the load"; break 2; }; done
done
wait "$lc"; lc_rc=$?; wait "$lr"; lr_rc=$?
sleep 1
load_end=$(( ($(date +%s%N) - t0) / 1000000000 ))
log "load over at t=${load_end}s; quiet for 60 s"
printf 'minutes=%s\ninterval=%s\nload_start=%s\nload_end=%s\n' "$minutes" "$interval" "$load_start" "$load_end" >"$out/meta.env"
for _ in $(seq $(( (60 + interval - 1) / interval ))); do sleep "$interval"; sample; done

# ---- stop -------------------------------------------------------------------
kill -TERM "$cpid" "$rpid" 2>/dev/null
crc=124; rrc=124
for _ in $(seq 300); do
  if [ $crc = 124 ] && ! kill -0 "$cpid" 2>/dev/null; then wait "$cpid"; crc=$?; fi
  if [ $rrc = 124 ] && ! kill -0 "$rpid" 2>/dev/null; then wait "$rpid"; rrc=$?; fi
  [ $crc != 124 ] && [ $rrc != 124 ] && break; sleep 0.1
done
server_lines >>"$out/samples.tsv"
sort -t$'\t' -k2,2 -k3,3 -k1,1g -o "$out/samples.tsv" "$out/samples.tsv"

# ---- slopes -------------------------------------------------------------------
nfail=$(grep -c '^t=' "$out/load_failures.log" 2>/dev/null); nfail=${nfail:-0}
python3 - "$out" "$load_start" "$load_end" "$interval" "$crc" "$rrc" "$lc_rc" "$lr_rc" "$nfail" <<'PY'
import sys, statistics, collections
out, ls, le, iv = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
crc, rrc, lcrc, lrrc, nfail = (int(x) for x in sys.argv[5:10])
series = collections.defaultdict(list)
for line in open(f"{out}/samples.tsv"):
    t, proc, metric, v = line.rstrip("\n").split("\t")
    series[(proc, metric)].append((float(t), float(v)))
# What must stay flat: (absolute floor, share of the median)
rules = {"rss_kb": (8192, 0.10), "fds": (16, 0.10), "vmas": (16, 0.10)}
# (stacks_cached is left out: the free-stack cache fills towards its bound,
# 1,024 by default, as fibers come and go; the RSS and VMA series show what
# it costs)
gauge = ("fibers", "handles", "timers", "waits", "fd_waits", "ops", "waiting_fibers",
         "ready", "ops_inflight", "live_slots", "fibers_alive",
         "http_open", "echo_open", "pool_size")
for g in gauge:
    rules.setdefault(g, (16, 0.20))
rules["live_slots"] = (20000, 0.20)
warm = max(2 * iv, 0.10 * (le - ls))
lines, failed = [], []
lines.append(f"soak: load {le - ls:.0f} s (t={ls:.0f}..{le:.0f}), slopes over t={ls + warm:.0f}..{le:.0f}")
lines.append(f"{'process':8} {'metric':15} {'median':>12} {'slope/h':>12} {'rise':>10} {'tolerance':>10}  verdict")
def fit(pts):
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in pts) / den
for (proc, metric), pts in sorted(series.items()):
    if metric not in rules:
        continue
    win = [(t, v) for t, v in pts if ls + warm <= t <= le]
    if len(win) < 3:
        continue
    med = statistics.median(v for _, v in win)
    slope = fit(win)                       # per second
    rise = slope * (win[-1][0] - win[0][0])
    floor, share = rules[metric]
    tol = max(floor, share * abs(med))
    ok = rise <= tol
    if not ok:
        failed.append(f"{proc} {metric}")
    lines.append(f"{proc:8} {metric:15} {med:12.0f} {slope * 3600:12.1f} {rise:10.1f} {tol:10.0f}  {'flat' if ok else 'GROWS'}")
# Back to the baseline after the quiet phase.
lines.append("")
lines.append("before the load -> after the quiet phase:")
for (proc, metric) in [("c", "fds"), ("ruby", "fds"), ("c", "waits"), ("c", "timers"),
                       ("c", "fd_waits"), ("c", "fibers"), ("ruby", "waits"), ("ruby", "timers"),
                       ("ruby", "fd_waits"), ("ruby", "waiting_fibers")]:
    pts = series.get((proc, metric), [])
    before = [v for t, v in pts if t < ls]
    after = [v for t, v in pts if t > le + 30]
    if not before or not after:
        continue
    b, a = min(before), after[-1]
    slack = 4 if metric == "fds" else 2
    ok = a <= max(before) + slack
    if not ok:
        failed.append(f"{proc} {metric} after the load")
    lines.append(f"  {proc:5} {metric:15} {b:6.0f} -> {a:6.0f}  {'ok' if ok else 'NOT BACK'}")
cached = [v for t, v in series.get(("c", "stacks_cached"), [])]
if cached:
    lines.append(f"C server's free-stack cache: at most {max(cached):.0f} stacks (bound 1024)")
    if max(cached) > 1024:
        failed.append("c stacks_cached above its bound")
for name, rc in (("C server", crc), ("Ruby server", rrc)):
    lines.append(f"{name}: SIGTERM -> exit {rc}")
    if rc != 0:
        failed.append(f"{name} exit {rc}")
for name, rc in (("http_load C", lcrc), ("http_load Ruby", lrrc)):
    if rc != 0:
        failed.append(f"{name} exit {rc} (errors or a server that stopped answering)")
if nfail:
    failed.append(f"{nfail} churn or echo batches failed (load_failures.log)")
lines.append("")
lines.append("RESULT: " + ("every series flat" if not failed else "FAILED: " + ", ".join(failed)))
open(f"{out}/summary.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if failed else 0)
PY
status=$?
if [ -s "$out/load_failures.log" ]; then
  log "load commands that failed ($(grep -c '^t=' "$out/load_failures.log")), the first:"; head -n 8 "$out/load_failures.log" | sed 's/^/  /'
fi
tail -n 3 "$out/load_c.log" "$out/load_ruby.log" 2>/dev/null | sed 's/^/  /'

plot
exit $status
