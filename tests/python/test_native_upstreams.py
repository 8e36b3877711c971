"""Clients in front of a model of their own protocol, through toolgate:
the real Claude Code CLI against a fake of Anthropic's Messages API
(`target/debug/fake-model anthropic`) that signs its thinking and refuses
what the real API refuses (a thinking block altered, unsigned or moved
away from its calls, a tool result without its call, a fifth cache
marker). The fake follows the scripted model's script in the last user
message (`call NAME {json}`, `then NAME {json}`).

What must hold: a task of three gateway tool iterations with interleaved
thinking, then `--continue`, with no request refused by the fake; the
client's `cache_control` markers reach the model as sent; the tools' bytes
are the same in every iteration (the cached prefix stays cached).
"""

import http.server
import json
import os
import subprocess
import threading
import urllib.request

import pytest

from conftest import KEY, binary, read_until
from test_agents import agent, offline_env, run

GATEWAY_YAML = """
builtins:
  enabled: [calculator, text_process, json_process]
upstreams:
  - name: claude
    protocol: anthropic
    base_url: {fake}
models:
  - model: "*"
    upstream: claude
auth:
  keys:
    - name: agent
      key_env: TG_AGENT_KEY
"""


def serve(config_dir, yaml, env=None):
    (config_dir / "tool-sets").mkdir(exist_ok=True)
    (config_dir / "toolgate.yaml").write_text(yaml)
    (config_dir / "tool-sets" / "default.yaml").write_text("name: default\ntools: [calculator, text_process, json_process]\n")
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(config_dir)],
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "TOOLGATE_LOG": "info", "TG_AGENT_KEY": KEY, **(env or {})},
    )
    line = read_until(proc.stderr, "listening on http://")
    return proc, "http://" + line.split("listening on http://")[1].strip()


def start_fake(protocol, key=None):
    env = {**os.environ, **({"FAKE_KEY": key} if key else {})}
    proc = subprocess.Popen([binary("fake-model"), protocol], stdout=subprocess.PIPE, env=env)
    line = read_until(proc.stdout, "listening on http://")
    return proc, "http://" + line.split("listening on http://")[1].strip()


def stopped_after(started):
    """Yields the URL of a process from `serve` or `start_fake`, and stops
    the process when the fixture ends."""
    proc, url = started
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fake():
    yield from stopped_after(start_fake("anthropic"))


def fake_get(fake, what):
    with urllib.request.urlopen(fake.removesuffix("/v1") + "/fake/" + what, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def gateway(fake, tmp_path_factory):
    yield from stopped_after(serve(tmp_path_factory.mktemp("anthropic-gateway"), GATEWAY_YAML.format(fake=fake)))


class Recorder(http.server.BaseHTTPRequestHandler):
    """Passes each request to the gateway and back, keeping the request
    bodies the client sent (what the client's `cache_control` markers
    are)."""

    target = ""
    bodies = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        Recorder.bodies.append(json.loads(body or b"{}"))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        req = urllib.request.Request(Recorder.target + self.path, data=body, headers=headers, method="POST")
        try:
            resp = urllib.request.urlopen(req, timeout=120)
            status, answer, kind = resp.status, resp.read(), resp.headers.get("content-type", "")
        except urllib.error.HTTPError as e:
            status, answer, kind = e.code, e.read(), e.headers.get("content-type", "")
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorded(gateway):
    Recorder.target = gateway
    Recorder.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def markers(body):
    return json.dumps(body).count('"cache_control"')


SCRIPT = (
    'call calculator {"expression": "6*7"} '
    'then text_process {"text": "Thinking Machines", "operation": "upper"} '
    'then json_process {"input": "{\\"a\\": [1, 2]}", "operation": "keys"}'
)


def test_claude_code_runs_a_three_tool_task_and_continues_with_its_thinking_intact(recorded, fake, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = offline_env(home)
    env.update(ANTHROPIC_BASE_URL=recorded, ANTHROPIC_API_KEY=KEY)
    before = len(fake_get(fake, "requests"))
    status, out = run([agent("claude"), "-p", SCRIPT, "--output-format", "stream-json", "--verbose"], env, work)
    assert status == 0, out
    assert fake_get(fake, "refusals") == [], out
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    blocks = [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]]
    kinds = [b["type"] for b in blocks]
    # Every model turn's thinking, shown with its signature, around the
    # gateway's three calls.
    assert kinds.count("mcp_tool_use") == 3 and kinds.count("thinking") >= 4, kinds
    result = next(e for e in events if e.get("type") == "result")["result"]
    assert "[calculator] 42" in result and "THINKING MACHINES" in result and "[json_process]" in result, result

    sent = fake_get(fake, "requests")[before:]
    loop = [r for r in sent if any(t.get("name") == "calculator" for t in r.get("tools", []))]
    assert len(loop) >= 4, [len(r["messages"]) for r in sent]
    # The tools are the same bytes on every iteration of the loop.
    assert len({json.dumps(r["tools"], sort_keys=False) for r in loop}) == 1
    # The client's cache markers reach the model as it sent them.
    client = [b for b in Recorder.bodies if any(t.get("name") == "Read" for t in b.get("tools", []))]
    assert client and markers(client[-1]) >= 1
    assert markers(loop[0]) == markers(client[-1]), (markers(loop[0]), markers(client[-1]))

    # The next request carries the thinking of every turn back: 0 refusals.
    status, out = run([agent("claude"), "-p", "say done", "--continue"], env, work)
    assert status == 0, out
    assert fake_get(fake, "refusals") == [], out
    last = fake_get(fake, "requests")[-1]
    text = json.dumps(last["messages"])
    assert '"thinking"' in text and "say done" in text


def sse_events(url, body, headers):
    """The events of a streamed answer, as (event, data) pairs, with the
    message's id (the fake's counter) left out."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=30) as r:
        raw = r.read().decode()
    events = []
    for block in raw.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            data = json.loads(lines["data"])
            data.get("message", {}).pop("id", None)
            events.append((lines.get("event"), data))
    return events


def test_a_messages_stream_without_tools_is_relayed_event_for_event(tmp_path):
    # Same protocol, no tools: the model's stream reaches the client as it
    # was written, thinking and signature deltas included.
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "say hello"}],
    }
    # Two fakes fresh from the start count their answers alike.
    mine, behind = start_fake("anthropic"), start_fake("anthropic")
    gateway = serve(tmp_path, GATEWAY_YAML.format(fake=behind[1]))
    try:
        direct = sse_events(mine[1] + "/messages", body, {"anthropic-version": "2023-06-01"})
        relayed = sse_events(
            gateway[1] + "/v1/messages",
            {**body, "tool_set": "none"},
            {"anthropic-version": "2023-06-01", "x-api-key": KEY},
        )
    finally:
        for proc, _ in (gateway, mine, behind):
            proc.terminate()
            proc.wait(timeout=10)
    deltas = [d["delta"]["type"] for _, d in direct if d.get("type") == "content_block_delta"]
    assert "thinking_delta" in deltas and "signature_delta" in deltas, deltas
    assert relayed == direct


# ---------------------------------------------------------------------------
# Codex in front of a Responses model that encrypts its reasoning

RESPONSES_YAML = """
builtins:
  enabled: [calculator, text_process, json_process]
upstreams:
  - name: gpt
    protocol: openai_responses
    base_url: {fake}
models:
  - model: "*"
    upstream: gpt
auth:
  keys:
    - name: agent
      key_env: TG_AGENT_KEY
"""

CODEX_CONFIG = """
model = "mock-model"
model_provider = "toolgate"

[model_providers.toolgate]
name = "toolgate"
base_url = "{gateway}/v1"
wire_api = "responses"
env_key = "TOOLGATE_API_KEY"
"""


@pytest.fixture(scope="module")
def responses_fake():
    yield from stopped_after(start_fake("openai_responses"))


@pytest.fixture(scope="module")
def responses_gateway(responses_fake, tmp_path_factory):
    yield from stopped_after(serve(tmp_path_factory.mktemp("responses-gateway"), RESPONSES_YAML.format(fake=responses_fake)))


def test_codex_carries_encrypted_reasoning_through_the_loop_and_its_next_turn(responses_gateway, responses_fake, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    (home / ".codex" / "config.toml").write_text(CODEX_CONFIG.format(gateway=responses_gateway))
    env = offline_env(home)
    env.update(CODEX_HOME=str(home / ".codex"), TOOLGATE_API_KEY=KEY)
    before = len(fake_get(responses_fake, "requests"))
    script = 'call calculator {"expression": "6*7"} then text_process {"text": "codex", "operation": "upper"}'
    status, out = run([agent("codex"), "exec", "--skip-git-repo-check", script], env, work)
    assert status == 0, out
    assert fake_get(responses_fake, "refusals") == [], out
    assert "[calculator] 42" in out and "CODEX" in out, out
    sent = fake_get(responses_fake, "requests")[before:]
    assert all(r.get("store") is False for r in sent), [r.get("store") for r in sent]
    # Within the loop, each model call carries the reasoning of the calls
    # before it, encrypted, right before the calls it led to.
    loop = [r for r in sent if any(t.get("name") == "calculator" for t in r.get("tools", []))]
    assert len(loop) >= 3, len(loop)
    for later in loop[1:]:
        kinds = [i.get("type") for i in later["input"]]
        reasoning = [i for i in later["input"] if i.get("type") == "reasoning"]
        assert reasoning and all(i.get("encrypted_content") for i in reasoning), kinds
        assert kinds[kinds.index("reasoning") + 1] == "function_call", kinds

    # The next turn sends the reasoning it was shown back: 0 refusals.
    status, out = run([agent("codex"), "exec", "--skip-git-repo-check", "resume", "--last", "say done"], env, work)
    assert status == 0, out
    assert fake_get(responses_fake, "refusals") == [], out
    last = fake_get(responses_fake, "requests")[-1]
    assert any(i.get("type") == "reasoning" and i.get("encrypted_content") for i in last["input"]), last["input"]


# ---------------------------------------------------------------------------
# Gemini CLI in front of a Gemini model that signs its calls

GEMINI_YAML = """
builtins:
  enabled: [calculator, text_process, json_process]
upstreams:
  - name: gemini
    protocol: gemini
    base_url: {fake}
models:
  - model: "*"
    upstream: gemini
auth:
  keys:
    - name: agent
      key_env: TG_AGENT_KEY
"""


@pytest.fixture(scope="module")
def gemini_fake():
    yield from stopped_after(start_fake("gemini"))


@pytest.fixture(scope="module")
def gemini_gateway(gemini_fake, tmp_path_factory):
    yield from stopped_after(serve(tmp_path_factory.mktemp("gemini-gateway"), GEMINI_YAML.format(fake=gemini_fake)))


def fake_requests(fake):
    with urllib.request.urlopen(fake.removesuffix("/v1beta") + "/fake/requests", timeout=10) as r:
        return json.loads(r.read())


def fake_refusals(fake):
    with urllib.request.urlopen(fake.removesuffix("/v1beta") + "/fake/refusals", timeout=10) as r:
        return json.loads(r.read())


def test_gemini_cli_keeps_every_thought_signature_through_the_loop_and_its_next_turn(gemini_gateway, gemini_fake, tmp_path):
    from test_agents import GEMINI_SETTINGS

    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(GEMINI_SETTINGS))
    env = {k: v for k, v in offline_env(home).items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update(GOOGLE_GEMINI_BASE_URL=gemini_gateway, GEMINI_API_KEY=KEY, GEMINI_CLI_TRUST_WORKSPACE="true")
    (work / "note.txt").write_text("the secret word is kohlrabi\n")
    before = len(fake_requests(gemini_fake))
    # Three gateway tools in the loop, then the CLI's own tool.
    status, out = run([agent("gemini"), "-m", "gemini-3-pro", "-p", SCRIPT + ' then read_file {"file_path": "note.txt"}'], env, work)
    assert status == 0, out
    assert fake_refusals(gemini_fake) == [], out
    assert "kohlrabi" in out, out
    sent = fake_requests(gemini_fake)[before:]
    loop = [r for r in sent if any(d.get("name") == "calculator" for t in r.get("tools", []) for d in t.get("functionDeclarations", []))]
    assert len(loop) >= 4, len(loop)
    # Each later call carries the model's earlier calls with the signatures
    # it made, on the parts they came on.
    for later in loop[1:]:
        model_turns = [c for c in later["contents"] if c.get("role") == "model"]
        firsts = [next(p for p in c["parts"] if "functionCall" in p) for c in model_turns if any("functionCall" in p for p in c["parts"])]
        assert firsts and all(p.get("thoughtSignature") for p in firsts), model_turns
    # The gateway's own calls carry the fake's signatures, not the
    # stand-in for calls another model made.
    signed = [p["thoughtSignature"] for r in loop for c in r["contents"] if c.get("role") == "model" for p in c["parts"] if "functionCall" in p and "thoughtSignature" in p]
    assert any(s != "skip_thought_signature_validator" for s in signed), signed

    # A session's next turn carries what the CLI was shown: 0 refusals.
    # (A session whose model called the CLI's own tools is left out here:
    # Gemini CLI 0.61.0 resumes it with each function response twice, from
    # its record of the call and of the response, which Google's API
    # refuses as well.)
    status, out = run([agent("gemini"), "-m", "gemini-3-pro", "-p", SCRIPT], env, work)
    assert status == 0, out
    status, out = run([agent("gemini"), "-m", "gemini-3-pro", "--resume", "latest", "-p", "say done"], env, work)
    assert status == 0, out
    assert fake_refusals(gemini_fake) == [], out
    last = fake_requests(gemini_fake)[-1]
    assert "say done" in json.dumps(last["contents"]), last["contents"][-1]
