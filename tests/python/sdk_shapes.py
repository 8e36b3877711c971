"""Every request shape the official SDKs' types allow, generated from the
types themselves (not picked by hand): each member of the Anthropic SDK's
content-block and tool unions, of the OpenAI SDK's Responses input-item and
tool unions, and of its chat-completions message, content-part and tool
unions, built with its required fields, as a request of its face; and, for
Google's Gemini API, whose SDK (`google-genai`) types are models of
optional fields rather than unions, each field of its part, tool,
generation config and tool config, and each field a request sets beside
them.

`test_sdk_shapes.py` sends each through the gateway; the golden corpus of
the faces' translations (`tests/tests/e2e/golden.rs`) reads them from
`tests/fixtures/golden/sdk-shapes.json`, which this module writes when run
as a script (`.venv/bin/python tests/python/sdk_shapes.py`) and which a
test holds equal to what the pinned SDKs' types give.
"""

import base64
import collections.abc
import enum
import json
import pathlib
import sys
import types
import typing

import pydantic
import typing_extensions
from typing_extensions import is_typeddict

from anthropic.types.beta import BetaContentBlockParam, BetaToolUnionParam
from google import genai
from google.genai import types as gemini
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


# Google's Gemini API (`google-genai`): its types are pydantic models whose
# fields are all optional (the API's required ones say "Required." in their
# description), so every shape is one field of a model set, and a request
# is written as the JS SDK and the REST API write it: camelCase keys.

def dump(value):
    """A google-genai model as the JS SDK and the REST API write it."""
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


# The fields the API requires whose description says "Optional." (the API
# refuses a function call without its name).
ALSO_REQUIRED = {gemini.FunctionCall: ["name"]}

# What a string must look like where "x" is not one (a MIME type, a URI).
STRINGS = {"mime_type": "image/png", "file_uri": "https://example.com/x.png", "response_mime_type": "application/json"}

# A schema, which the types cannot give: `Schema` has only optional fields,
# a JSON Schema is `Any`.
SCHEMA = gemini.Schema(
    type="OBJECT", properties={"q": gemini.Schema(type="STRING", nullable=True)}, required=["q"]
)
JSON_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def required(model):
    """The fields of a google-genai model the API requires."""
    fields = model.model_fields
    said = [n for n, f in fields.items() if (f.description or "").strip().startswith("Required")]
    return said + [n for n in ALSO_REQUIRED.get(model, []) if n not in said]


def value(tp, name="", depth=0):
    """A minimal value of google-genai type `tp` (of a field `name`): a
    model with its required fields, the first member of an enum that is not
    `…UNSPECIFIED`, one item of a list or dict, valid base64 of bytes."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if depth > 8:
        return None
    if name.endswith("json_schema"):
        return JSON_SCHEMA
    if tp is gemini.Schema:
        return SCHEMA
    if origin is typing.Annotated:
        return value(args[0], name, depth)
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        choices = [a for a in args if a is not type(None)]
        return value(str if str in choices else choices[0], name, depth + 1)
    if origin is list:
        return [value(args[0], name, depth + 1)] if args else []
    if origin is dict:
        return {"x": value(args[1], "", depth + 1)} if args else {}
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        hints = tp.model_fields
        return tp(**{k: value(hints[k].annotation, k, depth + 1) for k in required(tp)})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(m for m in tp if not m.name.endswith("UNSPECIFIED"))
    if tp is bytes:
        # The same in standard and URL-safe base64 ("eA==").
        return b"x"
    if tp is str:
        return STRINGS.get(name, "x")
    if tp is bool:
        return True
    if tp in (int, float):
        return 1
    if tp is dict or tp is typing.Any:
        return {}
    return "x"


def field_value(model, name):
    """A minimal value of field `name` of google-genai `model`."""
    return value(model.model_fields[name].annotation, name)


# The signature Google documents for a call or thought whose own is not at
# hand (history from elsewhere): its bytes, which base64 writes as it.
SKIP_SIGNATURE = base64.urlsafe_b64decode("skip_thought_signature_validator")

GEMINI_PARTS = list(gemini.Part.model_fields)
GEMINI_RESPONSE_PARTS = list(gemini.FunctionResponsePart.model_fields)
GEMINI_TOOLS = list(gemini.Tool.model_fields)
GEMINI_DECLARATIONS = [f for f in gemini.FunctionDeclaration.model_fields if f not in required(gemini.FunctionDeclaration)]
GEMINI_CONFIG = list(gemini.GenerationConfig.model_fields)
GEMINI_THINKING = list(gemini.ThinkingConfig.model_fields)
GEMINI_TOOL_CONFIG = list(gemini.ToolConfig.model_fields)
GEMINI_CALLING = list(gemini.FunctionCallingConfig.model_fields)
# The fields a request sets beside its contents, tools and configs (the
# Python SDK takes them in `GenerateContentConfig`).
GEMINI_REQUEST = ["safety_settings", "cached_content", "labels", "system_instruction"]

# A part's data (the API's `data`, one of these a part); every other field
# of a part qualifies its data: the thought and its signature and what
# describes a text go on a text, the rest (media metadata) on inline data.
DATA = [
    "text",
    "inline_data",
    "file_data",
    "function_call",
    "function_response",
    "executable_code",
    "code_execution_result",
    "tool_call",
    "tool_response",
]
ON_TEXT = ["thought", "thought_signature", "part_metadata", "speech_metadata", "audio_transcription"]
# What a model writes (in a model content); the rest is the user's.
MODEL_WRITES = [
    "function_call",
    "executable_code",
    "code_execution_result",
    "tool_call",
    "thought",
    "thought_signature",
    "audio_transcription",
]


def gemini_part(name):
    """The part with field `name` set: data alone, a qualifier on the data
    it qualifies (a signature is the documented one, as on any history)."""
    if name == "thought_signature":
        return gemini.Part(text="x", thought_signature=SKIP_SIGNATURE)
    if name in DATA:
        return gemini.Part(**{name: field_value(gemini.Part, name)})
    data = "text" if name in ON_TEXT else "inline_data"
    return gemini.Part(**{data: field_value(gemini.Part, data), name: field_value(gemini.Part, name)})


def asked(part):
    """The model content a function or tool response answers: the call of
    its name (with the documented signature), or a tool call."""
    if part.function_response is not None:
        call = gemini.FunctionCall(name=part.function_response.name, id=part.function_response.id)
        return gemini.Content(role="model", parts=[gemini.Part(function_call=call, thought_signature=SKIP_SIGNATURE)])
    return gemini.Content(role="model", parts=[gemini.Part(tool_call=field_value(gemini.Part, "tool_call"))])


def gemini_contents(part, by_model):
    """Contents holding `part` after a text: the user's, after the call it
    answers; or a model's between the user's start and go-on (a model's
    function call answered, in the user's content after it)."""
    start = gemini.Content(role="user", parts=[gemini.Part(text="start")])
    if not by_model:
        content = gemini.Content(role="user", parts=[gemini.Part(text="hi"), part])
        if part.function_response is None and part.tool_response is None:
            return [content]
        return [start, asked(part), gemini.Content(role="user", parts=[part])]
    if part.function_call is not None:
        part = part.model_copy(update={"thought_signature": SKIP_SIGNATURE})
    content = gemini.Content(role="model", parts=[gemini.Part(text="hi"), part])
    if part.function_call is not None:
        answer = gemini.FunctionResponse(name=part.function_call.name, response={"output": "x"})
        return [start, content, gemini.Content(role="user", parts=[gemini.Part(function_response=answer)])]
    return [start, content, gemini.Content(role="user", parts=[gemini.Part(text="go on")])]


def gemini_request(contents, **fields):
    """A request of the Gemini face (the model is in its path): contents,
    and top-level fields already written."""
    return {"contents": [dump(c) for c in contents], **fields}


def gemini_hi():
    return [gemini.Content(role="user", parts=[gemini.Part(text="hi")])]


def gemini_part_request(name):
    """A request whose contents hold the part with field `name` (no gateway
    tools: the part alone is under test)."""
    contents = gemini_contents(gemini_part(name), name in MODEL_WRITES)
    return gemini_request(contents, tool_set="none")


def gemini_response_part_request(name):
    """A function response whose `parts` hold the part with field `name`
    (data alone, else on inline data), after its call."""
    data = name if name in ("inline_data", "file_data") else "inline_data"
    fields = {data: field_value(gemini.FunctionResponsePart, data)}
    if name != data:
        fields[name] = field_value(gemini.FunctionResponsePart, name)
    response = gemini.FunctionResponse(name="x", response={"output": "x"}, parts=[gemini.FunctionResponsePart(**fields)])
    return gemini_request(gemini_contents(gemini.Part(function_response=response), False), tool_set="none")


def gemini_tool(name):
    return gemini_request(gemini_hi(), tools=[dump(gemini.Tool(**{name: field_value(gemini.Tool, name)}))])


def gemini_declaration(name):
    """A function declaration with field `name` beside its required ones."""
    declaration = field_value(gemini.Tool, "function_declarations")[0]
    declaration = declaration.model_copy(update={name: field_value(gemini.FunctionDeclaration, name)})
    return gemini_request(gemini_hi(), tools=[dump(gemini.Tool(function_declarations=[declaration]))])


def gemini_config(name):
    config = gemini.GenerationConfig(**{name: field_value(gemini.GenerationConfig, name)})
    return gemini_request(gemini_hi(), generationConfig=dump(config))


def gemini_thinking(name):
    thinking = gemini.ThinkingConfig(**{name: field_value(gemini.ThinkingConfig, name)})
    return gemini_request(gemini_hi(), generationConfig=dump(gemini.GenerationConfig(thinking_config=thinking)))


def gemini_tool_config(name):
    config = gemini.ToolConfig(**{name: field_value(gemini.ToolConfig, name)})
    return gemini_request(gemini_hi(), toolConfig=dump(config))


def gemini_calling(name):
    calling = gemini.FunctionCallingConfig(**{name: field_value(gemini.FunctionCallingConfig, name)})
    return gemini_request(gemini_hi(), toolConfig=dump(gemini.ToolConfig(function_calling_config=calling)))


def gemini_field(name):
    """A request with top-level field `name` (a system instruction is a
    content of text)."""
    if name == "system_instruction":
        config = gemini.GenerateContentConfig(system_instruction=gemini.Content(parts=[gemini.Part(text="x")]))
    else:
        config = gemini.GenerateContentConfig(**{name: field_value(gemini.GenerateContentConfig, name)})
    return gemini_request(gemini_hi(), **dump(config))


class Sent(Exception):
    """What the Python SDK would send, caught before it is sent."""


def python_sdk(contents, config):
    """A request as the Python SDK sends it (`models.generate_content`):
    top-level and its own converters' keys in camelCase, the models within
    them in snake_case, bytes in URL-safe base64."""
    client = genai.Client(api_key="unused")
    sent = {}

    def request(method, path, body, http_options=None):
        sent.update(body)
        raise Sent

    # Its HTTP client's one method for a request, whose body is what goes
    # on the wire as JSON.
    client._api_client.request = request
    try:
        client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    except Sent:
        pass
    # Its HTTP layer drops the keys for the URL (`_url`, `_query`).
    return json.loads(json.dumps({k: v for k, v in sent.items() if not k.startswith("_")}))


# Bytes whose URL-safe base64 is not standard base64 ("-_8=", "+/8=").
URL_SAFE = b"\xfb\xff"


def python_sdk_requests():
    """A handful of requests as the Python SDK sends them, by name."""
    user = gemini.Content(role="user", parts=[gemini.Part(text="hi")])
    call = gemini.Part(function_call=gemini.FunctionCall(name="x", args={"q": "a"}), thought_signature=SKIP_SIGNATURE)
    answer = gemini.FunctionResponse(
        name="x",
        response={"output": "y"},
        parts=[gemini.FunctionResponsePart(inline_data=gemini.FunctionResponseBlob(mime_type="image/png", data=URL_SAFE))],
    )
    declarations = [
        gemini.FunctionDeclaration(
            name="x",
            description="x",
            parameters=gemini.Schema(
                type="OBJECT",
                properties={"q": gemini.Schema(any_of=[gemini.Schema(type="STRING"), gemini.Schema(type="INTEGER")])},
                property_ordering=["q"],
                required=["q"],
            ),
        ),
        gemini.FunctionDeclaration(name="y", parameters_json_schema=JSON_SCHEMA),
    ]
    return {
        "media": python_sdk(
            [
                gemini.Content(
                    role="user",
                    parts=[
                        gemini.Part(text="hi"),
                        gemini.Part(inline_data=gemini.Blob(mime_type="image/png", data=URL_SAFE)),
                        gemini.Part(
                            file_data=gemini.FileData(mime_type="application/pdf", file_uri="https://example.com/x.pdf")
                        ),
                    ],
                )
            ],
            None,
        ),
        "function-response": python_sdk(
            [
                user,
                gemini.Content(role="model", parts=[call]),
                gemini.Content(role="user", parts=[gemini.Part(function_response=answer)]),
            ],
            gemini.GenerateContentConfig(tools=[gemini.Tool(function_declarations=declarations[:1])]),
        ),
        "declarations": python_sdk(
            [user],
            gemini.GenerateContentConfig(
                tools=[gemini.Tool(function_declarations=declarations)],
                tool_config=gemini.ToolConfig(
                    function_calling_config=gemini.FunctionCallingConfig(mode="ANY", allowed_function_names=["x"])
                ),
            ),
        ),
        "generation-config": python_sdk(
            [user],
            gemini.GenerateContentConfig(
                temperature=0.5,
                top_p=0.9,
                top_k=40,
                max_output_tokens=50,
                stop_sequences=["x"],
                seed=1,
                response_mime_type="application/json",
                response_schema=SCHEMA,
                thinking_config=gemini.ThinkingConfig(include_thoughts=True, thinking_budget=1024),
            ),
        ),
        "request-fields": python_sdk(
            [user],
            gemini.GenerateContentConfig(
                system_instruction="x",
                safety_settings=[gemini.SafetySetting(category="HARM_CATEGORY_HARASSMENT", threshold="BLOCK_NONE")],
                labels={"x": "x"},
            ),
        ),
    }


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
    for name in GEMINI_PARTS:
        out[f"gemini-part-{name}"] = gemini_part_request(name)
    for name in GEMINI_RESPONSE_PARTS:
        out[f"gemini-part-function_response-parts-{name}"] = gemini_response_part_request(name)
    for name in GEMINI_TOOLS:
        out[f"gemini-tool-{name}"] = gemini_tool(name)
    for name in GEMINI_DECLARATIONS:
        out[f"gemini-tool-function_declarations-{name}"] = gemini_declaration(name)
    for name in GEMINI_CONFIG:
        out[f"gemini-config-{name}"] = gemini_config(name)
    for name in GEMINI_THINKING:
        out[f"gemini-config-thinking_config-{name}"] = gemini_thinking(name)
    for name in GEMINI_TOOL_CONFIG:
        out[f"gemini-tool_config-{name}"] = gemini_tool_config(name)
    for name in GEMINI_CALLING:
        out[f"gemini-tool_config-function_calling_config-{name}"] = gemini_calling(name)
    for name in GEMINI_REQUEST:
        out[f"gemini-request-{name}"] = gemini_field(name)
    for name, request in python_sdk_requests().items():
        out[f"gemini-python-sdk-{name}"] = request
    return out


def written():
    """The corpus as the file holds it."""
    return json.dumps(corpus(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    CORPUS.write_text(written())
    print(f"{CORPUS}: {len(corpus())} shapes", file=sys.stderr)
