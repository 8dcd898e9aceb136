#!/usr/bin/env bash
# End-to-end checks of the tokenserve command line on the real stories260K model.
# Usage: cli_test.sh path/to/tokenserve   (shared data at ../shared or $TOKENSERVE_SHARED)
set -u
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
if [ ! -d "$SHARED/models" ]; then echo "shared data not found; skipping"; exit 0; fi
M=$SHARED/models/stories260K/stories260K-f32.gguf
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib.sh"
pass=0; fail=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi
}

# Greedy continuation begins with llama2.c's reference text after the prompt.
"$BIN" generate -m "$M" -p "Once upon a time" -n 64 --temp 0 >"$TMP/out" 2>"$TMP/err"
check "generate exit code" $?
ref=$(sed 's/^Once upon a time//' "$SHARED/models/stories260K/expected/greedy_once_upon_a_time_n64.runc.txt")
out=$(cat "$TMP/out")
case "$out" in "$ref"*) check "generate matches run.c reference" 0 ;; *) check "generate matches run.c reference (got: $out)" 1 ;; esac
grep -Eq '^prompt: 5 tokens, [0-9.]+ tokens/s; generation: [0-9]+ tokens, [0-9.]+ tokens/s$' "$TMP/err"
check "generate stats line" $?

# --ignore-eos gives exactly N tokens.
"$BIN" generate -m "$M" -p "Once upon a time" -n 100 --temp 0.9 --seed 5 --ignore-eos >/dev/null 2>"$TMP/err2"
grep -q 'generation: 100 tokens' "$TMP/err2"
check "ignore-eos forces N tokens" $?
# Same seed, same text.
"$BIN" generate -m "$M" -p "Once" -n 40 --temp 1.0 --seed 11 >"$TMP/s1" 2>/dev/null
"$BIN" generate -m "$M" -p "Once" -n 40 --temp 1.0 --seed 11 >"$TMP/s2" 2>/dev/null
cmp -s "$TMP/s1" "$TMP/s2"
check "seeded sampling reproducible" $?

# tokenize
[ "$("$BIN" tokenize -m "$M" --ids "Once upon a time")" = "1 403 407 261 378" ]
check "tokenize --ids" $?
[ "$("$BIN" tokenize -m "$M" --ids --no-bos "Once upon a time")" = "403 407 261 378" ]
check "tokenize --ids --no-bos" $?
"$BIN" tokenize -m "$M" "Once" | grep -q "403 -> ' Once'"
check "tokenize pieces" $?
V=$SHARED/models/llama.cpp-vocab/ggml-vocab-qwen2.gguf
[ "$("$BIN" tokenize -m "$V" --ids "<|im_start|>")" != "$("$BIN" tokenize -m "$V" --ids --special "<|im_start|>")" ]
check "tokenize --special differs" $?
[ "$("$BIN" tokenize -m "$V" --ids --special "<|im_start|>")" = "151644" ]
check "tokenize --special id" $?

# info
"$BIN" info -m "$M" >"$TMP/info"
grep -q '^architecture: *llama' "$TMP/info" && grep -q 'KV bytes/token: *640 (f16)' "$TMP/info" && grep -q '^context length: *128' "$TMP/info"
check "info" $?

# Bad input: one clear line, non-zero exit.
"$BIN" generate -m /nonexistent.gguf -p x -n 1 >/dev/null 2>"$TMP/e1"; rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$TMP/e1")" -eq 1 ] && grep -q "nonexistent.gguf" "$TMP/e1"
check "missing model: one line, non-zero exit" $?
head -c 1000 "$M" >"$TMP/trunc.gguf"
"$BIN" info -m "$TMP/trunc.gguf" >/dev/null 2>"$TMP/e2"; rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$TMP/e2")" -eq 1 ]
check "truncated model refused" $?
"$BIN" generate -m "$M" -p x -n notanumber >/dev/null 2>"$TMP/e3"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/e3")" -eq 1 ]
check "bad argument: exit 2, one line" $?
# Kernel ISA forcing: --isa and TOKENSERVE_ISA, the path in use logged, bad names refused.
"$BIN" generate -m "$M" -p "Once upon a time" -n 64 --temp 0 --isa scalar >"$TMP/isa_out" 2>"$TMP/isa_err"
grep -q '^kernels: scalar' "$TMP/isa_err" && cmp -s "$TMP/out" "$TMP/isa_out"
check "generate --isa scalar: logged, same greedy text" $?
TOKENSERVE_ISA=scalar "$BIN" generate -m "$M" -p "Once" -n 4 --temp 0 >/dev/null 2>"$TMP/isa_env"
grep -q '^kernels: scalar' "$TMP/isa_env"
check "TOKENSERVE_ISA=scalar" $?
"$BIN" generate -m "$M" -p x -n 1 --isa mmx >/dev/null 2>"$TMP/isa_bad"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/isa_bad")" -eq 1 ] && grep -q "unknown ISA 'mmx'" "$TMP/isa_bad"
check "unknown --isa: exit 2, one line" $?
"$BIN" frobnicate >/dev/null 2>&1; [ $? -eq 2 ]
check "unknown command" $?
"$BIN" generate -m "$M" -p "Once upon a time" -n 500 >/dev/null 2>"$TMP/e4"; rc=$?
[ $rc -ne 0 ] && grep -q "context" "$TMP/e4"
check "prompt + n past context refused" $?
"$BIN" info -m "$SHARED/models/stories260K/tinyllamas-stories-260k-f32.gguf" | grep -q 'GGUF v1'
check "GGUF v1 readable" $?

# synth -> generate on a synthetic Q8_0 model with a copied vocabulary.
"$BIN" synth --arch llama --layers 2 --embd 128 --heads 4 --kv-heads 2 --ffn 256 --ctx 512 \
  --vocab-from "$SHARED/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf" --type q8_0 --seed 3 -o "$TMP/syn.gguf" 2>/dev/null
check "synth" $?
"$BIN" generate -m "$TMP/syn.gguf" -p "Hello" -n 16 --temp 0 --ignore-eos >/dev/null 2>"$TMP/e5"
grep -q 'generation: 16 tokens' "$TMP/e5"
check "generate on synthetic q8_0 model" $?
"$BIN" synth --layers 1 --embd 64 --heads 4 --ffn 128 --type q9 --vocab-size 400 -o "$TMP/x.gguf" >/dev/null 2>&1; [ $? -eq 2 ]
check "synth rejects unknown type" $?
# synth a MoE layer from a preset (fewer experts), info reports resident vs per-token bytes.
"$BIN" synth --preset qwen3-30b-a3b --layers 1 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 \
  --experts-used 2 --expert-ffn 64 --vocab-size 400 --type q8_0 -o "$TMP/moe.gguf" 2>/dev/null
check "synth moe preset" $?
"$BIN" info -m "$TMP/moe.gguf" >"$TMP/moeinfo"
grep -q '^architecture: *qwen3moe' "$TMP/moeinfo" && grep -q '^experts: *8 per layer, 2 used per token' "$TMP/moeinfo" \
  && grep -q 'bytes resident, .* bytes read per token' "$TMP/moeinfo"
check "info on a MoE model" $?
"$BIN" generate -m "$TMP/moe.gguf" -p "Hello" -n 8 --temp 0 --ignore-eos >/dev/null 2>"$TMP/e6"
grep -q 'generation: 8 tokens' "$TMP/e6"
check "generate on synthetic moe model" $?
"$BIN" synth --arch qwen3moe --layers 1 --embd 64 --heads 4 --ffn 128 --type f16 --vocab-size 400 -o "$TMP/x.gguf" >/dev/null 2>"$TMP/e7"; [ $? -ne 0 ] && grep -q 'experts' "$TMP/e7"
check "synth moe without experts is refused" $?
# A gemma3 with a 32-token window: info reports window-only KV (12 layers, 2 global: groups of 2
# layers; 256 B per layer and token, so a 512-token context holds 512 B x 512 + 5 window groups x
# 3 blocks x 16 x 512 B), and generate runs past the window.
"$BIN" synth --arch gemma3 --layers 12 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 128 --ctx 512 \
  --sliding-window 32 --type f16 --vocab-size 400 -o "$TMP/g3.gguf" >/dev/null 2>&1 && "$BIN" info -m "$TMP/g3.gguf" >"$TMP/g3info"
grep -q 'keeps only the window for them (6 KV groups of 2 layers)' "$TMP/g3info" \
  && grep -q 'a 512-token context holds 385024 B (every position in every layer: 1572864)' "$TMP/g3info"
check "info on a sliding-window model" $?
"$BIN" generate -m "$TMP/g3.gguf" -p "Hello" -n 80 --temp 0 --ignore-eos >/dev/null 2>"$TMP/e8"
grep -q 'generation: 80 tokens' "$TMP/e8"
check "generate past the window with window-only KV" $?

# pull from a local HTTP server laid out like Hugging Face, then serve it as the default model.
mkdir -p "$TMP/hf/o/r/resolve/main" "$TMP/models"
cp "$M" "$TMP/hf/o/r/resolve/main/m.gguf"
(cd "$TMP/hf" && exec python3 -u -m http.server 0 --bind 127.0.0.1 >"$TMP/httpd.log" 2>&1) &
HTTPD=$!
PORT=""
for _ in $(seq 1 100); do
  PORT=$(grep -m1 -oE 'port [0-9]+' "$TMP/httpd.log" 2>/dev/null | grep -oE '[0-9]+')
  [ -n "$PORT" ] && curl -sf -m 5 "http://127.0.0.1:$PORT/" >/dev/null 2>&1 && break
  sleep 0.1
done
got=$("$BIN" pull o/r/m.gguf --endpoint "http://127.0.0.1:$PORT" --dir "$TMP/models" 2>/dev/null)
[ "$got" = "$TMP/models/o/r/m.gguf" ] && cmp -s "$got" "$M"
check "pull downloads into the models dir" $?
"$BIN" pull o/r/missing.gguf --endpoint "http://127.0.0.1:$PORT" --dir "$TMP/models" >/dev/null 2>"$TMP/e6"; rc=$?
[ $rc -ne 0 ] && grep -q "not found" "$TMP/e6"
check "pull of a missing file: clear error" $?
kill "$HTTPD" 2>/dev/null; wait "$HTTPD" 2>/dev/null
TOKENSERVE_MODELS="$TMP/empty" "$BIN" serve --no-auth >/dev/null 2>"$TMP/e7"; rc=$?
[ $rc -eq 2 ] && grep -q "tokenserve pull" "$TMP/e7"
check "serve without -m explains how to pull the default model" $?
DEF_DIR="$TMP/models/Qwen/Qwen2.5-0.5B-Instruct-GGUF"
mkdir -p "$DEF_DIR" && cp "$M" "$DEF_DIR/qwen2.5-0.5b-instruct-q8_0.gguf"
TOKENSERVE_MODELS="$TMP/models" "$BIN" serve --no-auth --port 0 --ledger "$TMP/l.db" >"$TMP/def.log" 2>&1 &
SRV=$!
ok=1
PORT=$(ts_port "$TMP/def.log" "$SRV") && ts_ready "$PORT" "$SRV" && ok=0
kill -TERM "$SRV" 2>/dev/null; wait "$SRV"; rc=$?
[ $ok -eq 0 ] && [ $rc -eq 0 ]
check "serve without -m uses the pulled default model; SIGTERM exits 0" $?

# Tier scheduling limits come from the config file.
printf '[tiers.batch]\nmax_running = 3\nkv_share = 0.5\n\n[tiers.interactive]\nlatency_target_ms = 250\n' >"$TMP/tiers.toml"
"$BIN" serve -m "$M" --no-auth --port 0 --ledger "$TMP/l2.db" --config "$TMP/tiers.toml" >/dev/null 2>"$TMP/tiers.log" &
SRV=$!
PORT=$(ts_port "$TMP/tiers.log" "$SRV") && ts_ready "$PORT" "$SRV"
kill -TERM "$SRV" 2>/dev/null; wait "$SRV"
grep -q "tier batch: max_running 3, kv_share 0.5" "$TMP/tiers.log" && grep -q "tier interactive: .*latency_target 250 ms" "$TMP/tiers.log"
check "tier limits from the config file reach the engine" $?
printf '[tiers.batch]\nkv_share = 2\n' >"$TMP/bad.toml"
"$BIN" serve -m "$M" --no-auth --port 0 --ledger "$TMP/l3.db" --config "$TMP/bad.toml" >/dev/null 2>"$TMP/e8"; rc=$?
[ $rc -ne 0 ] && grep -q "bad.toml:2:" "$TMP/e8"
check "bad config: line-precise error" $?

echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
