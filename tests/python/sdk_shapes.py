"""Every request shape the official SDKs' types allow, generated from the
types themselves (not picked by hand): each member of the Anthropic SDK's
content-block and tool unions, of the OpenAI SDK's Responses input-item and
tool unions, and of its chat-completions message, content-part and tool
unions, built with its required fields, as a request of its face.

`test_sdk_shapes.py` sends each through the gateway; the golden corpus of
the faces' translations (`tests/tests/e2e/golden.rs`) reads them from
`tests/fixtures/golden/sdk-shapes.json`, which this module writes when run
as a script (`.venv/bin/python tests/python/sdk_shapes.py`) and which a
test holds equal to what the pinned SDKs' types give.
"""

import collections.abc
import json
import pathlib
import sys
import types
import typing

import typing_extensions
from typing_extensions import is_typeddict

from anthropic.types.beta import BetaContentBlockParam, BetaToolUnionParam
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.responses import ResponseInputItemParam, ToolParam

CORPUS = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "sdk-shapes.json"


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


BLOCKS = members(BetaContentBlockParam)
ANTHROPIC_TOOLS = members(BetaToolUnionParam)
ITEMS = members(ResponseInputItemParam)
OPENAI_TOOLS = members(ToolParam)
CHAT_MESSAGES = members(ChatCompletionMessageParam)
CHAT_PARTS = members(ChatCompletionContentPartParam)
CHAT_TOOLS = members(ChatCompletionToolUnionParam)


def messages_block(block, role):
    """A Messages request whose `role` message holds a text block and
    `block` (no gateway tools: the block alone is under test)."""
    content = [{"type": "text", "text": "hi"}, build(block)]
    messages = [{"role": "user", "content": "start"}, {"role": role, "content": content}]
    if role == "assistant":
        messages.append({"role": "user", "content": "go on"})
    return {"model": "mock-model", "max_tokens": 50, "messages": messages, "tool_set": "none"}


def messages_tool(tool):
    return {"model": "mock-model", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}], "tools": [build(tool)]}


def responses_item(item):
    return {"model": "mock-model", "input": [{"role": "user", "content": "hi"}, build(item)], "tool_set": "none", "store": False}


def responses_tool(tool):
    return {"model": "mock-model", "input": "hi", "tools": [build(tool)], "store": False}


def chat_message(message):
    """Chat completions in tool mode (the default set's tools): the message
    between a user's start and go-on."""
    built = build(message)
    messages = [{"role": "user", "content": "start"}, built, {"role": "user", "content": "go on"}]
    if built.get("role") == "tool":
        # A tool message answers a call of the assistant message before it.
        call = {"id": built["tool_call_id"], "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        messages.insert(1, {"role": "assistant", "content": None, "tool_calls": [call]})
    return {"model": "mock-model", "messages": messages}


def chat_part(part):
    return {"model": "mock-model", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, build(part)]}]}


def chat_tool(tool):
    return {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "tools": [build(tool)]}


def corpus():
    """Every shape as a request of its face, by case name (the face first)."""
    out = {}
    for block in BLOCKS:
        for role in ("user", "assistant"):
            out[f"messages-block-{role}-{block.__name__}"] = messages_block(block, role)
    for tool in ANTHROPIC_TOOLS:
        out[f"messages-tool-{tool.__name__}"] = messages_tool(tool)
    for item in ITEMS:
        out[f"responses-item-{item.__name__}"] = responses_item(item)
    for tool in OPENAI_TOOLS:
        out[f"responses-tool-{tool.__name__}"] = responses_tool(tool)
    for message in CHAT_MESSAGES:
        out[f"chat-message-{message.__name__}"] = chat_message(message)
    for part in CHAT_PARTS:
        out[f"chat-part-{part.__name__}"] = chat_part(part)
    for tool in CHAT_TOOLS:
        out[f"chat-tool-{tool.__name__}"] = chat_tool(tool)
    return out


def written():
    """The corpus as the file holds it."""
    return json.dumps(corpus(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    CORPUS.write_text(written())
    print(f"{CORPUS}: {len(corpus())} shapes", file=sys.stderr)
