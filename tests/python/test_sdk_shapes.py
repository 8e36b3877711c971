"""Every request shape the official SDKs' types allow (`sdk_shapes.py`
generates them from the types themselves), sent through its face.
None may be refused: the face serves it, translates it, or leaves it out
with a notice (`X-Toolgate-Notice`), and answers 200.
"""

import json
import urllib.error
import urllib.request

import pytest

from sdk_shapes import (
    ANTHROPIC_TOOLS,
    BLOCKS,
    CHAT_MESSAGES,
    CHAT_PARTS,
    CHAT_TOOLS,
    CORPUS,
    GEMINI_CALLING,
    GEMINI_CONFIG,
    GEMINI_DECLARATIONS,
    GEMINI_PARTS,
    GEMINI_REQUEST,
    GEMINI_RESPONSE_PARTS,
    GEMINI_THINKING,
    GEMINI_TOOL_CONFIG,
    GEMINI_TOOLS,
    ITEMS,
    OPENAI_TOOLS,
    build,
    chat_message,
    chat_part,
    chat_tool,
    gemini_calling,
    gemini_config,
    gemini_declaration,
    gemini_field,
    gemini_part_request,
    gemini_response_part_request,
    gemini_thinking,
    gemini_tool,
    gemini_tool_config,
    messages_block,
    messages_tool,
    python_sdk_requests,
    responses_item,
    responses_tool,
    written,
)


def post(gateway, path, body):
    req = urllib.request.Request(
        gateway + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("x-toolgate-notice")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), None


def test_the_unions_are_read():
    # The generator sees the SDKs' unions whole (counts of the pinned SDKs).
    assert len(BLOCKS) >= 20 and len(ANTHROPIC_TOOLS) >= 20
    assert len(ITEMS) >= 30 and len(OPENAI_TOOLS) >= 15
    assert len(CHAT_MESSAGES) >= 6 and len(CHAT_PARTS) >= 4 and len(CHAT_TOOLS) >= 2
    # google-genai's models, field by field.
    assert len(GEMINI_PARTS) >= 15 and len(GEMINI_RESPONSE_PARTS) >= 5 and len(GEMINI_TOOLS) >= 12
    assert len(GEMINI_DECLARATIONS) >= 5 and len(GEMINI_CONFIG) >= 20 and len(GEMINI_THINKING) >= 3
    assert len(GEMINI_TOOL_CONFIG) >= 3 and len(GEMINI_CALLING) >= 3 and len(GEMINI_REQUEST) == 4


def test_the_golden_corpus_holds_every_sdk_shape():
    # The golden corpus (tests/tests/e2e/golden.rs) reads the shapes from a
    # file: it is what the pinned SDKs' types give, not an older version.
    assert CORPUS.read_text() == written(), (
        f"{CORPUS} is stale: run `.venv/bin/python tests/python/sdk_shapes.py`"
    )


@pytest.mark.parametrize("block", BLOCKS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("role", ["user", "assistant"])
def test_every_messages_content_block_is_served_or_left_out(gateway, block, role):
    status, body, _ = post(gateway, "/v1/messages", messages_block(block, role))
    assert status == 200, (block.__name__, role, build(block), body)


@pytest.mark.parametrize("tool", ANTHROPIC_TOOLS, ids=lambda t: t.__name__)
def test_every_messages_tool_is_served_or_left_out(gateway, tool):
    status, answer, _ = post(gateway, "/v1/messages", messages_tool(tool))
    assert status == 200, (tool.__name__, build(tool), answer)


@pytest.mark.parametrize("item", ITEMS, ids=lambda t: t.__name__)
def test_every_responses_input_item_is_served_or_left_out(gateway, item):
    status, answer, _ = post(gateway, "/v1/responses", responses_item(item))
    assert status == 200, (item.__name__, build(item), answer)


@pytest.mark.parametrize("tool", OPENAI_TOOLS, ids=lambda t: t.__name__)
def test_every_responses_tool_is_served_or_left_out(gateway, tool):
    status, answer, _ = post(gateway, "/v1/responses", responses_tool(tool))
    assert status == 200, (tool.__name__, build(tool), answer)


# Chat completions in tool mode (the default set's tools): the gateway owns
# `messages` and `tools`; what it does not read goes to the upstream as sent.


@pytest.mark.parametrize("message", CHAT_MESSAGES, ids=lambda t: t.__name__)
def test_every_chat_message_is_served(gateway, message):
    status, body, _ = post(gateway, "/v1/chat/completions", chat_message(message))
    assert status == 200, (message.__name__, build(message), body)


@pytest.mark.parametrize("part", CHAT_PARTS, ids=lambda t: t.__name__)
def test_every_chat_content_part_is_served(gateway, part):
    status, answer, _ = post(gateway, "/v1/chat/completions", chat_part(part))
    assert status == 200, (part.__name__, build(part), answer)


@pytest.mark.parametrize("tool", CHAT_TOOLS, ids=lambda t: t.__name__)
def test_every_chat_tool_is_served(gateway, tool):
    status, answer, _ = post(gateway, "/v1/chat/completions", chat_tool(tool))
    assert status == 200, (tool.__name__, build(tool), answer)


# Gemini (google-genai's models, field by field), on the face's path: the
# model is in it, the scripted model behind the test gateway's `mock-*`.

GEMINI_PATH = "/v1beta/models/mock-model:generateContent"


GEMINI_CASES = [
    (kind, name, build)
    for kind, names, build in [
        ("part", GEMINI_PARTS, gemini_part_request),
        ("function-response-part", GEMINI_RESPONSE_PARTS, gemini_response_part_request),
        ("tool", GEMINI_TOOLS, gemini_tool),
        ("declaration", GEMINI_DECLARATIONS, gemini_declaration),
        ("generation-config", GEMINI_CONFIG, gemini_config),
        ("thinking-config", GEMINI_THINKING, gemini_thinking),
        ("tool-config", GEMINI_TOOL_CONFIG, gemini_tool_config),
        ("function-calling-config", GEMINI_CALLING, gemini_calling),
        ("request", GEMINI_REQUEST, gemini_field),
    ]
    for name in names
]


@pytest.mark.parametrize(
    "kind,name,build", GEMINI_CASES, ids=[f"{k}-{n}" for k, n, _ in GEMINI_CASES]
)
def test_every_gemini_field_is_served_or_left_out(gateway, kind, name, build):
    # Parts, tools, declarations, configs and request fields, one by one.
    status, answer, _ = post(gateway, GEMINI_PATH, build(name))
    assert status == 200, (kind, name, build(name), answer)


@pytest.mark.parametrize("name", list(python_sdk_requests()))
def test_the_python_sdk_s_spelling_is_served(gateway, name):
    # snake_case within the models, URL-safe base64: as google-genai sends.
    request = python_sdk_requests()[name]
    status, answer, _ = post(gateway, GEMINI_PATH, request)
    assert status == 200, (name, request, answer)
