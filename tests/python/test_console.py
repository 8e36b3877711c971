"""The console (`/console`) in a real headless browser: Debian's chromium
(installed by `make deb`), driven by Playwright for Python, against
`toolgate serve` with the shipped configuration (plus four API keys, an
MCP server written with the Python SDK, and a published MCP App server,
`@modelcontextprotocol/server-basic-vanillajs`) and the scripted model.

Screenshots of every page are written to $TOOLGATE_SCREENSHOTS when it is
set (`make screenshots` sets it to docs/console), else to a temporary
folder.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, binary, missing, read_until, require_module

playwright_api = None  # imported by the fixtures: a missing one fails under `make test`


def sync_playwright():
    global playwright_api
    playwright_api = require_module("playwright.sync_api", "playwright is not installed (make setup installs it)")
    return playwright_api.sync_playwright()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

KEYS = {
    "admin": "admin-key-0123456789",
    "carol": "carol-key-0123456789",
    "bob": "bob-key-0123456789",
    "dave": "dave-key-0123456789",
}

CONSOLE_YAML = """
auth:
  keys:
    - name: admin
      key_env: TG_ADMIN_KEY
      console: all
    - name: carol
      key_env: TG_CAROL_KEY
      tool_sets: [default]
      console: own
    - name: bob
      key_env: TG_BOB_KEY
    - name: dave
      key_env: TG_DAVE_KEY
      tool_sets: [apps-bare]
      console: own
"""

MCP_YAML = """
mcp_servers:
  - name: py
    transport: stdio
    command: {python}
    args: ["{script}", stdio]
    tools: {{ include: [add, echo], prefix: py_ }}
  - name: apps
    transport: stdio
    command: {node}
    args: ["{app_server}", --stdio]
    tools: {{ prefix: apps_ }}
"""

NODE = ROOT / "tests/node/node_modules/.bin/node"
APP_SERVER = ROOT / "tests/mcp/node_modules/@modelcontextprotocol/server-basic-vanillajs/dist/index.js"


@pytest.fixture(scope="module")
def console(tmp_path_factory, model):
    if CHROMIUM is None:
        missing("chromium is not installed (make deb installs it)")
    config = tmp_path_factory.mktemp("console")
    for name in ("tools.d", "tool-sets"):
        shutil.copytree(ROOT / name, config / name)
    (config / "workspace").mkdir()
    shipped = (ROOT / "toolgate.yaml").read_text()
    assert "\nconsole:\n  enabled: true" in shipped, "the shipped configuration enables the console"
    (config / "toolgate.yaml").write_text(shipped + CONSOLE_YAML)
    for needed in (NODE, APP_SERVER):
        if not needed.exists():
            missing(f"{needed} is missing: run `make setup`")
    (config / "tools.d" / "mcp.yaml").write_text(
        MCP_YAML.format(
            python=sys.executable, script=ROOT / "tests" / "mcp" / "test_server.py", node=NODE, app_server=APP_SERVER
        )
    )
    (config / "tool-sets" / "mcp.yaml").write_text('name: mcp\ndescription: The Python MCP server.\ntools: ["py_*"]\n')
    (config / "tool-sets" / "apps.yaml").write_text(
        'name: apps\ndescription: An MCP App server.\ntools: ["apps_*"]\nresources: ["ui://*"]\n'
    )
    (config / "tool-sets" / "apps-bare.yaml").write_text(
        'name: apps-bare\ndescription: The same tools, not their interfaces.\ntools: ["apps_*"]\n'
    )
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "TOOLGATE_LOG": "info",
        "OPENAI_BASE_URL": model,
        "TG_ADMIN_KEY": KEYS["admin"],
        "TG_CAROL_KEY": KEYS["carol"],
        "TG_BOB_KEY": KEYS["bob"],
        "TG_DAVE_KEY": KEYS["dave"],
    }
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(config)],
        stderr=subprocess.PIPE,
        env=env,
    )
    line = read_until(proc.stderr, "listening on http://")
    base = "http://" + line.split("listening on http://")[1].strip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield {"base": base, "config": config, "browser": browser}
        browser.close()
    proc.terminate()
    proc.wait(timeout=10)


SHOTS = pathlib.Path(os.environ["TOOLGATE_SCREENSHOTS"]) if os.environ.get("TOOLGATE_SCREENSHOTS") else None


def shoot(page, tmp_path, name):
    folder = SHOTS or tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def open_console(console, key="admin", viewport=None):
    """A new tab on /console with `key` entered, every request it makes
    recorded."""
    context = console["browser"].new_context(viewport=viewport or {"width": 1280, "height": 900})
    page = context.new_page()
    page.requests = []
    page.on("request", lambda r: page.requests.append(r.url))
    page.goto(console["base"] + "/console")
    if key:
        page.fill("#api-key", KEYS[key])
        page.press("#api-key", "Enter")
    return page


def expect(page):
    return playwright_api.expect(page)


def test_the_catalog_lists_the_shipped_sets_their_tools_and_what_is_unavailable(console, tmp_path):
    page = open_console(console)
    expect(page.locator("#page-title")).to_have_text("Catalog")
    names = page.locator("details.set .set-name").all_inner_texts()
    assert {"default", "research", "workspace", "mcp"} <= set(names)
    research = page.locator('details.set[data-set="research"]')
    research.locator("summary").click()
    # web_search needs an API key the environment does not have.
    expect(research.locator(".unavailable")).to_contain_text("web_search")
    # The MCP server is up, its tools listed under its set.
    servers = page.locator("#servers-title + .table")
    expect(servers).to_contain_text("py")
    expect(servers).to_contain_text("ready")
    page.locator('details.set[data-set="mcp"] summary').click()
    expect(page.locator('details.set[data-set="mcp"]')).to_contain_text("py_add")
    # Nothing was asked of another origin (no fonts, no CDN).
    assert page.requests and all(u.startswith(console["base"]) for u in page.requests), page.requests
    shoot(page, tmp_path, "catalog")
    page.context.close()


def test_a_tool_form_submits_and_shows_the_result_and_an_invalid_value_its_error(console, tmp_path):
    page = open_console(console)
    page.get_by_role("button", name="calculator", exact=True).first.click()
    expect(page.locator("#page-title")).to_have_text("calculator")
    expect(page.locator(".facts")).to_contain_text("builtin")
    page.get_by_label("expression").fill("6 * 7")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    result = page.locator("#result .result")
    expect(result).to_have_attribute("data-outcome", "ok")
    expect(result.locator(".data")).to_have_text("42")
    expect(result.locator(".meta")).to_contain_text("ms")
    shoot(page, tmp_path, "tool")
    # An out-of-range value: refused by the gateway's validation, in its words.
    page.get_by_label("precision").fill("99")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    expect(result).to_have_attribute("data-outcome", "invalid_arguments")
    expect(result.locator(".details")).to_contain_text("/precision")
    expect(result.locator(".details")).to_contain_text("maximum")
    shoot(page, tmp_path, "tool-invalid")
    # The JSON form reaches the same tool.
    page.get_by_text("Arguments as JSON", exact=True).click()
    page.fill("#raw-args", '{"expression": "2 ^ 10"}')
    page.get_by_role("button", name="Call calculator with this JSON").click()
    expect(result.locator(".data")).to_have_text("1024")
    page.context.close()


def test_the_playground_shows_the_tool_call_card_and_the_answer_and_goes_on(console, tmp_path):
    page = open_console(console)
    page.get_by_role("button", name="Playground").click()
    expect(page.locator("#page-title")).to_have_text("Playground")
    page.fill("#play-model", "mock-model")
    page.select_option("#play-set", "default")
    page.fill("#play-message", 'call calculator {"expression": "6*7"}')
    page.get_by_role("button", name="Send").click()
    card = page.locator("#t0-cards article.card")
    expect(card).to_have_class("card ok")
    expect(card).to_contain_text("calculator")
    expect(card).to_contain_text("iteration 1")
    expect(card.locator("pre").last).to_have_text("42")
    expect(page.locator("#t0-answer")).to_have_text("Tool results: [calculator] 42")
    summary = page.locator("#t0 .summary")
    expect(summary).to_contain_text("formatter function_calling")
    expect(summary).to_contain_text("1 tool call")
    expect(summary).to_contain_text("tokens")
    # The conversation goes on: the next turn carries the first.
    page.fill("#play-message", "thanks")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#t1 .summary")).to_contain_text("Finished")
    expect(page.locator("#transcript > li")).to_have_count(2)
    shoot(page, tmp_path, "playground")
    page.context.close()


def test_recent_activity_lists_calls_filtered_by_outcome(console, tmp_path):
    page = open_console(console)
    page.get_by_role("button", name="calculator", exact=True).first.click()
    page.get_by_label("expression").fill("1 +")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    expect(page.locator("#result .result")).not_to_have_attribute("data-outcome", "ok")
    page.get_by_label("expression").fill("1 + 1")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    expect(page.locator("#result .result")).to_have_attribute("data-outcome", "ok")
    page.get_by_role("button", name="Recent activity").click()
    rows = page.locator("table.activity tbody tr")
    expect(rows.first).to_contain_text("calculator")
    expect(rows.first).to_contain_text('"1 + 1"')
    expect(rows.first).to_contain_text("admin")
    assert rows.count() >= 2
    page.select_option("#filter-outcome", "error")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#filter-outcome")).to_have_value("error")
    outcomes = page.locator("table.activity tbody tr").evaluate_all("rows => rows.map(r => r.dataset.outcome)")
    assert outcomes and "ok" not in outcomes, outcomes
    shoot(page, tmp_path, "activity")
    page.context.close()


def test_a_broken_yaml_edit_shows_the_reload_error_with_its_position(console, tmp_path):
    broken = console["config"] / "tools.d" / "broken.yaml"
    broken.write_text("tools:\n  - name: broken\n    description: Broken.\n    http:\n      url: https://example.com\n      methd: GET\n")
    try:
        page = open_console(console)
        deadline = time.time() + 20
        while True:
            page.get_by_role("button", name="Catalog").click()
            expect(page.locator("#page-title")).to_have_text("Catalog")
            if page.locator(".diagnostics").count() or time.time() > deadline:
                break
            time.sleep(0.3)
        diagnostics = page.locator(".diagnostics")
        expect(diagnostics).to_contain_text("tools.d/broken.yaml:6:")
        expect(diagnostics).to_contain_text("methd")
        expect(page.locator(".outcome-failed")).to_have_text("failed")
        shoot(page, tmp_path, "reload-error")
        page.context.close()
        # A key limited to its own sees that the reload failed, not why
        # (the errors name the configuration's files).
        page = open_console(console, key="carol")
        expect(page.locator(".outcome-failed")).to_have_text("failed")
        assert page.locator(".diagnostics").count() == 0
        assert "broken.yaml" not in page.locator("#main").inner_text()
        page.context.close()
    finally:
        broken.unlink()


def test_a_key_without_access_is_refused_and_a_limited_key_sees_only_its_own(console, tmp_path):
    # No key yet: the page asks for one and shows no data.
    page = open_console(console, key=None)
    expect(page.locator("#main")).to_contain_text("Enter an API key")
    page.fill("#api-key", "not-a-key")
    page.press("#api-key", "Enter")
    expect(page.locator("#alert")).to_contain_text("not valid")
    page.fill("#api-key", KEYS["bob"])
    page.press("#api-key", "Enter")
    expect(page.locator("#alert")).to_contain_text("may not use the console")
    shoot(page, tmp_path, "refused")
    page.context.close()

    page = open_console(console, key="admin")
    page.get_by_role("button", name="calculator", exact=True).first.click()
    page.get_by_label("expression").fill("100 - 1")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    expect(page.locator("#result .data")).to_have_text("99")
    page.context.close()

    page = open_console(console, key="carol")
    expect(page.locator("#page-title")).to_have_text("Catalog")
    assert page.locator("details.set .set-name").all_inner_texts() == ["default"]
    # Another set's tool is not hers to see or call.
    page.evaluate("htmx.ajax('GET', '/console/ui/tools/web_fetch', {target: '#main'})")
    expect(page.locator("#alert")).to_contain_text("may not use tool `web_fetch`")
    # Her own calls are listed, not the other keys'.
    page.get_by_role("button", name="Catalog").click()
    page.get_by_role("button", name="calculator", exact=True).first.click()
    expect(page.locator(".facts")).not_to_contain_text("Declared in")
    page.get_by_label("expression").fill("2 + 2")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    expect(page.locator("#result .data")).to_have_text("4")
    page.get_by_role("button", name="Recent activity").click()
    expect(page.locator("#main")).to_contain_text("made with this key")
    rows = page.locator("table.activity tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text('"2 + 2"')
    assert "admin" not in page.locator("#main").inner_text()
    assert "100 - 1" not in page.locator("#main").inner_text()
    page.context.close()


def test_the_last_page_asked_for_is_the_one_shown(console):
    """A page still loading when another is asked for never replaces it:
    the catalog's answer is held until the tool page is shown, and is
    then let through."""
    page = open_console(console)
    expect(page.locator("#page-title")).to_have_text("Catalog")
    held = []
    page.route("**/console/ui/catalog", lambda route: held.append(route))
    page.get_by_role("button", name="Catalog").click()
    # The catalog is asked for and held; then a tool of the old catalog.
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(20)
    assert held, "the catalog's request never reached the route"
    page.get_by_role("button", name="calculator", exact=True).first.click()
    expect(page.locator("#page-title")).to_have_text("calculator")
    page.unroute("**/console/ui/catalog")
    try:
        held[0].continue_()
    except Exception:
        pass  # the browser already cancelled it
    page.wait_for_timeout(500)
    expect(page.locator("#page-title")).to_have_text("calculator")
    page.get_by_label("expression").fill("6 * 7")
    page.get_by_role("button", name="Call calculator", exact=True).click()
    expect(page.locator("#result .data")).to_have_text("42")
    page.context.close()


def open_tool(page, name):
    page.evaluate(f"htmx.ajax('GET', '/console/ui/tools/{name}', {{target: '#main'}})")
    expect(page.locator("#page-title")).to_have_text(name)


def test_an_mcp_app_runs_sandboxed_under_its_tool_s_result_and_calls_its_server(console, tmp_path):
    """A published MCP App (server-basic-vanillajs, built on the official
    App SDK) behind the gateway: calling its tool in the console shows
    its interface, which gets the call's result, calls its server's tool
    through the gateway and logs to the console, from an opaque origin
    that cannot read the console's key."""
    page = open_console(console)
    open_tool(page, "apps_get-time")
    expect(page.locator(".facts")).to_contain_text("from MCP server apps")
    page.get_by_role("button", name="Call apps_get-time", exact=True).click()
    result = page.locator("#result .result")
    expect(result).to_have_attribute("data-outcome", "ok")
    expect(result.locator(".app h4")).to_contain_text("ui://apps/get-time/mcp-app.html")
    app = page.frame_locator("iframe.app-frame")
    # The interface shows the time of the call's own result (its
    # structuredContent), handed over after the App SDK's handshake.
    called = result.locator(".data").inner_text()
    expect(app.locator("#server-time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"))
    first = app.locator("#server-time").inner_text()
    assert first in called, (first, called)
    # Its button calls the server's `get-time` through the gateway.
    with page.expect_response(lambda r: r.url.endswith("/console/ui/apps/call")) as answer:
        app.locator("#get-time-btn").click()
    assert answer.value.status == 200, answer.value.text()
    assert answer.value.json()["structuredContent"]["time"], answer.value.json()
    expect(app.locator("#server-time")).not_to_have_text(first)
    # It logs to its host.
    app.locator("#log-text").fill("hello from the app")
    app.locator("#send-log-btn").click()
    expect(result.locator(".app-log")).to_contain_text("hello from the app")
    # The sandbox holds: an opaque origin, no access to the console.
    frame = page.frames[-1]
    assert frame.evaluate("window.origin") == "null"
    assert frame.evaluate("(() => { try { return sessionStorage.length, 'read'; } catch (e) { return e.name; } })()") == "SecurityError"
    assert frame.evaluate("(() => { try { return parent.document.title; } catch (e) { return e.name; } })()") == "SecurityError"
    csp = page.request.get(console["base"] + "/console/app-frame").headers["content-security-policy"]
    assert csp.startswith("sandbox allow-scripts;") and "connect-src 'none'" in csp, csp
    shoot(page, tmp_path, "mcp-app")
    # The interface asks for its own server's tools only.
    asked = page.evaluate(
        """() => fetch('/console/ui/apps/call', {method: 'POST', headers: {'HX-Request': 'true',
             'Authorization': 'Bearer ' + sessionStorage.getItem('toolgate.key'), 'Content-Type': 'application/json'},
             body: JSON.stringify({tool: 'apps_get-time', name: 'add', arguments: {a: 1, b: 2}})}).then(r => r.status)"""
    )
    assert asked == 404
    page.context.close()

    # A set that holds the tool but not its interface: the result says so.
    page = open_console(console, key="dave")
    open_tool(page, "apps_get-time")
    page.get_by_role("button", name="Call apps_get-time", exact=True).click()
    expect(page.locator("#result .result")).to_have_attribute("data-outcome", "ok")
    expect(page.locator("#result .app")).to_contain_text("Not shown: no tool set of yours")
    assert page.locator("iframe").count() == 0
    page.context.close()


def test_the_console_works_from_the_keyboard_and_at_400_percent_zoom(console, tmp_path):
    # 1280 CSS pixels at 400% zoom leave 320.
    page = open_console(console, viewport={"width": 320, "height": 800})
    expect(page.locator("#page-title")).to_have_text("Catalog")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 320, f"the catalog is {width}px wide at 320px"
    # Tab to the Playground button and press Enter: its page gets the focus.
    # (Bounded by the focusable elements of the catalog page, which grow
    # with the shipped sets.)
    for _ in range(80):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.page") == "playground":
            break
    assert page.evaluate("document.activeElement.dataset.page") == "playground", "Tab never reached Playground"
    page.keyboard.press("Enter")
    expect(page.locator("#page-title")).to_be_focused()
    expect(page.locator("#page-title")).to_have_text("Playground")
    shoot(page, tmp_path, "zoom-400")
    page.context.close()


def api(console, method, path, body=None, key="admin"):
    import json
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        console["base"] + path,
        data=data,
        method=method,
        headers={"authorization": "Bearer " + KEYS[key], "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def test_the_dashboard_draws_the_run_s_traffic(console, tmp_path):
    import json

    # Traffic of this run: a loop that calls a tool, and a tool call that fails.
    api(console, "POST", "/v1/chat/completions", {
        "model": "mock-model", "tool_set": "default",
        "messages": [{"role": "user", "content": 'call calculator {"expression": "6*7"}'}],
    })
    try:
        api(console, "POST", "/v1/tools/calculator/invoke", {"arguments": {"expression": "1/"}})
    except OSError:
        pass  # its error status
    time.sleep(0.3)
    spend = api(console, "GET", "/v1/spend?group_by=hour")["data"]
    calls = sum(r["model_calls"] for r in spend)
    tool_calls = sum(r["tool_calls"] for r in spend)
    tool_failures = sum(r["tool_failures"] for r in spend)
    assert calls >= 2 and tool_calls >= 2 and tool_failures >= 1, spend

    page = open_console(console)
    page.get_by_role("button", name="Dashboard").click()
    expect(page.locator("#page-title")).to_have_text("Dashboard")
    for chart in ("calls", "latency", "tokens", "spend", "tools"):
        expect(page.locator(f"#chart-{chart} canvas")).to_have_count(1)
    drawn = lambda chart: json.loads(page.locator(f"#chart-{chart}").get_attribute("data-drawn"))
    # What is drawn is the run's traffic: 24 hours, the calls in the last.
    hours, model_calls = drawn("calls")
    assert len(hours) == 24 and sum(model_calls) == calls and model_calls[-1] > 0, model_calls
    _, tools, failures = drawn("tools")
    assert (sum(tools), sum(failures)) == (tool_calls, tool_failures)
    _, p50, p95 = drawn("latency")
    assert p50[-1] is not None and p95[-1] >= p50[-1]
    _, inputs, outputs, _ = drawn("tokens")
    assert inputs[-1] > 0 and outputs[-1] > 0
    # The canvas has pixels of the series' colour, not only a frame.
    painted = page.evaluate(
        """() => { const c = document.querySelector('#chart-calls canvas');
                   const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                   let n = 0; for (let i = 0; i < d.length; i += 4) { if (d[i] === 0x1f && d[i+1] === 0x5f && d[i+2] === 0xbf) n++; }
                   return n; }"""
    )
    assert painted > 10, painted
    expect(page.locator("table.dash-tools")).to_contain_text("calculator")
    shoot(page, tmp_path, "dashboard")
    page.context.close()


def test_the_console_is_off_unless_enabled(gateway):
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(gateway + "/console")
    assert refused.value.code == 404
    assert b"console.enabled" in refused.value.read()


def test_an_open_gateway_s_console_refuses_other_hosts_and_requests_not_from_its_page(tmp_path, model):
    """Without API keys, the console answers only its page's requests
    (`HX-Request`, which another origin's page cannot send without a CORS
    preflight) under a loopback name or an allowed host (DNS rebinding)."""
    import http.client

    (tmp_path / "toolgate.yaml").write_text(
        f"upstreams:\n  - name: mock\n    base_url: {model}\n"
        "console:\n  enabled: true\n  allowed_hosts: [gateway.internal]\n"
    )
    proc = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", "127.0.0.1:0", "--config", str(tmp_path)],
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "TOOLGATE_LOG": "info"},
    )
    try:
        line = read_until(proc.stderr, "listening on http://")
        host, port = line.split("listening on http://")[1].strip().split(":")

        def get(path, headers):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            return response.status, response.read().decode()

        page = {"HX-Request": "true"}
        assert get("/console/ui/catalog", {**page, "Host": f"localhost:{port}"})[0] == 200
        assert get("/console/ui/catalog", {**page, "Host": "gateway.internal"})[0] == 200
        status, body = get("/console/ui/catalog", {**page, "Host": f"attacker.example:{port}"})
        assert status == 403 and "allowed_hosts" in body
        status, body = get("/console/ui/catalog", {"Host": f"localhost:{port}"})
        assert status == 400 and "HX-Request" in body
        # The page itself holds no data and is served to anyone.
        assert get("/console", {"Host": f"localhost:{port}"})[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
