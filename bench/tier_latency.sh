#!/usr/bin/env bash
# Interactive TTFT while the batch tier saturates the engine (issue 10 item 7): a real
# `tokenserve serve` on 127.0.0.1, 12 batch-tier clients with ~200-token prompts kept running,
# and 10 interactive requests arriving one by one (each after the previous one finished). Prints
# the interactive TTFT p50 / p99 / max against the interactive latency_target, once per
# --step-latency-fraction value given (0 = the latency cut off: the "before" figure), all in one
# run on this host. Everything it starts stops by itself (trap on exit).
#
# Usage: bench/tier_latency.sh [BIN] [MODEL.gguf] [FRACTIONS]
#   BIN       tokenserve binary (default build/tokenserve)
#   MODEL     GGUF to serve (default: a SmolLM2-135M-shaped Q8_0 synthesized once into
#             ${TS_BENCH_CACHE:-/tmp/tokenserve-bench-cache})
#   FRACTIONS space-separated --step-latency-fraction values (default "0 0.25")
# Env: THREADS (default 2), INTERACTIVE_OUT (8), BATCH_OUT (256), TARGET_MS (500: the
# interactive latency_target, the engine default).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/build/tokenserve}
MODEL=${2:-}
FRACTIONS=${3:-"0 0.25"}
THREADS=${THREADS:-2}
INTERACTIVE_OUT=${INTERACTIVE_OUT:-8}
BATCH_OUT=${BATCH_OUT:-256}
TARGET_MS=${TARGET_MS:-500}
CACHE=${TS_BENCH_CACHE:-/tmp/tokenserve-bench-cache}
if [ -z "$MODEL" ]; then
  mkdir -p "$CACHE"
  MODEL=$CACHE/smollm2-135m-q8_0.gguf
  [ -f "$MODEL" ] || "$BIN" synth --preset smollm2-135m --type q8_0 --vocab-size 49152 -o "$MODEL" >/dev/null || exit 1
fi
TMP=$(mktemp -d)
SRV=""; BATCH=""
stop_all() {
  [ -n "$BATCH" ] && kill "$BATCH" 2>/dev/null && wait "$BATCH" 2>/dev/null
  [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
  BATCH=""; SRV=""
}
trap 'stop_all; rm -rf "$TMP"' EXIT

cat >"$TMP/tiers.toml" <<TOML
[tiers.interactive]
latency_target_ms = $TARGET_MS
TOML

echo "model $(basename "$MODEL"), $THREADS threads, interactive latency_target ${TARGET_MS} ms"
printf '%-9s %9s %9s %9s %9s  %s\n' fraction p50_ms p99_ms max_ms target_ms "ttft of each interactive request (ms)"
for F in $FRACTIONS; do
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --no-auth --threads "$THREADS" \
    --ledger "$TMP/ledger-$F.db" --step-latency-fraction "$F" --config "$TMP/tiers.toml" \
    >"$TMP/server-$F.log" 2>&1 &
  SRV=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
  URL=http://127.0.0.1:$PORT
  NAME=$(curl -sf "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  # The batch tier: 12 closed-loop clients, each request a ~200-token prompt and a long output.
  "$BIN" bench --url "$URL" --model "$NAME" --tier batch --concurrency 12 --requests 1000 \
    --input-tokens 200 --output-tokens "$BATCH_OUT" --seed 3 --quiet >"$TMP/batch-$F.txt" 2>&1 &
  BATCH=$!
  sleep 3  # the batch prefill is under way
  "$BIN" bench --url "$URL" --model "$NAME" --tier interactive --concurrency 1 --requests 10 \
    --input-tokens 32 --output-tokens "$INTERACTIVE_OUT" --seed 5 --quiet --json "$TMP/inter-$F.json" \
    >"$TMP/inter-$F.txt" 2>&1 || { echo "interactive bench failed:"; cat "$TMP/inter-$F.txt"; tail -5 "$TMP/server-$F.log"; exit 1; }
  python3 - "$TMP/inter-$F.json" "$F" "$TARGET_MS" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
t = sorted(r["ttft_ms"] for r in b["per_request"])
def pct(p):  # nearest rank
    import math
    return t[max(0, math.ceil(p / 100 * len(t)) - 1)]
print(f"{sys.argv[2]:<9} {pct(50):9.0f} {pct(99):9.0f} {t[-1]:9.0f} {sys.argv[3]:>9}  " +
      " ".join(f"{r['ttft_ms']:.0f}" for r in b["per_request"]))
PY
  stop_all
done
