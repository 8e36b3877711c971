"""An MCP server that serves each caller as themselves, for toolgate's
end-to-end tests of per-user sessions: streamable HTTP (official Python
SDK) behind bearer-token auth, whose tokens are JWTs of the authorization
server in the test (checked against its keys, for this server's audience).

    python user_server.py PORT ISSUER

It speaks the 2025-11-25 protocol, whose sessions (`Mcp-Session-Id`) the
test observes. Its tool `whoami` answers the subject of the token the call came with and
the session the call belongs to (`Mcp-Session-Id`), and which subjects
opened that session: a test reads from it who called over which session.
`refuse_my_token` makes it refuse the token its call came with (as an
upstream does with a revoked token). Its tool list depends on the caller:
`alice_notes` is listed (and served) to alice alone, as a server lists
each user what their account may use; so are the prompt `alice_prompt`
and the resource `notes://alice`.
"""

import sys

import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer

PORT = int(sys.argv[1])
ISSUER = sys.argv[2]
RESOURCE = f"http://127.0.0.1:{PORT}/mcp"
KEYS = jwt.PyJWKClient(ISSUER + "/jwks")
SUBJECTS: dict[str, str] = {}
SESSIONS: dict[str, set] = {}
REFUSED: set = set()


class Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        if token in REFUSED:
            return None
        try:
            key = KEYS.get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=RESOURCE, issuer=ISSUER)
        except Exception:  # noqa: BLE001 (any invalid token is refused)
            return None
        SUBJECTS[token] = claims["sub"]
        return AccessToken(token=token, client_id=claims.get("client_id", "unknown"), scopes=[], expires_at=claims.get("exp"))


class PerCallerServer(MCPServer):
    """Lists `alice_notes` to alice alone."""

    async def list_tools(self):
        tools = await super().list_tools()
        if caller() != "alice":
            tools = [t for t in tools if t.name != "alice_notes"]
        return tools

    async def list_prompts(self):
        prompts = await super().list_prompts()
        return prompts if caller() == "alice" else [p for p in prompts if p.name != "alice_prompt"]

    async def list_resources(self):
        resources = await super().list_resources()
        return resources if caller() == "alice" else [r for r in resources if str(r.uri) != "notes://alice"]


def caller() -> str:
    token = get_access_token()
    return SUBJECTS.get(token.token, "?") if token is not None else "?"


server = PerCallerServer(
    "toolgate-user-server",
    log_level="WARNING",
    token_verifier=Verifier(),
    auth=AuthSettings(issuer_url=ISSUER, resource_server_url=RESOURCE, validate_token_resource=False),
)


@server.tool(description="Who calls, over which session.")
def whoami(ctx: Context) -> dict:
    sub = SUBJECTS.get(get_access_token().token, "?")
    session = ctx.request_context.request.headers.get("mcp-session-id", "")
    SESSIONS.setdefault(session, set()).add(sub)
    return {"sub": sub, "session": session, "session_subjects": sorted(SESSIONS[session])}


def sessions_only(app):
    """Serves the 2025-11-25 protocol alone (its sessions are what the
    test observes): a request marked with a later protocol version is
    served as one without a version, so `server/discover` is unknown and
    the client falls back to `initialize`."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            scope = dict(scope)
            scope["headers"] = [
                (k, v) for k, v in scope["headers"] if not (k == b"mcp-protocol-version" and v.startswith(b"2026"))
            ]
        await app(scope, receive, send)

    return wrapped


@server.tool(description="Alice's notes (listed to alice alone).")
def alice_notes() -> str:
    if caller() != "alice":
        raise ValueError("these notes are alice's")
    return "alice's notes"


@server.prompt(description="Alice's prompt (listed to alice alone).")
def alice_prompt() -> str:
    if caller() != "alice":
        raise ValueError("this prompt is alice's")
    return f"a prompt for {caller()}"


@server.resource("notes://alice", description="Alice's notes as a resource (listed to alice alone).")
def alice_resource() -> str:
    if caller() != "alice":
        raise ValueError("these notes are alice's")
    return f"notes read by {caller()}"


@server.tool(description="Refuse, from now on, the token this call came with.")
def refuse_my_token() -> str:
    REFUSED.add(get_access_token().token)
    return "refused"


if __name__ == "__main__":
    import anyio
    import uvicorn

    app = sessions_only(server.streamable_http_app(host="127.0.0.1"))
    config = uvicorn.Config(app, host="127.0.0.1", port=PORT, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
