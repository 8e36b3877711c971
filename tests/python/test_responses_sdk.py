"""`POST /v1/responses` driven by the official `openai` SDK: the same tool
loop and tool sets as chat completions, behind the Responses API, streaming
and not, with gateway tools (shown as `mcp_call` items), client function
tools and the text formatter.
"""

import json

import openai
import pytest

CLOCK = {
    "type": "function",
    "name": "get_time",
    "description": "The time in a zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
}


def report(r):
    return r.model_dump()["toolgate"]


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_gateway_tools_run_in_the_loop(client, name):
    r = client.responses.create(model=name, input='call lookup {"q": "rust"}')
    assert r.status == "completed"
    assert r.output_text == "Tool results: [lookup] rust"
    ran = [o for o in r.output if o.type == "mcp_call"]
    assert [(c.name, c.output) for c in ran] == [("lookup", "rust")]
    assert json.loads(ran[0].arguments) == {"q": "rust"}
    assert report(r)["tool_set"] == "web"
    assert r.usage.output_tokens > 0


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_streaming_gives_the_same_answer(client, name):
    events = list(client.responses.create(model=name, input='call lookup {"q": "go"}', stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Tool results: [lookup] go"
    final = events[-1].response
    assert final.output_text == text
    assert [o.type for o in final.output] == ["mcp_call", "message"]
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_the_stream_helper_accumulates_the_response(client):
    with client.responses.stream(model="mock-model", input='call lookup {"q": "x"}') as s:
        final = s.get_final_response()
    assert final.output_text == "Tool results: [lookup] x"


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_client_tools_end_the_turn_and_their_outputs_continue_it(client, name):
    first = client.responses.create(model=name, input='call get_time {"zone": "UTC"}', tools=[CLOCK])
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_time"
    assert json.loads(calls[0].arguments) == {"zone": "UTC"}
    follow = [
        {"role": "user", "content": 'call get_time {"zone": "UTC"}'},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_time", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "12:00"},
    ]
    r = client.responses.create(model=name, input=follow, tools=[CLOCK])
    assert r.output_text == "Tool results: [get_time] 12:00"


def test_streamed_client_calls_arrive_whole(client):
    events = list(
        client.responses.create(model="mock-model", input='call get_time {"zone": "CET"}', tools=[CLOCK], stream=True)
    )
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in done] == [{"zone": "CET"}]


def test_tool_sets_instructions_and_errors(client):
    r = client.responses.create(
        model="mock-model", instructions="Be brief.", input='call lookup {"q": "x"}', extra_body={"tool_set": "small"}
    )
    assert report(r)["tool_set"] == "small"
    r = client.responses.create(model="mock-model", input="hello", extra_body={"tool_set": "none"})
    assert r.output_text == "Hello! You said: hello"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-9", input="hi")
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="mock-model", input="hi", previous_response_id="resp_123")
    assert "no stored response" in str(e.value)


def test_a_spent_budget_ends_with_an_answer(client):
    r = client.responses.create(
        model="mock-model", input='loop lookup {"q": "again"}', extra_body={"max_tool_iterations": 2}
    )
    assert r.status == "completed"
    assert r.output_text.startswith("Tool results: [lookup] again")
    assert report(r)["finish_reason"] == "max_tool_iterations"


def sent(model):
    """What the scripted model was sent so far."""
    import urllib.request

    with urllib.request.urlopen(model.removesuffix("/v1") + "/mock/requests", timeout=10) as r:
        return json.loads(r.read())


PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_images_and_files_reach_the_model(client, model):
    client.responses.create(
        model="mock-model",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is in this image?"},
                    {"type": "input_image", "image_url": PNG, "detail": "low"},
                    {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
                ],
            }
        ],
        extra_body={"tool_set": "none"},
    )
    content = sent(model)[-1]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is in this image?"}
    assert content[1] == {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}}
    assert content[2] == {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}}


def test_namespaced_tools_are_flattened_and_calls_come_back_in_their_namespace(client, model):
    tools = [{"type": "namespace", "name": "clock", "description": "Clocks.", "tools": [CLOCK]}]
    r = client.responses.create(model="mock-model", input='call clock__get_time {"zone": "UTC"}', tools=tools)
    call = r.model_dump()["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "get_time" and call["namespace"] == "clock", call
    assert "clock__get_time" in [t["function"]["name"] for t in sent(model)[-1]["tools"]]
    follow = [
        {"role": "user", "content": 'call clock__get_time {"zone": "UTC"}'},
        {"type": "function_call", "call_id": call["call_id"], "namespace": "clock", "name": "get_time", "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "12:00"},
    ]
    r = client.responses.create(model="mock-model", input=follow, tools=tools)
    assert r.output_text == "Tool results: [clock__get_time] 12:00"
    with client.responses.stream(model="mock-model", input='call clock__get_time {"zone": "CET"}', tools=tools) as s:
        final = s.get_final_response().model_dump()
    assert final["output"][-1]["namespace"] == "clock" and final["output"][-1]["name"] == "get_time"


def test_hosted_tools_are_left_out_with_a_notice_and_allowed_tools_are_kept_to(client, model):
    raw = client.responses.with_raw_response.create(
        model="mock-model",
        input='call get_time {"zone": "UTC"}',
        tools=[{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}, CLOCK],
        tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]},
        extra_body={"tool_set": "none"},
    )
    notice = raw.headers["x-toolgate-notice"]
    assert "web_search" in notice and "code_interpreter" in notice, notice
    assert raw.parse().output[-1].name == "get_time"
    assert [t["function"]["name"] for t in sent(model)[-1]["tools"]] == ["get_time"]


def test_responses_are_stored_continued_listed_and_deleted(client, model):
    first = client.responses.create(model="mock-model", instructions="Be brief.", input="remember avocado", extra_body={"tool_set": "none"})
    assert first.store is True
    again = client.responses.retrieve(first.id)
    assert again.id == first.id and again.output_text == first.output_text
    items = client.responses.input_items.list(first.id)
    assert [i.content[0].text for i in items.data] == ["remember avocado"]
    # A follow-up carries the stored conversation, not its instructions.
    follow = client.responses.create(model="mock-model", input="what was it?", previous_response_id=first.id, extra_body={"tool_set": "none"})
    assert follow.previous_response_id == first.id
    messages = sent(model)[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"], messages
    assert messages[0]["content"] == "remember avocado" and "avocado" in messages[1]["content"]
    # Streamed answers are kept too, and continued.
    with client.responses.stream(model="mock-model", input="and now?", previous_response_id=follow.id, extra_body={"tool_set": "none"}) as s:
        streamed = s.get_final_response()
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text
    assert len(sent(model)[-1]["messages"]) == 5
    # `store: false` keeps nothing; deleting forgets.
    unkept = client.responses.create(model="mock-model", input="x", store=False, extra_body={"tool_set": "none"})
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


# Only the client's tools (not the default tool set's).
NO_SET = {"tool_set": "none"}


def offered_names(request):
    return [t["function"]["name"] for t in request.get("tools", [])]


@pytest.mark.parametrize("stream", [False, True])
def test_deferred_tools_are_found_by_the_gateway_s_tool_search_for_any_model(client, model, stream):
    tools = [
        {"type": "tool_search"},
        {**WEATHER, "defer_loading": True},
        {"type": "namespace", "name": "clock", "description": "Clocks.", "tools": [{**CLOCK, "defer_loading": True}]},
    ]
    script = 'call tool_search {"query": "weather forecast for a city"} then get_weather {"city": "Paris"}'
    before = len(sent(model))
    if stream:
        events = list(client.responses.create(model="mock-model", input=script, tools=tools, stream=True, extra_body=NO_SET))
        r = events[-1].response
        added = [e.item.type for e in events if e.type == "response.output_item.added"]
        assert added == ["tool_search_call", "tool_search_output", "function_call"]
    else:
        r = client.responses.create(model="mock-model", input=script, tools=tools, extra_body=NO_SET)
    requests = sent(model)[before:]
    assert offered_names(requests[0]) == ["tool_search"]
    assert offered_names(requests[1]) == ["tool_search", "get_weather"]
    call, output, fc = (o.model_dump() for o in r.output)
    assert call["type"] == "tool_search_call" and call["execution"] == "server"
    assert call["arguments"] == {"query": "weather forecast for a city"}
    assert output["type"] == "tool_search_output" and output["call_id"] == call["call_id"]
    assert output["tools"][0]["name"] == "get_weather" and output["tools"][0]["defer_loading"] is True
    assert fc["type"] == "function_call" and fc["name"] == "get_weather"
    # Continued: the tool the search loaded is offered without a search.
    before = len(sent(model))
    done = client.responses.create(
        model="mock-model",
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": fc["call_id"], "output": "sunny"}],
        tools=tools,
        extra_body=NO_SET,
    )
    assert "sunny" in done.output_text
    assert "get_weather" in offered_names(sent(model)[before])


def test_a_client_run_tool_search_is_the_client_s_and_its_output_loads_tools(client, model):
    search = {
        "type": "tool_search",
        "execution": "client",
        "description": "Find tools in the project's catalog.",
        "parameters": {"type": "object", "properties": {"goal": {"type": "string"}}, "required": ["goal"]},
    }
    script = 'call tool_search {"goal": "weather"} then get_weather {"city": "Oslo"}'
    r = client.responses.create(model="mock-model", input=script, tools=[search, {**WEATHER, "defer_loading": True}], extra_body=NO_SET)
    (call,) = (o.model_dump() for o in r.output)
    assert call["type"] == "tool_search_call" and call["execution"] == "client"
    assert call["arguments"] == {"goal": "weather"}
    # The client answers with the tools it found, defined in the output.
    before = len(sent(model))
    r = client.responses.create(
        model="mock-model",
        input=[
            {"role": "user", "content": script},
            call,
            {"type": "tool_search_output", "call_id": call["call_id"], "execution": "client", "status": "completed", "tools": [WEATHER]},
        ],
        tools=[search, {**WEATHER, "defer_loading": True}],
        extra_body=NO_SET,
    )
    assert sorted(offered_names(sent(model)[before])) == ["get_weather", "tool_search"]
    assert [o.type for o in r.output] == ["function_call"] and r.output[0].name == "get_weather"


def test_the_websocket_mode_continues_on_its_connection_only(client, model):
    # The SDK's own WebSocket mode: `store: false` responses are kept by
    # the connection that made them.
    def turn(conn, **request):
        conn.send({"type": "response.create", "model": "mock-model", "store": False, **request, **NO_SET})
        for event in conn:
            if event.type in ("response.completed", "error", "response.failed"):
                return event

    with client.responses.connect() as conn:
        first = turn(conn, input="the code word is cobalt")
        assert first.type == "response.completed" and first.response.store is False
        before = len(sent(model))
        second = turn(conn, input="what was it?", previous_response_id=first.response.id)
        assert second.type == "response.completed"
        history = [m["content"] for m in sent(model)[before]["messages"]]
        assert history[0] == "the code word is cobalt" and history[-1] == "what was it?"
        # A tool output that answers no call is refused, and the response
        # it continued is forgotten.
        bad = turn(
            conn,
            input=[{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}],
            previous_response_id=second.response.id,
        )
        assert bad.type == "error" and bad.error.param == "input"
        gone = turn(conn, input="again", previous_response_id=second.response.id)
        assert gone.type == "error" and gone.error.code == "previous_response_not_found"
    with client.responses.connect() as other:
        event = turn(other, input="and here?", previous_response_id=first.response.id)
        assert event.type == "error" and event.error.code == "previous_response_not_found"


def test_a_compacted_conversation_continues_from_the_model_s_summary(client, model):
    conversation = [
        {"role": "user", "content": "We launch on Tuesday."},
        {"role": "assistant", "content": "Noted: Tuesday."},
    ]
    before = len(sent(model))
    compacted = client.responses.compact(model="mock-model", input=conversation)
    asked = sent(model)[before]
    assert "Summarize the conversation" in asked["messages"][-1]["content"]
    assert "tools" not in asked
    kinds = [o.type for o in compacted.output]
    assert kinds == ["message", "compaction"]
    summary_text = "Hello! You said: " + asked["messages"][-1]["content"]
    before = len(sent(model))
    client.responses.create(
        model="mock-model",
        input=[*(o.model_dump(exclude_none=True) for o in compacted.output), {"role": "user", "content": "and now?"}],
        extra_body=NO_SET,
    )
    messages = sent(model)[before]["messages"]
    assert messages[0] == {"role": "user", "content": "We launch on Tuesday."}
    assert messages[1]["content"] == "Summary of the conversation so far:\n" + summary_text


def test_a_hosted_tool_is_served_by_the_tool_set_s_tool_of_its_name(shipped_gateway, model):
    from conftest import KEY

    client = openai.OpenAI(base_url=shipped_gateway + "/v1", api_key=KEY, max_retries=0)
    raw = client.responses.with_raw_response.create(
        model="mock-model", input="hi", tools=[{"type": "web_search"}], extra_body={"tool_set": "research"}
    )
    assert "x-toolgate-notice" not in raw.headers
    assert "web_search" in offered_names(sent(model)[-1])
    # A set without one leaves it out, and says so.
    raw = client.responses.with_raw_response.create(
        model="mock-model", input="hi", tools=[{"type": "web_search_preview"}], extra_body={"tool_set": "default"}
    )
    assert "web_search_preview" in raw.headers["x-toolgate-notice"]


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_programmatic_tool_calling_is_served_by_code_mode_over_the_tool_set(client, name):
    program = "words = [lookup(q=w) for w in ['alpha', 'beta']]\n'-'.join(words)"
    raw = client.responses.with_raw_response.create(
        model=name,
        input="call run_code " + json.dumps({"code": program}),
        tools=[{**CLOCK, "allowed_callers": ["programmatic"]}],
    )
    r = raw.parse()
    ran = [o for o in r.output if o.type == "mcp_call"]
    assert [c.name for c in ran] == ["run_code"]
    assert json.loads(ran[0].output)["result"] == "alpha-beta", ran[0].output
    assert "`get_time`" in raw.headers["x-toolgate-notice"]
