# What the benchmark scripts share; sourced, not run.
#   $work          a temporary folder, removed on exit with the processes in $pids
#   port           a free port on 127.0.0.1
#   wrk_post NAME BODY [KEY]
#                  $work/NAME.lua: a wrk script POSTing BODY as JSON (with
#                  KEY as a bearer token when given)
#   calc_config DIR [LINE]
#                  a gateway configuration in DIR (LINE first, when given):
#                  the scripted model at $MOCK as upstream, the builtin
#                  calculator in the tool set `calc`; `upstreams:` comes
#                  last, so more upstreams may be appended
#   LOOP_BODY      a chat request the scripted model answers by calling the
#                  builtin calculator (tool set `calc`), then with its result
#   anthropic_upstream DIR
#                  appends to calc_config's DIR the fake Anthropic model at
#                  $ANTHROPIC as the upstream of `claude-*` models (the
#                  scripted model stays `mock-model`'s)
#   everything_tools DIR TOOL...
#                  server-everything over stdio in DIR, its TOOLs offered
#                  with the prefix `everything_`
#   need TOOL...   exits, saying how to install it, when a tool is missing
#   NGINX          nginx's path
#   COMPLETION     the fixed chat completion the benchmarks' upstream answers
#   nginx_conf NAME WORKERS SERVER-BLOCK
#                  starts an nginx of its own configuration in $work/NAME,
#                  its master's pid in $last_nginx

work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || { echo "$tool is missing: run \`make deb\`" >&2; exit 1; }
  done
}
# shellcheck disable=SC2034 # used by the scripts that source this one
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
# shellcheck disable=SC2034
COMPLETION='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}'

nginx_conf() { # name workers server-block
  mkdir -p "$work/$1"
  cat > "$work/$1/nginx.conf" <<CONF
worker_processes $2;
daemon off;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/$1;
  proxy_temp_path $work/$1;
  fastcgi_temp_path $work/$1;
  uwsgi_temp_path $work/$1;
  scgi_temp_path $work/$1;
  keepalive_requests 1000000;
  $3
}
CONF
  "$NGINX" -c "$work/$1/nginx.conf" -e "$work/$1/error.log" &
  pids+=($!)
  last_nginx=$!
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wrk_post() {
  {
    echo 'wrk.method = "POST"'
    echo 'wrk.headers["Content-Type"] = "application/json"'
    [ -z "${3:-}" ] || echo "wrk.headers[\"Authorization\"] = \"Bearer $3\""
    echo "wrk.body = [[$2]]"
  } > "$work/$1.lua"
}

# shellcheck disable=SC2034 # used by the scripts that source this one
LOOP_BODY='{"model":"mock-model","messages":[{"role":"user","content":"call calculator {\"expression\": \"6*7\"}"}],"tool_set":"calc"}'

calc_config() {
  mkdir -p "$1/tools.d" "$1/tool-sets"
  {
    [ -z "${2:-}" ] || echo "$2"
    cat <<YAML
builtins:
  enabled: [calculator]
upstreams:
  - name: mock
    base_url: http://$MOCK/v1
YAML
  } > "$1/toolgate.yaml"
  printf 'name: calc\ntools: [calculator]\n' > "$1/tool-sets/calc.yaml"
}

anthropic_upstream() {
  cat >> "$1/toolgate.yaml" <<YAML
  - name: anthropic
    base_url: http://$ANTHROPIC/v1
    protocol: anthropic
models:
  - model: mock-model
    upstream: mock
  - model: "claude-*"
    upstream: anthropic
YAML
}

everything_tools() {
  local dir=$1 tools
  shift
  tools=$(IFS=,; echo "$*")
  cat > "$dir/tools.d/everything.yaml" <<YAML
mcp_servers:
  - name: everything
    transport: stdio
    command: $PWD/tests/mcp/node_modules/.bin/mcp-server-everything
    args: [stdio]
    tools: { include: [${tools//,/, }], prefix: everything_ }
YAML
}
