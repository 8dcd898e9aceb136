#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster and a Redis server on free loopback ports, for the
# gateway integration tests. Installs the Debian packages first if they are missing.
# Prints (stdout) only shell lines to eval:
#   export TOKENSERVE_TEST_PG=postgresql://postgres@127.0.0.1:PORT/postgres
#   export TOKENSERVE_TEST_REDIS=redis://127.0.0.1:PORT
#   export TOKENSERVE_TEST_SERVICES_DIR=/tmp/ts-services.XXXX
# Usage:  eval "$(scripts/start_test_services.sh)"  ...  scripts/stop_test_services.sh
# Everything (data, sockets, logs) lives in the temp dir; the stop script removes it.
set -euo pipefail

log() { echo "start_test_services: $*" >&2; }

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then log "missing $*; install it (apt-get install $*)"; exit 1; fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2; }
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
[ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ] || apt_install postgresql
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server redis-tools
PG_BIN=$(pg_bin)

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 30000))
}

DIR=$(mktemp -d /tmp/ts-services.XXXXXX)
chmod 755 "$DIR"
PG_PORT=$(free_port)
REDIS_PORT=$(free_port)
while [ "$REDIS_PORT" = "$PG_PORT" ]; do REDIS_PORT=$(free_port); done

# PostgreSQL refuses to run as root: use the postgres user when we are root.
mkdir -p "$DIR/pg"
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  chown postgres "$DIR/pg"
  run_pg() { su postgres -s /bin/sh -c "$*"; }
else
  run_pg() { sh -c "$*"; }
fi
run_pg "'$PG_BIN/initdb' -D '$DIR/pg/data' -U postgres -A trust -E UTF8 --no-sync" >"$DIR/initdb.log" 2>&1 ||
  { cat "$DIR/initdb.log" >&2; exit 1; }
run_pg "'$PG_BIN/pg_ctl' -D '$DIR/pg/data' -l '$DIR/pg/postgres.log' -w -t 60 \
  -o \"-p $PG_PORT -k $DIR/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200\" start" >&2 ||
  { cat "$DIR/pg/postgres.log" >&2; exit 1; }

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --dir "$DIR" \
  --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" --save '' --appendonly no >&2
for _ in $(seq 50); do
  redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG || { cat "$DIR/redis.log" >&2; exit 1; }

log "PostgreSQL on 127.0.0.1:$PG_PORT, Redis on 127.0.0.1:$REDIS_PORT (state in $DIR)"
echo "export TOKENSERVE_TEST_PG=postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
echo "export TOKENSERVE_TEST_REDIS=redis://127.0.0.1:$REDIS_PORT"
echo "export TOKENSERVE_TEST_SERVICES_DIR=$DIR"
