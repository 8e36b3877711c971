#!/usr/bin/env bash
# Proxy benchmark: the scripted model served directly vs. through toolgate,
# measured in the same run with the same load generator (wrk), on 127.0.0.1.
#
#   direct       POST /v1/chat/completions to the scripted model
#   proxy        the same request through the gateway (no tool set: the
#                transparent proxy, body forwarded byte for byte)
#   tool loop    through the gateway with a one-tool set: model call, HTTP
#                tool call (to the scripted model's GET /v1/models), model call
#
# Throughput is measured with 64 connections, latency with 1 connection.
# Needs release builds of `toolgate` and `mock-llm` (make bench builds them)
# and wrk (installed from Debian's packages when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-8}
BIN=target/release
command -v wrk >/dev/null || { echo "installing wrk"; apt-get install -y -qq wrk >/dev/null; }

work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MOCK=127.0.0.1:$(port)
GATE=127.0.0.1:$(port)

"$BIN/mock-llm" "$MOCK" >/dev/null &
pids+=($!)

mkdir -p "$work/config/tools.d" "$work/config/tool-sets"
cat > "$work/config/toolgate.yaml" <<YAML
upstreams:
  - name: mock
    base_url: http://$MOCK/v1
YAML
cat > "$work/config/tools.d/bench.yaml" <<YAML
tools:
  - name: models_list
    description: Lists the models of the scripted model server.
    http:
      url: http://$MOCK/v1/models
    response:
      select: /data/0/id
YAML
printf 'name: bench\ntools: [models_list]\n' > "$work/config/tool-sets/bench.yaml"
TOOLGATE_LOG=warn "$BIN/toolgate" serve --config "$work/config" --listen "$GATE" &
pids+=($!)

for addr in "$MOCK" "$GATE"; do
  for _ in $(seq 50); do curl -sf "http://$addr/v1/models" >/dev/null && break; sleep 0.1; done
done

lua() { # name body
  cat > "$work/$1.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[$2]]
LUA
}
lua plain '{"model":"mock-model","messages":[{"role":"user","content":"hello"}]}'
lua loop '{"model":"mock-model","messages":[{"role":"user","content":"call models_list {}"}],"tool_set":"bench"}'

# Sanity: the loop really runs the tool.
curl -sf "http://$GATE/v1/chat/completions" -H 'content-type: application/json' -d @<(sed -n 's/^wrk.body = \[\[\(.*\)\]\]$/\1/p' "$work/loop.lua") \
  | grep -q 'Tool results: \[models_list\] mock-model' || { echo "the tool loop did not run the tool" >&2; exit 1; }

# run NAME ADDR LUA CONNECTIONS -> "rps p50_ms p99_ms"
run() {
  local out
  local threads=$(( $4 < 2 ? $4 : 2 ))
  out=$(wrk -t"$threads" -c"$4" -d"${DURATION}s" --latency -s "$work/$3.lua" "http://$2/v1/chat/completions")
  if grep -q "Non-2xx" <<<"$out"; then echo "$1: non-2xx answers" >&2; echo "$out" >&2; exit 1; fi
  local rps p50 p99
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  echo "$rps $(ms "$p50") $(ms "$p99")"
}
ms() { # wrk prints 123.45us / 1.23ms / 1.02s
  python3 -c "import re,sys; n,u=re.fullmatch(r'([0-9.]+)([a-z]+)', sys.argv[1]).groups(); print(round(float(n)*{'us':0.001,'ms':1,'s':1000,'m':60000}[u],4))" "$1"
}

read -r d_rps _ _ <<<"$(run direct "$MOCK" plain 64)"
read -r p_rps _ _ <<<"$(run proxy "$GATE" plain 64)"
read -r l_rps _ _ <<<"$(run loop "$GATE" loop 64)"
read -r _ d50 d99 <<<"$(run direct "$MOCK" plain 1)"
read -r _ p50 p99 <<<"$(run proxy "$GATE" plain 1)"
read -r _ l50 l99 <<<"$(run loop "$GATE" loop 1)"

echo
echo "proxy benchmark: wrk, ${DURATION}s per run, 127.0.0.1, $(nproc) cores, $(date -u +%Y-%m-%d)"
printf '%-34s %12s %10s %10s\n' "" "req/s (c=64)" "p50 ms c=1" "p99 ms c=1"
printf '%-34s %12s %10s %10s\n' "scripted model, direct" "$d_rps" "$d50" "$d99"
printf '%-34s %12s %10s %10s\n' "through toolgate, transparent" "$p_rps" "$p50" "$p99"
printf '%-34s %12s %10s %10s\n' "through toolgate, one-tool loop" "$l_rps" "$l50" "$l99"
python3 - "$d_rps" "$p_rps" "$l_rps" "$d50" "$p50" "$d99" "$p99" "$l50" <<'PY'
import sys
d, p, l, d50, p50, d99, p99, l50 = map(float, sys.argv[1:])
print(f"transparent proxy: throughput ratio {p/d:.2f} (target >= 0.5), added p50 {p50-d50:+.3f} ms (target < 0.2), added p99 {p99-d99:+.3f} ms")
print(f"one-tool loop (2 model calls + 1 HTTP tool call): {l/d:.2f} of direct throughput, p50 {l50:.3f} ms = {l50/d50:.1f}x one direct call")
PY
