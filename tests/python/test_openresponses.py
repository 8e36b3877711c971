"""The Open Responses compliance suite (its published runner, vendored in
tests/openresponses/ and run with the Node 22 and tsx pinned there) against
`/v1/responses` of the shipped configuration with a gateway key: HTTP and
streamed responses, tools, images, multi-turn, the WebSocket mode
(continuations, `store: false` kept by the connection alone, a failed
continuation forgetting what it continued) and compaction. Every case runs
and must pass.

Also here: the WebSocket mode's door is the same as every endpoint's (a key,
and no page of another site).
"""

import json
import os
import socket

from conftest import KEY, ROOT, missing

SUITE = ROOT / "tests" / "openresponses"


def test_the_open_responses_compliance_suite_passes(shipped_gateway):
    import subprocess

    bin_dir = SUITE / "node_modules" / ".bin"
    if not (bin_dir / "tsx").exists() or not (bin_dir / "node").exists():
        missing(f"{bin_dir} is missing tsx or node: `make setup` installs tests/openresponses (npm ci)")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NO_COLOR": "1"}
    cmd = [str(bin_dir / "tsx"), "bin/compliance-test.ts", "-u", shipped_gateway + "/v1", "-k", KEY, "-m", "mock-model", "--json"]
    done = subprocess.run(cmd, cwd=SUITE, env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    failed = {r["id"]: r.get("errors") for r in report["results"] if r["status"] != "passed"}
    assert not failed, json.dumps(failed, indent=1)
    # Every case of the suite ran (none filtered, none skipped).
    assert report["summary"]["skipped"] == 0
    assert report["summary"]["passed"] == report["summary"]["total"] >= 17
    assert done.returncode == 0


def upgrade(gateway, headers):
    """The status line of a WebSocket upgrade of GET /v1/responses."""
    host, port = gateway.removeprefix("http://").split(":")
    lines = [
        "GET /v1/responses HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        *[f"{k}: {v}" for k, v in headers.items()],
    ]
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return s.recv(4096).decode(errors="replace").split("\r\n")[0]


def test_the_websocket_mode_takes_a_key_and_no_other_site(shipped_gateway):
    assert " 101 " in upgrade(shipped_gateway, {"Authorization": f"Bearer {KEY}"})
    assert " 401 " in upgrade(shipped_gateway, {})
    assert " 401 " in upgrade(shipped_gateway, {"Authorization": "Bearer wrong"})
    # A page of another site (cross-site WebSocket hijacking) is refused
    # even with the key (a browser would send its cookies, not a key, but
    # the rule does not depend on that).
    assert " 403 " in upgrade(shipped_gateway, {"Authorization": f"Bearer {KEY}", "Origin": "http://evil.example"})


def test_each_websocket_turn_spends_one_of_the_key_s_requests(tmp_path, model):
    # A key allowed 3 requests a minute: the upgrade is one, each
    # `response.create` another; the third turn is refused in the WS error
    # envelope and the connection stays usable for reading it.
    import subprocess

    import websockets.sync.client as ws

    from conftest import binary, read_until

    (tmp_path / "toolgate.yaml").write_text(
        f"""
upstreams:
  - name: mock
    base_url: {model}
auth:
  keys:
    - name: tight
      key_env: TIGHT_KEY
      limits: {{ requests_per_minute: 3 }}
"""
    )
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(tmp_path)],
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "TIGHT_KEY": "tight-key-0123456789abcdef"},
    )
    try:
        base = read_until(proc.stderr, "listening on http://").split("listening on http://")[1].strip()
        with ws.connect(f"ws://{base}/v1/responses", additional_headers={"Authorization": "Bearer tight-key-0123456789abcdef"}) as conn:

            def turn():
                conn.send(json.dumps({"type": "response.create", "model": "mock-model", "input": "hi", "store": False}))
                while True:
                    event = json.loads(conn.recv(timeout=30))
                    if event["type"] in ("response.completed", "error", "response.failed"):
                        return event

            assert turn()["type"] == "response.completed"
            assert turn()["type"] == "response.completed"
            refused = turn()
            assert refused["type"] == "error" and refused["status"] == 429, refused
            assert refused["error"]["code"] == "rate_limited"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
