#!/usr/bin/env bash
# Proxy benchmark: toolgate as a transparent proxy next to nginx doing the
# same job, measured in one run with one load generator (wrk), on 127.0.0.1.
#
#   upstream     nginx (1 worker) answering every POST with a fixed chat
#                completion: the model, without a model's cost
#   nginx        nginx (2 workers) as a reverse proxy to it (keep-alive pool):
#                the reference
#   toolgate     `toolgate serve` with an API key, no tool set: the
#                transparent proxy (auth, rate check, metrics, request id)
#   hyper        bench-hyper-proxy: the HTTP server and pooled client
#                toolgate is built on, with nothing between them (the floor)
#
# The three are measured alternately, ROUNDS times, with wrk (1 thread, 16
# connections, DURATION seconds); each figure below is the median of its
# rounds, and the ratio is toolgate's median over nginx's. Next to it, the
# CPU time (user + system, from /proc) each proxy's own processes spent per
# request: a figure that does not depend on how the 2 cores were shared
# between wrk, the upstream and the proxy.
#
# Then the tail at a constant rate: oha at 50% and 90% of nginx's
# throughput, nginx and toolgate alternately (see below).
#
# Then the tool loop: the scripted model asks for the builtin `calculator`
# and answers after its result. The gateway's own time per loop iteration
# is its request time minus the model calls' and the tool's time, all three
# read from its own /metrics histograms (sums over the run).
#
# Needs release builds of `toolgate` and `mock-llm` (make bench builds them),
# nginx and wrk (`make deb` installs them), and oha (`make bench` installs
# it into target/tools).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-16}
BIN=target/release
# Another toolgate binary to measure (e.g. a build of an earlier commit).
TOOLGATE=${TOOLGATE:-$BIN/toolgate}
# shellcheck source=tests/bench/common.sh
. tests/bench/common.sh
need nginx wrk

UP=127.0.0.1:$(port)
NGX=127.0.0.1:$(port)
GATE=127.0.0.1:$(port)
MOCK=127.0.0.1:$(port)
LOOP=127.0.0.1:$(port)
HYPER=127.0.0.1:$(port)


nginx_conf upstream 1 "server {
    listen $UP;
    location / { default_type application/json; return 200 '$COMPLETION'; }
  }"
UP_MASTER=$last_nginx
nginx_conf proxy 2 "upstream model { server $UP; keepalive 64; }
  server {
    listen $NGX;
    location / {
      proxy_pass http://model;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }
  }"
NGX_PID=$last_nginx

mkdir -p "$work/config/tools.d" "$work/config/tool-sets"
cat > "$work/config/toolgate.yaml" <<YAML
upstreams:
  - name: model
    base_url: http://$UP/v1
auth:
  keys:
    - name: bench
      key_env: BENCH_KEY
YAML
BENCH_KEY=sk-bench-0123456789abcdef TOOLGATE_LOG=warn "$TOOLGATE" serve --config "$work/config" --listen "$GATE" &
pids+=($!)
GATE_PID=$!

# The same HTTP stack with nothing of the gateway's between server and
# client (tests/src/bin/bench-hyper-proxy.rs), served the same way (a
# thread per core, each with its own client; BENCH_HYPER_SHARED=1 for one
# work-stealing runtime instead): the floor toolgate builds on.
"$BIN/bench-hyper-proxy" "$HYPER" "http://$UP/v1/chat/completions" &
pids+=($!)
HYPER_PID=$!

# The tool loop: the scripted model as upstream, one builtin tool.
"$BIN/mock-llm" "$MOCK" >/dev/null &
pids+=($!)
calc_config "$work/loop"
TOOLGATE_LOG=warn "$TOOLGATE" serve --config "$work/loop" --listen "$LOOP" &
pids+=($!)

for addr in "$UP" "$NGX" "$HYPER"; do
  for _ in $(seq 50); do curl -sf -X POST "http://$addr/v1/chat/completions" >/dev/null && break; sleep 0.1; done
done
for addr in "$GATE" "$LOOP" "$MOCK"; do
  for _ in $(seq 100); do curl -sf "http://$addr/healthz" >/dev/null 2>&1 || curl -sf "http://$addr/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
done

wrk_post plain '{"model":"bench-model","messages":[{"role":"user","content":"Hello!"}]}' sk-bench-0123456789abcdef
wrk_post loop "$LOOP_BODY"

# Sanity: each path gives the fixed completion; the loop really runs the tool.
for addr in "$UP" "$NGX" "$GATE" "$HYPER"; do
  curl -sf "http://$addr/v1/chat/completions" -H 'authorization: Bearer sk-bench-0123456789abcdef' -H 'content-type: application/json' \
    -d '{"model":"bench-model","messages":[{"role":"user","content":"Hello!"}]}' | grep -q 'How can I help' || { echo "no completion from $addr" >&2; exit 1; }
done
curl -sf "http://$LOOP/v1/chat/completions" -H 'content-type: application/json' -d "$LOOP_BODY" \
  | grep -q '42' || { echo "the tool loop did not run the tool" >&2; exit 1; }

# cpu_ticks PID... -> user + system clock ticks of those processes so far
cpu_ticks() {
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

# run ADDR LUA [PID...] -> "rps p50_ms p99_ms cpu_us_per_request": the CPU
# time the PIDs (the proxy under test) spent per request, a figure that
# does not depend on how the 2 cores were shared with wrk and the upstream.
run() {
  local out addr=$1 lua=$2 before after
  shift 2
  before=$(cpu_ticks "$@")
  out=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$work/$lua.lua" "http://$addr/v1/chat/completions")
  after=$(cpu_ticks "$@")
  if grep -q "Non-2xx\|Socket errors" <<<"$out"; then echo "$addr: errors" >&2; echo "$out" >&2; exit 1; fi
  local rps p50 p99 n
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  echo "$rps $(ms "$p50") $(ms "$p99") $(python3 -c 'import os, sys; n, b, a = map(int, sys.argv[1:]); print(round((a - b) * 1e6 / os.sysconf("SC_CLK_TCK") / n, 2))' "$n" "$before" "$after")"
}
ms() { # wrk prints 123.45us / 1.23ms / 1.02s
  python3 -c "import re,sys; n,u=re.fullmatch(r'([0-9.]+)([a-z]+)', sys.argv[1]).groups(); print(round(float(n)*{'us':0.001,'ms':1,'s':1000,'m':60000}[u],4))" "$1"
}

: > "$work/results"
UP_PID=$(pgrep -P "$UP_MASTER" | tr '\n' ' ')
NGX_WORKERS=$(pgrep -P "$NGX_PID" | tr '\n' ' ')
for round in $(seq "$ROUNDS"); do
  for path in upstream nginx toolgate hyper; do
    case $path in
      upstream) r=$(run "$UP" plain $UP_PID) || exit 1 ;;
      nginx) r=$(run "$NGX" plain $NGX_WORKERS) || exit 1 ;;
      toolgate)
        # PERF_OUT=file: a perf profile (call graphs) of toolgate's first round.
        if [ -n "${PERF_OUT:-}" ] && [ "$round" = 1 ]; then
          perf record -q -g -p "$GATE_PID" -o "$PERF_OUT" -- sleep "$DURATION" 2>/dev/null &
          perf_pid=$!
        fi
        r=$(run "$GATE" plain "$GATE_PID") || exit 1
        [ -n "${perf_pid:-}" ] && { wait "$perf_pid" || true; perf_pid=; } ;;
      hyper) r=$(run "$HYPER" plain "$HYPER_PID") || exit 1 ;;
    esac
    echo "$path $r" >> "$work/results"
  done
done

# Tail latency at a constant rate. wrk keeps CONNECTIONS requests in
# flight, so a stall slows wrk down instead of showing in its tail. oha
# sends at a fixed rate (50% and 90% of nginx's median throughput above)
# and counts each request's latency from when it was due
# (--latency-correction). nginx and toolgate alternately, ROUNDS times.
OHA=${OHA:-target/tools/bin/oha}
[ -x "$OHA" ] || { echo "$OHA is missing: run \`make target/tools/bin/oha\` (make bench does)" >&2; exit 1; }
ngx_peak=$(awk '$1=="nginx" {print $2}' "$work/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
: > "$work/rate"
for round in $(seq "$ROUNDS"); do
  for share in 50 90; do
    rate=$(python3 -c "import sys; print(int(float(sys.argv[1]) * int(sys.argv[2]) / 100))" "$ngx_peak" "$share")
    for path in nginx toolgate; do
      case $path in nginx) addr=$NGX ;; toolgate) addr=$GATE ;; esac
      "$OHA" -z "${DURATION}s" -c "$CONNECTIONS" -q "$rate" --latency-correction --no-tui --output-format json \
        -m POST -H 'content-type: application/json' -H 'authorization: Bearer sk-bench-0123456789abcdef' \
        -d '{"model":"bench-model","messages":[{"role":"user","content":"Hello!"}]}' \
        "http://$addr/v1/chat/completions" > "$work/oha.json"
      python3 - "$work/oha.json" "$path" "$share" "$rate" >> "$work/rate" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
codes = r.get("statusCodeDistribution", {})
# Requests still in flight when the duration ends are counted as aborted.
errors = {k: v for k, v in r.get("errorDistribution", {}).items() if "deadline" not in k}
if set(codes) - {"200"} or errors:
    sys.exit(f"{sys.argv[2]}: errors at a constant rate: {codes} {errors}")
p = r["latencyPercentiles"]
print(sys.argv[2], sys.argv[3], sys.argv[4], r["summary"]["requestsPerSec"], p["p50"] * 1000, p["p99"] * 1000)
PY
    done
  done
done

# The loop: gateway time per iteration from the gateway's own metrics.
metric_sum() { # name [label filter]
  curl -sf "http://$LOOP/metrics" | awk -v n="$1_sum" -v f="${2:-}" '$1 ~ "^"n && index($1, f) {s += $2} END {printf "%.9f\n", s}'
}
metric_count() {
  curl -sf "http://$LOOP/metrics" | awk -v n="$1_count" -v f="${2:-}" '$1 ~ "^"n && index($1, f) {s += $2} END {printf "%d\n", s}'
}
r=$(CONNECTIONS=1 run "$LOOP" loop) || exit 1
read -r _ loop_p50 _ _ <<<"$r"
req_s=$(metric_sum toolgate_http_request_duration_seconds 'route="/v1/chat/completions"')
req_n=$(metric_count toolgate_http_request_duration_seconds 'route="/v1/chat/completions"')
up_s=$(metric_sum toolgate_upstream_request_duration_seconds)
up_n=$(metric_count toolgate_upstream_request_duration_seconds)
tool_s=$(metric_sum toolgate_tool_call_duration_seconds)
tool_n=$(metric_count toolgate_tool_call_duration_seconds)
rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$GATE_PID/status")

# Memory per idle keep-alive connection: N connections that each made one
# request and stay open; resident memory before and after, toolgate and the
# nginx proxy's workers.
IDLE=${IDLE:-1000}
idle_kib() { # addr pids... -> KiB per idle connection
  python3 - "$IDLE" "$@" <<'PY'
import resource, socket, sys, time
n, addr, pids = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 64)), hard))
def rss():
    total = 0
    for pid in pids:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total
host, port = addr.rsplit(":", 1)
time.sleep(0.5)
before = rss()
conns = []
for _ in range(n):
    s = socket.create_connection((host, int(port)))
    s.sendall(f"GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode())
    if not s.recv(65536):
        sys.exit(f"{addr} closed an idle connection")
    conns.append(s)
time.sleep(0.5)
after = rss()
print(f"{(after - before) / n:.1f}")
PY
}
gate_idle=$(idle_kib "$GATE" "$GATE_PID")
ngx_idle=$(idle_kib "$NGX" $(pgrep -P "$NGX_PID"))

python3 - "$work/results" "$work/rate" "$DURATION" "$ROUNDS" "$CONNECTIONS" "$req_s" "$req_n" "$up_s" "$up_n" "$tool_s" "$tool_n" "$loop_p50" "$rss_kib" "$gate_idle" "$ngx_idle" "$IDLE" <<'PY'
import statistics, sys, os, datetime
path, rate_path, duration, rounds, conns = sys.argv[1:6]
req_s, req_n, up_s, up_n, tool_s, tool_n, loop_p50, rss, gate_idle, ngx_idle, idle = map(float, sys.argv[6:])
runs = {}
for line in open(path):
    name, rps, p50, p99, cpu = line.split()
    runs.setdefault(name, []).append((float(rps), float(p50), float(p99), float(cpu)))
med = {k: tuple(statistics.median(x[i] for x in v) for i in range(4)) for k, v in runs.items()}
print()
print(f"proxy benchmark: wrk -t1 -c{conns} -d{duration}s, {rounds} alternating rounds, medians; "
      f"127.0.0.1, {os.cpu_count()} cores, {datetime.date.today()}")
print(f"{'path':<34} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>11}   each round's req/s")
labels = {"upstream": "upstream (nginx, fixed answer)", "nginx": "nginx reverse proxy (2 workers)",
          "toolgate": "toolgate transparent proxy", "hyper": "hyper alone (toolgate's HTTP stack)"}
for k in ("upstream", "nginx", "toolgate", "hyper"):
    rps, p50, p99, cpu = med[k]
    each = ", ".join(f"{r[0]:.0f}" for r in runs[k])
    print(f"{labels[k]:<34} {rps:>10.0f} {p50:>8.3f} {p99:>8.3f} {cpu:>11.1f}   {each}")
t, n = med["toolgate"], med["nginx"]
print(f"toolgate / nginx: throughput {t[0]/n[0]:.2f}x (goal >= 0.8), p99 {t[2]:.3f} ms vs {n[2]:.3f} ms; "
      f"toolgate resident memory after the run {rss/1024:.1f} MiB")
print(f"CPU per proxied request (user + system, the proxy's own processes): toolgate {t[3]:.1f} us, "
      f"nginx {n[3]:.1f} us, {t[3]/n[3]:.2f}x; hyper alone {med['hyper'][3]:.1f} us "
      f"({med['hyper'][0]/n[0]:.2f}x nginx's throughput), so the gateway's own work costs "
      f"{t[3]-med['hyper'][3]:.1f} us per request")
rate = {}
for line in open(rate_path):
    name, share, target, rps, p50, p99 = line.split()
    rate.setdefault((name, int(share)), []).append((int(target), float(rps), float(p50), float(p99)))
for share in (50, 90):
    n_, t_ = ([statistics.median(x[i] for x in rate[(k, share)]) for i in range(4)] for k in ("nginx", "toolgate"))
    print(f"at a constant {share}% of nginx's throughput ({n_[0]:.0f} req/s, oha, latency from when each request was due): "
          f"p99 toolgate {t_[3]:.3f} ms, nginx {n_[3]:.3f} ms, {t_[3]/n_[3]:.2f}x (goal <= 1.5); "
          f"p50 {t_[2]:.3f} / {n_[2]:.3f} ms; sent {t_[1]:.0f} / {n_[1]:.0f} req/s")
print(f"memory per idle keep-alive connection ({int(idle)} open): toolgate {gate_idle:.1f} KiB (goal <= 4), "
      f"nginx {ngx_idle:.1f} KiB, {gate_idle/max(ngx_idle, 0.1):.1f}x (per open stream: bench-load)")
iters = up_n  # one model call per loop iteration
own = req_s - up_s - tool_s
print(f"tool loop (scripted model, builtin calculator, 1 connection): {int(req_n)} requests, "
      f"{int(up_n)} model calls, {int(tool_n)} tool calls, p50 {loop_p50:.3f} ms per request; "
      f"gateway's own time {own/iters*1e6:.1f} us per iteration (goal <= 15), "
      f"{own/iters/(t[3]*1e-6):.2f}x toolgate's CPU per proxied request above ("
      f"request {req_s/req_n*1e6:.0f} us - model {up_s/req_n*1e6:.0f} us - tool {tool_s/req_n*1e6:.0f} us per request)")
PY
