"""The tools the official MCP conformance suite calls on a server
(`test_simple_text`, `test_image_content`...), as a stdio MCP server written
with the official Python SDK. toolgate proxies it in a tool set, and the
suite runs against that set's `/mcp/{tool_set}`: what is checked is what
the gateway makes of these results (content passed through, errors,
progress) on its own MCP endpoint. It also serves the prompts and
resources the suite reads (`test_simple_prompt`, `test://static-text`...),
which the gateway offers through the set's `prompts:` and `resources:`.

    python conformance_tools.py      # MCP over stdin/stdout
"""

import base64
import json

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp_types import (
    AudioContent,
    EmbeddedResource,
    ImageContent,
    InputRequiredResult,
    TextContent,
    TextResourceContents,
)

server = MCPServer("conformance-tools", log_level="WARNING")

# A 1x1 PNG and a tiny WAV header, base64.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00D\xac\x00\x00\x88X\x01\x00\x02\x00\x10\x00data\x00\x00\x00\x00").decode()


@server.tool(description="Tests simple text content response", structured_output=False)
def test_simple_text() -> list:
    return [TextContent(type="text", text="This is a simple text response for testing.")]


@server.tool(description="Tests image content response", structured_output=False)
def test_image_content() -> list:
    return [ImageContent(type="image", data=PNG, mimeType="image/png")]


@server.tool(description="Tests audio content response", structured_output=False)
def test_audio_content() -> list:
    return [AudioContent(type="audio", data=WAV, mimeType="audio/wav")]


@server.tool(description="Tests embedded resource content response", structured_output=False)
def test_embedded_resource() -> list:
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://embedded-resource", mimeType="text/plain", text="This is an embedded resource content."
            ),
        )
    ]


@server.tool(description="Tests response with multiple content types (text, image, resource)", structured_output=False)
def test_multiple_content_types() -> list:
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mimeType="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://mixed-content-resource", mimeType="application/json", text='{"test":"data","value":123}'
            ),
        ),
    ]


@server.tool(description="Tests error response handling", structured_output=False)
def test_error_handling() -> str:
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool(description="Tests tool that reports progress notifications", structured_output=False)
async def test_tool_with_progress(ctx: Context) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        await anyio.sleep(0.05)
    return "done"


@server.tool(description="Tests tool that emits log messages during execution", structured_output=False)
async def test_tool_with_logging(ctx: Context) -> str:
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(message)
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


# The tools that ask their client something. The gateway speaks 2026-07-28
# to this server, so they ask in their answer (input_required, SEP-2322) and
# read the reply when the call comes again; the gateway passes the question
# to its own client.


def asking(ctx: Context, method: str, params: dict):
    """The client's answer to the question, or the question to ask first."""
    answers = ctx.input_responses or {}
    if "ask" in answers:
        answer = answers["ask"]
        return answer.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(answer, "model_dump") else answer
    return InputRequiredResult.model_validate({"inputRequests": {"ask": {"method": method, "params": params}}})


def asked(answer) -> bool:
    return isinstance(answer, InputRequiredResult)


@server.tool(description="Tests tool that requests LLM sampling from client", structured_output=False)
async def test_sampling(prompt: str, ctx: Context):
    answer = asking(
        ctx,
        "sampling/createMessage",
        {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 100},
    )
    if asked(answer):
        return answer
    return [TextContent(type="text", text=f"LLM response: {answer.get('content', {}).get('text', '')}")]


@server.tool(description="Tests tool that requests user input from client", structured_output=False)
async def test_elicitation(message: str, ctx: Context):
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = asking(ctx, "elicitation/create", {"mode": "form", "message": message, "requestedSchema": schema})
    if asked(answer):
        return answer
    return [TextContent(type="text", text=f"User response: {json.dumps(answer)}")]


@server.tool(description="Tests elicitation with default values (SEP-1034)", structured_output=False)
async def test_elicitation_sep1034_defaults(ctx: Context):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    answer = asking(
        ctx, "elicitation/create", {"mode": "form", "message": "Please review your details", "requestedSchema": schema}
    )
    if asked(answer):
        return answer
    return [TextContent(type="text", text=f"Elicitation completed: {json.dumps(answer)}")]


@server.tool(description="Tests elicitation with enum schemas (SEP-1330)", structured_output=False)
async def test_elicitation_sep1330_enums(ctx: Context):
    choices = [{"const": f"value{i}", "title": t} for i, t in ((1, "First Option"), (2, "Second Option"), (3, "Third Option"))]
    picks = [{"const": f"value{i}", "title": t} for i, t in ((1, "First Choice"), (2, "Second Choice"), (3, "Third Choice"))]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": choices},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": picks}},
        },
    }
    answer = asking(ctx, "elicitation/create", {"mode": "form", "message": "Pick options", "requestedSchema": schema})
    if asked(answer):
        return answer
    return [TextContent(type="text", text=f"Elicitation completed: {json.dumps(answer)}")]


@server.tool(description="Logs while it runs: the stateless scenario checks no log reaches a client that did not ask", structured_output=False)
async def test_logging_tool(ctx: Context) -> str:
    await ctx.info("test_logging_tool ran")
    return "logged"


@server.tool(description="Asks for input: the stateless scenario checks only results come back on the call's stream", structured_output=False)
async def test_streaming_elicitation(ctx: Context):
    answer = asking(
        ctx,
        "elicitation/create",
        {"mode": "form", "message": "Anything to add?", "requestedSchema": {"type": "object", "properties": {"note": {"type": "string"}}}},
    )
    if asked(answer):
        return answer
    return [TextContent(type="text", text=f"Elicitation completed: {json.dumps(answer)}")]

# The tools of the suite's `input-required-result-*` scenarios (SEP-2322):
# they ask in their answer, and the gateway hands the question to its own
# client, which answers in a request of its own.

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def elicit(message: str, schema: dict) -> dict:
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def sample(text: str, max_tokens: int) -> dict:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens},
    }


ROOTS = {"method": "roots/list", "params": {}}


def answers(ctx: Context) -> dict:
    """The client's answers, as JSON, by key."""
    found = ctx.input_responses or {}
    return {
        key: answer.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(answer, "model_dump") else answer
        for key, answer in found.items()
    }


def accepted(answer) -> dict | None:
    """The content of an accepted elicitation, or None."""
    if isinstance(answer, dict) and answer.get("action") == "accept" and isinstance(answer.get("content"), dict):
        return answer["content"]
    return None


def ask(requests: dict, state: str | None = None) -> InputRequiredResult:
    return InputRequiredResult.model_validate({"inputRequests": requests, **({"requestState": state} if state else {})})


@server.tool(description="Asks the client's name (SEP-2322)", structured_output=False)
async def test_input_required_result_elicitation(ctx: Context):
    content = accepted(answers(ctx).get("user_name"))
    if content is None or not isinstance(content.get("name"), str):
        return ask({"user_name": elicit("What is your name?", NAME_SCHEMA)})
    return [TextContent(type="text", text=f"Hello, {content['name']}!")]


@server.tool(description="Asks the client's model (SEP-2322)", structured_output=False)
async def test_input_required_result_sampling(ctx: Context):
    answer = answers(ctx).get("capital_question")
    if not isinstance(answer, dict):
        return ask({"capital_question": sample("What is the capital of France?", 100)})
    return [TextContent(type="text", text=f"Sampled: {answer.get('content', {}).get('text', '')}")]


@server.tool(description="Asks the client's roots (SEP-2322)", structured_output=False)
async def test_input_required_result_list_roots(ctx: Context):
    answer = answers(ctx).get("client_roots")
    if not isinstance(answer, dict) or not isinstance(answer.get("roots"), list):
        return ask({"client_roots": ROOTS})
    return [TextContent(type="text", text="Roots: " + ", ".join(r.get("uri", "") for r in answer["roots"]))]


@server.tool(description="Asks with a request state it checks (SEP-2322)", structured_output=False)
async def test_input_required_result_request_state(ctx: Context):
    answer = accepted(answers(ctx).get("confirm"))
    if answer is None or ctx.request_state != "confirm-state-v1":
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        return ask({"confirm": elicit("Please confirm", schema)}, "confirm-state-v1")
    return [TextContent(type="text", text=f"state-ok: confirmed={answer.get('ok')}")]


@server.tool(description="Asks three things at once (SEP-2322)", structured_output=False)
async def test_input_required_result_multiple_inputs(ctx: Context):
    found = answers(ctx)
    if ctx.request_state != "multi-v1" or not {"user_name", "greeting", "client_roots"} <= found.keys():
        return ask(
            {
                "user_name": elicit("What is your name?", NAME_SCHEMA),
                "greeting": sample("Generate a greeting", 50),
                "client_roots": ROOTS,
            },
            "multi-v1",
        )
    return [TextContent(type="text", text=f"All three answered: {sorted(found)}")]


@server.tool(description="Asks twice, its state growing (SEP-2322)", structured_output=False)
async def test_input_required_result_multi_round(ctx: Context):
    found = answers(ctx)
    if ctx.request_state == "round-2" and accepted(found.get("step2")) is not None:
        return [TextContent(type="text", text=f"Done: color {accepted(found['step2']).get('color')}")]
    if ctx.request_state == "round-1" and accepted(found.get("step1")) is not None:
        name = accepted(found["step1"]).get("name", "")
        schema = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        return ask({"step2": elicit(f"Step 2: What is your favorite color, {name}?", schema)}, "round-2")
    return ask({"step1": elicit("Step 1: What is your name?", NAME_SCHEMA)}, "round-1")


@server.tool(description="Asks with a state a client must not change (SEP-2322)", structured_output=False)
async def test_input_required_result_tampered_state(ctx: Context):
    if ctx.request_state != "untampered" or accepted(answers(ctx).get("confirm")) is None:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        return ask({"confirm": elicit("Please confirm", schema)}, "untampered")
    return [TextContent(type="text", text="confirmed")]


@server.tool(description="Asks only what the client declared it answers (SEP-2322)", structured_output=False)
async def test_input_required_result_capabilities(ctx: Context):
    found = answers(ctx)
    if found:
        return [TextContent(type="text", text=f"Answered: {sorted(found)}")]
    declared = ctx.client_capabilities
    requests = {}
    if declared is not None and declared.elicitation is not None:
        requests["user_name"] = elicit("What is your name?", NAME_SCHEMA)
    if declared is not None and declared.sampling is not None:
        requests["greeting"] = sample("Generate a greeting", 50)
    if not requests:
        return [TextContent(type="text", text="Nothing to ask this client")]
    return ask(requests)


@server.prompt(description="A prompt that asks for its context (SEP-2322)")
async def test_input_required_result_prompt(ctx: Context):
    content = accepted(answers(ctx).get("user_context"))
    if content is None:
        schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
        return ask({"user_context": elicit("What context should the prompt use?", schema)})
    return [UserMessage(f"Use this context: {content.get('context', '')}")]


@server.resource("test://static-text", name="static-text", description="A static text resource", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", description="A static binary resource", mime_type="image/png")
def static_binary() -> bytes:
    return base64.b64decode(PNG)


@server.resource("test://watched-resource", name="watched-resource", description="A resource clients subscribe to", mime_type="text/plain")
def watched_resource() -> str:
    return "Watched resource content."


@server.resource("test://template/{id}/data", name="template", description="A resource template", mime_type="application/json")
def template_data(id: str) -> str:
    return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'


@server.prompt(description="A simple prompt without arguments")
def test_simple_prompt() -> list:
    return [UserMessage("This is a simple prompt for testing.")]


@server.prompt(description="A prompt with required arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> list:
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@server.prompt(description="A prompt that includes an embedded resource")
def test_prompt_with_embedded_resource(resourceUri: str) -> list:
    return [
        UserMessage(
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri=resourceUri, mimeType="text/plain", text="Embedded resource content for testing."),
            )
        ),
        UserMessage("Please process the embedded resource above."),
    ]


@server.prompt(description="A prompt that includes image content")
def test_prompt_with_image() -> list:
    return [UserMessage(ImageContent(type="image", data=PNG, mimeType="image/png")), UserMessage("Please analyze the image above.")]


if __name__ == "__main__":
    server.run("stdio")
