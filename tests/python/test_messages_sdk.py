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


def text_of(message):
    """The answer's text (after the gateway's own tool blocks)."""
    return "".join(b.text for b in message.content if b.type == "text")


CLOCK = {
    "name": "get_time",
    "description": "The time in a zone.",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
}


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_gateway_tools_run_in_the_loop(claude, name):
    r = claude.messages.create(model=name, max_tokens=200, messages=user('call lookup {"q": "rust"}'))
    assert r.type == "message" and r.role == "assistant"
    assert text_of(r) == "Tool results: [lookup] rust"
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
    assert text_of(final) == text
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
    assert text_of(r) == "Tool results: [get_time] 12:00"


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
    assert text_of(r).startswith("Tool results: [lookup] again")
    assert report(r)["finish_reason"] == "max_tool_iterations"


def sent(model):
    """What the scripted model was sent so far."""
    import json
    import urllib.request

    with urllib.request.urlopen(model.removesuffix("/v1") + "/mock/requests", timeout=10) as r:
        return json.loads(r.read())


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_gateway_tool_calls_show_as_tools_the_server_ran(claude):
    # The beta surface has blocks for tools the server ran; the stable one
    # has not, so there the calls are only in the report.
    plain = claude.messages.create(model="mock-model", max_tokens=200, messages=user('call lookup {"q": "rust"}'))
    assert [b.type for b in plain.content] == ["text"]
    beta = ["mcp-client-2025-11-20"]
    r = claude.beta.messages.create(model="mock-model", max_tokens=200, betas=beta, messages=user('call lookup {"q": "rust"}'))
    use, result = r.content[0].model_dump(), r.content[1].model_dump()
    assert use["type"] == "mcp_tool_use" and use["name"] == "lookup" and use["server_name"] == "toolgate"
    assert use["input"] == {"q": "rust"}
    assert result["type"] == "mcp_tool_result" and result["tool_use_id"] == use["id"]
    assert result["content"][0]["text"] == "rust" and result["is_error"] is False
    # Sent back as the next turn's history, they are the call and its result.
    follow = user('call lookup {"q": "rust"}') + [
        {"role": "assistant", "content": [b.model_dump() for b in r.content]},
        {"role": "user", "content": "and now?"},
    ]
    again = claude.beta.messages.create(model="mock-model", max_tokens=200, betas=beta, messages=follow)
    assert again.content[-1].text.startswith("Hello! You said: and now?")
    with claude.beta.messages.stream(model="mock-model", max_tokens=200, betas=beta, messages=user('call lookup {"q": "go"}')) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["mcp_tool_use", "mcp_tool_result", "text"]


def test_images_and_documents_reach_the_model(claude, model):
    claude.messages.create(
        model="mock-model",
        max_tokens=100,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is in this image?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a plain note"}, "title": "Note"},
                ],
            }
        ],
        extra_body={"tool_set": "none"},
    )
    content = sent(model)[-1]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is in this image?"}
    assert content[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert content[2] == {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    assert content[3]["text"] == "Note\n\na plain note"


def test_an_image_in_a_tool_result_follows_it(claude, model):
    follow = user('call get_time {"zone": "UTC"}') + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu1", "name": "get_time", "input": {"zone": "UTC"}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "tu1",
                    "content": [
                        {"type": "text", "text": "a clock"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    ],
                }
            ],
        },
    ]
    claude.messages.create(model="mock-model", max_tokens=100, tools=[CLOCK], messages=follow)
    messages = sent(model)[-1]["messages"]
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"].startswith("a clock")
    after = messages[messages.index(tool) + 1]
    assert after["role"] == "user" and after["content"][0]["type"] == "image_url"


def test_system_messages_stand_where_they_are_and_clear_when_asked(claude, model):
    claude.messages.create(
        model="mock-model",
        max_tokens=100,
        messages=[
            {"role": "user", "content": "first"},
            {"role": "system", "content": "gone once the user speaks again", "clear_at": "next_user_message"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
            {"role": "system", "content": [{"type": "text", "text": "Working directory: /tmp"}], "output_config": {"effort": "low"}},
        ],
        extra_body={"tool_set": "none", "output_config": {"effort": "medium"}, "context_management": {"edits": []}},
    )
    messages = sent(model)[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "system"], messages
    assert messages[-1]["content"] == "Working directory: /tmp"


def test_what_cannot_be_served_is_left_out_with_a_notice(claude):
    raw = claude.messages.with_raw_response.create(
        model="mock-model",
        max_tokens=100,
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "container_upload", "file_id": "f1"}]}
        ],
        tools=[{"type": "web_search_20250305", "name": "web_search"}],
        extra_body={"tool_set": "none"},
    )
    notice = raw.headers["x-toolgate-notice"]
    assert "web_search" in notice and "container_upload" in notice, notice
    assert raw.parse().content[-1].text == "Hello! You said: hi"


def test_tokens_are_counted(claude):
    counted = claude.messages.count_tokens(model="mock-model", messages=user("hello " * 100))
    assert 100 < counted.input_tokens < 400


def test_every_error_of_the_face_is_in_anthropic_form(gateway):
    import json
    import urllib.error
    import urllib.request

    def post(path, body, headers):
        req = urllib.request.Request(gateway + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    cases = [
        ("/v1/messages", b"{}", {"content-type": "text/plain"}, 415),
        ("/v1/messages", b"not json", {"content-type": "application/json"}, 400),
        ("/v1/messages/batches", b"{}", {"content-type": "application/json"}, 404),
        ("/v1/messages", b"x" * (3 * 1024 * 1024), {"content-type": "application/json"}, 413),
        ("/v1/messages", b"{}", {"content-type": "application/json", "origin": "http://evil.example"}, 403),
    ]
    for path, body, headers, status in cases:
        got, answer = post(path, body, headers)
        assert got == status, (path, got, answer)
        assert answer["type"] == "error" and set(answer["error"]) == {"type", "message"}, answer


WEATHER = {
    "name": "get_weather",
    "description": "The weather forecast for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def offered_names(request):
    return [t["function"]["name"] for t in request.get("tools", [])]


@pytest.mark.parametrize("kind", ["tool_search_tool_bm25_20251119", "tool_search_tool_regex_20251119"])
def test_deferred_tools_are_found_by_the_gateway_s_search_for_any_model(claude, model, kind):
    # A model with no tool search of its own: the gateway offers one in
    # the deferred tools' place, and what it finds is offered next.
    name = kind.rsplit("_", 1)[0]
    tools = [
        {"type": kind, "name": name},
        {**WEATHER, "defer_loading": True},
        {**CLOCK, "defer_loading": True},
    ]
    script = user(f'call {name} {{"query": "weather forecast"}} then get_weather {{"city": "Paris"}}')
    before = len(sent(model))
    r = claude.beta.messages.create(
        model="mock-model", max_tokens=200, tools=tools, messages=script, betas=["advanced-tool-use-2025-11-20"]
    )
    requests = sent(model)[before:]
    assert offered_names(requests[0])[-1] == name
    assert "get_weather" not in offered_names(requests[0]) and "get_time" not in offered_names(requests[0])
    assert "get_weather" in offered_names(requests[1]) and "get_time" not in offered_names(requests[1])
    blocks = [b.model_dump() for b in r.content]
    assert [b["type"] for b in blocks] == ["server_tool_use", "tool_search_tool_result", "tool_use"]
    assert blocks[0]["name"] == name and blocks[0]["input"] == {"query": "weather forecast"}
    found = blocks[1]["content"]["tool_references"]
    assert found[0] == {"type": "tool_reference", "tool_name": "get_weather"}
    assert blocks[2]["name"] == "get_weather" and blocks[2]["input"] == {"city": "Paris"}
    assert r.stop_reason == "tool_use"
    # The client runs its tool and sends the turn back: the tool it loaded
    # is offered, and the search is in the model's history.
    follow = script + [
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": blocks[2]["id"], "content": "sunny"}]},
    ]
    before = len(sent(model))
    r = claude.beta.messages.create(
        model="mock-model", max_tokens=200, tools=tools, messages=follow, betas=["advanced-tool-use-2025-11-20"]
    )
    assert "sunny" in text_of(r)
    last = sent(model)[before]
    assert "get_weather" in offered_names(last)
    searched = [m for m in last["messages"] if m["role"] == "tool" and "get_weather" in m["content"]]
    assert searched, last["messages"]


def test_a_search_that_finds_nothing_says_so_and_loads_nothing(claude, model):
    tools = [{"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}, {**WEATHER, "defer_loading": True}]
    before = len(sent(model))
    r = claude.messages.create(
        model="mock-model",
        max_tokens=200,
        tools=tools,
        messages=user('call tool_search_tool_bm25 {"query": "quantum chromodynamics"}'),
    )
    assert "No tool matches" in text_of(r)
    assert all("get_weather" not in offered_names(q) for q in sent(model)[before:])


def test_a_server_tool_is_served_by_the_tool_set_s_tool_of_its_name(shipped_gateway, model):
    from conftest import KEY

    claude = anthropic.Anthropic(base_url=shipped_gateway, api_key=KEY, max_retries=0)
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    raw = claude.messages.with_raw_response.create(
        model="mock-model", max_tokens=100, messages=user("hi"), tools=tools, extra_body={"tool_set": "research"}
    )
    assert "x-toolgate-notice" not in raw.headers
    assert "web_search" in offered_names(sent(model)[-1])
    raw = claude.messages.with_raw_response.create(
        model="mock-model", max_tokens=100, messages=user("hi"), tools=tools, extra_body={"tool_set": "default"}
    )
    assert "web_search" in raw.headers["x-toolgate-notice"]


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_code_execution_is_served_by_code_mode_over_the_tool_set(claude, name):
    import json

    program = "words = [lookup(q=w) for w in ['alpha', 'beta']]\nprint(len(words))\n'-'.join(words)"
    raw = claude.messages.with_raw_response.create(
        model=name,
        max_tokens=300,
        messages=user("call run_code " + json.dumps({"code": program})),
        tools=[
            {"type": "code_execution_20260120", "name": "code_execution"},
            {**CLOCK, "allowed_callers": ["code_execution_20260120"]},
        ],
    )
    r = raw.parse()
    call = report(r)["tool_calls"][0]
    assert call["function"]["name"] == "run_code"
    assert call["result"]["result"] == "alpha-beta", call
    assert call["result"]["printed"] == "2\n"
    assert "[run_code]" in text_of(r)
    notice = raw.headers["x-toolgate-notice"]
    assert "code mode" in notice and "`get_time`" in notice, notice
