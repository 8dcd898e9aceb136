#!/usr/bin/env bash
# Chaos benchmark (not a test): load through a real `tokenserve serve` backed by PostgreSQL
# (ledger) and Redis (limits, quotas) while injecting faults, then checks the bill.
#   - SIGKILL of the server mid-load, and a restart
#   - Redis hung (SIGSTOP/SIGCONT: a partition) and Redis stopped then started (data lost)
#   - PostgreSQL stopped, then started
#   - slow clients that read their responses a few bytes at a time
# Reports: requests answered by status, transport errors, ledger rows, answered requests
# missing from the ledger (rows lost), duplicate rows, and quota drift (Redis counter of the
# tenant's daily quota vs the ledger's sum of its tokens).
# Loopback only; bounded (about DURATION + 40 s). Usage:
#   bench/chaos.sh [path/to/tokenserve]   (env: DURATION=60 CLIENTS=4 TOKENSERVE_SHARED=...)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIN=$(realpath "${1:-$ROOT/build/tokenserve}")
SHARED=${TOKENSERVE_SHARED:-$ROOT/../shared}
MODEL=$SHARED/models/stories260K/stories260K-f32.gguf
DURATION=${DURATION:-60}
CLIENTS=${CLIENTS:-4}
[ -x "$BIN" ] || { echo "chaos: no tokenserve binary at $BIN" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "chaos: model $MODEL not found" >&2; exit 2; }

eval "$("$ROOT/scripts/start_test_services.sh")"
SVC=$TOKENSERVE_TEST_SERVICES_DIR
WORK=$(mktemp -d /tmp/ts-chaos.XXXXXX)
SERVER_PID="" LOAD_PID="" SLOW_PID=""
cleanup() {
  for p in $LOAD_PID $SLOW_PID $SERVER_PID; do kill -KILL "$p" 2>/dev/null; done
  [ -f "$SVC/redis.pid" ] && kill -CONT "$(cat "$SVC/redis.pid")" 2>/dev/null
  "$ROOT/scripts/stop_test_services.sh" "$SVC" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"  # the PostgreSQL ledger's journal lives in the working directory

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
PG_PORT=${TOKENSERVE_TEST_PG##*:}; PG_PORT=${PG_PORT%%/*}
REDIS_PORT=${TOKENSERVE_TEST_REDIS##*:}
pg() { if [ "$(id -u)" -eq 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
psql_q() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tAc "$1"; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >gov.toml <<TOML
[tenants.chaos]
quota = { tokens = 100000000, period = "day" }
TOML
KEY=$("$BIN" keys create --tenant chaos --app load --ledger "$TOKENSERVE_TEST_PG" | tail -n 1)

start_server() {
  "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --threads 1 --ledger "$TOKENSERVE_TEST_PG" \
    --limits "$TOKENSERVE_TEST_REDIS" --config gov.toml >>server.log 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 200); do curl -fs "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && return; sleep 0.05; done
  echo "chaos: server did not start" >&2; tail -20 server.log >&2; exit 1
}
start_server

# Load: CLIENTS threads until the stop file appears; one line per request: status id-or-error.
cat >load.py <<'PY'
import http.client, json, os, sys, threading, time
port, key, clients = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
out = open("load.out", "a", buffering=1)
lock = threading.Lock()
def worker(i):
    n = 0
    while not os.path.exists("stop"):
        n += 1
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            body = json.dumps({"model": "stories260K-f32", "prompt": f"Once upon a time {i} {n}",
                               "max_tokens": 8, "temperature": 0})
            c.request("POST", "/v1/completions", body, {"Authorization": "Bearer " + key,
                                                        "Content-Type": "application/json"})
            r = c.getresponse(); data = r.read(); c.close()
            if r.status == 200:
                rid = json.loads(data).get("id", "-")
            else:  # errors by kind: the OpenAI error code (or the first words of the message)
                try:
                    e = json.loads(data)["error"]
                    rid = e.get("code") or "_".join(str(e.get("message", "?")).split()[:6])
                except Exception:
                    rid = "unparsed"
            with lock: out.write(f"{r.status} {rid}\n")
        except Exception as e:
            with lock: out.write(f"transport {type(e).__name__}\n")
            time.sleep(0.05)
for i in range(clients): threading.Thread(target=worker, args=(i,), daemon=True).start()
while not os.path.exists("stop"): time.sleep(0.1)
time.sleep(1)
PY
# Slow clients: stream a completion and read it 16 bytes every 50 ms.
cat >slow.py <<'PY'
import socket, json, os, sys, time
port, key = int(sys.argv[1]), sys.argv[2]
while not os.path.exists("stop"):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        body = json.dumps({"model": "stories260K-f32", "prompt": "slow", "max_tokens": 32, "stream": True})
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        got = b""
        while b"[DONE]" not in got and not os.path.exists("stop"):
            d = s.recv(16)
            if not d: break
            got += d; time.sleep(0.05)
        s.close()
        open("slow.out", "a").write(("done" if b"[DONE]" in got else "cut") + "\n")
    except Exception as e:
        open("slow.out", "a").write(f"transport {type(e).__name__}\n"); time.sleep(0.2)
PY
python3 load.py "$PORT" "$KEY" "$CLIENTS" & LOAD_PID=$!
python3 slow.py "$PORT" "$KEY" & SLOW_PID=$!

step=$((DURATION / 6)); [ "$step" -lt 3 ] && step=3
log() { echo "chaos: $(date -u +%H:%M:%S) $*"; }
sleep "$step"; log "SIGKILL server"; kill -KILL "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null
sleep 1; log "restart server"; start_server
sleep "$step"; log "Redis hung (SIGSTOP) for ${step}s"; kill -STOP "$(cat "$SVC/redis.pid")"
sleep "$step"; log "Redis resumed"; kill -CONT "$(cat "$SVC/redis.pid")"
sleep "$step"; log "Redis stopped"; redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1
sleep "$step"; log "Redis started (empty)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --dir "$SVC" --pidfile "$SVC/redis.pid" \
  --logfile "$SVC/redis.log" --save '' --appendonly no >/dev/null
sleep "$step"; log "PostgreSQL stopped for ${step}s"
pg "'$PG_BIN/pg_ctl' -D '$SVC/pg/data' -m fast -w stop" >/dev/null
sleep "$step"; log "PostgreSQL started"
pg "'$PG_BIN/pg_ctl' -D '$SVC/pg/data' -l '$SVC/pg/postgres.log' -w -t 60 -o \"-p $PG_PORT -k $SVC/pg -c listen_addresses=127.0.0.1 -c fsync=off\" start" >/dev/null
sleep "$step"; log "load stops"; touch stop; wait "$LOAD_PID" 2>/dev/null; wait "$SLOW_PID" 2>/dev/null
LOAD_PID="" SLOW_PID=""
sleep 2  # journal replay, last settles
kill -TERM "$SERVER_PID"; wait "$SERVER_PID"; SERVER_RC=$?; SERVER_PID=""

answered=$(grep -c '^200 ' load.out)
echo "== chaos report (duration ${DURATION}s, $CLIENTS clients + 1 slow reader) =="
echo "responses by status:"; awk '{print $1}' load.out | sort | uniq -c | sed 's/^/  /'
echo "errors by kind:"; grep -v '^200 ' load.out | sort | uniq -c | sort -rn | head -10 | sed 's/^/  /'
echo "slow clients:"; sort slow.out 2>/dev/null | uniq -c | sed 's/^/  /'
grep '^200 ' load.out | awk '{print $2}' | sort >answered.ids
psql_q "SELECT request_id FROM ts_usage WHERE tenant='chaos'" | sort >ledger.ids
rows=$(wc -l <ledger.ids)
lost=$(comm -23 answered.ids ledger.ids | wc -l)
dups=$(psql_q "SELECT COUNT(*) - COUNT(DISTINCT request_id) FROM ts_usage")
echo "answered (200): $answered; ledger rows: $rows; answered but missing from the ledger: $lost; duplicate rows: $dups"
day_ms=$(( $(date -u -d "$(date -u +%F)" +%s) * 1000 ))
charged=$(redis-cli -p "$REDIS_PORT" GET "ts:q:tenant:chaos:day:$day_ms")
reported=$(psql_q "SELECT COALESCE(SUM(prompt_tokens + completion_tokens),0) FROM ts_usage WHERE tenant='chaos' AND time_ms >= $day_ms")
echo "quota: charged in Redis ${charged:-<none>}, reported in the ledger $reported, drift $(( ${charged:-0} - reported ))"
echo "server exit after SIGTERM: $SERVER_RC; ledger/limit lines in the log:"
grep -E "circuit|journal|replay|ledger write failed|spool full|lost" server.log | sed 's/^/  /' | sort | uniq -c | sort -rn | head -12
