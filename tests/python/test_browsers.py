"""What a web page in the user's browser can make a local gateway do:
nothing. Debian's chromium (driven by Playwright) opens pages of other
sites (`evil.example`, `rebound.example`, both resolved to 127.0.0.1 by
chromium's own resolver rules) against `toolgate serve` with the shipped
configuration (no API keys, 127.0.0.1, `execute_python` and the file tools
enabled) and the scripted model, and sends every endpoint that acts the
requests a page may send without asking first (Chromium's own guard
for local addresses turned off, as other browsers have none) (a "simple" POST: text/plain,
a form, no type at all), then, as a DNS-rebound page would, JSON to its own
origin. Each is refused before it runs: the file the request would write is
never written.
"""

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, binary, missing, read_until, require_module

playwright_api = None  # imported by the fixtures: a missing one fails under `make test`


def sync_playwright():
    global playwright_api
    playwright_api = require_module("playwright.sync_api", "playwright is not installed (make setup installs it)")
    return playwright_api.sync_playwright()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def write(name):
    """A body that writes workspace/NAME through `file_write`."""
    return {"arguments": {"path": name, "content": "pwned"}}


def chat(name):
    return {"model": "mock-model", "messages": [{"role": "user", "content": f"write {name}"}]}


# Every endpoint that acts, with a body that would act.
ENDPOINTS = {
    "tool_api_file_write": ("/v1/tools/file_write/invoke", write),
    "tool_api_python": ("/v1/tools/execute_python/invoke", lambda n: {"arguments": {"code": "print(2+2)"}}),
    "chat_completions": ("/v1/chat/completions", chat),
    "responses": ("/v1/responses", lambda n: {"model": "mock-model", "input": f"write {n}"}),
    "messages": (
        "/v1/messages",
        lambda n: {"model": "mock-model", "max_tokens": 64, "messages": [{"role": "user", "content": f"write {n}"}]},
    ),
    "mcp": (
        "/mcp/default",
        lambda n: {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "file_write", "arguments": write(n)["arguments"]},
        },
    ),
}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, model):
    """`toolgate serve` with the shipped configuration, as `make run` serves it."""
    config = tmp_path_factory.mktemp("shipped")
    for name in ("tools.d", "tool-sets"):
        shutil.copytree(ROOT / name, config / name)
    shutil.copy(ROOT / "toolgate.yaml", config / "toolgate.yaml")
    (config / "workspace").mkdir()
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(config)],
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "TOOLGATE_LOG": "info", "OPENAI_BASE_URL": model},
    )
    line = read_until(proc.stderr, "listening on http://")
    base = "http://" + line.split("listening on http://")[1].strip()
    yield {"base": base, "port": base.rsplit(":", 1)[1], "workspace": config / "workspace"}
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        missing("chromium is not installed (make deb installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP rebound.example 127.0.0.1",
                # Chromium's own guard for local addresses is off: other
                # browsers have none, and a user may grant it; what is
                # tested is what the gateway itself refuses.
                "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,"
                "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults",
            ],
        )
        yield b
        b.close()


def page_at(browser, origin):
    """A tab showing a page of `origin` (served by the test, not the
    gateway), every answer the browser receives recorded with its status
    (Playwright sees the status of opaque answers too)."""
    context = browser.new_context()
    page = context.new_page()
    page.answers = []
    page.on("response", lambda r: page.answers.append((r.request.method, r.url, r.status)))
    context.route(origin + "/", lambda route: route.fulfill(status=200, content_type="text/html", body="<p>hello</p>"))
    page.goto(origin + "/")
    return page


SEND = """async ([url, body, type]) => {
    const init = {method: "POST", mode: "no-cors", body};
    if (type !== null) init.headers = {"Content-Type": type};
    try { await fetch(url, init); return "sent"; } catch (e) { return "failed: " + e; }
}"""


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", None])
@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_a_page_of_another_site_cannot_make_the_gateway_act(shipped, browser, endpoint, kind):
    path, body = ENDPOINTS[endpoint]
    name = f"{endpoint}-{(kind or 'none').replace('/', '_')}.txt"
    page = page_at(browser, "http://evil.example")
    url = shipped["base"] + path
    assert page.evaluate(SEND, [url, json.dumps(body(name)), kind]) == "sent"
    page.wait_for_timeout(200)
    statuses = [status for method, u, status in page.answers if u == url and method == "POST"]
    assert statuses == [403], page.answers
    assert not (shipped["workspace"] / name).exists()
    page.context.close()


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_a_page_of_another_site_cannot_send_json_either(shipped, browser, endpoint):
    """JSON needs a CORS preflight, which the gateway never grants: the
    browser does not send the request."""
    path, body = ENDPOINTS[endpoint]
    name = f"{endpoint}-cors.txt"
    page = page_at(browser, "http://evil.example")
    url = shipped["base"] + path
    result = page.evaluate(
        """async ([url, body]) => {
            try { await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body}); return "sent"; }
            catch (e) { return "failed"; }
        }""",
        [url, json.dumps(body(name))],
    )
    assert result == "failed"
    page.wait_for_timeout(200)
    assert [s for m, u, s in page.answers if u == url and m == "POST"] == []
    assert not (shipped["workspace"] / name).exists()
    page.context.close()


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_a_rebound_page_is_refused_by_its_host(shipped, browser, endpoint):
    """DNS rebinding: the page's own name now points at 127.0.0.1, so its
    requests are same-origin (JSON allowed, answers readable); the gateway
    has no keys, so it refuses the name."""
    path, body = ENDPOINTS[endpoint]
    name = f"{endpoint}-rebound.txt"
    origin = f"http://rebound.example:{shipped['port']}"
    page = page_at(browser, origin)
    answer = page.evaluate(
        """async ([url, body]) => {
            const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, body});
            return [r.status, await r.text()];
        }""",
        [origin + path, json.dumps(body(name))],
    )
    assert answer[0] == 403, answer
    error = json.loads(answer[1])["error"]
    # Each face answers in its own shape: OpenAI's names the code.
    assert error.get("code", "host_not_allowed") == "host_not_allowed" and "http.allowed_hosts" in error["message"], error
    assert not (shipped["workspace"] / name).exists()
    page.context.close()


def post(url, body, headers):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_a_body_not_sent_as_json_is_refused_whoever_sends_it(shipped, endpoint):
    path, body = ENDPOINTS[endpoint]
    name = f"{endpoint}-plain.txt"
    data = json.dumps(body(name)).encode()
    for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}, {}):
        status, answer = post(shipped["base"] + path, data, {"Accept": "application/json, text/event-stream", **headers})
        assert status == 415, (headers, answer)
        error = json.loads(answer)["error"]
        assert error.get("code", "unsupported_media_type") == "unsupported_media_type", error
        assert "Content-Type: application/json" in error["message"], error
    assert not (shipped["workspace"] / name).exists()


def test_the_same_request_from_a_program_still_runs(shipped):
    """The rule refuses what pages send, not clients: JSON without
    `Origin` (every SDK, curl with its content type) runs."""
    status, answer = post(
        shipped["base"] + "/v1/tools/file_write/invoke",
        json.dumps(write("from-a-program.txt")).encode(),
        {"Content-Type": "application/json"},
    )
    assert status == 200, answer
    assert (shipped["workspace"] / "from-a-program.txt").read_text() == "pwned"
