#!/usr/bin/env bash
# `tokenserve eval` and `tokenserve contamination` end to end against the real server:
# a layered suite scored on stories260K gives the baseline RUN.json; the same suite against a
# broken model (seeded random weights, same tokenizer) must be reported as a significant
# regression of the benchmark layer with exit status 3, with the markdown report and SVG charts
# written beside RUN.json. Malformed suites and baselines get one-line errors.
# Usage: eval_e2e.sh path/to/tokenserve
set -u
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
if [ ! -d "$SHARED/models" ]; then echo "shared data not found; skipping"; exit 0; fi
M=$SHARED/models/stories260K/stories260K-f32.gguf
TMP=$(mktemp -d)
SRV=
. "$(dirname "$0")/lib.sh"
NSRV=0
start_server() {  # model file -> sets SRV and PORT
  NSRV=$((NSRV + 1))
  "$BIN" serve -m "$1" --host 127.0.0.1 --port 0 --no-auth --ledger "$TMP/ledger-$NSRV.db" >"$TMP/server-$NSRV.log" 2>&1 &
  SRV=$!
  PORT=$(ts_port "$TMP/server-$NSRV.log" "$SRV") && ts_ready "$PORT" "$SRV" && return 0
  echo "server did not start"; cat "$TMP/server-$NSRV.log"; return 1
}
stop_server() { if [ -n "$SRV" ]; then kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=; fi; }
cleanup() { stop_server; rm -rf "$TMP"; }
trap cleanup EXIT
pass=0; fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }

# The suite: greedy continuations stories260K is known to produce (contains/regex), chat and
# structured cases it fails on either way.
S=$TMP/suite
mkdir -p "$S/benchmark" "$S/adversarial"
python3 - "$S" <<'PY'
import json, sys
s = sys.argv[1]
bench = [
  ("b1", "Once upon a time, there was a", "contains", "Lily"),
  ("b2", "Tom had a red", "contains", "ball"),
  ("b3", "The dog", "contains", "ball"),
  ("b4", "Sara saw a", "contains", "box"),
  ("b5", "Max and", "contains", "park"),
  ("b6", "The little boy wanted", "contains", "toys"),
  ("b7", "She was happy because", "regex", "lov(e|ed) to play"),
  ("b8", "Lily and Tom", "contains", ["playing", "park"]),
]
with open(s + "/benchmark/cases.jsonl", "w") as f:
  for i, p, sc, e in bench:
    f.write(json.dumps({"id": i, "prompt": p, "scorer": sc, "expected": e, "max_tokens": 16}) + "\n")
adv = [
  {"id": "a1", "prompt": "What is 2 + 2? Answer:", "scorer": "number", "expected": 4, "max_tokens": 8},
  {"id": "a2", "messages": [{"role": "user", "content": "Reply with JSON"}], "scorer": "json_schema",
   "expected": {"type": "object", "required": ["answer"]}, "max_tokens": 8},
  {"id": "a3", "prompt": "Pick A, B or C:", "scorer": "choice", "expected": "B", "max_tokens": 8},
]
with open(s + "/adversarial/cases.jsonl", "w") as f:
  for c in adv: f.write(json.dumps(c) + "\n")
PY

start_server "$M" || exit 1
"$BIN" eval --suite "$S" --url "http://127.0.0.1:$PORT" --concurrency 3 -q -o "$TMP/base/RUN.json" >"$TMP/eval1.txt" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ ! -e "$TMP/base/RUN.json" ]
check "eval into a missing folder fails with nothing written" $?
mkdir -p "$TMP/base"
"$BIN" eval --suite "$S" --url "http://127.0.0.1:$PORT/v1" --concurrency 3 -q -o "$TMP/base/RUN.json" >"$TMP/eval1.txt" 2>&1
check "baseline eval exit code 0" $?
python3 - "$TMP/base/RUN.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b = r["layers"]["benchmark"]
assert r["model"] == "stories260K-f32", r["model"]
assert b["n"] == 8 and b["score"] == 1.0, b
lo, hi = b["ci"]
assert 0.6 < lo < 0.7 and hi == 1.0, b["ci"]   # Wilson 95% for 8/8: [0.676, 1]
assert b["output_tokens"]["p50"] == 16, b["output_tokens"]
assert r["layers"]["adversarial"]["n"] == 3
cases = {c["id"]: c for c in r["cases"]}
assert "Lily" in cases["b1"]["output"] and cases["b1"]["score"] == 1
assert cases["b1"]["completion_tokens"] == 16 and cases["b1"]["prompt_tokens"] > 0
assert all("error" not in c for c in r["cases"]), [c for c in r["cases"] if "error" in c]
print("baseline ok")
PY
check "baseline RUN.json: per-layer scores, Wilson CI, lengths, per-case outputs" $?
for f in RUN.md RUN.scores.svg RUN.lengths.svg; do [ -s "$TMP/base/$f" ]; check "baseline $f written" $?; done

# Same model again: no regression, exit 0.
"$BIN" eval --suite "$S" --url "http://127.0.0.1:$PORT" --baseline "$TMP/base/RUN.json" -q -o "$TMP/same.json" >"$TMP/same.txt" 2>&1
check "same model against its baseline exits 0" $?
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["comparison"]; assert c["regressed"]==[], c; assert c["layers"]["benchmark"]["verdict"]=="no_change", c' "$TMP/same.json"
check "same model: no regression reported" $?
stop_server

# A broken model (random weights, same tokenizer): the benchmark layer regresses.
"$BIN" synth --vocab-from "$M" --layers 1 --embd 64 --heads 4 --ffn 128 --ctx 512 --type f32 --seed 7 -o "$TMP/broken.gguf" >/dev/null 2>&1
start_server "$TMP/broken.gguf" || exit 1
"$BIN" eval --suite "$S" --url "http://127.0.0.1:$PORT" --baseline "$TMP/base/RUN.json" -q -o "$TMP/cand/RUN.json" >"$TMP/eval2.txt" 2>&1
[ $? -eq 2 ]; check "eval into a missing output folder exits 2 before sending" $?
mkdir -p "$TMP/cand"
"$BIN" eval --suite "$S" --url "http://127.0.0.1:$PORT" --baseline "$TMP/base/RUN.json" -q -o "$TMP/cand/RUN.json" >"$TMP/eval2.txt" 2>&1
rc=$?
[ "$rc" -eq 3 ]; check "regression exits 3 (got $rc)" $?
grep -q "REGRESSION in: benchmark" "$TMP/eval2.txt"; check "regression named on stdout" $?
python3 - "$TMP/cand/RUN.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["comparison"]
b = c["layers"]["benchmark"]
assert c["regressed"] == ["benchmark"], c["regressed"]
assert b["verdict"] == "regression" and b["test"] == "mcnemar_exact", b
assert b["n_paired"] == 8 and b["baseline_score"] == 1.0 and b["delta"] < -0.5, b
assert b["p_value"] < 0.05 and b["regressed_cases"] >= 6, b
assert c["layers"]["adversarial"]["verdict"] != "regression", c["layers"]["adversarial"]
print("regression detected:", b["baseline_score"], "->", b["score"], "p =", b["p_value"])
PY
check "candidate RUN.json: benchmark regression with McNemar p < 0.05" $?
grep -q "Regression" "$TMP/cand/RUN.md" && grep -q "RUN.scores.svg" "$TMP/cand/RUN.md"
check "markdown report names the regression and links the charts" $?
grep -q "<svg" "$TMP/cand/RUN.scores.svg" && grep -q "<svg" "$TMP/cand/RUN.lengths.svg"
check "SVG charts written" $?
stop_server

# Bad input: one-line errors naming file, line and field; nothing written.
mkdir -p "$TMP/bad/layer"
printf '{"id":"x","prompt":"hi","scorer":"exact","expected":"a"}\n{"id":"y","prompt":"hi","scorer":"nope","expected":"a"}\n' >"$TMP/bad/layer/c.jsonl"
"$BIN" eval --suite "$TMP/bad" --url http://127.0.0.1:9 -o "$TMP/bad.json" >"$TMP/bad.txt" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "c.jsonl:2: field 'scorer'" "$TMP/bad.txt" && [ ! -e "$TMP/bad.json" ]
check "malformed suite: exit 2, file:line and field named" $?
echo '{"not": "a run"}' >"$TMP/notrun.json"
"$BIN" eval --suite "$S" --url http://127.0.0.1:9 --baseline "$TMP/notrun.json" -o "$TMP/bad.json" >"$TMP/bad.txt" 2>&1
[ $? -eq 2 ] && grep -q "cases" "$TMP/bad.txt"; check "bad baseline refused before running" $?
"$BIN" eval --suite "$S" --url http://127.0.0.1:9 -o "$TMP/down.json" >"$TMP/down.txt" 2>&1
[ $? -eq 1 ] && [ "$(wc -l <"$TMP/down.txt")" -eq 1 ]; check "unreachable server: one-line error" $?

# Contamination: a corpus holding two cases' prompts verbatim (n = 3 for these short prompts).
cat >"$TMP/corpus.jsonl" <<'EOF'
{"text": "Unrelated text about the weather and nothing else at all, repeated in a long sentence for the corpus."}
{"text": "Lily and Tom went out. playing park"}
{"text": "What is 2 + 2? Answer: 4"}
EOF
"$BIN" contamination --suite "$S" --corpus "$TMP/corpus.jsonl" --n 3 --report "$TMP/cont.json" --remove "$TMP/clean" >"$TMP/cont.txt" 2>&1
check "contamination exit code" $?
python3 - "$TMP/cont.json" "$TMP/clean" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
bad = sorted(c["id"] for c in r["cases"] if c["contaminated"])
assert bad == ["a1", "b8"], bad   # both prompts are planted verbatim in the corpus
removed = json.load(open(os.path.join(sys.argv[2], "REMOVED.json")))["removed"]
assert sorted(x["id"] for x in removed) == ["a1", "b8"], removed
kept = open(os.path.join(sys.argv[2], "adversarial", "cases.jsonl")).read()
assert '"a1"' not in kept and '"a2"' in kept
print("contamination ok")
PY
check "contamination report and cleaned suite" $?
"$BIN" contamination --suite "$S" --corpus "$TMP/missing.txt" >"$TMP/c2.txt" 2>&1
[ $? -eq 1 ] && grep -q "missing.txt" "$TMP/c2.txt"; check "unreadable corpus named" $?

echo "eval_e2e: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
