# Shared by scripts/load-evaluate and scripts/load-evaluate-bounds (sourced,
# not run): a control plane seeded with the load test's organization (100
# rules, one agent, enforce), and wrk runs against it. Loopback only; each
# wrk run is bounded by its duration.
#
# After `load_init`: $WORK (removed on exit). After `start_server BIN DB`:
# $base, $auth, $SERVER_PID and $WORK/evaluate.lua; `stop_server` ends it.

load_init() {
  command -v wrk >/dev/null 2>&1 || { apt-get install -y -qq wrk >/dev/null || sudo apt-get install -y -qq wrk >/dev/null; }
  WORK=$(mktemp -d)
  SERVER_PID=""
  trap 'stop_server; rm -rf "$WORK"' EXIT
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# p50 and p99 from wrk --latency output.
latency() { awk '$1=="50%"{p50=$2} $1=="99%"{p99=$2} END{printf "p50 %s, p99 %s", p50, p99}' "$1"; }

# Requests per second from wrk output.
rate() { awk '/Requests\/sec/{print $2}' "$1"; }

# Responses completed, from wrk output.
completed() { awk '/requests in/{print $1}' "$1"; }

# ", N non-2xx responses" from wrk output, or nothing.
non_2xx() { awk '/Non-2xx/{printf ", %s non-2xx responses", $NF}' "$1"; }

# $1 as a percentage of $2, one decimal.
percent() { awk -v e="$1" -v h="$2" 'BEGIN{printf "%.1f", 100 * e / h}'; }

start_server() { # $1 = binary, $2 = database URL; extra environment passes through
  local bin="$1" db="$2" port key i
  port=$(free_port)
  printf 'rate_limit_requests = 1000000000\n' > "$WORK/config.toml"
  key=$(WARDEN_DATABASE_URL="$db" "$bin" keys create --org load --name load --audience management --config "$WORK/config.toml")
  WARDEN_DATABASE_URL="$db" WARDEN_LOG=warn "$bin" serve --listen "127.0.0.1:$port" --config "$WORK/config.toml" 2>"$WORK/server.log" &
  SERVER_PID=$!
  for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  base="http://127.0.0.1:$port"
  auth="Authorization: Bearer $key"
  curl -fs -X PUT "$base/allow/settings" -H "$auth" -d '{"default_agent_mode":"enforce"}' >/dev/null
  for i in $(seq 1 100); do
    curl -fs -X POST "$base/allow/rules" -H "$auth" \
      -d "{\"name\":\"rule $i\",\"priority\":$i,\"rego_source\":\"package r$i\\ndecision := \\\"deny\\\" if { input.context.f$((i % 10)) == \\\"absent-$i\\\"; startswith(input.action, \\\"drop_\\\") }\"}" >/dev/null
  done
  curl -fs -X POST "$base/allow/agents" -H "$auth" -d '{"agent_id":"load-agent","name":"load"}' >/dev/null
  cat > "$WORK/evaluate.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
wrk.body = '{"agent_id":"load-agent","target_app":"crm","action":"update_contact","context":{"f1":"a","f2":"b","email":"ana@example.com"}}'
LUA
}

stop_server() {
  [ -n "${SERVER_PID:-}" ] || return 0
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# The server's CPU time so far (user + system), in clock ticks.
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

# The median of the numbers given as arguments.
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
