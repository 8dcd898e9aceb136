#!/usr/bin/env bash
# `tokenserve bench` against the real server (stories260K, loopback, bounded traffic): the token
# counts it reports equal the server's own usage totals from /metrics, and `plan` reads the model.
# Usage: bench_e2e.sh path/to/tokenserve
set -u
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
if [ ! -d "$SHARED/models" ]; then echo "shared data not found; skipping"; exit 0; fi
M=$SHARED/models/stories260K/stories260K-f32.gguf
TMP=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
"$BIN" serve -m "$M" --host 127.0.0.1 --port 0 --no-auth --ledger "$TMP/ledger.db" >"$TMP/server.log" 2>&1 &
SRV=$!
cleanup() { kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
PORT=$(ts_port "$TMP/server.log" "$SRV") && ts_ready "$PORT" "$SRV" || exit 1
pass=0; fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }

MODEL=$(curl -sf "http://127.0.0.1:$PORT/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
"$BIN" bench --url "http://127.0.0.1:$PORT" --model "$MODEL" --scenario short-short --input-tokens 24 \
  --output-tokens 12 --concurrency 4 --requests 16 --quiet --json "$TMP/bench.json" --plot "$TMP/bench.svg" >"$TMP/bench.txt" 2>&1
check "bench exit code" $?
grep -q "TTFT" "$TMP/bench.txt"; check "bench report printed" $?
grep -q "<svg" "$TMP/bench.svg"; check "bench plot written" $?
curl -sf "http://127.0.0.1:$PORT/metrics" >"$TMP/metrics.txt"
python3 - "$TMP/bench.json" "$TMP/metrics.txt" <<'PY'
import json, re, sys
b = json.load(open(sys.argv[1]))
metrics = open(sys.argv[2]).read()
def total(name):
    s = 0.0
    for line in metrics.splitlines():
        if line.startswith("tokenserve:" + name + "{") or line.startswith("tokenserve:" + name + " "):
            s += float(line.rsplit(" ", 1)[1])
    return s
assert b["requests"]["ok"] == 16 and b["requests"]["errors"] == 0, b["requests"]
assert b["tokens"]["output"] == 16 * 12, b["tokens"]
assert all(r["prompt_tokens"] == 24 for r in b["per_request"]), "prompt lengths not exact"
# /tokenize calls made while sizing prompts are not completions: the server's counters cover
# exactly the 16 benchmark requests.
assert total("prompt_tokens_total") == b["tokens"]["prompt"], (total("prompt_tokens_total"), b["tokens"])
assert total("generation_tokens_total") == b["tokens"]["output"], (total("generation_tokens_total"), b["tokens"])
print("bench totals equal server usage:", b["tokens"])
PY
check "bench token counts equal the server's usage totals" $?

# The ledger -> replay file -> bench replay and plan round trip (the server keeps writing its
# ledger while running; rows are flushed within a second or two).
sleep 2
"$BIN" usage --ledger "$TMP/ledger.db" --export-replay "$TMP/replay.jsonl" >/dev/null 2>&1
[ "$(wc -l <"$TMP/replay.jsonl")" -ge 16 ]
check "usage --export-replay writes one line per request" $?
"$BIN" bench --url "http://127.0.0.1:$PORT" --model "$MODEL" --scenario "replay:$TMP/replay.jsonl" --concurrency 4 \
  --requests 8 --quiet --json "$TMP/replay.json" >/dev/null 2>&1
python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); assert b["requests"]["ok"]==8, b["requests"]' "$TMP/replay.json"
check "bench replays the exported ledger" $?
"$BIN" plan -m "$M" --memory 1GiB --ledger "$TMP/ledger.db" --json >"$TMP/plan.json" 2>&1
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); s=json.dumps(p); assert "36" in s, s[:400]' "$TMP/plan.json"
check "plan reads its length distribution from the ledger (24 + 12 = 36 tokens)" $?

"$BIN" plan -m "$M" --memory 1GiB --p50 64 --p95 100 --p99 128 >"$TMP/plan.txt" 2>&1
check "plan exit code" $?
grep -q "640" "$TMP/plan.txt"; check "plan reports 640 KV bytes/token for stories260K" $?

echo "bench_e2e: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
