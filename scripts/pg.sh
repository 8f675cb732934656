#!/usr/bin/env bash
# pg.sh — a throw-away PostgreSQL cluster on loopback, for tests, the demo
# and benchmarks. Debian's postgresql (initdb + pg_ctl), data and unix
# socket in a temp dir, TCP on 127.0.0.1 at a free port, trust auth,
# fsync off. As root the server runs as the unprivileged `postgres` user.
#
#   scripts/pg.sh run CMD [ARGS...]   start, run CMD with WEFT_PG_CONNINFO
#                                     (and WEFT_PG_DIR) set, stop; exits
#                                     with CMD's status
#   scripts/pg.sh start               start; prints "export WEFT_PG_...=..."
#                                     lines for eval
#   scripts/pg.sh stop DIR            stop the cluster in DIR, remove DIR
#
# Exit status 3 means the server could not be started (the reason is
# printed); callers decide whether that is a skip or a failure. (With run,
# a command's own exit status 3 is reported as 1.)
# WEFT_PG_BIN overrides /usr/lib/postgresql/15/bin.
set -u
bin=${WEFT_PG_BIN:-}
if [ -z "$bin" ]; then
  for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { bin=$d; break; }
  done
fi

as_owner() { # run a command as the cluster owner (from /: the caller's
  # directory may be closed to that user; every path given is absolute)
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

pg_start() { # sets $dir and $conninfo; returns 3 on failure
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; return 3
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "pg.sh: running as root and there is no 'postgres' user to run the server" >&2; return 3
  fi
  dir=$(mktemp -d /tmp/weft-pg.XXXXXX) || return 3
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  local port; port=$(free_port)
  if ! as_owner "$bin/initdb" -D "$dir/data" -U weft -A trust -E UTF8 --no-sync \
       --no-instructions >"$dir/initdb.log" 2>&1; then
    echo "pg.sh: initdb failed:" >&2; cat "$dir/initdb.log" >&2; rm -rf "$dir"; return 3
  fi
  as_owner tee -a "$dir/data/postgresql.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 40
shared_buffers = 16MB
log_min_messages = warning
CONF
  if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null 2>&1; then
    echo "pg.sh: the server did not start:" >&2; tail -n 20 "$dir/server.log" >&2
    pg_stop "$dir"; return 3
  fi
  conninfo="host=127.0.0.1 port=$port user=weft dbname=postgres connect_timeout=10"
}

pg_stop() { # DIR
  local d=$1
  [ -n "$d" ] && [ -d "$d" ] || return 0
  if [ -f "$d/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$d/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$d"
}

cmd=${1:-}; shift || true
case "$cmd" in
  run)
    [ $# -gt 0 ] || { echo "usage: pg.sh run CMD [ARGS...]" >&2; exit 2; }
    pg_start || exit 3
    trap 'pg_stop "$dir"' EXIT
    trap 'exit 130' INT TERM
    export WEFT_PG_CONNINFO=$conninfo WEFT_PG_DIR=$dir
    "$@"
    rc=$?
    [ $rc -eq 3 ] && rc=1 # 3 is reserved for "the server did not start"
    exit $rc ;;
  start)
    pg_start || exit 3
    printf 'export WEFT_PG_CONNINFO=%q\nexport WEFT_PG_DIR=%q\n' "$conninfo" "$dir" ;;
  stop)
    pg_stop "${1:-}" ;;
  *)
    echo "usage: pg.sh run CMD... | start | stop DIR" >&2; exit 2 ;;
esac
