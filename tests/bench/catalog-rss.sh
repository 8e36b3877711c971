#!/usr/bin/env bash
# Memory per catalog tool in a serving gateway: `toolgate serve` with 1,010
# generated HTTP tools against one with 10 (the baseline, same run), each
# a fresh process; resident memory once it listens, and again after one
# `GET /v1/tools`. Two rounds; the figure is the difference per extra tool.
#
# Usage: tests/bench/catalog-rss.sh   (make bench runs it on the release
# build)
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLGATE=${TOOLGATE:-target/release/toolgate}

# serve N: prints "RSS-after-load RSS-after-listing" in KiB.
serve() {
  local n=$1 dir
  dir=$(mktemp -d)
  mkdir -p "$dir/tools.d" "$dir/tool-sets"
  python3 - "$dir" "$n" <<'PY'
import sys
d, n = sys.argv[1], int(sys.argv[2])
files = {}
for i in range(n):
    files.setdefault(i // 20, []).append(f'''  - name: tool_{i:04}
    description: Generated tool number {i}, which looks up an item by id and query.
    category: bench
    parameters:
      type: object
      properties:
        id: {{ type: string, description: The item id., minLength: 1 }}
        q: {{ type: string, description: Free text. }}
        limit: {{ type: integer, minimum: 1, maximum: 100 }}
      required: [id]
    http:
      method: GET
      url: "https://api.example.com/v1/items/{{{{ args.id }}}}"
      query:
        q: "{{{{ args.q }}}}"
        limit: "{{{{ args.limit or 10 }}}}"
      headers:
        Accept: application/json
      timeout: 5s
    response:
      select: /data
''')
for f, tools in files.items():
    open(f"{d}/tools.d/gen-{f:03}.yaml", "w").write("tools:\n" + "".join(tools))
open(f"{d}/tool-sets/all.yaml", "w").write('name: all\ntools: ["tool_*"]\n')
open(f"{d}/toolgate.yaml", "w").write("defaults:\n  tool_set: all\n")
PY
  "$TOOLGATE" serve --listen 127.0.0.1:0 --config "$dir" 2>"$dir/log" &
  local pid=$!
  for _ in $(seq 200); do grep -qs "listening on" "$dir/log" && break; sleep 0.1; done
  sleep 1.5
  local url loaded listed
  url=$(grep -o "http://[0-9.:]*" "$dir/log" | head -1)
  loaded=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  curl -s "$url/v1/tools" >/dev/null
  sleep 0.5
  listed=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  echo "$loaded $listed"
}

echo "memory per catalog tool (toolgate serve, 1,010 generated HTTP tools against 10; goal <= 16 KiB)"
for round in 1 2; do
  read -r small_load small_list < <(serve 10)
  read -r big_load big_list < <(serve 1010)
  awk -v a="$small_load" -v b="$big_load" -v c="$small_list" -v d="$big_list" -v r="$round" 'BEGIN {
    printf "  round %d: %.1f KiB per tool once listening (%d vs %d KiB), %.1f after one GET /v1/tools\n", r, (b - a) / 1000, b, a, (d - c) / 1000 }'
done
