# Shared helpers for the bash end-to-end tests (source it).
#
# A server under test is started with --port 0: it binds a free port itself and names it in its
# first log line ("listening on http://127.0.0.1:PORT"). The tests read the port from there and
# never connect to a port nobody holds yet: polling such a port can end in a TCP self-connect
# (the client's ephemeral source port equals the destination port) and a probe that hangs.

# ts_port LOG PID: prints the port PID announced in LOG (waits up to 60 s). Fails, printing the
# log, if the process exits first or announces nothing.
ts_port() {
  local log=$1 pid=$2 p=""
  for _ in $(seq 1 600); do
    p=$(grep -m1 -oE '(listening on|gateway on|serving model .* on) http://[^ ]+:[0-9]+' "$log" 2>/dev/null | grep -oE '[0-9]+$')
    [ -n "$p" ] && { echo "$p"; return 0; }
    kill -0 "$pid" 2>/dev/null || { echo "server exited early:" >&2; cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "server announced no port:" >&2; cat "$log" >&2; return 1
}

# ts_ready PORT PID [PATH]: waits until http://127.0.0.1:PORT/PATH (default /ready) answers 2xx
# (60 s at most, 5 s per probe). Fails if PID exits first.
ts_ready() {
  local port=$1 pid=$2 path=${3:-/ready}
  for _ in $(seq 1 600); do
    curl -sf -m 5 "http://127.0.0.1:$port$path" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited before $path answered" >&2; return 1; }
    sleep 0.1
  done
  echo "no answer from $path on port $port" >&2; return 1
}
