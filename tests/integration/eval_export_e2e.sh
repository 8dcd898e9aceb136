#!/usr/bin/env bash
# Body logging and `tokenserve usage --export-suite` end to end against the real server:
# tenant acme opts into log_bodies, globex does not. acme's flagged requests (cut at max_tokens:
# finish_reason length; one chat, one streamed completion) become runnable cases in
# DIR/ledger-failures/cases.jsonl with their bodies and outputs; its request that finished
# normally is not exported; globex's flagged request is metadata only. `tokenserve eval` then
# loads and runs that layer. (Failed requests, status >= 400 / finish_reason error, take the
# same path; the real server offers no deterministic way to fail a request after admission, so
# that case is covered by EvalExport.LoggedBodiesBecomeRunnableCases in tests/tools.)
# Usage: eval_export_e2e.sh path/to/tokenserve
set -u
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
if [ ! -d "$SHARED/models" ]; then echo "shared data not found; skipping"; exit 0; fi
M=$SHARED/models/stories260K/stories260K-f32.gguf
TMP=$(mktemp -d)
SRV=
. "$(dirname "$0")/lib.sh"
start_server() {  # extra serve flags...
  "$BIN" serve -m "$M" --host 127.0.0.1 --port 0 --ledger "$TMP/ledger.db" "$@" >"$TMP/server.log" 2>&1 &
  SRV=$!
  PORT=$(ts_port "$TMP/server.log" "$SRV") && ts_ready "$PORT" "$SRV" && return 0
  echo "server did not start"; cat "$TMP/server.log"; return 1
}
stop_server() { if [ -n "$SRV" ]; then kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=; fi; }
cleanup() { stop_server; [ -n "${KEEP_TMP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"; }
trap cleanup EXIT
pass=0; fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
post() {  # key, path, body -> "STATUS"
  curl -s -o "$TMP/body" -w "%{http_code}" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    --data "$3" "http://127.0.0.1:$PORT$2"
}

ADMIN=ts-admin-$(python3 -c 'import secrets; print(secrets.token_hex(8))')
printf '[admin]\nkey_sha256 = "%s"\n[tenants.acme]\nlog_bodies = true\n[tenants.globex]\n' \
  "$(printf %s "$ADMIN" | sha256sum | cut -d' ' -f1)" >"$TMP/gov.toml"
ACME=$("$BIN" keys create --tenant acme --app bot --ledger "$TMP/ledger.db" | tail -n 1)
GLOBEX=$("$BIN" keys create --tenant globex --app bot --ledger "$TMP/ledger.db" | tail -n 1)
start_server --config "$TMP/gov.toml" || exit 1
MODEL=stories260K-f32

st=$(post "$ACME" /v1/chat/completions "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story.\"},{\"role\":\"user\",\"content\":\"Tom had a red\"}],\"max_tokens\":3}")
[ "$st" = 200 ] && grep -q '"finish_reason":"length"' "$TMP/body"; check "acme: chat cut at max_tokens ($st)" $?
st=$(post "$ACME" /v1/completions "{\"model\":\"$MODEL\",\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"stream\":true}")
[ "$st" = 200 ]; check "acme: streamed completion cut at max_tokens" $?
st=$(post "$ACME" /v1/completions "{\"model\":\"$MODEL\",\"prompt\":\"The dog\",\"max_tokens\":100,\"stop\":[\".\"]}")
[ "$st" = 200 ] && grep -q "\"finish_reason\":\"stop\"" "$TMP/body"; check "acme: a request that finishes normally" $?
st=$(post "$ADMIN" /v1/prompts '{"id":"tale","messages":[{"role":"user","content":"A tale of {{ who }}"}]}')
[ "$st" = 201 ]; check "admin registers a prompt ($st)" $?
st=$(post "$ACME" /v1/chat/completions "{\"model\":\"$MODEL\",\"prompt\":{\"id\":\"tale\",\"version\":1,\"variables\":{\"who\":\"a cat\"}},\"max_tokens\":2}")
[ "$st" = 200 ] && grep -q '"finish_reason":"length"' "$TMP/body"; check "acme: registry prompt cut at max_tokens ($st)" $?
st=$(post "$GLOBEX" /v1/completions "{\"model\":\"$MODEL\",\"prompt\":\"Sara saw a\",\"max_tokens\":3}")
[ "$st" = 200 ]; check "globex: completion cut at max_tokens" $?
stop_server  # the writer drains the ledger at shutdown
python3 - "$TMP/ledger.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT u.tenant, b.output_text FROM ts_usage_bodies b JOIN ts_usage u USING (request_id)").fetchall()
assert sorted(t for t, _ in rows) == ["acme"] * 4, rows   # acme's 4 requests; none of globex's
assert db.execute("SELECT COUNT(*) FROM ts_usage WHERE tenant = 'globex'").fetchone()[0] == 1
PY
check "ts_usage_bodies holds acme's requests only" $?

"$BIN" usage --ledger "$TMP/ledger.db" --export-suite "$TMP/suite" >"$TMP/export.txt" 2>&1
check "usage --export-suite exit code ($(cat "$TMP/export.txt"))" $?
grep -q "wrote 3 runnable cases" "$TMP/export.txt" && grep -q " 1 metadata-only" "$TMP/export.txt"
check "export counts: 3 acme cases, 1 globex metadata record ($(cat "$TMP/export.txt"))" $?
python3 - "$TMP/suite/ledger-failures" <<'PY'
import json, os, sys
d = sys.argv[1]
cases = [json.loads(l) for l in open(os.path.join(d, "cases.jsonl"))]
assert len(cases) == 3 and all(c["ledger"]["tenant"] == "acme" for c in cases), cases
tale = [c for c in cases if c["ledger"].get("prompt", {}).get("id") == "tale"]
# The registry prompt is logged as the messages it rendered to, so the case runs anywhere.
assert len(tale) == 1 and tale[0]["messages"] == [{"role": "user", "content": "A tale of a cat"}], tale
assert tale[0]["ledger"]["prompt"]["version"] == 1 and tale[0]["max_tokens"] == 2, tale
chat = [c for c in cases if c.get("messages") and c not in tale][0]
assert chat["messages"][0] == {"role": "system", "content": "Tell a story."} and chat["scorer"] == "regex", chat
assert chat["messages"][1]["content"] == "Tom had a red" and chat["max_tokens"] == 3, chat
assert chat["ledger"]["finish_reason"] == "length" and chat["ledger"]["recorded_output"] != "", chat
stream = [c for c in cases if "prompt" in c][0]
assert stream["prompt"] == "Once upon a time" and stream["ledger"]["recorded_output"] != "", stream
pend = [json.loads(l) for l in open(os.path.join(d, "PENDING.ndjson"))]
assert len(pend) == 1 and pend[0]["tenant"] == "globex" and "log_bodies" in pend[0]["reason"], pend
assert "messages" not in pend[0] and "prompt" not in pend[0]
print("export ok")
PY
check "exported cases carry acme's bodies and outputs; globex stays metadata only" $?
"$BIN" usage --ledger "$TMP/ledger.db" --export-suite "$TMP/suite" >"$TMP/export2.txt" 2>&1
[ $? -ne 0 ] && grep -q "already exists" "$TMP/export2.txt"; check "a second export does not overwrite" $?

# The exported layer is a suite `tokenserve eval` runs.
start_server --no-auth || exit 1
mkdir -p "$TMP/run"
"$BIN" eval --suite "$TMP/suite" --url "http://127.0.0.1:$PORT" -q -o "$TMP/run/RUN.json" >"$TMP/eval.txt" 2>&1
check "eval runs the exported layer ($(tail -n 3 "$TMP/eval.txt"))" $?
python3 - "$TMP/run/RUN.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["layers"]["ledger-failures"]
assert l["n"] == 3 and l["errors"] == 0, l
cases = {c["id"]: c for c in r["cases"]}
# Same model, same greedy request: each case's output is non-empty again, so the floor holds.
assert l["score"] == 1.0, r["cases"]
assert len(cases) == 3 and all(c["layer"] == "ledger-failures" for c in cases.values()), cases
print("eval ok:", l["score"])
PY
check "RUN.json scores the ledger-failures layer's 3 cases" $?
stop_server

echo "eval_export_e2e: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
