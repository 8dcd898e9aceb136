#!/usr/bin/env bash
# context_overflow against the real server with stories260K (128-token context): the default
# error, truncate_left / truncate_middle on both endpoints (dropped tokens reported, chat keeps
# the system message and the latest turn), segmented map-reduce over a prompt several times the
# context (every window metered, usage rolled up with a per-segment breakdown equal to the
# ledger row, streaming progress events before the answer), and bad policies refused.
# Usage: context_overflow_e2e.sh path/to/tokenserve
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
export URL="http://127.0.0.1:$PORT" LEDGER="$TMP/ledger.db" BIN
python3 - <<'PY'
import json, os, sqlite3, subprocess, sys, time, urllib.request, urllib.error

URL = os.environ["URL"]
MODEL = "stories260K-f32"
passed = failed = 0

def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", name, detail)

def post(path, body, stream=False):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode()
            return r.status, raw if stream else json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())

sentence = "Once upon a time there was a little girl named Lily who loved to play in the park with her dog. "
long_prompt = sentence * 12                      # ~360 tokens: about three contexts of 128
ctx = 128

# Default: today's 400.
st, j = post("/v1/completions", {"model": MODEL, "prompt": long_prompt, "max_tokens": 8})
check("default is context_length_exceeded", st == 400 and j["error"]["code"] == "context_length_exceeded", j)

# Truncation, completions.
for mode in ("truncate_left", "truncate_middle"):
    st, j = post("/v1/completions", {"model": MODEL, "prompt": long_prompt, "max_tokens": 8, "context_overflow": mode})
    ok = st == 200 and j["context_overflow"]["mode"] == mode and j["context_overflow"]["dropped_tokens"] > 200
    ok = ok and j["usage"]["prompt_tokens"] + 8 <= ctx and j["usage"]["prompt_tokens"] >= ctx - 8 - 1
    check(mode + " on completions", ok, (st, j))
# A prompt that fits is untouched.
st, j = post("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4, "context_overflow": "truncate_left"})
check("fitting prompt is not truncated", st == 200 and "context_overflow" not in j, j)

# Truncation, chat: the system message and the latest turn stay; old turns go.
msgs = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": long_prompt},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Tell me more about Lily"}]
st, j = post("/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 8, "context_overflow": "truncate_left"})
ok = st == 200 and j["context_overflow"]["dropped_messages"] == 1 and j["context_overflow"]["dropped_tokens"] > 200
check("truncate_left on chat drops the old long turn", ok, (st, j))
tok = post("/tokenize", {"model": MODEL, "messages": [msgs[0], msgs[2], msgs[3]]})[1]
check("chat truncation kept system + latest turns", st == 200 and j["usage"]["prompt_tokens"] == tok["count"], (j.get("usage"), tok))
st, j = post("/v1/chat/completions", {"model": MODEL, "messages": [msgs[0], {"role": "user", "content": long_prompt}],
                                       "max_tokens": 8, "context_overflow": "truncate_middle"})
check("chat with nothing droppable keeps the 400", st == 400 and j["error"]["code"] == "context_length_exceeded", j)

# Segmented map-reduce, completions.
seg = {"mode": "segment", "window": 48, "overlap": 8, "map_max_tokens": 4, "map_prompt": "{text} So", "reduce_prompt": "{text} The end"}
st, j = post("/v1/completions", {"model": MODEL, "prompt": long_prompt, "max_tokens": 8, "context_overflow": seg})
check("segment answers 200", st == 200, j)
if st == 200:
    u = j["usage"]
    segs = u["segments"]
    n = len(segs)
    check("several windows", n >= 7 and j["context_overflow"]["segments"] == n, n)
    check("windows step by window - overlap and cover the input",
          all(s["window"][0] == 40 * i for i, s in enumerate(segs)) and all(s["window"][1] - s["window"][0] <= 48 for s in segs), segs)
    check("every window metered", all(s["prompt_tokens"] > 0 and s["completion_tokens"] == 4 for s in segs), segs)
    map_prompt = sum(s["prompt_tokens"] for s in segs)
    map_out = sum(s["completion_tokens"] for s in segs)
    reduce_prompt = u["prompt_tokens"] - map_prompt
    check("usage rolls up maps + reduce", u["completion_tokens"] == map_out + 8 and 0 < reduce_prompt <= ctx - 8, u)
    total_prompt, total_completion = u["prompt_tokens"], u["completion_tokens"]

# Streaming: progress events before the answer, final usage with segments.
req = urllib.request.Request(URL + "/v1/completions", data=json.dumps({"model": MODEL, "prompt": long_prompt, "max_tokens": 8, "stream": True,
    "stream_options": {"include_usage": True}, "context_overflow": seg}).encode(), headers={"Content-Type": "application/json"})
raw = urllib.request.urlopen(req, timeout=120).read().decode()
events = [e for e in raw.split("\n\n") if e.strip()]
progress = [i for i, e in enumerate(events) if e.startswith("event: context_overflow.progress")]
content = [i for i, e in enumerate(events) if e.startswith("data: {") and '"text"' in e]
check("stream: one progress event per window", len(progress) == n, len(progress))
check("stream: progress comes before the answer", progress and content and max(progress) < min(content), (progress[:3], content[:3]))
last = json.loads([e for e in events if e.startswith("data: {")][-1][6:])
check("stream: final usage has the segments", len(last["usage"]["segments"]) == n and last["usage"]["completion_tokens"] == total_completion, last)
check("stream ends with [DONE]", events[-1] == "data: [DONE]")

# Chat segment mode segments the last user message.
st, j = post("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 6,
                                       "context_overflow": {"mode": "segment", "window": 48, "overlap": 0, "map_max_tokens": 2,
                                                            "map_prompt": "{text}", "reduce_prompt": "{text}"}})
check("segment on chat", st == 200 and len(j["usage"]["segments"]) >= 7 and j["choices"][0]["message"]["content"] is not None, (st, j))

# Bad policies.
for body, why in [({"mode": "segment", "window": 48, "overlap": 48}, "overlap >= window"),
                  ({"mode": "segment", "window": 200, "overlap": 8}, "window too large for the context"),
                  ({"mode": "segment", "window": 16, "overlap": 0, "map_max_tokens": 16}, "map outputs do not fit the reduce step"),
                  ({"mode": "segment"}, "window missing"),
                  ("truncate_sideways", "unknown mode"),
                  ({"mode": "squash"}, "unknown object mode"),
                  (7, "wrong type")]:
    st, j = post("/v1/completions", {"model": MODEL, "prompt": long_prompt, "max_tokens": 8, "context_overflow": body})
    check("bad policy: " + why, st == 400 and j["error"]["param"] == "context_overflow", (st, j))

# The ledger row of the segmented request carries the rolled-up totals.
print("context_overflow checks: %d passed, %d failed" % (passed, failed))
json.dump({"prompt": total_prompt, "completion": total_completion, "failed": failed}, open(os.environ["LEDGER"] + ".expect", "w"))
sys.exit(1 if failed else 0)
PY
rc=$?
# Stop the server so the ledger is flushed, then look for the segmented request's row.
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null
python3 - "$TMP/ledger.db" <<'PY'
import json, sqlite3, sys
exp = json.load(open(sys.argv[1] + ".expect"))
rows = sqlite3.connect(sys.argv[1]).execute("SELECT prompt_tokens, completion_tokens FROM ts_usage").fetchall()
assert (exp["prompt"], exp["completion"]) in rows, (exp, rows)
print("ledger row of the segmented request:", exp)
PY
lrc=$?
[ "$lrc" -eq 0 ] || echo "FAIL: ledger row with the rolled-up totals"

# The tenant's default from the governance config applies to requests without the field.
printf '[tenants.acme]\ncontext_overflow = "truncate_left"\n' >"$TMP/gov.toml"
KEY=$("$BIN" keys create --tenant acme --app bot --ledger "$TMP/ledger2.db" | tail -n 1)
"$BIN" serve -m "$M" --host 127.0.0.1 --port 0 --ledger "$TMP/ledger2.db" --config "$TMP/gov.toml" >"$TMP/server2.log" 2>&1 &
SRV=$!
PORT=$(ts_port "$TMP/server2.log" "$SRV") && ts_ready "$PORT" "$SRV" || exit 1
LONG=$(python3 -c 'print("Once upon a time there was a little girl named Lily. " * 30)')
curl -s -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PORT/v1/completions" \
  -d "{\"model\":\"stories260K-f32\",\"prompt\":\"$LONG\",\"max_tokens\":4}" >"$TMP/default.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["context_overflow"]["mode"]=="truncate_left" and j["context_overflow"]["dropped_tokens"]>0, j' "$TMP/default.json"
drc=$?
[ "$drc" -eq 0 ] || echo "FAIL: tenant default from the config"
curl -s -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PORT/v1/completions" \
  -d "{\"model\":\"stories260K-f32\",\"prompt\":\"$LONG\",\"max_tokens\":4,\"context_overflow\":\"error\"}" >"$TMP/explicit.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["error"]["code"]=="context_length_exceeded", j' "$TMP/explicit.json"
erc=$?
[ "$erc" -eq 0 ] || echo "FAIL: the request's field overrides the tenant default"
[ "$rc" -eq 0 ] && [ "$lrc" -eq 0 ] && [ "$drc" -eq 0 ] && [ "$erc" -eq 0 ]
