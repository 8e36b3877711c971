"""toolgate as the client of the MCP conformance suite's client scenarios.

The suite starts a scenario server and runs this driver with the server's
URL as the last argument. The driver does what a user of the gateway does:
it writes a configuration folder declaring that URL as an MCP server over
streamable HTTP, runs `toolgate serve` on it, lists the tools through the
tool API (`GET /v1/tools`) and invokes each once
(`POST /v1/tools/{name}/invoke`) with arguments made from its schema, then
stops the gateway (SIGTERM). The MCP traffic the suite checks is the
gateway's own. In the `elicitation-*` scenarios the server asks a person,
so the tools are called through the gateway's MCP face by a client whose
person accepts (`through_mcp`): the question travels through the gateway.

For the `auth/*` scenarios the server is declared with `oauth`:
`client_credentials` when the suite's context gives a client id and secret
for that grant, else `authorization_code`, and the driver first runs
`toolgate mcp login` the way a person does: it opens the printed URL (the
suite's authorization server answers at once with its redirect) and
follows the redirect to the gateway's 127.0.0.1 callback.

Environment: `TOOLGATE_BIN` (the binary), `MCP_CONFORMANCE_SCENARIO` (the
scenario), `MCP_CONFORMANCE_CONTEXT` (the suite's context: client id and
secret where a scenario gives them, and the tool calls to make with their
arguments).
"""

import json
import os
import pathlib
import socket
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


# Where the gateway's client metadata document would be published (the
# suite's authorization server accepts it as the client id).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def oauth_yaml(scenario: str, context: dict) -> tuple[str, str]:
    """The server's `oauth` setting for an auth scenario, and the file's
    `env` declarations."""
    secret = context.get("client_secret")
    if scenario.startswith("auth/client-credentials"):
        return (
            f"    oauth:\n      grant: client_credentials\n      client_id: \"{context.get('client_id', '')}\"\n"
            "      client_secret_env: SCENARIO_CLIENT_SECRET\n",
            "env:\n  SCENARIO_CLIENT_SECRET: required\n",
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lines = f"    oauth:\n      grant: authorization_code\n      redirect_port: {port}\n"
    env = ""
    if context.get("client_id"):
        lines += f"      client_id: \"{context['client_id']}\"\n"
        if secret:
            lines += "      client_secret_env: SCENARIO_CLIENT_SECRET\n"
            env = "env:\n  SCENARIO_CLIENT_SECRET: required\n"
    else:
        lines += f"      client_metadata_url: \"{CLIENT_METADATA_URL}\"\n"
    return lines, env


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def login(config: pathlib.Path, env: dict) -> bool:
    """`toolgate mcp login scenario`, with the driver as the person's browser."""
    proc = subprocess.Popen(
        [os.environ["TOOLGATE_BIN"], "mcp", "login", "scenario", "--config", str(config)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("  http"):
                url = line.strip()
                break
        if url is None:
            return proc.wait(timeout=30) == 0
        opener = urllib.request.build_opener(NoRedirect)
        try:
            opener.open(url, timeout=30)
            print("the authorization server did not redirect", flush=True)
            return False
        except urllib.error.HTTPError as e:
            location = e.headers.get("location")
        print(f"redirected to {location}", flush=True)
        if location:
            try:
                urllib.request.urlopen(location, timeout=30).read()
            except urllib.error.URLError as e:
                print(f"the callback failed: {e}", flush=True)
        out, _ = proc.communicate(timeout=60)
        print(out, end="", flush=True)
        return proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()


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


def through_mcp(url: str, calls: list) -> None:
    """Each call made by an MCP client of the gateway whose person accepts
    every elicitation without changing a field."""
    import anyio
    import httpx2
    import mcp_types as types
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async def accept(_ctx, params):
        print(f"asked: {params.message}", flush=True)
        return types.ElicitResult(action="accept", content={})

    async def go():
        http_client = httpx2.AsyncClient(timeout=30)
        async with Client(
            streamable_http_client(url, http_client=http_client), mode="legacy", elicitation_callback=accept
        ) as c:
            for name, args in calls:
                result = await c.call_tool(name, args)
                print(f"{name}({json.dumps(args)}) -> {result.model_dump_json()[:500]}", flush=True)

    anyio.run(go)


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    print(f"scenario {scenario}: {url}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        config = pathlib.Path(folder)
        (config / "tools.d").mkdir()
        (config / "tool-sets").mkdir()
        (config / "toolgate.yaml").write_text(GATEWAY_YAML.format())
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
        env = {**os.environ, "NO_COLOR": "1", "TOOLGATE_LOG": "info"}
        server = SERVER_YAML.format(url=url)
        if scenario.startswith("auth/"):
            oauth, declared = oauth_yaml(scenario, context)
            server = declared + server + oauth
            env["SCENARIO_CLIENT_SECRET"] = context.get("client_secret", "")
        (config / "tools.d" / "scenario.yaml").write_text(server)
        (config / "tool-sets" / "scenario.yaml").write_text('name: scenario\ntools: ["*"]\n')
        if "grant: authorization_code" in server and not login(config, env):
            print("the login failed", flush=True)
        gateway = subprocess.Popen(
            [os.environ["TOOLGATE_BIN"], "serve", "--config", str(config)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
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
            # A scenario may name the calls to make (with the arguments a
            # person would give); other tools get a value their schema accepts.
            # A null the schema does not allow (`verbose: null` for a boolean)
            # would be refused by the gateway's validation: it is left out,
            # which the scenario counts as "not provided".
            given = {
                c["name"]: {k: v for k, v in c.get("arguments", {}).items() if v is not None}
                for c in context.get("toolCalls", [])
            }
            calls = []
            for tool in tools:
                function = tool["function"]
                args = given.get(function["name"])
                if args is None:
                    args = example(function.get("parameters") or {"type": "object"})
                calls.append((function["name"], args))
            if scenario.startswith("elicitation-"):
                # A server that asks a person: the tools are called by an MCP
                # client of the gateway that answers (accepting, the fields
                # left as they are), as an editor's user would.
                through_mcp(base + "/mcp/scenario", calls)
            for name, args in [] if scenario.startswith("elicitation-") else calls:
                status, result = http("POST", f"{base}/v1/tools/{name}/invoke", {"arguments": args})
                print(f"{name}({json.dumps(args)}) -> {status} {json.dumps(result)[:500]}", flush=True)
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
