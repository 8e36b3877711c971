"""The golden corpus (`tests/tests/e2e/golden.rs`) against the providers'
own published types: every request body the gateway sent a model
(`upstream` in each snapshot of `tests/tests/e2e/snapshots/golden/`) is
one the provider's SDK types accept, unknown keys included; and a Messages
request to an `anthropic` model (same protocol: passthrough) keeps the
client's body but for the edits `docs/chat.md` documents.

The types are the pinned SDKs' (`requirements.txt`): `openai` for chat
completions and Responses, `anthropic` (its beta types: the gateway passes
betas on) for Messages, `google-genai` for Gemini's `generateContent`.

The OpenAI and Anthropic request types are `TypedDict`s, which pydantic
does not check strictly enough here: it ignores unknown keys (and a
`TypeAdapter` refuses a `config` with `extra="forbid"` for a TypedDict),
and it validates an `Iterable[...]` field (`messages`, `input`, `tools`)
lazily, only when the result is iterated, so an invalid message passes.
`conforms` walks the type instead: every key known, every required key
present, every value of its type, a union met by any one of its members.
google-genai's types are pydantic models with `extra="forbid"` and
camelCase aliases (its Python names are accepted too, so the keys are
checked to be the REST API's camelCase names besides); they are validated
by pydantic in JSON mode, where bytes are base64.
"""

import collections
import collections.abc
import copy
import enum
import functools
import json
import pathlib
import re
import types
import typing

import pydantic
import pytest
import typing_extensions
from typing_extensions import is_typeddict

ROOT = pathlib.Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "tests" / "tests" / "e2e" / "snapshots" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN_RS = ROOT / "tests" / "tests" / "e2e" / "golden.rs"
PROTOCOLS = ("openai_chat", "anthropic", "openai_responses", "gemini")
# Each face's path and the model protocol it speaks.
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:generateContent"
FACES = {
    "/v1/chat/completions": "openai_chat",
    "/v1/messages": "anthropic",
    "/v1/responses": "openai_responses",
    GEMINI_PATH: "gemini",
}
# The fields of a request the gateway owns (docs/chat.md): read, never sent on.
GATEWAY_FIELDS = ("tool_set", "max_tool_iterations", "tool_mode")


def need(module: str):
    """The module `module`, or the test fails saying how to get it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        pytest.fail(f"{module} is missing ({e}): `make setup` installs tests/python/requirements.txt")


# The corpus, as `corpus()` in golden.rs builds it.


def face_path(name: str) -> str:
    """The face a case's name starts with (after `sdk-`), and its path."""
    name = name.removeprefix("sdk-")
    if name.startswith("messages"):
        return "/v1/messages"
    if name.startswith("responses"):
        return "/v1/responses"
    if name.startswith("gemini"):
        return GEMINI_PATH
    return "/v1/chat/completions"


def case_of(name: str, v) -> dict:
    """A case file: a request body, or `{path, headers, body}`."""
    if isinstance(v, dict) and "body" in v and "path" in v:
        return {"name": name, "path": v["path"], "headers": v.get("headers") or {}, "body": v["body"]}
    return {"name": name, "path": face_path(name), "headers": {}, "body": v}


def corpus() -> dict:
    """Every case of the golden corpus, by name."""
    cases = {}
    for folder in ("faces", "golden/cases"):
        for f in sorted((FIXTURES / folder).glob("*.json")):
            cases[f.stem] = case_of(f.stem, json.loads(f.read_text()))
    sdk = json.loads((FIXTURES / "golden" / "sdk-shapes.json").read_text())
    for name, v in sdk.items():
        cases[f"sdk-{name}"] = case_of(f"sdk-{name}", v)
    return cases


def snapshots() -> list:
    """`(name, protocol, case, document)` of every golden snapshot."""
    out = []
    for f in sorted(SNAPSHOTS.glob("*.snap")):
        protocol, case = f.stem.split("__", 1)
        out.append((f.stem, protocol, case, json.loads(f.read_text().split("---\n", 2)[2])))
    if not out:
        pytest.fail(f"no snapshot in {SNAPSHOTS}")
    return out


def case_for(cases: dict, name: str, case: str, doc: dict) -> dict:
    """The corpus case of snapshot `name`, which must have been sent as it
    says (so this module reads the corpus as golden.rs does)."""
    assert case in cases, f"{name}: no case {case} in the corpus"
    c = cases[case]
    assert doc["request"] == {"path": c["path"], "headers": c["headers"]}, (name, doc["request"], c["path"])
    return c


def golden_rs(pattern: str) -> str:
    """What `pattern` (one group) finds in golden.rs."""
    m = re.search(pattern, GOLDEN_RS.read_text(), re.S)
    if not m:
        pytest.fail(f"{GOLDEN_RS} has no {pattern!r}: update this module with it")
    return m.group(1)


# golden.rs's `Normalizer`: made-up ids become `<idN>` (numbered in the
# order it meets them), times 0.


@functools.cache
def id_prefixes() -> tuple:
    return tuple(re.findall(r'"([^"]*)"', golden_rs(r"const ID_PREFIXES: \[&str; \d+\] = \[(.*?)\];")))


def is_made_up(s: str) -> bool:
    if len(s) == 36 and s.count("-") == 4:
        return True
    return any(
        s.startswith(p) and len(s) - len(p) >= 16 and re.fullmatch(r"[A-Za-z0-9_]*", s[len(p) :]) is not None
        for p in id_prefixes()
    )


def normalized(value, ids=None):
    """`value` as golden.rs's `Normalizer` writes it in a snapshot."""
    ids = {} if ids is None else ids

    def id_of(s):
        return ids.setdefault(s, f"<id{len(ids)}>")

    if isinstance(value, str):
        if is_made_up(value):
            return id_of(value)
        for w in [w for w in re.split(r"[^A-Za-z0-9_-]", value) if is_made_up(w)]:
            value = value.replace(w, id_of(w))
        return value
    if isinstance(value, list):
        return [normalized(v, ids) for v in value]
    if isinstance(value, dict):
        zeroed = ("created", "created_at", "completed_at", "execution_time", "duration_ms")
        return {
            k: 0 if k in zeroed and is_number(v) else normalized(v, ids)
            for k, v in value.items()
        }
    return value


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


ID = re.compile(r"(<id\d+>)")


# A JSON value against a TypedDict (or a pydantic model's fields).

REQUIRED = {typing.Required, typing_extensions.Required}
NOT_REQUIRED = {typing.NotRequired, typing_extensions.NotRequired}
WRAPPERS = REQUIRED | NOT_REQUIRED | {typing.Annotated, typing_extensions.ReadOnly}
LISTS = {list, collections.abc.Iterable, collections.abc.Sequence, typing.List, typing.Iterable, typing.Sequence}
DICTS = {dict, collections.abc.Mapping, typing.Dict, typing.Mapping}
UNIONS = {typing.Union, types.UnionType}


def unwrap(tp):
    """`tp` without `Annotated`, `Required`, `NotRequired`, `ReadOnly`."""
    while typing.get_origin(tp) in WRAPPERS:
        tp = typing.get_args(tp)[0]
    return tp


def is_model(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def is_object(tp) -> bool:
    return is_typeddict(tp) or is_model(tp)


@functools.cache
def fields(tp) -> dict:
    """A TypedDict's or a pydantic model's keys: `{key: (type, required)}`."""
    if is_model(tp):
        return {f.alias or k: (f.annotation, f.is_required()) for k, f in tp.model_fields.items()}
    out = {}
    for k, h in typing.get_type_hints(tp, include_extras=True).items():
        # Marked `Required`, or required by the class (which does not see a
        # `Required` in an annotation written as a string, as the SDKs' are).
        marks, t = set(), h
        while typing.get_origin(t) in WRAPPERS:
            marks.add(typing.get_origin(t))
            t = typing.get_args(t)[0]
        out[k] = (h, bool(marks & REQUIRED) or (k in tp.__required_keys__ and not marks & NOT_REQUIRED))
    return out


def members(tp) -> list:
    """The types of a union (through `Annotated` and nested unions)."""
    out = []
    for t in typing.get_args(tp):
        t = unwrap(t)
        out.extend(members(t) if typing.get_origin(t) in UNIONS else [t])
    return out


def literals(tp, key) -> tuple:
    """The values a TypedDict's `key` may take, if it is a literal."""
    if not is_object(tp) or key not in fields(tp):
        return ()
    t = unwrap(fields(tp)[key][0])
    return tuple(
        a
        for t in (members(t) if typing.get_origin(t) in UNIONS else [t])
        if typing.get_origin(t) is typing.Literal
        for a in typing.get_args(t)
    )


def matches_literal(value, allowed) -> bool:
    """`value` is one of `allowed`; a literal that looks like a made-up id
    (`mcp_approval_request`) is `<idN>` in a snapshot."""
    if any(value == a and type(value) is type(a) for a in allowed):
        return True
    return isinstance(value, str) and ID.fullmatch(value) is not None and any(
        isinstance(a, str) and is_made_up(a) for a in allowed
    )


def kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def name_of(tp) -> str:
    return getattr(tp, "__name__", None) or repr(tp).replace("typing.", "")


def at(path: str, key) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


def conforms(value, tp, path: str, out: list):
    """Appends to `out` `(path, message)` for each way `value` is not a `tp`."""
    tp = unwrap(tp)
    origin = typing.get_origin(tp)
    if tp is object or tp is typing.Any:
        return
    if origin in UNIONS:
        conforms_to_union(value, tp, path, out)
    elif origin is typing.Literal:
        if not matches_literal(value, typing.get_args(tp)):
            out.append((path, f"{value!r} is not one of {list(typing.get_args(tp))}"))
    elif origin in LISTS or tp in LISTS:
        if not isinstance(value, list):
            out.append((path, f"{kind(value)} where an array is expected"))
            return
        for i, v in enumerate(value):
            for item in typing.get_args(tp)[:1]:
                conforms(v, item, at(path, i), out)
    elif origin in DICTS or tp in DICTS:
        if not isinstance(value, dict):
            out.append((path, f"{kind(value)} where an object is expected"))
            return
        for k, v in value.items():
            for item in typing.get_args(tp)[1:2]:
                conforms(v, item, at(path, k), out)
    elif is_object(tp):
        if not isinstance(value, dict):
            out.append((path, f"{kind(value)} where a {name_of(tp)} (an object) is expected"))
            return
        known = fields(tp)
        for k, v in value.items():
            if k in known:
                conforms(v, known[k][0], at(path, k), out)
            else:
                out.append((at(path, k), f"unknown key {k!r}: {name_of(tp)} has no such field"))
        for k, (_, required) in known.items():
            if required and k not in value:
                out.append((at(path, k), f"missing: {name_of(tp)} requires {k!r}"))
    elif not is_scalar(value, tp):
        out.append((path, f"{kind(value)} where {name_of(tp)} is expected"))


def is_scalar(value, tp) -> bool:
    """`value` is a JSON scalar of type `tp`."""
    if tp is type(None) or tp is None:
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return is_number(value) and isinstance(value, int)
    if tp is float:
        return is_number(value)
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value in [e.value for e in tp]
    # bytes, files, paths: no JSON value is one.
    return False


def conforms_to_union(value, tp, path, out):
    """A union is met when any member is. Otherwise the errors are those of
    the member the value means to be (its `type`, then its `role`, names it),
    or of the nearest member of its kind."""
    options = members(tp)
    tried = []
    for m in options:
        errs = []
        conforms(value, m, path, errs)
        if not errs:
            return
        tried.append((m, errs))
    if isinstance(value, dict):
        named, narrowed = [(m, e) for m, e in tried if is_object(m)], False
        for key in ("type", "role"):
            if key not in value or not any(literals(m, key) for m, _ in named):
                continue
            these = [(m, e) for m, e in named if matches_literal(value[key], literals(m, key))]
            if not these:
                allowed = sorted({str(a) for m, _ in named for a in literals(m, key)})
                out.append((at(path, key), f"{key} {value[key]!r} is none of the union's: {allowed}"))
                return
            named, narrowed = these, True
        if named:
            nearest, errs = min(named, key=lambda p: len(p[1]))
            others = [name_of(m) for m, _ in named if m is not nearest]
            also = f" (as {name_of(nearest)}; nor is it a {' or '.join(others)})" if narrowed and others else ""
            out.extend((p, msg + also) for p, msg in errs)
            return
    # Members whose errors are deeper than the value itself are of its kind.
    near = [(m, e) for m, e in tried if all(p != path for p, _ in e)]
    if near:
        out.extend(min(near, key=lambda p: len(p[1]))[1])
    else:
        names = [name_of(m) for m in options]
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        out.append((path, f"{kind(value)} where one of {shown} is expected"))


# Each protocol's request type.


def typed(protocol: str, stream: bool):
    """The SDK's request type of `protocol`, streamed or not."""
    if protocol == "openai_chat":
        params = need("openai.types.chat.completion_create_params")
        return params.CompletionCreateParamsStreaming if stream else params.CompletionCreateParamsNonStreaming
    if protocol == "openai_responses":
        params = need("openai.types.responses.response_create_params")
        return params.ResponseCreateParamsStreaming if stream else params.ResponseCreateParamsNonStreaming
    params = need("anthropic.types.beta.message_create_params")
    return params.MessageCreateParamsStreaming if stream else params.MessageCreateParamsNonStreaming


# `GenerateContentRequest`'s fields in the REST API (the model is in the
# path), each with google-genai's type of it; `labels` is Vertex's.
GEMINI_FIELDS = {
    "contents": "Content",
    "systemInstruction": "Content",
    "tools": "Tool",
    "toolConfig": "ToolConfig",
    "generationConfig": "GenerationConfig",
    "safetySettings": "SafetySetting",
    "cachedContent": None,
    "labels": None,
}
GEMINI_LISTS = {"contents", "tools", "safetySettings"}
# pydantic's error for a bytes field (`inlineData.data`,
# `thoughtSignature`) that is not base64.
NOT_BASE64 = "bytes_invalid_encoding"


def camel_keys(value, model, path, out):
    """The keys of `value` (valid as a `model`) are the REST API's names of
    its fields: lowerCamelCase, or the proto's snake_case field names,
    which the API's JSON parser takes as well (Google's Python SDK writes
    nested fields so). A map's keys (a schema's `properties`) are the
    user's, and not checked."""
    if not isinstance(value, dict):
        return
    known = {}
    for k, f in model.model_fields.items():
        known[f.alias or k] = f.annotation
        known[k] = f.annotation
    for k, v in value.items():
        if k not in known:
            out.append((at(path, k), f"{k!r} is not the REST name of a field of {model.__name__}", None))
            continue
        choices = [unwrap(known[k])]
        while any(typing.get_origin(t) in UNIONS for t in choices):
            choices = [a for t in choices for a in (typing.get_args(t) if typing.get_origin(t) in UNIONS else [t])]
        maps = [t for t in choices if typing.get_origin(t) in DICTS]
        if maps:
            values = [m for t in maps for a in typing.get_args(t)[1:] for m in [unwrap(a), *typing.get_args(unwrap(a))] if is_model(m)]
            for key, item in (v.items() if isinstance(v, dict) else []):
                for m in values:
                    camel_keys(item, m, at(at(path, k), key), out)
            continue
        inner = [unwrap(known[k])]
        while any(typing.get_origin(t) in UNIONS | LISTS | DICTS for t in inner):
            inner = [a for t in inner for a in (typing.get_args(t) or [t])]
        for t in (t for t in inner if is_model(t)):
            for i, item in enumerate(v) if isinstance(v, list) else [(None, v)]:
                camel_keys(item, t, at(path, k) if i is None else at(at(path, k), i), out)


def snake_key(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def gemini_conforms(body: dict, out: list):
    genai = need("google.genai.types")
    if not isinstance(body.get("contents"), list):
        out.append(("contents", "missing or not an array: GenerateContentRequest requires contents", None))
    for key, value in body.items():
        # The proto's snake_case names are the API's too.
        key = {snake_key(k): k for k in GEMINI_FIELDS}.get(key, key)
        if key not in GEMINI_FIELDS:
            out.append((key, f"unknown key {key!r}: GenerateContentRequest has no such field", None))
        elif key == "cachedContent":
            if not isinstance(value, str):
                out.append((key, f"{kind(value)} where a string is expected", None))
        elif key == "labels":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                out.append((key, "not an object of strings", None))
        elif key in GEMINI_LISTS and not isinstance(value, list):
            out.append((key, f"{kind(value)} where an array is expected", None))
        else:
            model = getattr(genai, GEMINI_FIELDS[key])
            for i, item in enumerate(value) if key in GEMINI_LISTS else [(None, value)]:
                path = key if i is None else at(key, i)
                try:
                    model.model_validate_json(json.dumps(item), strict=True)
                except pydantic.ValidationError as e:
                    for err in e.errors():
                        where = path
                        for part in err["loc"]:
                            where = at(where, part)
                        out.append((where, f"{err['msg']} ({model.__name__}, {err['type']})", err.get("input")))
                else:
                    camel_keys(item, model, path, out)


def with_output_ids(body: dict) -> dict:
    """A Responses body with an `id` (and a `status`) on the output items
    the gateway replays without them: reasoning items and the assistant's
    messages. The API takes them without (Codex, OpenAI's own agent, sends
    them so since openai/codex#3390, "Response API doesn't require IDs on
    reasoning items anymore"; with `store: false` an id names an item that
    was never kept, and is refused), but the SDK's types still require
    them: the placeholder lets every other field be checked."""
    items = body.get("input")
    if not isinstance(items, list):
        return body
    filled = []
    for item in items:
        if isinstance(item, dict) and "id" not in item and (
            item.get("type") == "reasoning" or (item.get("type") == "message" and item.get("role") == "assistant")
        ):
            item = {**item, "id": "omitted"}
            if item.get("type") == "message":
                item.setdefault("status", "completed")
        filled.append(item)
    return {**body, "input": filled}


def body_violations(protocol: str, body) -> list:
    """`(path, message, value)` for each way `body` is not a request of
    `protocol` (`value` the offending one, where pydantic says it)."""
    if not isinstance(body, dict):
        return [("", f"{kind(body)} where a request object is expected", None)]
    out = []
    if protocol == "gemini":
        gemini_conforms(body, out)
    else:
        if protocol == "openai_responses":
            body = with_output_ids(body)
        conforms(body, typed(protocol, body.get("stream") is True), "", out)
        out = [(p, m, None) for p, m in out]
    return out


def client_body(case: dict, stream: bool) -> dict:
    """The body the case sent (`stream` as golden.rs sets it), as the
    snapshot shows it."""
    body = copy.deepcopy(case["body"])
    # Gemini streams by its method, not a field.
    if case["path"] != GEMINI_PATH:
        body["stream"] = stream
    return normalized(body)


def strings_of(value) -> set:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return set().union(*map(strings_of, value)) if value else set()
    if isinstance(value, dict):
        return set().union(*map(strings_of, value.values())) if value else set()
    return set()


def upstream_violations():
    """Every upstream body of the corpus against its protocol's type:
    `(counts by protocol, the gateway's violations, the client's own)`,
    each violation `(snapshot, path, message)`."""
    cases = corpus()
    counts = collections.Counter()
    violations, clients = [], []
    for name, protocol, case_name, doc in snapshots():
        assert protocol in PROTOCOLS, f"{name}: unknown protocol {protocol}"
        case = case_for(cases, name, case_name, doc)
        face = FACES[case["path"].split("?")[0]]
        for side, stream in (("whole", False), ("stream", True)):
            client = client_body(case, stream)
            # What the client sent itself is not the gateway's doing: a
            # request to a model of the face's protocol carries the fields
            # and blocks the gateway does not own as the client sent them
            # (docs/chat.md), and the corpus has some no SDK type takes: the
            # bare "x" `sdk_shapes.py` builds where the union's member is a
            # response model, fields the pinned SDKs no longer or not yet
            # have (`top_k` in messages-cache-thinking; in the recorded Codex
            # request, `client_metadata`, developer messages with an `id`,
            # a `web_search_call` without `action`). Those, the same
            # violation at the same place of the client's own body, are
            # listed, not failed. Anything the gateway wrote or changed is
            # failed.
            own = set()
            if face == protocol:
                out = []
                conforms(client, typed(face, stream), "", out)
                own = set(out)
            sent = strings_of(client)
            # A request the model refused (status 400) was sent all the
            # same: its bodies are checked too.
            for n, call in enumerate(doc[side]["upstream"]):
                counts[protocol] += 1
                for path, message, value in body_violations(protocol, call["body"]):
                    where = f"{side}.upstream[{n}].body" + (f".{path}" if path and path[0] != "[" else path)
                    # A client's bytes that are not base64 (the corpus's "x"
                    # as an image's or audio's data) stay not base64 in the
                    # Gemini part the gateway copies them to verbatim.
                    copied = NOT_BASE64 in message and isinstance(value, str) and value in sent
                    if (path, message) in own or copied:
                        clients.append((name, where, message))
                    else:
                        violations.append((name, where, message))
    return counts, violations, clients


def test_every_upstream_request_validates_against_the_provider_types():
    counts, violations, clients = upstream_violations()
    print("request bodies validated, by protocol:", dict(counts))
    print(f"{len(clients)} violations are the client's own content, passed on as sent:")
    for s, p, m in clients:
        print(f"  {s}: {p}: {m}")
    shown = "\n".join(f"  {s}: {p}: {m}" for s, p, m in violations[:40])
    assert not violations, (
        f"{len(violations)} violations of the providers' types in {sum(counts.values())} request bodies "
        f"{dict(counts)} ({len(clients)} more are the client's own); the first 40:\n{shown}"
    )
    assert all(counts[p] > 0 for p in PROTOCOLS), counts


# Test 2: Messages to an `anthropic` model.


def same(a, b, path: str, ids: dict, out: list):
    """Appends `(path, message)` where `b` (the snapshot's) differs from
    `a` (the client's, normalized on its own): each is numbered in its own
    order, so `<idN>` in one stands for one `<idM>` in the other."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() - b.keys():
            out.append((at(path, k), "left out"))
        for k in b.keys() - a.keys():
            out.append((at(path, k), f"added: {json.dumps(b[k])[:120]}"))
        for k in a.keys() & b.keys():
            same(a[k], b[k], at(path, k), ids, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((path, f"{len(a)} items became {len(b)}"))
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, at(path, i), ids, out)
    elif isinstance(a, str) and isinstance(b, str):
        x, y = ID.split(a), ID.split(b)
        equal = len(x) == len(y) and all(
            p == q if i % 2 == 0 else ids.setdefault(("client", p), q) == q and ids.setdefault(("sent", q), p) == p
            for i, (p, q) in enumerate(zip(x, y))
        )
        if not equal:
            out.append((path, f"{a[:80]!r} became {b[:80]!r}"))
    elif not (a == b and type(a) is type(b)):
        out.append((path, f"{json.dumps(a)[:80]} became {json.dumps(b)[:80]}"))


# The `server_name` of the gateway's own calls as the Messages face shows
# them (`mcp_tool_use` / `mcp_tool_result`; docs/faces.md).
GATEWAY_SERVER = "toolgate"


def as_the_model_wrote(messages):
    """`messages` with the gateway's own calls, which the client got (and
    sends back) as `mcp_tool_use` / `mcp_tool_result` blocks, as the model
    had them: its `tool_use`, then a user turn of their `tool_result`s
    (docs/chat.md: "The model's own turns go back to it as it wrote them")."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        blocks = m.get("content") if isinstance(m, dict) and m.get("role") == "assistant" else None
        blocks = blocks if isinstance(blocks, list) else []
        gateways = {
            b.get("id")
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "mcp_tool_use" and b.get("server_name") == GATEWAY_SERVER
        }
        if not gateways:
            out.append(m)
            continue
        calls, results = [], []
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "mcp_tool_use" and b.get("id") in gateways:
                calls.append({"type": "tool_use", "id": b["id"], "name": b["name"], "input": b["input"]})
            elif isinstance(b, dict) and b.get("type") == "mcp_tool_result" and b.get("tool_use_id") in gateways:
                result = {"type": "tool_result", "tool_use_id": b["tool_use_id"], "content": b.get("content")}
                results.append({**result, "is_error": True} if b.get("is_error") is True else result)
            else:
                calls.append(b)
        out.append({**m, "content": calls})
        if results:
            out.append({"role": "user", "content": results})
    return out


# The Anthropic tool types the gateway serves itself (docs/chat.md).
GATEWAY_SERVED = ("code_execution_", "tool_search_tool_")


def tool_differences(mine: list, theirs: list, set_tools: set, no_set: bool, ids: dict, out: list):
    """The client's tools (`mine`) are the last of those sent (`theirs`), in
    their order and as they were; those before are the set's."""
    def name(t):
        return t.get("name") if isinstance(t, dict) else None

    sent = {name(t): i for i, t in enumerate(theirs)}
    kept = [t for t in mine if name(t) in sent]
    for t in mine:
        kind_of = t.get("type", "custom")
        # Anthropic's code execution and tool search are the gateway's own
        # for every model (its code mode; its search over the deferred
        # tools), documented as such.
        if kind_of.startswith(GATEWAY_SERVED):
            continue
        if name(t) not in sent:
            out.append(("tools", f"the client's tool {name(t) or kind_of!r} of type {kind_of!r} left out"))
    tail = theirs[len(theirs) - len(kept) :] if kept else []
    if [name(t) for t in tail] != [name(t) for t in kept]:
        mine_sent, all_sent = [name(t) for t in kept], [name(t) for t in theirs]
        out.append(("tools", f"the client's tools {mine_sent} are not the last sent, in order: {all_sent}"))
    for t in kept:
        same(t, theirs[sent[name(t)]], f"tools[{sent[name(t)]}]", ids, out)
    added = [name(t) for t in theirs if name(t) not in {name(t) for t in kept}]
    if no_set and added:
        out.append(("tools", f"tools {added} added to a request with no tool set"))
    elif not set(added) <= set_tools | {"run_code"}:
        out.append(("tools", f"tools {added} added: the set's are {sorted(set_tools)} (or `run_code` in code mode)"))


def passthrough_differences(client: dict, sent: dict, set_tools: set) -> list:
    """How `sent` differs from the client's body beyond the documented edits
    of a request to a model of its own protocol (docs/chat.md, "A request
    whose face speaks the upstream's protocol"): the gateway's own fields
    read (`tool_set`...), `model` written, the set's tools before the
    client's, which keep their order and content (a snapshot's keys are
    sorted, so their bytes cannot be compared), `stream` as asked (false may
    be left out), the model's own turns as it wrote them."""
    out, ids = [], {}
    if not isinstance(sent.get("model"), str):
        out.append(("model", "not written"))
    if sent.get("stream", False) is not client["stream"]:
        out.append(("stream", f"{client['stream']} became {json.dumps(sent.get('stream'))}"))
    no_set = client.get("tool_set") == "none"
    tool_differences(client.get("tools", []), sent.get("tools", []), set_tools, no_set, ids, out)
    mine = {k: v for k, v in client.items() if k not in (*GATEWAY_FIELDS, "model", "stream", "tools")}
    theirs = {k: v for k, v in sent.items() if k not in ("model", "stream", "tools")}
    if "messages" in mine:
        mine["messages"] = as_the_model_wrote(mine["messages"])
    same(mine, theirs, "", ids, out)
    return out


def test_messages_passthrough_keeps_the_client_body():
    cases = corpus()
    # The golden config's default set (golden.rs's CONFIG).
    listed = golden_rs(r"--- tool-sets/default\.yaml\n.*?tools: \[([^\]]*)\]")
    set_tools = {t.strip() for t in listed.split(",")}
    checked, differences = set(), []
    for name, protocol, case_name, doc in snapshots():
        case = case_for(cases, name, case_name, doc)
        if protocol != "anthropic" or case["path"].split("?")[0] != "/v1/messages":
            continue
        for side, stream in (("whole", False), ("stream", True)):
            upstream = doc[side]["upstream"]
            if not upstream:
                differences.append((name, side, f"no model call (status {doc[side]['status']})"))
                continue
            for path, message in passthrough_differences(client_body(case, stream), upstream[0]["body"], set_tools):
                differences.append((name, f"{side}.upstream[0].body.{path}".rstrip("."), message))
            checked.add(case_name)
    print(f"{len(checked)} Messages requests passed through")
    shown = "\n".join(f"  {s}: {p}: {m}" for s, p, m in differences[:40])
    assert not differences, f"{len(differences)} undocumented edits; the first 40:\n{shown}"
    assert len(checked) >= 50, f"only {len(checked)} Messages requests in the corpus"
