#!/usr/bin/env bash
# Headless-Chromium dashboard test in live mode: starts a real `tokenserve serve` with API keys
# (SQLite ledger in a temp dir), creates a key, and runs tests/browser/dashboard.test.mjs with
# TOKENSERVE_URL / TOKENSERVE_API_KEY / TOKENSERVE_TRAFFIC, then stops the server with SIGTERM
# and checks it exits 0. Exit 77 (skipped) when stories260K, playwright-core or Chromium is missing.
# Usage: dashboard_live.sh path/to/tokenserve
set -euo pipefail
BIN=${1:?usage: dashboard_live.sh path/to/tokenserve}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
MODEL=$SHARED/models/stories260K/stories260K-f32.gguf
CHROMIUM=${CHROMIUM_PATH:-/usr/bin/chromium}
[ -f "$MODEL" ] || { echo "SKIP: $MODEL not found"; exit 77; }
[ -d "$ROOT/tests/browser/node_modules/playwright-core" ] || { echo "SKIP: run npm ci in tests/browser"; exit 77; }
[ -x "$CHROMIUM" ] || { echo "SKIP: no Chromium at $CHROMIUM"; exit 77; }

DIR=$(mktemp -d /tmp/ts-dashboard-live.XXXXXX)
PID=""
cleanup() {
  [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null && kill -KILL "$PID" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT

KEY=$("$BIN" keys create --tenant dash --app live --ledger "$DIR/ledger.db" | tail -n 1)
# /metrics and the dashboard need the metrics key when API keys are on; it comes from a file.
METRICS_KEY=ts-metrics-dashboard-live-key
echo "$METRICS_KEY" >"$DIR/metrics.key"
printf '[metrics]\nkey_file = "%s"\n' "$DIR/metrics.key" >"$DIR/gov.toml"
"$BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 --threads 1 --ledger "$DIR/ledger.db" \
  --config "$DIR/gov.toml" >"$DIR/server.log" 2>&1 &
PID=$!
PORT=$(ts_port "$DIR/server.log" "$PID") && ts_ready "$PORT" "$PID" || { cat "$DIR/server.log"; echo "server not ready"; exit 1; }

rc=0
TOKENSERVE_URL="http://127.0.0.1:$PORT" TOKENSERVE_API_KEY="$KEY" TOKENSERVE_METRICS_KEY="$METRICS_KEY" TOKENSERVE_TRAFFIC=${TOKENSERVE_TRAFFIC:-6} \
  node --test "$ROOT/tests/browser/dashboard.test.mjs" || rc=$?

kill -TERM "$PID"
src=0
wait "$PID" || src=$?
PID=""
if [ "$rc" -ne 0 ]; then tail -n 40 "$DIR/server.log"; exit "$rc"; fi
[ "$src" -eq 0 ] || { tail -n 40 "$DIR/server.log"; echo "server exited $src after SIGTERM"; exit 1; }
# The traffic the browser test sent is in the ledger, one row per request.
rows=$("$BIN" usage --by tenant --tenant dash --format json --ledger "$DIR/ledger.db" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["requests"])')
[ "$rows" -eq "${TOKENSERVE_TRAFFIC:-6}" ] || { echo "ledger has $rows rows, expected ${TOKENSERVE_TRAFFIC:-6}"; exit 1; }
echo "dashboard live test passed ($rows ledger rows)"
