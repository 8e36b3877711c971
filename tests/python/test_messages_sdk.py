"""`POST /v1/messages` driven by the official `anthropic` SDK: the same tool
loop and tool sets as chat completions, behind Anthropic's Messages format,
streaming and not, with gateway tools, client tools and the text formatter.
"""

import anthropic
import pytest


@pytest.fixture
def claude(gateway):
    # No SDK retries: the gateway's own behaviour is under test.
    return anthropic.Anthropic(base_url=gateway, api_key="not-needed", max_retries=0)


def user(text):
    return [{"role": "user", "content": text}]


def report(message):
    return message.model_dump()["toolgate"]


CLOCK = {
    "name": "get_time",
    "description": "The time in a zone.",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
}


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_gateway_tools_run_in_the_loop(claude, name):
    r = claude.messages.create(model=name, max_tokens=200, messages=user('call lookup {"q": "rust"}'))
    assert r.type == "message" and r.role == "assistant"
    assert r.content[0].type == "text"
    assert r.content[0].text == "Tool results: [lookup] rust"
    assert r.stop_reason == "end_turn"
    assert report(r)["tool_set"] == "web"
    assert report(r)["tool_calls"][0]["function"]["name"] == "lookup"
    assert r.usage.output_tokens > 0


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_streaming_gives_the_same_answer(claude, name):
    with claude.messages.stream(model=name, max_tokens=200, messages=user('call lookup {"q": "go"}')) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Tool results: [lookup] go"
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_client_tools_end_the_turn_and_their_results_continue_it(claude, name):
    r = claude.messages.create(
        model=name, max_tokens=200, tools=[CLOCK], messages=user('call get_time {"zone": "UTC"}')
    )
    assert r.stop_reason == "tool_use"
    call = [b for b in r.content if b.type == "tool_use"][0]
    assert call.name == "get_time" and call.input == {"zone": "UTC"}
    follow = user('call get_time {"zone": "UTC"}') + [
        {"role": "assistant", "content": [b.model_dump() for b in r.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "12:00"}]},
    ]
    r = claude.messages.create(model=name, max_tokens=200, tools=[CLOCK], messages=follow)
    assert r.stop_reason == "end_turn"
    assert r.content[0].text == "Tool results: [get_time] 12:00"


def test_streamed_client_tool_calls_arrive_whole(claude):
    with claude.messages.stream(
        model="mock-model", max_tokens=200, tools=[CLOCK], messages=user('call get_time {"zone": "CET"}')
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    call = [b for b in final.content if b.type == "tool_use"][0]
    assert call.input == {"zone": "CET"}


def test_tool_set_from_the_body_and_system_prompt(claude):
    r = claude.messages.create(
        model="mock-model",
        max_tokens=200,
        system="Answer briefly.",
        messages=user('call lookup {"q": "x"}'),
        extra_body={"tool_set": "small"},
    )
    assert report(r)["tool_set"] == "small"
    r = claude.messages.create(
        model="mock-model", max_tokens=200, messages=user("hello"), extra_body={"tool_set": "none"}
    )
    assert r.content[0].text == "Hello! You said: hello"
    assert report(r)["tool_calls"] == []


def test_errors_come_in_anthropic_form(claude):
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="gpt-9", max_tokens=10, messages=user("hi"))
    assert "no route serves model" in str(e.value)
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="mock-model", max_tokens=10, messages=user("hi"), extra_body={"tool_set": "nope"})
    assert "available: small, web" in str(e.value)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="mock-model", max_tokens=10, messages=[{"role": "robot", "content": "x"}])


def test_a_spent_budget_ends_with_an_answer(claude):
    r = claude.messages.create(
        model="mock-model",
        max_tokens=200,
        messages=user('loop lookup {"q": "again"}'),
        extra_body={"max_tool_iterations": 2},
    )
    assert r.stop_reason == "end_turn"
    assert r.content[0].text.startswith("Tool results: [lookup] again")
    assert report(r)["finish_reason"] == "max_tool_iterations"
