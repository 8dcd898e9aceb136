#!/usr/bin/env bash
# The prompt registry against the real server (stories260K, SQLite ledger): admin CRUD and
# labels over /v1/prompts, tenant keys reading only their own and shared prompts (403 on
# writes), chat requests with "prompt" references rendered server-side (missing variables,
# unknown ids and labels refused), ledger rows carrying prompt id + version reported by
# `tokenserve usage --by prompt`, the `tokenserve prompts` command, and --no-auth = admin.
# Usage: prompts_e2e.sh path/to/tokenserve
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
cleanup() { stop_server; rm -rf "$TMP"; }
trap cleanup EXIT
pass=0; fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
# call METHOD PATH KEY [BODY] -> prints "STATUS BODY"
call() {
  local auth=()
  [ -n "$3" ] && auth=(-H "Authorization: Bearer $3")
  curl -s -o "$TMP/body" -w "%{http_code}" -X "$1" "${auth[@]}" -H 'Content-Type: application/json' \
    ${4:+--data "$4"} "http://127.0.0.1:$PORT$2"
  printf ' '; cat "$TMP/body"
}
expect() {  # description, expected status, "STATUS BODY", optional python condition on j
  local st=${3%% *} body=${3#* }
  if [ "$st" != "$2" ]; then check "$1 (status $st, want $2: $body)" 1; return; fi
  if [ -n "${4:-}" ]; then
    python3 -c "import json,sys; j=json.loads(sys.argv[1]); assert $4, j" "$body" 2>/dev/null
    check "$1 ($body)" $?
  else
    check "$1" 0
  fi
}

ADMIN=ts-admin-$(python3 -c 'import secrets; print(secrets.token_hex(8))')
printf '[admin]\nkey_sha256 = "%s"\n' "$(printf %s "$ADMIN" | sha256sum | cut -d' ' -f1)" >"$TMP/gov.toml"
ACME=$("$BIN" keys create --tenant acme --app bot --ledger "$TMP/ledger.db" | tail -n 1)
GLOBEX=$("$BIN" keys create --tenant globex --app bot --ledger "$TMP/ledger.db" | tail -n 1)
start_server --config "$TMP/gov.toml" || exit 1
MODEL=stories260K-f32

expect "admin creates a shared prompt with a label" 201 "$(call POST /v1/prompts "$ADMIN" \
  '{"id":"story","messages":[{"role":"system","content":"You tell stories."},{"role":"user","content":"A story about {{ animal }} named {{ name }}"}],"labels":["production"]}')" \
  'j["version"]==1 and j["hash"].startswith("sha256:") and j["created"] and sorted(j["variables"])==["animal","name"]'
expect "admin creates version 2" 201 "$(call POST /v1/prompts "$ADMIN" '{"id":"story","template":"Once upon a time, {{ name }}"}')" 'j["version"]==2'
expect "identical content is not a new version" 200 "$(call POST /v1/prompts "$ADMIN" '{"id":"story","template":"Once upon a time, {{ name }}"}')" 'j["version"]==2 and not j["created"]'
expect "admin creates acme's own prompt" 201 "$(call POST /v1/prompts "$ADMIN" '{"id":"acme-only","template":"Hi {{ x }}","tenant":"acme"}')"
expect "admin moves staging to 2" 200 "$(call POST /v1/prompts/story/labels "$ADMIN" '{"label":"staging","version":2}')" 'j["version"]==2'
expect "label on a missing version is 404" 404 "$(call POST /v1/prompts/story/labels "$ADMIN" '{"label":"staging","version":9}')"
expect "bad template syntax is 400" 400 "$(call POST /v1/prompts "$ADMIN" '{"id":"broken","template":"{% if %}"}')" '"line" in j["error"]["message"]'
expect "both messages and template is 400" 400 "$(call POST /v1/prompts "$ADMIN" '{"id":"x","template":"a","messages":[]}')"
expect "tenant cannot create" 403 "$(call POST /v1/prompts "$ACME" '{"id":"mine","template":"a"}')"
expect "tenant cannot move labels" 403 "$(call POST /v1/prompts/story/labels "$ACME" '{"label":"production","version":2}')"
expect "no key is 401" 401 "$(call GET /v1/prompts "")"
expect "acme lists shared + own" 200 "$(call GET /v1/prompts "$ACME")" 'sorted(p["id"] for p in j["data"])==["acme-only","story"]'
expect "globex lists shared only" 200 "$(call GET /v1/prompts "$GLOBEX")" '[p["id"] for p in j["data"]]==["story"]'
expect "globex cannot read acme's prompt" 404 "$(call GET /v1/prompts/acme-only "$GLOBEX")"
expect "get by label" 200 "$(call GET '/v1/prompts/story?label=production' "$ACME")" 'j["version"]==1 and j["messages"][1]["content"].startswith("A story")'
expect "get by version" 200 "$(call GET '/v1/prompts/story?version=2' "$ACME")" 'j["template"]=="Once upon a time, {{ name }}"'
expect "versions list" 200 "$(call GET /v1/prompts/story/versions "$ACME")" 'len(j["data"])==2'
expect "bad version query is 400" 400 "$(call GET '/v1/prompts/story?version=zero' "$ACME")"

# Chat with prompt references, metered by version.
expect "chat with prompt label" 200 "$(call POST /v1/chat/completions "$ACME" \
  "{\"model\":\"$MODEL\",\"max_tokens\":6,\"prompt\":{\"id\":\"story\",\"label\":\"production\",\"variables\":{\"animal\":\"a cat\",\"name\":\"Tom\"}}}")" \
  'j["usage"]["completion_tokens"]==6 and j["usage"]["prompt_tokens"]>10'
expect "chat with prompt version" 200 "$(call POST /v1/chat/completions "$ACME" \
  "{\"model\":\"$MODEL\",\"max_tokens\":5,\"prompt\":{\"id\":\"story\",\"version\":2,\"variables\":{\"name\":\"Lily\"}}}")"
expect "chat with the latest version" 200 "$(call POST /v1/chat/completions "$GLOBEX" \
  "{\"model\":\"$MODEL\",\"max_tokens\":4,\"prompt\":{\"id\":\"story\",\"variables\":{\"name\":\"Sam\"}}}")"
expect "missing variable is 400 naming it" 400 "$(call POST /v1/chat/completions "$ACME" \
  "{\"model\":\"$MODEL\",\"prompt\":{\"id\":\"story\",\"label\":\"production\",\"variables\":{\"animal\":\"a dog\"}}}")" \
  '"name" in j["error"]["message"] and j["error"]["param"]=="prompt.variables"'
expect "unknown prompt id is 404" 404 "$(call POST /v1/chat/completions "$ACME" "{\"model\":\"$MODEL\",\"prompt\":{\"id\":\"nope\"}}")"
expect "unknown label is 404" 404 "$(call POST /v1/chat/completions "$ACME" "{\"model\":\"$MODEL\",\"prompt\":{\"id\":\"story\",\"label\":\"canary\"}}")"
expect "another tenant's prompt is 404" 404 "$(call POST /v1/chat/completions "$GLOBEX" "{\"model\":\"$MODEL\",\"prompt\":{\"id\":\"acme-only\",\"variables\":{\"x\":1}}}")"
expect "prompt and messages together is 400" 400 "$(call POST /v1/chat/completions "$ACME" \
  "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"prompt\":{\"id\":\"story\"}}")"
expect "plain chat still works" 200 "$(call POST /v1/chat/completions "$ACME" \
  "{\"model\":\"$MODEL\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}")"
stop_server  # flushes the ledger

"$BIN" usage --ledger "$TMP/ledger.db" --by prompt --format json >"$TMP/usage.json" 2>&1
python3 - "$TMP/usage.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {g["prompt"]: g for g in r["rows"]}
assert rows["story@1"]["requests"] == 1 and rows["story@1"]["completion_tokens"] == 6, rows
assert rows["story@2"]["requests"] == 2 and rows["story@2"]["completion_tokens"] == 9, rows
assert rows["(none)"]["requests"] == 1, rows
print("usage by prompt:", {k: v["requests"] for k, v in rows.items()})
PY
check "ledger rows carry prompt id + version; usage --by prompt" $?

# The CLI on the same database.
"$BIN" prompts --ledger "$TMP/ledger.db" create --id cli-prompt --template 'Dear {{ who }}' --label production >"$TMP/cli.txt" 2>&1 &&
  grep -q "created cli-prompt version 1 sha256:" "$TMP/cli.txt"
check "prompts create" $?
"$BIN" prompts --ledger "$TMP/ledger.db" list >"$TMP/list.txt" 2>&1 && grep -q "story" "$TMP/list.txt" && grep -q "production=1" "$TMP/list.txt"
check "prompts list" $?
"$BIN" prompts --ledger "$TMP/ledger.db" label story production 2 >/dev/null 2>&1 &&
  "$BIN" prompts --ledger "$TMP/ledger.db" get story --label production >"$TMP/get.json" 2>&1 &&
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["version"]==2, j' "$TMP/get.json"
check "prompts label + get" $?
"$BIN" prompts --ledger "$TMP/ledger.db" render cli-prompt --vars '{"who":"Ann"}' >"$TMP/render.json" 2>&1 &&
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j==[{"role":"user","content":"Dear Ann"}], j' "$TMP/render.json"
check "prompts render" $?
"$BIN" prompts --ledger "$TMP/ledger.db" render cli-prompt >"$TMP/err.txt" 2>&1
[ $? -ne 0 ] && grep -q "who" "$TMP/err.txt" && [ "$(wc -l <"$TMP/err.txt")" -eq 1 ]
check "prompts render with a missing variable: one-line error" $?
"$BIN" prompts --ledger "$TMP/ledger.db" get nope >"$TMP/err.txt" 2>&1
[ $? -ne 0 ] && grep -q "unknown prompt id 'nope'" "$TMP/err.txt"
check "prompts get unknown id" $?

# --no-auth: every caller is admin.
start_server --no-auth || exit 1
expect "--no-auth caller may create" 201 "$(call POST /v1/prompts "" '{"id":"open","template":"x"}')"
expect "--no-auth caller reads every prompt" 200 "$(call GET /v1/prompts "")" '"acme-only" in [p["id"] for p in j["data"]]'
stop_server

echo "prompts_e2e: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
