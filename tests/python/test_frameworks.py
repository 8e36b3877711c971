"""Agent frameworks as clients of the gateway: the OpenAI Agents SDK with
its default model (the Responses API) and pydantic-ai (chat completions),
each with a gateway tool set and a function tool of its own, and each
stopping after one request when the gateway's tool budget is spent (a
framework that read the ending as "the model said nothing" would ask
again; the requests are counted).
"""

import asyncio

import agents
import openai
import pydantic_ai


def counted(gateway):
    """An AsyncOpenAI client for the gateway, and the paths it requests."""
    paths = []

    async def record(request):
        paths.append(request.url.path)

    http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [record]})
    client = openai.AsyncOpenAI(base_url=gateway + "/v1", api_key="not-needed", max_retries=0, http_client=http)
    return client, paths


@agents.function_tool
def get_time(zone: str) -> str:
    """The time in a zone."""
    return f"12:00 in {zone}"


def agents_run(gateway, prompt, extra_body):
    agents.set_tracing_disabled(True)
    client, paths = counted(gateway)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_default_openai_api("responses")
    agent = agents.Agent(
        name="assistant",
        instructions="Use the tools.",
        model="mock-model",
        tools=[get_time],
        model_settings=agents.ModelSettings(extra_body=extra_body),
    )
    result = asyncio.run(agents.Runner.run(agent, prompt, max_turns=5))
    return result, paths


def test_agents_sdk_uses_a_gateway_tool_set(gateway):
    result, paths = agents_run(gateway, 'call lookup {"q": "rust"}', {"tool_set": "web"})
    assert result.final_output == "Tool results: [lookup] rust"
    assert paths == ["/v1/responses"], "the gateway ran the tool: one request"


def test_agents_sdk_runs_its_own_function_tools(gateway):
    result, paths = agents_run(gateway, 'call get_time {"zone": "UTC"}', {"tool_set": "web"})
    assert result.final_output == "Tool results: [get_time] 12:00 in UTC"
    assert paths == ["/v1/responses", "/v1/responses"], "the SDK ran its tool between two requests"


def test_agents_sdk_stops_when_the_budget_is_spent(gateway):
    result, paths = agents_run(gateway, 'loop lookup {"q": "x"}', {"tool_set": "web", "max_tool_iterations": 2})
    assert result.final_output.startswith("Tool results: [lookup] x")
    assert paths == ["/v1/responses"], "one request, one loop"


def test_agents_sdk_uses_a_tool_set_as_an_mcp_server(gateway):
    """The SDK's own MCP client (`MCPServerStreamableHttp`) on `/mcp/web`:
    the gateway offers no tools in the chat (`tool_set: none`), so the
    model's call of `lookup` is the SDK's, which calls it over MCP."""
    from agents.mcp import MCPServerStreamableHttp

    agents.set_tracing_disabled(True)
    client, paths = counted(gateway)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_default_openai_api("responses")

    async def go():
        async with MCPServerStreamableHttp(params={"url": gateway + "/mcp/web"}, name="toolgate") as server:
            names = [t.name for t in await server.list_tools()]
            assert names == ["lookup", "slow"]
            agent = agents.Agent(
                name="assistant",
                instructions="Use the tools.",
                model="mock-model",
                mcp_servers=[server],
                model_settings=agents.ModelSettings(extra_body={"tool_set": "none"}),
            )
            return await agents.Runner.run(agent, 'call lookup {"q": "mcp"}', max_turns=5)

    result = asyncio.run(go())
    assert result.final_output == "Tool results: [lookup] mcp"
    assert paths == ["/v1/responses", "/v1/responses"], "the SDK called the tool over MCP between two requests"


def pydantic_agent(gateway, extra_body):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client, paths = counted(gateway)
    model = OpenAIChatModel("mock-model", provider=OpenAIProvider(openai_client=client))
    agent = pydantic_ai.Agent(model, model_settings={"extra_body": extra_body})

    @agent.tool_plain
    def get_time(zone: str) -> str:
        """The time in a zone."""
        return f"12:00 in {zone}"

    return agent, paths


def test_pydantic_ai_uses_a_gateway_tool_set_and_its_own_tools(gateway):
    agent, paths = pydantic_agent(gateway, {"tool_set": "web"})
    assert agent.run_sync('call lookup {"q": "go"}').output == "Tool results: [lookup] go"
    assert paths == ["/v1/chat/completions"]
    assert agent.run_sync('call get_time {"zone": "CET"}').output == "Tool results: [get_time] 12:00 in CET"


def test_pydantic_ai_stops_when_the_budget_is_spent(gateway):
    agent, paths = pydantic_agent(gateway, {"tool_set": "web", "max_tool_iterations": 2})
    result = agent.run_sync('loop lookup {"q": "x"}')
    assert result.output.startswith("Tool results: [lookup] x")
    assert paths == ["/v1/chat/completions"], "one request, one loop"
