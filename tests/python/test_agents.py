"""The coding agents people put in front of a gateway, unchanged: the real
Claude Code CLI on `/v1/messages`, the real Codex CLI on `/v1/responses`
and the real Gemini CLI on `/v1beta/models/{model}:streamGenerateContent`
(pinned in tests/agents/package.json, installed by `make setup`), each
pointed at toolgate the documented way (a base URL and a gateway key) in its
default configuration, offline (an isolated HOME, telemetry and updates
off), against the shipped configuration and the scripted model.

What each must do: answer; run a gateway tool server-side; pass its own tool
(Claude Code's Read, Codex's shell) through and run it; resume a session;
use toolgate's MCP face as an MCP server of its own configuration. The
scripted model follows the script in the last user message (`call NAME
{json}`, `then NAME {json}`, see tests/src/mock_llm.rs).
"""

import json
import os
import subprocess
import urllib.request

import pytest

from conftest import KEY, ROOT, missing

AGENTS = ROOT / "tests" / "agents" / "node_modules" / ".bin"
def agent(name):
    path = AGENTS / name
    if not path.exists():
        missing(f"{path} is missing: `make setup` installs tests/agents (npm ci)")
    return str(path)


@pytest.fixture(scope="module")
def gateway(shipped_gateway):
    return shipped_gateway


def offline_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE", "CODEX"))}
    env.update(
        HOME=str(home),
        NO_COLOR="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    return env


def run(cmd, env, cwd, timeout=180):
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


def sent(model):
    """What the scripted model was sent so far."""
    with urllib.request.urlopen(model.removesuffix("/v1") + "/mock/requests", timeout=10) as r:
        return json.loads(r.read())


# ---------------------------------------------------------------------------
# Claude Code


@pytest.fixture
def claude(gateway, tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = offline_env(home)
    env.update(ANTHROPIC_BASE_URL=gateway, ANTHROPIC_API_KEY=KEY)

    def ask(prompt, *args):
        return run([agent("claude"), "-p", prompt, *args], env, work)

    ask.home, ask.work, ask.gateway = home, work, gateway
    return ask


def test_claude_code_answers(claude):
    status, out = claude("hello there")
    assert status == 0, out
    assert "Hello! You said:" in out and "hello there" in out, out


def test_claude_code_sees_a_gateway_tool_run_server_side(claude):
    status, out = claude('call calculator {"expression": "6*7"}')
    assert status == 0, out
    assert "Tool results: [calculator] 42" in out, out


def test_claude_code_shows_the_gateway_tool_as_a_tool_run_by_the_server(claude):
    status, out = claude('call calculator {"expression": "6*7"}', "--output-format", "stream-json", "--verbose")
    assert status == 0, out
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    blocks = [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]]
    kinds = [b["type"] for b in blocks]
    assert "mcp_tool_use" in kinds and "mcp_tool_result" in kinds, kinds
    use = next(b for b in blocks if b["type"] == "mcp_tool_use")
    assert use["name"] == "calculator" and use["server_name"] == "toolgate", use


def test_claude_code_runs_its_own_tool(claude):
    (claude.work / "note.txt").write_text("the secret word is pumpkin\n")
    status, out = claude(f'call Read {{"file_path": "{claude.work / "note.txt"}"}}')
    assert status == 0, out
    assert "Tool results: [Read]" in out and "pumpkin" in out, out


def test_claude_code_resumes_its_session(claude, model):
    status, out = claude("remember the word avocado")
    assert status == 0, out
    status, out = claude("what was the word?", "--continue")
    assert status == 0, out
    assert "what was the word?" in out, out
    # The resumed request carried the first turn.
    last = sent(model)[-1]
    text = json.dumps(last["messages"])
    assert "avocado" in text and "what was the word?" in text


def test_claude_code_uses_toolgate_as_its_mcp_server(claude):
    # Its own configuration: the server, and the permission to use its tool.
    server = {"type": "http", "url": claude.gateway + "/mcp/default", "headers": {"Authorization": f"Bearer {KEY}"}}
    mcp = {"mcpServers": {"toolgate": server}}
    (claude.home / ".claude").mkdir(exist_ok=True)
    (claude.home / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["mcp__toolgate__calculator"]}}))
    status, out = claude(
        'call ToolSearch {"query": "select:mcp__toolgate__calculator"} then mcp__toolgate__calculator {"expression": "2+3"}',
        "--mcp-config",
        json.dumps(mcp),
    )
    assert status == 0, out
    assert "[mcp__toolgate__calculator]" in out and "5" in out.split("[mcp__toolgate__calculator]")[1], out


# ---------------------------------------------------------------------------
# Codex


CODEX_CONFIG = """
model = "mock-model"
model_provider = "toolgate"

[model_providers.toolgate]
name = "toolgate"
base_url = "{gateway}/v1"
wire_api = "responses"
env_key = "TOOLGATE_API_KEY"
"""

CODEX_MCP = """
[mcp_servers.toolgate]
url = "{gateway}/mcp/default"
bearer_token_env_var = "TOOLGATE_API_KEY"
"""


@pytest.fixture
def codex(gateway, tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(CODEX_CONFIG.format(gateway=gateway))
    env = offline_env(home)
    env.update(CODEX_HOME=str(home / ".codex"), TOOLGATE_API_KEY=KEY)

    def ask(prompt, *args, resume=False):
        cmd = [agent("codex"), "exec", "--skip-git-repo-check"]
        if resume:
            cmd += ["resume", "--last"]
        return run([*cmd, *args, prompt], env, work)

    ask.home, ask.work, ask.gateway = home, work, gateway
    return ask


def test_codex_answers(codex):
    status, out = codex("hello there")
    assert status == 0, out
    assert "Hello! You said: hello there" in out, out


def test_codex_sees_a_gateway_tool_run_server_side(codex):
    status, out = codex('call calculator {"expression": "6*7"}')
    assert status == 0, out
    assert "Tool results: [calculator] 42" in out, out


def test_codex_runs_its_own_shell(codex):
    (codex.work / "b.txt").write_text("codex secret is turnip\n")
    status, out = codex('call exec_command {"cmd": "cat b.txt"}')
    assert status == 0, out
    assert "Tool results: [exec_command]" in out and "turnip" in out, out


def test_codex_resumes_its_session(codex, model):
    status, out = codex("remember the word avocado")
    assert status == 0, out
    status, out = codex("what was the word?", resume=True)
    assert status == 0, out
    last = sent(model)[-1]
    text = json.dumps(last["messages"])
    assert "avocado" in text and "what was the word?" in text


def test_codex_uses_toolgate_as_its_mcp_server(codex, model):
    # Every MCP server Codex knows goes to the model as a `namespace` tool;
    # the model calls it by its flat name, Codex runs it over MCP.
    with open(codex.home / ".codex" / "config.toml", "a") as f:
        f.write(CODEX_MCP.format(gateway=codex.gateway))
    status, out = codex('call mcp__toolgate__calculator {"expression": "2+3"}')
    assert status == 0, out
    assert "[mcp__toolgate__calculator]" in out and "5" in out.split("[mcp__toolgate__calculator]")[1], out
    names = [t["function"]["name"] for t in sent(model)[-1].get("tools", [])]
    assert "mcp__toolgate__calculator" in names, names


# ---------------------------------------------------------------------------
# Gemini CLI

# Its API-key mode, and no usage statistics (the tests run offline).
GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
}


@pytest.fixture
def gemini(gateway, tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(GEMINI_SETTINGS))
    env = offline_env(home)
    env = {k: v for k, v in env.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update(GOOGLE_GEMINI_BASE_URL=gateway, GEMINI_API_KEY=KEY, GEMINI_CLI_TRUST_WORKSPACE="true")

    def ask(prompt, *args, key=KEY):
        return run([agent("gemini"), "-m", "mock-model", *args, "-p", prompt], {**env, "GEMINI_API_KEY": key}, work)

    ask.home, ask.work, ask.gateway = home, work, gateway
    return ask


def test_gemini_cli_answers_streamed(gemini, model):
    status, out = gemini("hello there")
    assert status == 0, out
    assert "Hello! You said: hello there" in out, out
    # Gemini CLI streams (`streamGenerateContent?alt=sse`); so does the loop.
    assert sent(model)[-1]["stream"] is True


def test_gemini_cli_sees_a_gateway_tool_run_server_side(gemini):
    status, out = gemini('call calculator {"expression": "6*7"}')
    assert status == 0, out
    assert "Tool results: [calculator] 42" in out, out


def test_gemini_cli_runs_its_own_tool(gemini):
    (gemini.work / "note.txt").write_text("the secret word is parsnip\n")
    status, out = gemini('call read_file {"file_path": "note.txt"}')
    assert status == 0, out
    assert "Tool results: [read_file]" in out and "parsnip" in out, out


def test_gemini_cli_with_a_wrong_key_says_so_in_google_s_error(gemini):
    status, out = gemini("hello", key="wrong-key")
    assert status != 0, out
    assert '"status":"INVALID_ARGUMENT"' in out and "API key is not valid" in out, out


def test_every_refusal_has_the_shape_of_the_face_that_answers(gateway):
    """The layers' own refusals (no key, a bad key, a page's origin, a body
    not sent as JSON, an unknown path) in each face's error body: Anthropic's
    on its paths, OpenAI's on the others."""
    import urllib.error

    def call(method, path, headers, body=b"{}"):
        req = urllib.request.Request(gateway + path, data=body if method != "GET" else None, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    json_type = {"content-type": "application/json"}
    good = {**json_type, "authorization": f"Bearer {KEY}"}
    cases = [
        ("POST", "/v1/messages", json_type, 401),
        ("POST", "/v1/messages", {**json_type, "x-api-key": "wrong"}, 401),
        ("POST", "/v1/messages/count_tokens", json_type, 401),
        ("POST", "/v1/messages", {**good, "origin": "http://evil.example"}, 403),
        ("POST", "/v1/messages", {**good, "content-type": "text/plain"}, 415),
        ("POST", "/v1/messages/batches", good, 404),
        ("POST", "/v1/responses", json_type, 401),
        ("POST", "/v1/responses", {**good, "content-type": "text/plain"}, 415),
        ("GET", "/v1/responses/resp_nope", good, 404),
        ("POST", "/v1/chat/completions", json_type, 401),
        ("POST", "/v1/chat/completions", {**good, "origin": "http://evil.example"}, 403),
        ("POST", "/v1/tools/calculator/invoke", {**good, "content-type": "text/plain"}, 415),
        ("GET", "/v1/nothing-here", good, 404),
    ]
    for method, path, headers, status in cases:
        got, body = call(method, path, headers)
        assert got == status, (method, path, got, body)
        if path.startswith("/v1/messages"):
            assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, (path, body)
        else:
            assert set(body) == {"error"} and {"message", "type", "code"} <= set(body["error"]), (path, body)
