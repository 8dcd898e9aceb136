#!/usr/bin/env bash
# End-to-end checks of `tokenserve quantize` on the real stories260K model.
# Usage: quantize_cli_test.sh path/to/tokenserve   (shared data at ../shared or $TOKENSERVE_SHARED)
set -u
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
if [ ! -d "$SHARED/models" ]; then echo "shared data not found; skipping"; exit 0; fi
M=$SHARED/models/stories260K/stories260K-f32.gguf
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi
}
one_line() { [ "$(wc -l <"$1")" -eq 1 ]; }

"$BIN" quantize --help >"$TMP/help" 2>&1
check "--help exit code" $?
grep -q "Q4_K_M" "$TMP/help" && grep -q "IQ4_XS" "$TMP/help" && grep -q -- "--threads" "$TMP/help"
check "--help lists presets and --threads" $?

# F32 -> Q8_0 with a progress bar, then the file loads and generates like the source.
"$BIN" quantize "$M" "$TMP/q8.gguf" q8_0 --threads 2 >"$TMP/out" 2>"$TMP/err"
check "quantize Q8_0 exit code" $?
grep -q "quantize: \[" "$TMP/err" && grep -q "100%" "$TMP/err"
check "progress bar on stderr" $?
grep -q "wrote $TMP/q8.gguf (Q8_0)" "$TMP/err"
check "summary line" $?
[ -f "$TMP/q8.gguf" ] && [ ! -e "$TMP/q8.gguf.tmp" ]
check "output renamed into place" $?
"$BIN" info -m "$TMP/q8.gguf" | grep -q "q8_0"
check "info shows q8_0 tensors" $?
"$BIN" generate -m "$M" -p "Once upon a time" -n 24 --temp 0 >"$TMP/g32" 2>/dev/null
"$BIN" generate -m "$TMP/q8.gguf" -p "Once upon a time" -n 24 --temp 0 >"$TMP/g8" 2>/dev/null
check "generate with the Q8_0 file" $?
cmp -s "$TMP/g32" "$TMP/g8"
check "Q8_0 greedy text equals F32's" $?

# Dry run: the plan with llama-quantize's fallbacks for 64-wide rows; nothing written.
"$BIN" quantize --dry-run "$M" "$TMP/dry.gguf" Q4_K_M >"$TMP/plan" 2>&1
check "dry-run exit code" $?
grep -Eq '^blk\.0\.attn_q\.weight +64 x 64 +f32 +-> q5_0 +\(fallback\)$' "$TMP/plan"
check "dry-run shows the Q4_K -> Q5_0 fallback" $?
grep -Eq '^output_norm\.weight +64 +f32 +-> f32$' "$TMP/plan"
check "dry-run keeps norms F32" $?
[ ! -e "$TMP/dry.gguf" ]
check "dry-run writes nothing" $?

# llama-quantize's override flags.
"$BIN" quantize --dry-run "$M" "$TMP/dry.gguf" Q8_0 --output-tensor-type f16 --token-embedding-type q4_0 >"$TMP/plan2" 2>&1
grep -Eq '^output\.weight .* -> f16$' "$TMP/plan2" && grep -Eq '^token_embd\.weight .* -> q4_0$' "$TMP/plan2"
check "--output-tensor-type / --token-embedding-type" $?
"$BIN" quantize "$M" "$TMP/bad.gguf" Q8_0 --output-tensor-type q9_k >/dev/null 2>"$TMP/e0"
[ $? -eq 2 ] && one_line "$TMP/e0" && grep -q "q9_k" "$TMP/e0"
check "unknown override type refused" $?

# Bad input: one line, non-zero exit, no output file.
"$BIN" quantize "$M" "$TMP/bad.gguf" Q7_K >/dev/null 2>"$TMP/e1"
[ $? -eq 2 ] && one_line "$TMP/e1" && grep -q "unknown type 'Q7_K'" "$TMP/e1" && [ ! -e "$TMP/bad.gguf" ]
check "unknown type refused" $?
"$BIN" quantize "$TMP/missing.gguf" "$TMP/bad.gguf" Q8_0 >/dev/null 2>"$TMP/e2"
[ $? -eq 1 ] && one_line "$TMP/e2" && grep -q "missing.gguf" "$TMP/e2" && [ ! -e "$TMP/bad.gguf" ]
check "missing input refused" $?
head -c 100 "$M" >"$TMP/trunc.gguf"
"$BIN" quantize "$TMP/trunc.gguf" "$TMP/bad.gguf" Q8_0 >/dev/null 2>"$TMP/e3"
[ $? -eq 1 ] && one_line "$TMP/e3" && [ ! -e "$TMP/bad.gguf" ] && [ ! -e "$TMP/bad.gguf.tmp" ]
check "truncated input refused" $?
"$BIN" quantize "$M" "$TMP/bad.gguf" >/dev/null 2>"$TMP/e4"
[ $? -eq 2 ] && one_line "$TMP/e4"
check "missing TYPE refused" $?
"$BIN" quantize "$M" "$TMP/bad.gguf" Q8_0 --threads -3 >/dev/null 2>"$TMP/e5"
[ $? -eq 2 ] && one_line "$TMP/e5"
check "bad --threads refused" $?
"$BIN" quantize "$M" "$TMP/no/such/dir/x.gguf" Q8_0 >/dev/null 2>"$TMP/e6"
[ $? -eq 1 ] && grep -q "x.gguf" "$TMP/e6"
check "unwritable output refused" $?

echo "quantize cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
