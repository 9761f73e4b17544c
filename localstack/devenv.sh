#!/usr/bin/env bash
# Local development environment for dispatch: PostgreSQL + the SQS stand-in (cmd/sqsfake).
#
#   localstack/devenv.sh up     bring up whatever is missing (idempotent)
#   localstack/devenv.sh down   stop what `up` started (never the system cluster)
#   localstack/devenv.sh env    print export lines for the Go binary and tests
#                               (use: eval "$(localstack/devenv.sh env)")
#
# Ports: PGPORT (default 5432), SQS_PORT (default 9324).
set -euo pipefail

PGPORT="${PGPORT:-5432}"
SQS_PORT="${SQS_PORT:-9324}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEV_DIR="$ROOT/.dev"
SQS_PID_FILE="$DEV_DIR/sqs.pid"
SQS_LOG="$DEV_DIR/sqs.log"
SQS_BIN="$DEV_DIR/bin/sqsfake"

PG_DATA=/tmp/dispatch-pg
PG_LOG=/tmp/dispatch-pg.log
PG_DB=dispatch

log() { printf '%s\n' "$*"; }
die() { printf 'devenv: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# ---------------------------------------------------------------- PostgreSQL

pg_answers() { pg_isready -q -h 127.0.0.1 -p "$PGPORT" >/dev/null 2>&1; }

pg_wait() { # seconds
  local i
  for ((i = 0; i < $1 * 4; i++)); do
    pg_answers && return 0
    sleep 0.25
  done
  return 1
}

# Runs a PostgreSQL server binary as the postgres user when we are root
# (initdb and postgres refuse to run as root).
as_pg_owner() {
  if is_root; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# Directory holding initdb/pg_ctl; prefers the version the data dir was made with.
pg_bindir() {
  local want="" d
  [ -f "$PG_DATA/PG_VERSION" ] && want="$(cat "$PG_DATA/PG_VERSION")"
  if [ -n "$want" ] && [ -x "/usr/lib/postgresql/$want/bin/pg_ctl" ]; then
    echo "/usr/lib/postgresql/$want/bin"
    return 0
  fi
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
    echo "$d"
    return 0
  fi
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"
    return 0
  fi
  return 1
}

# Try the distribution's cluster (Debian/Ubuntu postgresql-common), when its
# configured port is the one we want. Returns 0 if PostgreSQL answers afterwards.
pg_try_system_cluster() {
  [ -d /etc/postgresql ] || return 1
  command -v pg_ctlcluster >/dev/null 2>&1 || return 1
  local ver port
  ver="$(ls /etc/postgresql | head -1)"
  [ -n "$ver" ] && [ -d "/etc/postgresql/$ver/main" ] || return 1
  port="$(sed -nE 's/^[[:space:]]*port[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' \
    "/etc/postgresql/$ver/main/postgresql.conf" 2>/dev/null | tail -1)"
  if [ -n "$port" ] && [ "$port" != "$PGPORT" ]; then
    return 1 # starting it would not help on PGPORT
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start >/dev/null 2>&1 || true
  if pg_wait 10; then
    PG_STARTED="started system cluster $ver/main"
    return 0
  fi
  return 1
}

pg_start_private() {
  local bin
  bin="$(pg_bindir)" || die "postgres: no initdb/pg_ctl found (install PostgreSQL server)"
  mkdir -p "$DEV_DIR"
  if [ ! -f "$PG_DATA/PG_VERSION" ]; then
    mkdir -p "$PG_DATA"
    if is_root; then
      getent passwd postgres >/dev/null || die "postgres: running as root but there is no 'postgres' user"
      chown postgres: "$PG_DATA"
    fi
    chmod 700 "$PG_DATA"
    if ! as_pg_owner "$bin/initdb" -D "$PG_DATA" --auth=trust -U postgres >"$DEV_DIR/pg-initdb.log" 2>&1; then
      tail -20 "$DEV_DIR/pg-initdb.log" >&2
      die "postgres: initdb failed (log: $DEV_DIR/pg-initdb.log)"
    fi
  fi
  touch "$PG_LOG"
  if is_root; then chown postgres: "$PG_LOG"; fi
  if ! as_pg_owner "$bin/pg_ctl" -D "$PG_DATA" \
    -o "-p $PGPORT -k /tmp -c listen_addresses=127.0.0.1" \
    -l "$PG_LOG" start -w >/dev/null 2>&1; then
    tail -20 "$PG_LOG" >&2
    die "postgres: could not start private cluster in $PG_DATA (log: $PG_LOG)"
  fi
  pg_wait 10 || die "postgres: private cluster started but 127.0.0.1:$PGPORT does not answer (log: $PG_LOG)"
  PG_STARTED="started private cluster in $PG_DATA"
}

pg_ensure_db() {
  local have
  have="$(psql -h 127.0.0.1 -U postgres -p "$PGPORT" -d postgres -tAc \
    "select 1 from pg_database where datname='$PG_DB'")" ||
    die "postgres: cannot connect as user postgres to 127.0.0.1:$PGPORT (trust auth expected)"
  if [ "$have" = "1" ]; then
    PG_DB_MSG="database $PG_DB present"
  else
    createdb -h 127.0.0.1 -U postgres -p "$PGPORT" "$PG_DB" || die "postgres: createdb $PG_DB failed"
    PG_DB_MSG="database $PG_DB created"
  fi
}

pg_up() {
  command -v pg_isready >/dev/null 2>&1 || die "postgres: pg_isready not found (install the PostgreSQL client)"
  PG_STARTED=""
  if pg_answers; then
    PG_STARTED="already answering"
  elif ! pg_try_system_cluster; then
    pg_start_private
  fi
  pg_ensure_db
  log "postgres: $PG_STARTED on 127.0.0.1:$PGPORT; $PG_DB_MSG"
}

pg_down() {
  if [ ! -f "$PG_DATA/postmaster.pid" ]; then
    log "postgres: no private cluster running in $PG_DATA (system cluster left alone)"
    return 0
  fi
  local bin
  bin="$(pg_bindir)" || die "postgres: no pg_ctl found to stop $PG_DATA"
  as_pg_owner "$bin/pg_ctl" -D "$PG_DATA" stop -m fast -w >/dev/null 2>&1 ||
    die "postgres: pg_ctl stop failed for $PG_DATA (log: $PG_LOG)"
  log "postgres: stopped private cluster in $PG_DATA"
}

# ---------------------------------------------------------------- SQS stand-in

# The stand-in (localstack/sqsfake, served by cmd/sqsfake) is built from this
# checkout with the Go toolchain: nothing to download, nothing but Go needed.

sqs_answers() {
  curl -fsS -m 2 -o /dev/null -X POST "http://127.0.0.1:$SQS_PORT/" \
    -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'X-Amz-Target: AmazonSQS.ListQueues' \
    --data '{}' >/dev/null 2>&1
}

# Prints the pid recorded by `up` if that process is still our stand-in.
sqs_recorded_pid() {
  [ -f "$SQS_PID_FILE" ] || return 1
  local pid
  pid="$(cat "$SQS_PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'sqsfake' || return 1
  fi
  echo "$pid"
}

# True when cmd/sqsfake, built from this checkout now, differs from the
# binary the recorded stand-in runs (Go builds are reproducible).
sqs_stale() {
  command -v go >/dev/null 2>&1 || return 1
  (cd "$ROOT" && go build -o "$SQS_BIN.new" ./cmd/sqsfake) >/dev/null 2>&1 || { rm -f "$SQS_BIN.new"; return 1; }
  if cmp -s "$SQS_BIN.new" "$SQS_BIN"; then
    rm -f "$SQS_BIN.new"
    return 1
  fi
  rm -f "$SQS_BIN.new"
  return 0
}

sqs_up() {
  command -v curl >/dev/null 2>&1 || die "sqs: curl not found (apt-get install curl)"
  local pid
  if sqs_answers; then
    if pid="$(sqs_recorded_pid)" && sqs_stale; then
      log "sqs: the stand-in we started (pid $pid) runs an older build of cmd/sqsfake; restarting it"
      sqs_down
    else
      log "sqs: already answering on 127.0.0.1:$SQS_PORT"
      return 0
    fi
  fi
  mkdir -p "$DEV_DIR"
  if pid="$(sqs_recorded_pid)"; then
    die "sqs: a stand-in started earlier (pid $pid, see $SQS_PID_FILE) is running but does not answer on port $SQS_PORT; run '$0 down' first"
  fi
  command -v go >/dev/null 2>&1 || die "sqs: go not found (the stand-in is built from this checkout)"
  if ! (cd "$ROOT" && go build -o "$SQS_BIN" ./cmd/sqsfake) >"$DEV_DIR/sqsfake-build.log" 2>&1; then
    tail -20 "$DEV_DIR/sqsfake-build.log" >&2
    die "sqs: building cmd/sqsfake failed (log: $DEV_DIR/sqsfake-build.log)"
  fi
  nohup "$SQS_BIN" -addr "127.0.0.1:$SQS_PORT" >"$SQS_LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$SQS_PID_FILE"
  local i
  for ((i = 0; i < 60; i++)); do
    if sqs_answers; then
      log "sqs: started the SQS stand-in on 127.0.0.1:$SQS_PORT (pid $pid, log $SQS_LOG; in memory)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$SQS_PID_FILE"
      tail -20 "$SQS_LOG" >&2
      die "sqs: stand-in exited during start (log: $SQS_LOG)"
    fi
    sleep 0.25
  done
  kill "$pid" 2>/dev/null || true
  rm -f "$SQS_PID_FILE"
  tail -20 "$SQS_LOG" >&2
  die "sqs: stand-in did not answer on 127.0.0.1:$SQS_PORT within 15 s (log: $SQS_LOG)"
}

sqs_down() {
  local pid
  if ! pid="$(sqs_recorded_pid)"; then
    rm -f "$SQS_PID_FILE"
    log "sqs: no stand-in started by devenv is running"
    return 0
  fi
  kill "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 40; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$SQS_PID_FILE"
  log "sqs: stopped the stand-in (pid $pid)"
}

# ---------------------------------------------------------------- main

print_env() {
  cat <<EOF
export DATABASE_URL='postgres://postgres@127.0.0.1:$PGPORT/$PG_DB?sslmode=disable'
export AWS_ENDPOINT_URL_SQS='http://127.0.0.1:$SQS_PORT'
export AWS_REGION='us-east-1'
export AWS_ACCESS_KEY_ID='local'
export AWS_SECRET_ACCESS_KEY='local'
EOF
}

usage() {
  echo "usage: $0 {up|down|env}" >&2
  exit 2
}

[ $# -eq 1 ] || usage
case "$1" in
up)
  pg_up
  sqs_up
  ;;
down)
  sqs_down
  pg_down
  ;;
env) print_env ;;
*) usage ;;
esac
