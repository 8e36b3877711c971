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
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="mock-model", input="hi", previous_response_id="resp_123")
    assert "whole conversation" in str(e.value)


def test_a_spent_budget_ends_with_an_answer(client):
    r = client.responses.create(
        model="mock-model", input='loop lookup {"q": "again"}', extra_body={"max_tool_iterations": 2}
    )
    assert r.status == "completed"
    assert r.output_text.startswith("Tool results: [lookup] again")
    assert report(r)["finish_reason"] == "max_tool_iterations"
