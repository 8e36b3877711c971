"""Every request shape the official SDKs' types allow, generated from the
types themselves (not picked by hand): each member of the Anthropic SDK's
content-block and tool unions, of the OpenAI SDK's Responses input-item and
tool unions, and of its chat-completions message, content-part and tool
unions, built with its required fields and sent through the face.
None may be refused: the face serves it, translates it, or leaves it out
with a notice (`X-Toolgate-Notice`), and answers 200.
"""

import collections.abc
import json
import types
import typing
import urllib.error
import urllib.request

import pytest
import typing_extensions
from typing_extensions import is_typeddict

from anthropic.types.beta import BetaContentBlockParam, BetaToolUnionParam
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.responses import ResponseInputItemParam, ToolParam


def members(union):
    """The types of a union (through `Annotated`), each once."""
    out = []
    for t in typing.get_args(union):
        if typing.get_origin(t) is typing.Annotated:
            out.extend(members(typing.get_args(t)[0]))
        elif typing.get_origin(t) in (typing.Union, types.UnionType):
            out.extend(members(t))
        else:
            out.append(t)
    return out


REQUIRED = {typing.Required, typing_extensions.Required}
WRAPPERS = REQUIRED | {typing.NotRequired, typing_extensions.NotRequired, typing_extensions.ReadOnly}


def build(tp, depth=0):
    """A minimal value of `tp`: every required field of a TypedDict, the
    first choice of a union or literal, one item of a list."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if depth > 8:
        return None
    if origin is typing.Annotated:
        return build(args[0], depth)
    if origin in WRAPPERS:
        return build(args[0], depth)
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        choices = [a for a in args if a is not type(None)]
        # A plain string where one is allowed keeps the value simple.
        for a in choices:
            if a is str:
                return "x"
        return build(choices[0], depth + 1)
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence, typing.Iterable, typing.List):
        return [build(args[0], depth + 1)] if args else []
    if origin in (dict, typing.Dict, collections.abc.Mapping):
        return {}
    if is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        # Required keys: those the class says, and those marked `Required`
        # (which a class with stringized annotations cannot see itself).
        required = set(tp.__required_keys__) | {k for k, h in hints.items() if typing.get_origin(h) in REQUIRED}
        return {k: build(hints[k], depth + 1) for k in hints if k in required}
    if tp is str:
        return "x"
    if tp is bool:
        return True
    if tp in (int, float):
        return 1
    if tp is object or tp is typing.Any:
        return {}
    return "x"


def post(gateway, path, body):
    req = urllib.request.Request(
        gateway + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("x-toolgate-notice")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), None


BLOCKS = members(BetaContentBlockParam)
ANTHROPIC_TOOLS = members(BetaToolUnionParam)
ITEMS = members(ResponseInputItemParam)
OPENAI_TOOLS = members(ToolParam)
CHAT_MESSAGES = members(ChatCompletionMessageParam)
CHAT_PARTS = members(ChatCompletionContentPartParam)
CHAT_TOOLS = members(ChatCompletionToolUnionParam)


def test_the_unions_are_read():
    # The generator sees the SDKs' unions whole (counts of the pinned SDKs).
    assert len(BLOCKS) >= 20 and len(ANTHROPIC_TOOLS) >= 20
    assert len(ITEMS) >= 30 and len(OPENAI_TOOLS) >= 15
    assert len(CHAT_MESSAGES) >= 6 and len(CHAT_PARTS) >= 4 and len(CHAT_TOOLS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("role", ["user", "assistant"])
def test_every_messages_content_block_is_served_or_left_out(gateway, block, role):
    content = [{"type": "text", "text": "hi"}, build(block)]
    messages = [{"role": "user", "content": "start"}, {"role": role, "content": content}]
    if role == "assistant":
        messages.append({"role": "user", "content": "go on"})
    status, body, _ = post(gateway, "/v1/messages", {"model": "mock-model", "max_tokens": 50, "messages": messages, "tool_set": "none"})
    assert status == 200, (block.__name__, role, build(block), body)


@pytest.mark.parametrize("tool", ANTHROPIC_TOOLS, ids=lambda t: t.__name__)
def test_every_messages_tool_is_served_or_left_out(gateway, tool):
    body = {"model": "mock-model", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}], "tools": [build(tool)]}
    status, answer, _ = post(gateway, "/v1/messages", body)
    assert status == 200, (tool.__name__, build(tool), answer)


@pytest.mark.parametrize("item", ITEMS, ids=lambda t: t.__name__)
def test_every_responses_input_item_is_served_or_left_out(gateway, item):
    built = build(item)
    body = {"model": "mock-model", "input": [{"role": "user", "content": "hi"}, built], "tool_set": "none", "store": False}
    status, answer, _ = post(gateway, "/v1/responses", body)
    assert status == 200, (item.__name__, built, answer)


@pytest.mark.parametrize("tool", OPENAI_TOOLS, ids=lambda t: t.__name__)
def test_every_responses_tool_is_served_or_left_out(gateway, tool):
    body = {"model": "mock-model", "input": "hi", "tools": [build(tool)], "store": False}
    status, answer, _ = post(gateway, "/v1/responses", body)
    assert status == 200, (tool.__name__, build(tool), answer)


# Chat completions in tool mode (the default set's tools): the gateway owns
# `messages` and `tools`; what it does not read goes to the upstream as sent.


@pytest.mark.parametrize("message", CHAT_MESSAGES, ids=lambda t: t.__name__)
def test_every_chat_message_is_served(gateway, message):
    built = build(message)
    messages = [{"role": "user", "content": "start"}, built, {"role": "user", "content": "go on"}]
    if built.get("role") == "tool":
        # A tool message answers a call of the assistant message before it.
        call = {"id": built["tool_call_id"], "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        messages.insert(1, {"role": "assistant", "content": None, "tool_calls": [call]})
    status, body, _ = post(gateway, "/v1/chat/completions", {"model": "mock-model", "messages": messages})
    assert status == 200, (message.__name__, built, body)


@pytest.mark.parametrize("part", CHAT_PARTS, ids=lambda t: t.__name__)
def test_every_chat_content_part_is_served(gateway, part):
    content = [{"type": "text", "text": "hi"}, build(part)]
    body = {"model": "mock-model", "messages": [{"role": "user", "content": content}]}
    status, answer, _ = post(gateway, "/v1/chat/completions", body)
    assert status == 200, (part.__name__, build(part), answer)


@pytest.mark.parametrize("tool", CHAT_TOOLS, ids=lambda t: t.__name__)
def test_every_chat_tool_is_served(gateway, tool):
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "tools": [build(tool)]}
    status, answer, _ = post(gateway, "/v1/chat/completions", body)
    assert status == 200, (tool.__name__, build(tool), answer)
