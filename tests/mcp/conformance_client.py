"""toolgate as the client of the MCP conformance suite's client scenarios.

The suite starts a scenario server and runs this driver with the server's
URL as the last argument. The driver does what a user of the gateway does:
it writes a configuration folder declaring that URL as an MCP server over
streamable HTTP, runs `toolgate serve` on it, lists the tools through the
tool API (`GET /v1/tools`) and invokes each once
(`POST /v1/tools/{name}/invoke`) with arguments made from its schema, then
stops the gateway (SIGTERM). The MCP traffic the suite checks is the
gateway's own.

Environment: `TOOLGATE_BIN` (the binary), `MCP_CONFORMANCE_SCENARIO` (the
scenario, for the log).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

GATEWAY_YAML = """listen: 127.0.0.1:0
defaults: {{ tool_set: scenario }}
upstreams: [{{ name: none, base_url: "http://127.0.0.1:9/v1" }}]
"""

SERVER_YAML = """mcp_servers:
  - name: scenario
    transport: http
    url: "{url}"
    startup_timeout: 10s
    timeout: 10s
"""


def example(schema: dict):
    """A value the schema accepts, for the simple schemas scenarios use."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind in ("number", "integer"):
        return max(schema.get("minimum", 1), 1)
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        props = schema.get("properties", {})
        return {name: example(props.get(name, {})) for name in schema.get("required", [])}
    if kind == "null":
        return None
    return "test"


def http(method: str, url: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    print(f"scenario {scenario}: {url}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        config = pathlib.Path(folder)
        (config / "tools.d").mkdir()
        (config / "tool-sets").mkdir()
        (config / "toolgate.yaml").write_text(GATEWAY_YAML.format())
        (config / "tools.d" / "scenario.yaml").write_text(SERVER_YAML.format(url=url))
        (config / "tool-sets" / "scenario.yaml").write_text('name: scenario\ntools: ["*"]\n')
        gateway = subprocess.Popen(
            [os.environ["TOOLGATE_BIN"], "serve", "--config", str(config)],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NO_COLOR": "1", "TOOLGATE_LOG": "info"},
        )
        try:
            base = None
            deadline = time.monotonic() + 30
            while base is None and time.monotonic() < deadline:
                line = gateway.stderr.readline()
                if not line:
                    break
                print(line, end="", file=sys.stderr)
                if "listening on http://" in line:
                    base = "http://" + line.split("listening on http://")[1].strip()
            if base is None:
                print("the gateway did not start", file=sys.stderr)
                return 1
            status, listing = http("GET", base + "/v1/tools")
            tools = listing.get("data", []) if isinstance(listing, dict) else []
            print(f"tools ({status}): {[t['function']['name'] for t in tools]}", flush=True)
            for tool in tools:
                function = tool["function"]
                args = example(function.get("parameters") or {"type": "object"})
                status, result = http(
                    "POST", f"{base}/v1/tools/{function['name']}/invoke", {"arguments": args}
                )
                print(f"{function['name']}({json.dumps(args)}) -> {status} {json.dumps(result)[:500]}", flush=True)
        finally:
            gateway.terminate()
            try:
                _, rest = gateway.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                gateway.kill()
                _, rest = gateway.communicate()
            print(rest, end="", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
