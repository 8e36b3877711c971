#!/usr/bin/env bash
# Two toolgate binaries side by side: both proxy the same fixed upstream
# (nginx answering one completion), and wrk loads each in turn, ROUNDS
# times (in turns), so that both see the same machine. Prints, per binary, the CPU
# time (user + system, from /proc) it spent per proxied request and its
# throughput, each round's and their medians. On a shared machine, where
# one run of proxy.sh moves by more than a change is worth, the paired
# rounds tell two builds apart.
#
# Usage: tests/bench/ab.sh BINARY_A BINARY_B
#   ROUNDS (8), DURATION seconds per run (3), CONNECTIONS (16)
# Needs nginx and wrk (`make deb` installs them).
set -euo pipefail
shopt -s inherit_errexit
[ $# = 2 ] || { echo "usage: $0 BINARY_A BINARY_B" >&2; exit 2; }
A=$(realpath "$1")
B=$(realpath "$2")
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-8}
DURATION=${DURATION:-3}
CONNECTIONS=${CONNECTIONS:-16}
# shellcheck source=tests/bench/common.sh
. tests/bench/common.sh
need nginx wrk

UP=127.0.0.1:$(port)
GA=127.0.0.1:$(port)
GB=127.0.0.1:$(port)
nginx_conf up 1 "server {
    listen $UP;
    location / { default_type application/json; return 200 '$COMPLETION'; }
  }"
for _ in $(seq 50); do curl -sf -X POST "http://$UP/" >/dev/null && break; sleep 0.1; done

for g in a b; do
  mkdir -p "$work/$g/tools.d" "$work/$g/tool-sets"
  printf 'reload: { watch: false }\nupstreams:\n  - name: model\n    base_url: http://%s/v1\n' "$UP" > "$work/$g/toolgate.yaml"
done
TOOLGATE_LOG=warn "$A" serve --config "$work/a" --listen "$GA" &
pids+=($!)
PA=$!
TOOLGATE_LOG=warn "$B" serve --config "$work/b" --listen "$GB" &
pids+=($!)
PB=$!
for addr in "$GA" "$GB"; do
  for _ in $(seq 100); do curl -sf "http://$addr/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
done
BODY='{"model":"bench-model","messages":[{"role":"user","content":"Hello!"}]}'
for addr in "$GA" "$GB"; do
  curl -sf "http://$addr/v1/chat/completions" -H 'content-type: application/json' -d "$BODY" \
    | grep -q 'How can I help' || { echo "no completion from $addr" >&2; exit 1; }
done
wrk_post plain "$BODY"

# user + system clock ticks of a process (fields 14 and 15 of its stat,
# counted after its name, which may hold spaces)
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# run ADDR PID -> "cpu_us_per_request req_per_s"; exits on a failed run
run() {
  local before after out n rps
  before=$(ticks "$2")
  out=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$work/plain.lua" "http://$1/v1/chat/completions")
  after=$(ticks "$2")
  if grep -q "Non-2xx\|Socket errors" <<<"$out"; then echo "$1: errors" >&2; echo "$out" >&2; exit 1; fi
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  python3 -c 'import os, sys; n, b, a = map(int, sys.argv[1:4]); print(round((a - b) * 1e6 / os.sysconf("SC_CLK_TCK") / n, 1), sys.argv[4])' "$n" "$before" "$after" "$rps"
}
run "$GA" "$PA" >/dev/null
run "$GB" "$PB" >/dev/null
: > "$work/rounds"
# Each round runs both, in turns (a b, then b a), so that neither always
# runs second.
for round in $(seq "$ROUNDS"); do
  order="a b"
  [ $((round % 2)) = 1 ] || order="b a"
  for k in $order; do
    case $k in
      a) r=$(run "$GA" "$PA") || exit 1 ;;
      b) r=$(run "$GB" "$PB") || exit 1 ;;
    esac
    echo "$k $r" >> "$work/rounds"
  done
done
python3 - "$work/rounds" "$A" "$B" <<'PY'
import statistics, sys
rounds = {}
for line in open(sys.argv[1]):
    k, cpu, rps = line.split()
    rounds.setdefault(k, []).append((float(cpu), float(rps)))
a, b = rounds["a"], rounds["b"]
for k, path in (("a", sys.argv[2]), ("b", sys.argv[3])):
    r = rounds[k]
    print(f"{k} {path}: CPU per proxied request median {statistics.median(x[0] for x in r):.1f} us "
          f"({' '.join(f'{x[0]:.1f}' for x in r)}), throughput median {statistics.median(x[1] for x in r):.0f} req/s")
wins = sum(1 for x, y in zip(a, b) if y[0] < x[0])
print(f"b / a: CPU {statistics.median(x[0] for x in b) / statistics.median(x[0] for x in a):.3f}, "
      f"throughput {statistics.median(x[1] for x in b) / statistics.median(x[1] for x in a):.3f}; "
      f"b used less CPU in {wins} of {len(a)} paired rounds")
PY
