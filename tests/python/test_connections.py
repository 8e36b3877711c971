"""Users acting as themselves upstream (`connections`, `credentials`),
against a real OAuth authorization server: panva's oidc-provider from npm
(tests/node/authorization_server.mjs), with its own sign-in pages, JWT
access tokens, refresh tokens, revocation and the RFC 8693 grant.

Two users, alice and bob, sign in at the authorization server for tokens
that call the gateway. Three APIs check bearer tokens against the server's
keys: one users connect their account to (`per_user`), one reached by token
exchange (`token_exchange`), one that trusts the gateway's own tokens
(`forward`). Each answers who called, with the token's id.
"""

import base64
import html
import hashlib
import http.cookiejar
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import ThreadingHTTPServer

import pytest

from conftest import ROOT, JsonHandler, binary, free_port, missing, read_until, redis_server, require_module, wait_for_port

NODE_DIR = ROOT / "tests" / "node"
NODE = NODE_DIR / "node_modules" / ".bin" / "node"
SERVER = NODE_DIR / "authorization_server.mjs"
USER_MCP_SERVER = ROOT / "tests" / "mcp" / "user_server.py"
# PKCE of the test's own sign-ins.
VERIFIER = "a-verifier-of-the-tests-own-sign-ins-0123456789"
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
CONNECTIONS_KEY = "q5Kk2bbbmv8B2JQpP8r2m3oCqYc0lJ3aAMQfJ8mR8zE="


class Answer:
    def __init__(self, status, headers, text):
        self.status_code, self.headers, self.text = status, headers, text

    def json(self):
        return json.loads(self.text)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Browser:
    """A browser's part: cookies kept, redirects seen (not followed)."""

    def __init__(self):
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), NoRedirect()
        )

    def request(self, method, url, data=None, token=None, auth=None, body=None, follow_redirects=False, headers=None):
        headers = dict(headers or {})
        payload = None
        if data is not None:
            payload = urllib.parse.urlencode(data).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req = urllib.request.Request(url, data=payload, method=method, headers=headers)
        try:
            with self.opener.open(req, timeout=30) as r:
                return Answer(r.status, r.headers, r.read().decode())
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.headers, e.read().decode())

    def get(self, url, **kw):
        return self.request("GET", url, **kw)

    def post(self, url, **kw):
        return self.request("POST", url, **kw)

    def delete(self, url, **kw):
        return self.request("DELETE", url, **kw)


class Api(JsonHandler):
    """An API that checks bearer tokens: a JWT of the authorization server
    for its own audience. `GET /me` answers the token's `sub` and `jti`."""

    audience = ""
    jwks = None
    seen: dict = {}
    refuse_subjects: set = set()
    refuse_once: set = set()

    def do_GET(self):  # noqa: N802 (http.server's naming)
        import jwt

        auth = self.headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return self.refuse("no bearer token")
        token = auth[len("Bearer "):]
        try:
            key = self.jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=self.audience)
        except Exception as e:  # noqa: BLE001 (any invalid token is a 401)
            return self.refuse(str(e))
        sub, jti = claims["sub"], claims.get("jti")
        if sub in self.refuse_subjects or jti in self.refuse_once:
            self.refuse_once.discard(jti)
            return self.refuse("this token is revoked here")
        self.seen.setdefault(sub, []).append(jti)
        self.send_json(json.dumps({"sub": sub, "jti": jti}).encode())

    def refuse(self, why):
        body = json.dumps({"error": "invalid_token", "why": why}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def api_server(issuer, audience):
    import jwt

    handler = type(
        "ThisApi",
        (Api,),
        {
            "audience": audience,
            "jwks": jwt.PyJWKClient(issuer + "/jwks"),
            "seen": {},
            "refuse_subjects": set(),
            "refuse_once": set(),
        },
    )
    server = ThreadingHTTPServer(("127.0.0.1", int(audience.rsplit(":", 1)[1].strip("/"))), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


def through_sign_in(session, url, user, stop):
    """Follows `url` as a browser would through the authorization server's
    sign-in and consent pages (signing in as `user`), up to the redirect to
    `stop`: that URL."""
    method, data = "GET", None
    for _ in range(20):
        r = session.request(method, url, data=data, follow_redirects=False)
        if r.status_code in (302, 303):
            url = urllib.parse.urljoin(url, r.headers["location"])
            method, data = "GET", None
            if url.startswith(stop):
                return url
            continue
        assert r.status_code == 200, (url, r.status_code, r.text[:500])
        prompt = re.search(r'name="prompt" value="(\w+)"', r.text).group(1)
        action = re.search(r'action="([^"]+)"', r.text).group(1)
        data = {"prompt": prompt}
        if prompt == "login":
            data |= {"login": user, "password": "anything"}
        url, method = urllib.parse.urljoin(url, action), "POST"
    raise AssertionError(f"never redirected to {stop}")


@pytest.fixture(scope="module", params=["embedded", "redis"])
def world(request, tmp_path_factory, model):
    """Everything, with users' tokens kept in the embedded store or (with
    `state.redis`) in a real redis-server."""
    require_module("jwt", "PyJWT (installed by `make setup`)")
    if not NODE.exists() or not (NODE_DIR / "node_modules" / "oidc-provider").exists():
        missing("tests/node/node_modules lacks node or oidc-provider: run `make setup`")
    as_port, gw_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    gateway = f"http://127.0.0.1:{gw_port}"
    resources = {name: f"http://127.0.0.1:{free_port()}/" for name in ("api", "short", "brief", "rotating", "exchange")}
    mcp_port = free_port()
    mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
    # Tokens for the gateway: the audience `auth.jwt` checks, which the
    # `forward` API trusts too.
    gateway_resource = f"http://127.0.0.1:{free_port()}/"
    env = {
        **os.environ,
        "AS_PORT": str(as_port),
        "GATEWAY_REDIRECT_URI": gateway + "/connect/callback",
        "GATEWAY_RESOURCE": gateway_resource,
        "API_RESOURCE": resources["api"],
        "SHORT_RESOURCE": resources["short"],
        "EXCHANGE_RESOURCE": resources["exchange"],
        "MCP_RESOURCE": mcp_url,
        "BRIEF_RESOURCE": resources["brief"],
        "ROTATING_RESOURCE": resources["rotating"],
    }
    auth = subprocess.Popen([NODE, SERVER], cwd=NODE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    read_until(auth.stdout, "ready ")
    apis = {name: api_server(issuer, r) for name, r in resources.items()}
    apis["forward"] = api_server(issuer, gateway_resource)
    mcp_server = subprocess.Popen(
        [sys.executable, USER_MCP_SERVER, str(mcp_port), issuer],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(mcp_port, mcp_server)
    # The gateway's own token at the MCP server (client credentials): its
    # session lists the tools.
    r = Browser().post(
        f"{issuer}/token",
        auth=("toolgate", "toolgate-secret"),
        data={"grant_type": "client_credentials", "scope": "api", "resource": mcp_url},
    )
    assert r.status_code == 200, r.text
    service_token = r.json()["access_token"]

    redis = None
    state = ""
    if request.param == "redis":
        redis, redis_port = redis_server()
        state = "state:\n  redis:\n    url_env: TG_REDIS_URL\n"
    config = tmp_path_factory.mktemp("connections")
    (config / "tools.d").mkdir()
    (config / "tool-sets").mkdir()
    (config / "toolgate.yaml").write_text(state + f"""
upstreams:
  - name: mock
    base_url: {model}
auth:
  keys:
    - name: team
      key_env: TG_TEAM_KEY
      console: own
    - name: admin
      key_env: TG_ADMIN_KEY
      console: all
  jwt:
    issuer: {issuer}
    audience: {gateway_resource}
    jwks_url: {issuer}/jwks
console:
  enabled: true
connections:
  public_url: {gateway}
  key_env: TG_CONNECTIONS_KEY
  store: store
  oauth:
    people:
      issuer: {issuer}
      client_id: toolgate
      client_secret_env: TG_CLIENT_SECRET
      scopes: [api]
      resource: {resources["api"]}
    short:
      issuer: {issuer}
      client_id: toolgate
      client_secret_env: TG_CLIENT_SECRET
      scopes: [api]
      resource: {resources["short"]}
    brief:
      issuer: {issuer}
      client_id: toolgate
      client_secret_env: TG_CLIENT_SECRET
      scopes: [api]
      resource: {resources["brief"]}
    rotating:
      issuer: {issuer}
      client_id: toolgate
      client_secret_env: TG_CLIENT_SECRET
      scopes: [api]
      resource: {resources["rotating"]}
    tasks:
      issuer: {issuer}
      client_id: toolgate
      client_secret_env: TG_CLIENT_SECRET
      scopes: [api]
      resource: {mcp_url}
  exchange:
    corp:
      issuer: {issuer}
      client_id: toolgate
      client_secret_env: TG_CLIENT_SECRET
      resource: {resources["exchange"]}
""")
    tool = """
  - name: {name}
    description: Who the API says calls.
    http:
      url: "{url}me"
    cache: {{ ttl: 5m }}
"""
    for file, credentials, name, url in [
        ("people", "{per_user: people}", "people_me", resources["api"]),
        ("short", "{per_user: short}", "short_me", resources["short"]),
        ("brief", "{per_user: brief}", "brief_me", resources["brief"]),
        ("rotating", "{per_user: rotating}", "rotating_me", resources["rotating"]),
        ("corp", "{token_exchange: corp}", "corp_me", resources["exchange"]),
        ("forward", "forward", "forward_me", gateway_resource),
    ]:
        text = f"credentials: {credentials}\ntools:" + tool.format(name=name, url=url)
        if file in ("short", "brief", "rotating"):  # every call reaches its API
            text = text.replace("    cache: { ttl: 5m }\n", "")
        (config / "tools.d" / f"{file}.yaml").write_text(text)
    (config / "tools.d" / "mcp.yaml").write_text(f"""
env:
  SERVICE_TOKEN: required
mcp_servers:
  - name: tasks
    transport: http
    url: {mcp_url}
    headers: {{ Authorization: "Bearer {{{{ env.SERVICE_TOKEN }}}}" }}
    credentials: {{ per_user: tasks }}
  # The same server without a token of the gateway's: it refuses the
  # gateway's own session, and lists its tools to connected callers alone.
  - name: tasks_users
    transport: http
    url: {mcp_url}
    credentials: {{ per_user: tasks }}
    tools: {{ prefix: u_ }}
""")
    (config / "tool-sets" / "me.yaml").write_text(
        "name: me\ntools: [people_me, short_me, brief_me, rotating_me, corp_me, forward_me, whoami, refuse_my_token, alice_notes, u_*]\n"
        'prompts: ["*"]\nresources: ["notes://*"]\n'
    )
    genv = {
        **os.environ,
        "NO_COLOR": "1",
        "TG_TEAM_KEY": "team-key-0123456789abcdef",
        "TG_ADMIN_KEY": "admin-key-0123456789abcdef",
        "TG_CONNECTIONS_KEY": CONNECTIONS_KEY,
        "TG_CLIENT_SECRET": "toolgate-secret",
        "SERVICE_TOKEN": service_token,
    }
    if redis is not None:
        genv["TG_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    genv.pop("OPENAI_BASE_URL", None)
    gw = subprocess.Popen(
        [binary("toolgate"), "serve", "--listen", f"127.0.0.1:{gw_port}", "--config", str(config)],
        stderr=subprocess.PIPE,
        env=genv,
    )
    read_until(gw.stderr, "listening on http://")

    def sign_in(user):
        """A token for the gateway, as `user` gets one from the server."""
        browser = Browser()
        if True:
            query = urllib.parse.urlencode({
                "client_id": "tester",
                "response_type": "code",
                "redirect_uri": "http://127.0.0.1:9/callback",
                "scope": "api",
                "resource": gateway_resource,
                "code_challenge": CHALLENGE,
                "code_challenge_method": "S256",
            })
            back = through_sign_in(browser, f"{issuer}/auth?{query}", user, "http://127.0.0.1:9/callback")
            code = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(back).query))["code"]
            r = browser.post(
                f"{issuer}/token",
                auth=("tester", "tester-secret"),
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": "http://127.0.0.1:9/callback",
                    "code_verifier": VERIFIER,
                    "resource": gateway_resource,
                },
            )
            assert r.status_code == 200, r.text
            return r.json()["access_token"]

    def invoke(token, tool, base=None):
        """Calls `tool` as `token`'s caller (at another replica's `base`)."""
        req = urllib.request.Request(
            f"{base or gateway}/v1/tools/{tool}/invoke",
            data=json.dumps({"arguments": {}}).encode(),
            headers={"Authorization": f"Bearer {token}", "X-Tool-Set": "me", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(token, path):
        req = urllib.request.Request(f"{gateway}{path}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def chat(token, script):
        req = urllib.request.Request(
            f"{gateway}/v1/chat/completions",
            data=json.dumps({"model": "mock-1", "tool_set": "me", "messages": [{"role": "user", "content": script}]}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["choices"][0]["message"]["content"]

    def connect(user, link):
        """`user` opens a connect link in a browser and signs in."""
        browser = Browser()
        if True:
            back = through_sign_in(browser, link, user, gateway + "/connect/callback")
            r = browser.get(back)
            assert r.status_code == 200, r.text
            assert "Connected" in r.text
            return r.text

    def stats():
        return Browser().get(f"{issuer}/test/stats").json()

    yield {
        "gateway": gateway,
        "config": config,
        "apis": {name: handler for name, (_, handler) in apis.items()},
        "sign_in": sign_in,
        "env": genv,
        "invoke": invoke,
        "get": get,
        "chat": chat,
        "connect": connect,
        "stats": stats,
        "web": Browser(),
        "redis_port": redis_port if redis is not None else None,
    }
    gw.terminate()
    gw.wait(timeout=10)
    mcp_server.kill()
    mcp_server.wait()
    if redis is not None:
        redis.kill()
        redis.wait()
    auth.kill()
    auth.wait()
    for server, _ in apis.values():
        server.shutdown()


def link_in(error):
    """The connect link a `not_connected` error gives."""
    return re.search(r"open (http\S+) to connect", error["error"]["message"]).group(1)


def ensure_connected(world, user, token, tool):
    """`user` has connected the account `tool` needs (connecting now if not)."""
    status, body = world["invoke"](token, tool)
    if status == 403:
        assert body["error"]["code"] == "not_connected", body
        world["connect"](user, link_in(body))


def test_each_user_connects_once_and_then_calls_as_themselves(world):
    alice, bob = world["sign_in"]("alice"), world["sign_in"]("bob")
    invoke, people, short = world["invoke"], world["apis"]["api"], world["apis"]["short"]

    # Not connected yet: the error names how to connect, and nothing was sent.
    status, body = invoke(alice, "people_me")
    assert status == 403 and body["error"]["code"] == "not_connected", body
    assert "`people`" in body["error"]["message"]
    assert people.seen == {}
    # A link is the user's own: alice's link connects alice.
    page = world["connect"]("alice", link_in(body))
    assert "people" in page
    status, body = invoke(alice, "people_me")
    assert status == 200, body
    assert body["data"]["sub"] == "alice"
    # bob is still not connected; then connects too.
    status, body = invoke(bob, "people_me")
    assert status == 403 and body["error"]["code"] == "not_connected"
    world["connect"]("bob", link_in(body))
    for user, token in (("alice", alice), ("bob", bob)):
        ensure_connected(world, user, token, "short_me")

    # A mixed run: every call reaches the API with its caller's own token
    # (`short_me` is not cached), or comes from the caller's own cache
    # (`people_me`), and nothing of one user reaches the other.
    before = {u: len(people.seen.get(u, [])) for u in ("alice", "bob")}
    short_before = {u: len(short.seen.get(u, [])) for u in ("alice", "bob")}
    for i in range(300):
        user, token = [("alice", alice), ("bob", bob)][i % 2]
        tool = ("people_me", "short_me")[(i // 2) % 2]
        status, body = invoke(token, tool)
        assert status == 200, body
        assert body["data"]["sub"] == user, (i, user, tool, body)
    assert set(people.seen) == {"alice", "bob"} == set(short.seen)
    # Cached per caller: alice's result was cached before the run, bob's
    # first call of the run reached the API (none came from alice's cache).
    assert {u: len(people.seen[u]) - before[u] for u in ("alice", "bob")} == {"alice": 0, "bob": 1}
    assert {u: len(short.seen[u]) - short_before[u] for u in ("alice", "bob")} == {"alice": 75, "bob": 75}
    for api in (people, short):
        assert not set(api.seen["alice"]) & set(api.seen["bob"]), "no token served both users"

    # The listing says who is connected, to each user alone.
    r = world["web"].get(world["gateway"] + "/v1/connections", token=alice)
    assert r.status_code == 200, r.text
    listed = {c["name"]: c["connected"] for c in r.json()["data"]}
    assert listed == {"people": True, "short": True, "brief": False, "rotating": False, "tasks": False}
    assert "access_token" not in r.text and "eyJ" not in r.text


def test_the_store_keeps_tokens_sealed(world):
    alice = world["sign_in"]("alice")
    ensure_connected(world, "alice", alice, "people_me")
    store = pathlib.Path(world["config"]) / "store" / "people"
    if world["redis_port"]:
        # Redis holds them, under the digest of the user, sealed; the
        # embedded store is not used.
        assert not store.exists()
        cli = ["redis-cli", "-p", str(world["redis_port"])]
        keys = subprocess.run(cli + ["--raw", "KEYS", "toolgate:connections:people:*"], capture_output=True, check=True)
        keys = keys.stdout.decode().split()
        assert len(keys) == 2, keys  # alice and bob
        for key in keys:
            assert "alice" not in key and "bob" not in key
            raw = subprocess.run(cli + ["--raw", "GET", key], capture_output=True, check=True).stdout
            assert len(raw) > 40
            assert b"alice" not in raw and b"bob" not in raw and b"eyJ" not in raw, "no name or JWT in the clear"
            assert b"refresh" not in raw and b"access_token" not in raw
        return
    entries = list(store.iterdir())
    assert entries, "the embedded store has the connected users' entries"
    for entry in entries:
        raw = entry.read_bytes()
        assert oct(entry.stat().st_mode & 0o777) == "0o600"
        assert b"alice" not in raw and b"bob" not in raw and b"eyJ" not in raw, "no name or JWT in the clear"
        assert b"refresh" not in raw and b"access_token" not in raw
    assert oct(store.stat().st_mode & 0o777) == "0o700"


def test_a_refused_token_is_refreshed_once(world):
    alice = world["sign_in"]("alice")
    invoke, short, stats = world["invoke"], world["apis"]["short"], world["stats"]
    ensure_connected(world, "alice", alice, "short_me")
    status, body = invoke(alice, "short_me")
    assert status == 200, body
    old = body["data"]["jti"]
    refreshes = stats()["grants"].get("refresh_token", 0)
    # The API refuses alice's token once: the gateway refreshes it at the
    # authorization server and calls again, with the new one.
    short.refuse_once.add(old)
    status, body = invoke(alice, "short_me")
    assert status == 200, body
    assert body["data"]["sub"] == "alice" and body["data"]["jti"] != old
    assert stats()["grants"]["refresh_token"] == refreshes + 1
    # The new token is kept: no more refreshes.
    status, again = invoke(alice, "short_me")
    assert status == 200 and again["data"]["jti"] == body["data"]["jti"]
    assert stats()["grants"]["refresh_token"] == refreshes + 1


def test_a_token_about_to_expire_is_refreshed_before_the_call(world):
    # `brief` tokens live 20 seconds, less than the 30 s before expiry at
    # which the gateway renews a token: every call renews it first.
    erin = world["sign_in"]("erin")
    invoke, brief, stats = world["invoke"], world["apis"]["brief"], world["stats"]
    ensure_connected(world, "erin", erin, "brief_me")
    refreshes = stats()["grants"].get("refresh_token", 0)
    jtis = []
    for _ in range(2):
        status, body = invoke(erin, "brief_me")
        assert status == 200, body
        assert body["data"]["sub"] == "erin"
        jtis.append(body["data"]["jti"])
    assert stats()["grants"]["refresh_token"] == refreshes + 2
    assert len(set(jtis)) == 2, "each call came with a renewed token"


def test_one_renewal_for_a_hundred_calls_on_two_replicas(world):
    # The authorization server rotates refresh tokens and revokes the whole
    # grant when a spent one comes back. `rotating` tokens live 40 seconds:
    # 10 seconds after connecting, a token is within the 30 s before expiry
    # at which the gateway renews it, and 100 calls of one user arrive at
    # once, half on a second replica of the gateway (with Redis, sharing
    # the store; with the embedded store, all on the one replica). Exactly
    # one renewal, no grant revoked, every call answered as the user.
    grace = world["sign_in"]("grace")
    stats = world["stats"]
    ensure_connected(world, "grace", grace, "rotating_me")
    connected = time.monotonic()
    bases = [world["gateway"]]
    second = None
    if world["redis_port"]:
        port = free_port()
        second = subprocess.Popen(
            [binary("toolgate"), "serve", "--listen", f"127.0.0.1:{port}", "--config", str(world["config"])],
            stderr=subprocess.PIPE,
            env=world["env"],
        )
        read_until(second.stderr, "listening on http://")
        threading.Thread(target=second.stderr.read, daemon=True).start()
        bases.append(f"http://127.0.0.1:{port}")
    try:

        def call(i):
            return world["invoke"](grace, "rotating_me", base=bases[i % len(bases)])

        # Each replica warm (its sessions, keys and the server's metadata
        # at hand) while the token is still fresh: no renewal yet.
        for i in range(len(bases)):
            status, body = call(i)
            assert status == 200 and body["data"]["sub"] == "grace", body
        before = stats()
        time.sleep(max(0.0, 10.5 - (time.monotonic() - connected)))
        results = [None] * 100
        go = threading.Barrier(100)

        def run(i):
            go.wait()
            results[i] = call(i)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [r for r in results if r[0] != 200]
        assert not failed, failed[:3]
        assert {r[1]["data"]["sub"] for r in results} == {"grace"}
        after = stats()
        assert after["grants"].get("refresh_token", 0) - before["grants"].get("refresh_token", 0) == 1
        assert after["grants_revoked"] == before["grants_revoked"]
        assert after["refused"] == before["refused"]
        # Still connected, on either replica.
        for i in range(len(bases)):
            status, body = call(i)
            assert status == 200 and body["data"]["sub"] == "grace", body
    finally:
        if second is not None:
            second.terminate()
            second.wait(timeout=10)


def test_a_token_the_upstream_keeps_refusing_is_dropped(world):
    bob = world["sign_in"]("bob")
    invoke, short, stats = world["invoke"], world["apis"]["short"], world["stats"]
    ensure_connected(world, "bob", bob, "short_me")
    refreshes = stats()["grants"].get("refresh_token", 0)
    short.refuse_subjects.add("bob")
    try:
        status, body = invoke(bob, "short_me")
        assert status == 403 and body["error"]["code"] == "not_connected", body
        assert "refused your token" in body["error"]["message"]
        assert stats()["grants"].get("refresh_token", 0) == refreshes + 1, "one refresh was tried"
        r = world["web"].get(world["gateway"] + "/v1/connections", token=bob)
        assert {c["name"]: c["connected"] for c in r.json()["data"]}["short"] is False
    finally:
        short.refuse_subjects.discard("bob")


def test_disconnecting_forgets_and_revokes_the_token(world):
    alice = world["sign_in"]("alice")
    ensure_connected(world, "alice", alice, "short_me")
    revoked = world["stats"]()["revoked"]
    r = world["web"].delete(world["gateway"] + "/v1/connections/short", token=alice)
    assert r.status_code == 200 and r.json() == {"name": "short", "subject": "alice", "disconnected": True}, r.text
    assert world["stats"]()["revoked"] == revoked + 1, "revoked at the authorization server"
    status, body = world["invoke"](alice, "short_me")
    assert status == 403 and body["error"]["code"] == "not_connected"


def test_token_exchange_gets_each_caller_a_token_of_their_own(world):
    alice, bob = world["sign_in"]("alice"), world["sign_in"]("bob")
    invoke, corp, stats = world["invoke"], world["apis"]["exchange"], world["stats"]
    before = stats()["grants"].get("urn:ietf:params:oauth:grant-type:token-exchange", 0)
    for _ in range(3):
        for user, token in (("alice", alice), ("bob", bob)):
            status, body = invoke(token, "corp_me")
            assert status == 200, body
            assert body["data"]["sub"] == user
    # One exchange per caller's token: the exchanged token is kept.
    after = stats()["grants"]["urn:ietf:params:oauth:grant-type:token-exchange"]
    assert after - before == 2
    assert set(corp.seen) == {"alice", "bob"}
    # An API key is not a token: nothing to exchange, and the error says so.
    status, body = invoke("team-key-0123456789abcdef", "corp_me")
    assert status == 403 and body["error"]["code"] == "not_connected"
    assert "token" in body["error"]["message"]


def test_forward_sends_the_callers_own_token(world):
    alice = world["sign_in"]("alice")
    status, body = world["invoke"](alice, "forward_me")
    assert status == 200, body
    assert body["data"]["sub"] == "alice"
    import jwt

    assert body["data"]["jti"] == jwt.decode(alice, options={"verify_signature": False})["jti"]


def test_only_an_admin_disconnects_another_user(world):
    web, gateway = world["web"], world["gateway"]
    bob = world["sign_in"]("bob")
    ensure_connected(world, "bob", bob, "people_me")
    alice = world["sign_in"]("alice")
    r = web.delete(gateway + "/v1/connections/people?subject=bob", token=alice)
    assert r.status_code == 403, r.text
    r = web.delete(
        gateway + "/v1/connections/people?subject=bob",
        token="admin-key-0123456789abcdef",
    )
    assert r.status_code == 200 and r.json()["disconnected"] is True, r.text
    status, body = world["invoke"](bob, "people_me")
    assert status == 403 and body["error"]["code"] == "not_connected"


def test_a_forged_or_foreign_link_connects_no_one(world):
    web, gateway = world["web"], world["gateway"]
    r = web.get(gateway + "/connect/people?ticket=forged", follow_redirects=False)
    assert r.status_code == 400 and "not valid" in r.text
    r = web.get(gateway + "/connect/callback?code=x&state=forged", follow_redirects=False)
    assert r.status_code == 400
    alice = world["sign_in"]("alice")
    r = web.post(gateway + "/v1/connections/short/link", token=alice, body={})
    assert r.status_code == 200, r.text
    link = r.json()["url"]
    # A link for `short` does not open `people`.
    ticket = urllib.parse.parse_qs(urllib.parse.urlparse(link).query)["ticket"][0]
    r = web.get(gateway + "/connect/people?ticket=" + ticket, follow_redirects=False)
    assert r.status_code == 400 and "short" in r.text
    r = web.get(link, follow_redirects=False)
    assert r.status_code == 302 and "code_challenge=" in r.headers["location"]


def both_connected_to_tasks(world, alice, bob):
    """Once the MCP server `tasks` is up (the gateway's own session lists
    its tools), alice and bob have connected their accounts to it."""
    for _ in range(100):
        status, body = world["invoke"](alice, "whoami")
        if status == 200 or body["error"]["code"] == "not_connected":
            break
        time.sleep(0.1)
    for user, token in (("alice", alice), ("bob", bob)):
        ensure_connected(world, user, token, "whoami")


def test_an_mcp_server_gets_each_user_in_a_session_of_their_own(world):
    alice, bob = world["sign_in"]("alice"), world["sign_in"]("bob")
    invoke = world["invoke"]
    both_connected_to_tasks(world, alice, bob)
    sessions = {"alice": set(), "bob": set()}
    for i in range(200):
        user, token = [("alice", alice), ("bob", bob)][i % 2]
        status, body = invoke(token, "whoami")
        assert status == 200, body
        data = json.loads(body["data"])
        assert data["sub"] == user, (i, data)
        # The server saw no other user on the session the call came over.
        assert data["session_subjects"] == [user], (i, data)
        sessions[user].add(data["session"])
    # One session per user, kept across their calls; none shared.
    assert "" not in sessions["alice"] | sessions["bob"], "calls came over sessions"
    assert len(sessions["alice"]) == 1 and len(sessions["bob"]) == 1, sessions
    assert not sessions["alice"] & sessions["bob"]
    # The server refuses alice's token: the gateway renews it and calls
    # again, over a new session of hers.
    refreshes = world["stats"]()["grants"].get("refresh_token", 0)
    status, body = invoke(alice, "refuse_my_token")
    assert status == 200, body
    status, body = invoke(alice, "whoami")
    assert status == 200, body
    data = json.loads(body["data"])
    assert data["sub"] == "alice" and data["session_subjects"] == ["alice"]
    assert data["session"] not in sessions["alice"] | sessions["bob"], "a new session of hers"
    assert world["stats"]()["grants"]["refresh_token"] == refreshes + 1
    # A caller who has not connected gets the link, not a shared session.
    carol = world["sign_in"]("carol")
    status, body = invoke(carol, "whoami")
    assert status == 403 and body["error"]["code"] == "not_connected", body


def through_mcp(world, token, work):
    """`work(client)` with an MCP client of the gateway's face, as the caller of `token`."""
    import anyio
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async def go():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with Client(streamable_http_client(world["gateway"] + "/mcp/me", http_client=http), mode="legacy") as c:
            return await work(c)

    return anyio.run(go)


def mcp_tool_names(world, token):
    """The tools the gateway's MCP face lists to the caller of `token`."""

    async def names(c):
        return sorted(t.name for t in (await c.list_tools()).tools)

    return through_mcp(world, token, names)


def test_an_mcp_server_lists_each_user_what_it_lists_them(world):
    """A server whose tool list depends on the caller: each user is offered
    (tool API, MCP face, the model of a chat) and may call what it lists to
    them, never what it lists to another user; a server that refuses the
    gateway's own session lists its tools to connected users alone."""
    alice, bob, erin = world["sign_in"]("alice"), world["sign_in"]("bob"), world["sign_in"]("erin")
    invoke, get = world["invoke"], world["get"]
    both_connected_to_tasks(world, alice, bob)

    def listed(token):
        body = get(token, "/v1/tools?tool_set=me")
        return {t["function"]["name"] for t in body["data"]}, {u["name"]: u["reason"] for u in body["unavailable"]}

    # Erin has not connected: the gateway's own listing (no `alice_notes`),
    # and the server that refused the gateway offers her nothing yet, saying why.
    tools, unavailable = listed(erin)
    assert "whoami" in tools and "alice_notes" not in tools, tools
    assert not any(t.startswith("u_") for t in tools), tools
    assert "connected their account" in unavailable["mcp:tasks_users"], unavailable
    status, body = invoke(erin, "u_whoami")
    assert status == 503 and body["error"]["code"] == "tool_unavailable", body

    # A mixed run: every listing is the caller's own, every call too.
    crossed = 0
    for i in range(60):
        user, token = [("alice", alice), ("bob", bob)][i % 2]
        tools, _ = listed(token)
        mine = user == "alice"
        crossed += ("alice_notes" in tools) != mine or ("u_alice_notes" in tools) != mine
        assert {"whoami", "u_whoami"} <= tools, tools
        status, body = invoke(token, "u_whoami" if i % 3 else "alice_notes")
        if i % 3:
            assert status == 200 and json.loads(body["data"])["sub"] == user, body
        elif mine:
            assert status == 200 and body["data"] == {"result": "alice's notes"}, body
        else:
            # Not listed to bob: not his to call (the server is never asked).
            assert status == 404 and body["error"]["code"] == "unknown_tool", body
    assert crossed == 0

    # The MCP face lists the same, per caller.
    alice_mcp, bob_mcp = mcp_tool_names(world, alice), mcp_tool_names(world, bob)
    assert "alice_notes" in alice_mcp and "u_alice_notes" in alice_mcp, alice_mcp
    assert "alice_notes" not in bob_mcp and "u_alice_notes" not in bob_mcp, bob_mcp
    assert "u_whoami" in bob_mcp

    # Prompts and resources too: listed per caller, and fetched over the
    # caller's own session (the server answers who asked).
    async def extras(c):
        from mcp.shared.exceptions import MCPError

        prompts = sorted(p.name for p in (await c.list_prompts()).prompts)
        resources = sorted(str(r.uri) for r in (await c.list_resources()).resources)
        try:
            prompt = (await c.get_prompt("alice_prompt")).messages[0].content.text
        except MCPError as e:
            prompt = f"refused: {e}"
        try:
            notes = (await c.read_resource("notes://alice")).contents[0].text
        except MCPError as e:
            notes = f"refused: {e}"
        return prompts, resources, prompt, notes

    prompts, resources, prompt, notes = through_mcp(world, alice, extras)
    assert "alice_prompt" in prompts and "u_alice_prompt" in prompts, prompts
    assert resources == ["notes://alice"], resources
    assert prompt == "a prompt for alice" and notes == "notes read by alice", (prompt, notes)
    prompts, resources, prompt, notes = through_mcp(world, bob, extras)
    assert "alice_prompt" not in prompts and "u_alice_prompt" not in prompts, prompts
    assert resources == [], resources
    # Refused by the gateway: bob is not offered them, the server is not asked.
    assert prompt.startswith("refused") and "no prompt named" in prompt, prompt
    assert notes.startswith("refused") and "alice's" not in notes, notes

    # `check --connect` reports the server that refused the gateway as
    # per caller, not as a failure.
    check = subprocess.run(
        [binary("toolgate"), "check", "--connect", "--config", str(world["config"])],
        capture_output=True, text=True, env=world["env"], timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "MCP server `tasks_users` over http: per caller" in check.stdout, check.stdout

    # The model of a chat is offered the caller's tools: it calls
    # `u_alice_notes` for alice; for bob the tool is not offered.
    assert "alice's notes" in world["chat"](alice, "call u_alice_notes {}")
    assert "alice's notes" not in world["chat"](bob, "call u_alice_notes {}")


def test_the_console_shows_a_users_accounts_and_connects_and_disconnects_them(world):
    web, gateway = world["web"], world["gateway"]
    dana = world["sign_in"]("dana")
    page = web.get(gateway + "/console/ui/catalog", token=dana, headers={"HX-Request": "true"})
    assert page.status_code == 200, page.text
    assert "Your accounts" in page.text
    accounts = dict(re.findall(r'data-account="(\w+)"><strong>\w+</strong>:\s*(connected|not connected)', page.text))
    assert accounts == {n: "not connected" for n in ("people", "short", "brief", "rotating", "tasks")}, accounts
    # The page's Connect link is dana's own.
    link = html.unescape(re.search(r'data-account="people">.*?href="([^"]+)"', page.text, re.S).group(1))
    world["connect"]("dana", link)
    page = web.get(gateway + "/console/ui/catalog", token=dana, headers={"HX-Request": "true"})
    assert re.search(r'data-account="people"><strong>people</strong>:\s*connected', page.text)
    status, body = world["invoke"](dana, "people_me")
    assert status == 200 and body["data"]["sub"] == "dana"
    page = web.post(
        gateway + "/console/ui/connections/people/disconnect", token=dana, headers={"HX-Request": "true"}, data={}
    )
    assert page.status_code == 200, page.text
    assert re.search(r'data-account="people"><strong>people</strong>:\s*not connected', page.text)
    status, body = world["invoke"](dana, "people_me")
    assert status == 403 and body["error"]["code"] == "not_connected"
