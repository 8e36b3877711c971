#!/usr/bin/env bash
# Instructions the gateway executes per request, counted by valgrind
# (cachegrind, no cache simulation): a figure that does not move with the
# machine's load, unlike CPU time on a shared 2-core machine.
#
# One gateway configuration, three kinds of request, each measured in a
# fresh gateway process under cachegrind: the same warm-up (one request of
# each kind), then wrk (1 connection) for DURATION seconds of one kind.
# A run with the warm-up only is subtracted, and the rest divided by the
# requests wrk made:
#
#   proxy  a chat completion passed through to the scripted model (no tool
#          set): the baseline, an HTTP exchange on each side;
#   loop   the tool loop: the scripted model asks for the builtin
#          calculator, then answers (two model calls, one tool call);
#   mcp    an MCP tool (server-everything's echo, stdio) through the tool
#          API;
#   messages  an Anthropic Messages request passed through to an
#          `anthropic` upstream (the fake Anthropic model): the native
#          passthrough, against the chat one (goal: within 10%).
#
# Usage: tests/bench/instructions.sh   (make bench runs it; needs valgrind,
# wrk, the MCP servers of tests/mcp and the release build of `fake-model`:
# `make bench` makes them)
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLGATE=${TOOLGATE:-target/release/toolgate}
BIN=${BIN:-target/release}
DURATION=${DURATION:-8}
# MESSAGES=0 leaves the Messages row out (a build from before native
# upstreams, which has no `anthropic` protocol).
MESSAGES=${MESSAGES:-1}
EVERYTHING=tests/mcp/node_modules/.bin/mcp-server-everything
for need in valgrind wrk curl; do
  command -v "$need" >/dev/null || { echo "instructions.sh: $need is missing (make bench installs it)" >&2; exit 1; }
done
[ -x "$EVERYTHING" ] || { echo "instructions.sh: $EVERYTHING is missing (make bench installs it)" >&2; exit 1; }
[ "$MESSAGES" = 0 ] || [ -x "$BIN/fake-model" ] || { echo "instructions.sh: $BIN/fake-model is missing (make bench builds it)" >&2; exit 1; }

# shellcheck source=tests/bench/common.sh
. tests/bench/common.sh
MOCK=127.0.0.1:$(port)
GATE=127.0.0.1:$(port)
ANTHROPIC=127.0.0.1:$(port)

"$BIN/mock-llm" "$MOCK" >/dev/null &
pids+=($!)
calc_config "$work/config" "reload: { watch: false }"
if [ "$MESSAGES" = 1 ]; then
  # The fake Anthropic model, an upstream beside the scripted model's.
  "$BIN/fake-model" anthropic "$ANTHROPIC" >/dev/null &
  pids+=($!)
  anthropic_upstream "$work/config"
fi
everything_tools "$work/config" echo

wrk_post proxy '{"model":"mock-model","messages":[{"role":"user","content":"Hello!"}]}'
wrk_post loop "$LOOP_BODY"
wrk_post mcp '{"arguments": {"message": "hello 42"}}'
MESSAGES_BODY='{"model":"claude-bench","max_tokens":64,"messages":[{"role":"user","content":"Hello!"}]}'
wrk_post messages "$MESSAGES_BODY"
declare -A path=(
  [proxy]=/v1/chat/completions
  [loop]=/v1/chat/completions
  [mcp]=/v1/tools/everything_echo/invoke
  [messages]=/v1/messages
)

# measure KIND -> "requests instructions" (KIND "none": the warm-up only)
measure() {
  local out="$work/cg.$1" g n=0
  TOOLGATE_LOG=warn valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" \
    "$TOOLGATE" serve --config "$work/config" --listen "$GATE" 2>"$work/valgrind.$1" &
  g=$!
  for _ in $(seq 300); do curl -sf "http://$GATE/healthz" >/dev/null && break; sleep 0.2; done
  local ok=
  for _ in $(seq 100); do
    curl -sf -X POST "http://$GATE${path[mcp]}" -H 'content-type: application/json' \
      -d '{"arguments": {"message": "hi"}}' | grep -q 'Echo: hi' && ok=1 && break
    sleep 0.3
  done
  [ -n "$ok" ] || { echo "instructions.sh: the MCP tool never answered" >&2; kill "$g"; exit 1; }
  curl -sf "http://$GATE/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"mock-model","messages":[{"role":"user","content":"Hello!"}]}' >/dev/null
  curl -sf "http://$GATE/v1/chat/completions" -H 'content-type: application/json' -d "$LOOP_BODY" \
    | grep -q '42' || { echo "instructions.sh: the tool loop did not run the tool" >&2; kill "$g"; exit 1; }
  if [ "$MESSAGES" = 1 ]; then
    curl -sf "http://$GATE/v1/messages" -H 'content-type: application/json' -d "$MESSAGES_BODY" \
      | grep -q '"type":"message"' || { echo "instructions.sh: the Messages request was not passed through" >&2; kill "$g"; exit 1; }
  fi
  if [ "$1" != none ]; then
    local r
    r=$(wrk -t1 -c1 -d"${DURATION}s" -s "$work/$1.lua" "http://$GATE${path[$1]}")
    if grep -q "Non-2xx" <<<"$r"; then echo "instructions.sh: $1: errors under load" >&2; echo "$r" >&2; kill "$g"; exit 1; fi
    n=$(awk '/requests in/ {print $1}' <<<"$r")
  fi
  kill -TERM "$g"
  wait "$g" || true
  echo "$n $(awk '/^summary:/ {print $2}' "$out")"
}

read -r _ base <<<"$(measure none)"
declare -A per
kinds=(proxy loop mcp)
[ "$MESSAGES" = 0 ] || kinds+=(messages)
per[messages]=0
for kind in "${kinds[@]}"; do
  read -r n total <<<"$(measure "$kind")"
  per[$kind]=$(( (total - base) / n ))
  echo "$kind: $n requests, $(( total - base )) instructions after the warm-up"
done
python3 - "${per[proxy]}" "${per[loop]}" "${per[mcp]}" "${per[messages]}" <<'PY'
import sys
proxy, loop, mcp, messages = map(int, sys.argv[1:])
print(f"instructions per request (valgrind), against a proxied request measured in the same run:")
print(f"  proxied chat completion: {proxy:,} (1.00x)")
print(f"  tool loop (2 model calls, 1 builtin call): {loop:,} ({loop / proxy:.2f}x)")
print(f"  MCP tool through the tool API: {mcp:,} ({mcp / proxy:.2f}x)")
if messages:
    print(f"  Messages request passed through to an anthropic upstream: {messages:,} ({messages / proxy:.2f}x; goal <= 1.10)")
PY
