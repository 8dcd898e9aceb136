#!/usr/bin/env bash
# Stops the services started by start_test_services.sh and removes their temp dir.
# Usage: scripts/stop_test_services.sh [DIR]   (default: $TOKENSERVE_TEST_SERVICES_DIR)
set -uo pipefail
DIR=${1:-${TOKENSERVE_TEST_SERVICES_DIR:-}}
case "$DIR" in
  /tmp/ts-services.*) ;;
  *) echo "stop_test_services: no services dir given (arg or TOKENSERVE_TEST_SERVICES_DIR)" >&2; exit 1 ;;
esac
[ -d "$DIR" ] || exit 0
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -f "$DIR/pg/data/postmaster.pid" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    su postgres -s /bin/sh -c "'$PG_BIN/pg_ctl' -D '$DIR/pg/data' -m immediate -w stop" >/dev/null 2>&1
  else
    "$PG_BIN/pg_ctl" -D "$DIR/pg/data" -m immediate -w stop >/dev/null 2>&1
  fi
fi
if [ -f "$DIR/redis.pid" ]; then
  REDIS_PID=$(cat "$DIR/redis.pid")
  kill "$REDIS_PID" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.1; done
fi
rm -rf "$DIR"
