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
    ITEMS,
    OPENAI_TOOLS,
    build,
    chat_message,
    chat_part,
    chat_tool,
    messages_block,
    messages_tool,
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
