#!/usr/bin/env bash
# Benchmark (not a test): N idle keep-alive connections held open against `tokenserve serve`
# while a streaming load runs; reports the server's resident memory and streaming TTFT before
# and after the connections are opened. Loopback only, bounded.
#   bench/idle_connections.sh [path/to/tokenserve]   (env: CONNS=10000 TOKENSERVE_SHARED=...)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIN=$(realpath "${1:-$ROOT/build/tokenserve}")
MODEL=${TOKENSERVE_SHARED:-$ROOT/../shared}/models/stories260K/stories260K-f32.gguf
CONNS=${CONNS:-10000}
ulimit -n $((CONNS + 1024)) 2>/dev/null || { echo "cannot raise the open-file limit to $((CONNS + 1024))"; exit 2; }
DIR=$(mktemp -d /tmp/ts-idle.XXXXXX)
PID=""
trap '[ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null; rm -rf "$DIR"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --threads 1 --no-auth --ledger "$DIR/l.db" \
  --idle-timeout 600 >"$DIR/server.log" 2>&1 &
PID=$!
for _ in $(seq 200); do curl -fs "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && break; sleep 0.05; done
python3 - "$PORT" "$PID" "$CONNS" <<'PY'
import json, socket, statistics, sys, threading, time
port, pid, conns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def rss_mib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) / 1024
def ttft_ms(n=4, per=10):
    out = []
    def one():
        for _ in range(per):
            s = socket.create_connection(("127.0.0.1", port))
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "stream": True, "model": MODEL})
            t0 = time.perf_counter()
            s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
            buf = b""
            while b"data: " not in buf: buf += s.recv(4096)
            out.append((time.perf_counter() - t0) * 1000)
            while b"[DONE]" not in buf:
                d = s.recv(4096)
                if not d: break
                buf += d
            s.close()
    ts = [threading.Thread(target=one) for _ in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.9)]
import urllib.request
MODEL = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"][0]["id"]
ttft_ms(1, 3)  # warm-up
r0 = rss_mib(); p50a, p90a = ttft_ms()
idle = []
t0 = time.time()
for i in range(conns):
    s = socket.create_connection(("127.0.0.1", port)); idle.append(s)
time.sleep(1.0)
r1 = rss_mib(); p50b, p90b = ttft_ms()
m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
open_conns = [l for l in m.splitlines() if l.startswith("tokenserve_http_connections_open")]
print(f"idle connections opened: {len(idle)} in {time.time()-t0:.1f}s; server reports {open_conns[0].split()[-1] if open_conns else '?'} open")
print(f"RSS before {r0:.1f} MiB, with {len(idle)} idle connections {r1:.1f} MiB "
      f"(+{(r1-r0)*1024/max(1,len(idle)):.2f} KiB per connection)")
print(f"streaming TTFT (4 clients x 10 requests) before: p50 {p50a:.1f} ms, p90 {p90a:.1f} ms; "
      f"with idle connections: p50 {p50b:.1f} ms, p90 {p90b:.1f} ms")
for s in idle: s.close()
PY
kill -TERM "$PID"; wait "$PID"; PID=""
