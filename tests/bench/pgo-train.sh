#!/usr/bin/env bash
# The traffic a profile-guided build of `toolgate` learns from (`make
# release`): a gateway built with `-Cprofile-generate` serves a mix of
# what clients send, then exits, writing its profile.
#
# The mix is the gateway's everyday work, not the benchmarks' requests:
# chat completions with and without streaming, with a conversation of
# several turns and client tools; the tool loop over the builtin
# calculator and an MCP server's tools, streamed and not; Responses;
# Anthropic Messages passed through to an `anthropic` upstream, streamed
# and not, and a coding agent's turn with its tool's result; the tool API (an MCP tool, a builtin); the tool list and the
# health check; every request with an API key. Each wrk thread takes the
# requests in turn.
#
# Usage: TOOLGATE=<instrumented build> tests/bench/pgo-train.sh
#   DURATION seconds (20); BIN, where mock-llm and fake-model are
#   (target/release); PGO_SHOW=1 prints the first answer to each request.
# Needs wrk, curl, python3, the MCP servers of tests/mcp (`make setup`) and
# release builds of `mock-llm` and `fake-model` (`make release` makes them).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLGATE=${TOOLGATE:?the instrumented toolgate to train}
BIN=${BIN:-target/release}
DURATION=${DURATION:-20}
EVERYTHING=tests/mcp/node_modules/.bin/mcp-server-everything
for need in wrk curl python3; do
  command -v "$need" >/dev/null || { echo "pgo-train.sh: $need is missing (make deb installs wrk and curl)" >&2; exit 1; }
done
[ -x "$EVERYTHING" ] || { echo "pgo-train.sh: $EVERYTHING is missing (make setup installs it)" >&2; exit 1; }
for b in mock-llm fake-model; do
  [ -x "$BIN/$b" ] || { echo "pgo-train.sh: $BIN/$b is missing (cargo build --release -p toolgate-tests --bins)" >&2; exit 1; }
done

# shellcheck source=tests/bench/common.sh
. tests/bench/common.sh
MOCK=127.0.0.1:$(port)
# The API key of every request (the Lua script reads it too).
export TRAIN_KEY=sk-train-0123456789abcdef
GATE=127.0.0.1:$(port)
ANTHROPIC=127.0.0.1:$(port)

"$BIN/mock-llm" "$MOCK" >/dev/null &
pids+=($!)
"$BIN/fake-model" anthropic "$ANTHROPIC" >/dev/null &
pids+=($!)
calc_config "$work/config" "reload: { watch: false }
auth:
  keys:
    - name: train
      key_env: TRAIN_KEY"
anthropic_upstream "$work/config"
everything_tools "$work/config" echo get-sum
printf 'name: mixed\ntools: [calculator, everything_echo, everything_get-sum]\n' > "$work/config/tool-sets/mixed.yaml"

# The requests, as (method, path, body) triples in a Lua table.
cat > "$work/train.lua" <<'LUA'
local bodies = {
  {"POST", "/v1/chat/completions", '{"model":"mock-model","messages":[{"role":"system","content":"You answer briefly."},{"role":"user","content":"What is the tallest mountain in Europe?"}],"temperature":0.3}'},
  {"POST", "/v1/chat/completions", '{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Write two lines about the sea."}]}'},
  {"POST", "/v1/chat/completions", '{"model":"mock-model","messages":[{"role":"user","content":"Find the weather in Oslo."},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\\"city\\":\\"Oslo\\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"{\\"temp\\": -3, \\"sky\\": \\"snow\\"}"},{"role":"user","content":"And what should I wear?"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"The weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}'},
  {"POST", "/v1/chat/completions", '{"model":"mock-model","tool_set":"mixed","messages":[{"role":"user","content":"call calculator {\\"expression\\": \\"(12+30)/2\\"}"}]}'},
  {"POST", "/v1/chat/completions", '{"model":"mock-model","tool_set":"mixed","stream":true,"messages":[{"role":"user","content":"call everything_get-sum {\\"a\\": 19, \\"b\\": 23}"}]}'},
  {"POST", "/v1/chat/completions", '{"model":"mock-model","tool_set":"mixed","messages":[{"role":"user","content":"call everything_echo {\\"message\\": \\"ping\\"} then calculator {\\"expression\\": \\"2^10\\"}"}]}'},
  {"POST", "/v1/responses", '{"model":"mock-model","input":"Name three rivers in Africa."}'},
  {"POST", "/v1/responses", '{"model":"mock-model","tool_set":"mixed","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"call calculator {\\"expression\\": \\"7*8\\"}"}]}]}'},
  {"POST", "/v1/messages", '{"model":"claude-train","max_tokens":256,"system":"Be brief.","messages":[{"role":"user","content":"Summarise the plot of Hamlet."}]}'},
  {"POST", "/v1/messages", '{"model":"claude-train","max_tokens":512,"system":[{"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],"messages":[{"role":"user","content":"Open README.md"},{"role":"assistant","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"toolu_01","name":"read_file","input":{"path":"README.md"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"# Project\\nA gateway for tools."}]}]}'},
  {"POST", "/v1/messages", '{"model":"claude-train","max_tokens":256,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"Count to five."}]}]}'},
  {"POST", "/v1/tools/everything_echo/invoke", '{"arguments":{"message":"a message to echo back"}}'},
  {"POST", "/v1/tools/calculator/invoke", '{"arguments":{"expression":"sqrt(2)*3"}}'},
  {"GET", "/v1/tools", nil},
  {"GET", "/healthz", nil},
}
local requests = {}
local n = 0
function init(args)
  for i, b in ipairs(bodies) do
    local headers = {Authorization = "Bearer " .. os.getenv("TRAIN_KEY")}
    if b[3] then headers["Content-Type"] = "application/json" end
    requests[i] = wrk.format(b[1], b[2], headers, b[3])
  end
end
if os.getenv("PGO_SHOW") then
  local shown = 0
  function response(status, headers, body)
    if shown < #requests then
      shown = shown + 1
      print(status, string.sub(body, 1, 300))
    end
  end
end
function request()
  n = n % #requests + 1
  return requests[n]
end
LUA

TOOLGATE_LOG=warn "$TOOLGATE" serve --config "$work/config" --listen "$GATE" &
g=$!
pids+=("$g")
for _ in $(seq 300); do
  kill -0 "$g" 2>/dev/null || { echo "pgo-train.sh: the gateway exited" >&2; exit 1; }
  curl -sf "http://$GATE/healthz" >/dev/null && break
  sleep 0.2
done
ok=
for _ in $(seq 100); do
  curl -sf -X POST "http://$GATE/v1/tools/everything_echo/invoke" -H 'content-type: application/json' \
    -H "authorization: Bearer $TRAIN_KEY" \
    -d '{"arguments": {"message": "hi"}}' | grep -q 'Echo: hi' && ok=1 && break
  sleep 0.3
done
[ -n "$ok" ] || { echo "pgo-train.sh: the MCP tool never answered" >&2; exit 1; }
r=$(wrk -t2 -c8 -d"${DURATION}s" -s "$work/train.lua" "http://$GATE/")
if [ -n "${PGO_SHOW:-}" ]; then echo "$r"; else echo "$r" | grep -E "requests in|Non-2xx" || true; fi
if grep -q -E "Non-2xx|Socket errors" <<<"$r"; then echo "pgo-train.sh: some requests failed" >&2; echo "$r" >&2; exit 1; fi
# A clean exit writes the profile.
kill -TERM "$g"
wait "$g"
