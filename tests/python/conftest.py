"""Fixtures for the end-to-end tests that drive toolgate with the official
`openai` SDK: a local HTTP backend for tools, the scripted model
(`mock-llm`), and the `toolgate` binary serving a temporary configuration.

The binaries come from `cargo build --workspace` (`make test` builds them
first); when they are missing the tests fail under `make test` and are
skipped elsewhere, saying so (`missing`).
"""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"


def missing(why: str):
    """A prerequisite of a test is missing (`why` says what and how to get
    it): under `make test` (TOOLGATE_TESTS_REQUIRE_ALL) the test fails with
    `why`; in a developer's partial setup it is skipped."""
    if os.environ.get("TOOLGATE_TESTS_REQUIRE_ALL"):
        pytest.fail(f"a prerequisite is missing: {why}")
    pytest.skip(why)


def require_module(name: str, why: str):
    """The module `name`, or `missing(why)`."""
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        missing(why)


def binary(name: str) -> pathlib.Path:
    path = TARGET / name
    if not path.exists():
        missing(f"{path} is missing: run `cargo build --workspace` first (make test does)")
    return path


class JsonHandler(BaseHTTPRequestHandler):
    """Answers JSON, quietly."""

    def send_json(self, body: bytes):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Backend(JsonHandler):
    """Answers tools: /echo?q=... returns {"q": ...}; /sleep?ms=N sleeps."""

    hits = 0

    def do_GET(self):  # noqa: N802 (http.server's naming)
        Backend.hits += 1
        url = urllib.parse.urlparse(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/sleep":
            time.sleep(int(params.get("ms", "100")) / 1000)
        self.send_json(json.dumps({"path": url.path, **params}).encode())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc):
    """Waits until something listens on `port` (the child `proc` started)."""
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def redis_server():
    """A real redis-server of the test's own, keeping nothing on disk:
    (the process, its port)."""
    if not shutil.which("redis-server"):
        missing("redis-server is not installed: `make deb` installs it")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc)
    return proc, port


def read_until(stream, needle: str, timeout: float = 30.0) -> str:
    """Reads lines from a child's pipe until one contains `needle`."""
    result = {}

    def reader():
        for raw in stream:
            line = raw.decode(errors="replace")
            if needle in line:
                result["line"] = line
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if "line" not in result:
        raise RuntimeError(f"never saw {needle!r}")
    # Keep draining so the child never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()
    return result["line"]


def serving(config, env):
    """`toolgate serve` on the folder `config` with `env` added to its
    environment (`OPENAI_BASE_URL` taken out): yields its URL, and stops
    it after."""
    env = {**os.environ, "NO_COLOR": "1", **env}
    env.pop("OPENAI_BASE_URL", None)
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(config)], stderr=subprocess.PIPE, env=env
    )
    line = read_until(proc.stderr, "listening on http://")
    yield "http://" + line.split("listening on http://")[1].strip()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def backend():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="session")
def model():
    proc = subprocess.Popen([binary("mock-llm"), "127.0.0.1:0"], stdout=subprocess.PIPE)
    line = read_until(proc.stdout, "listening on")
    yield line.split("listening on ")[1].strip()
    proc.kill()
    proc.wait()


GATEWAY_YAML = """
defaults:
  tool_set: web
  max_tool_iterations: 5
upstreams:
  - name: mock
    base_url: {model}
    read_timeout: 2s
    retries: {{ max_attempts: 3, initial_backoff: 10ms, max_backoff: 2s }}
models:
  - model: "text-*"
    upstream: mock
    formatter: structured_prompt
  - model: "mock-*"
    upstream: mock
policies:
  - name: no-forbidden-words
    tools: [lookup]
    when: 'args.q.contains("forbidden")'
    action: deny
    reason: that word is not looked up here
"""

TOOLS_YAML = """
tools:
  - name: lookup
    description: Look a word up.
    parameters:
      type: object
      properties:
        q: {{ type: string }}
      required: [q]
    http:
      url: "{backend}/echo"
      query: {{ q: "{{{{ args.q }}}}" }}
    response:
      select: /q
  - name: slow
    description: Takes its time.
    parameters:
      type: object
      properties:
        ms: {{ type: integer }}
      required: [ms]
    http:
      url: "{backend}/sleep"
      query: {{ ms: "{{{{ args.ms }}}}" }}
      timeout: 300ms
"""


@pytest.fixture(scope="session")
def gateway(tmp_path_factory, backend, model):
    config = tmp_path_factory.mktemp("config")
    (config / "tools.d").mkdir()
    (config / "tool-sets").mkdir()
    (config / "toolgate.yaml").write_text(GATEWAY_YAML.format(model=model))
    (config / "tools.d" / "t.yaml").write_text(TOOLS_YAML.format(backend=backend))
    (config / "tool-sets" / "web.yaml").write_text("name: web\ntools: [lookup, slow]\n")
    (config / "tool-sets" / "small.yaml").write_text("name: small\ntools: [lookup]\n")
    env = {**os.environ, "NO_COLOR": "1", "TOOLGATE_LOG": "info"}
    env.pop("OPENAI_BASE_URL", None)
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(config)],
        stderr=subprocess.PIPE,
        env=env,
    )
    line = read_until(proc.stderr, "listening on http://")
    yield "http://" + line.split("listening on http://")[1].strip()
    proc.terminate()
    proc.wait(timeout=10)


# The API key of `shipped_gateway`.
KEY = "agent-key-0123456789abcdef"

KEYS_YAML = """
auth:
  keys:
    - name: agent
      key_env: TG_AGENT_KEY
"""


@pytest.fixture(scope="session")
def shipped_gateway(tmp_path_factory, model):
    """`toolgate serve` with the shipped configuration and one API key
    (`KEY`), against the scripted model."""
    config = tmp_path_factory.mktemp("shipped")
    for name in ("tools.d", "tool-sets"):
        shutil.copytree(ROOT / name, config / name)
    (config / "toolgate.yaml").write_text((ROOT / "toolgate.yaml").read_text() + KEYS_YAML)
    (config / "workspace").mkdir()
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(config)],
        stderr=subprocess.PIPE,
        # A search key, so that the research set's `web_search` is enabled
        # (it is never called here).
        env={
            **os.environ,
            "NO_COLOR": "1",
            "TOOLGATE_LOG": "info",
            "OPENAI_BASE_URL": model,
            "TG_AGENT_KEY": KEY,
            "BRAVE_API_KEY": "unused-search-key",
        },
    )
    line = read_until(proc.stderr, "listening on http://")
    yield "http://" + line.split("listening on http://")[1].strip()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def client(gateway):
    import openai

    # No SDK retries: the gateway's own behaviour is under test.
    return openai.OpenAI(base_url=gateway + "/v1", api_key="not-needed", max_retries=0)
