"""Google's Gemini API (`/v1beta/models/{model}:generateContent` and the
same under `/v1/`, which the 3.x SDKs call) driven by the official
`google-genai` SDK: the same tool loop and tool sets as every face, behind
Gemini's request and response shapes, streaming and not, with gateway
tools, the client's own functions (declared, and the SDK's automatic
function calling), images, structured output, token counts, the model
list, and every error in Google's error body.
"""

import base64
import json
import urllib.error
import urllib.request

import pytest
from google import genai
from google.genai import errors, types

from conftest import KEY, TOOLS_YAML, serving


def client(base, api_version=None, key="not-needed"):
    options = types.HttpOptions(base_url=base, api_version=api_version) if api_version else types.HttpOptions(base_url=base)
    return genai.Client(api_key=key, http_options=options)


@pytest.fixture(params=["v1", "v1beta"])
def gemini(gateway, request):
    return client(gateway, request.param)


def sent(model):
    with urllib.request.urlopen(model.removesuffix("/v1") + "/mock/requests", timeout=10) as r:
        return json.loads(r.read())


def test_a_plain_answer(gemini):
    r = gemini.models.generate_content(model="mock-model", contents="hello there")
    assert r.text == "Hello! You said: hello there"
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.usage_metadata.prompt_token_count > 0 and r.usage_metadata.candidates_token_count > 0
    assert r.model_version == "mock-model" and r.response_id


@pytest.mark.parametrize("name", ["mock-model", "text-model"])
def test_gateway_tools_run_in_the_loop_whole_and_streamed(gemini, name):
    r = gemini.models.generate_content(model=name, contents='call lookup {"q": "rust"}')
    assert r.text == "Tool results: [lookup] rust"
    chunks = list(gemini.models.generate_content_stream(model=name, contents='call lookup {"q": "go"}'))
    assert "".join(c.text or "" for c in chunks) == "Tool results: [lookup] go"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.total_token_count > 0


CLOCK = types.FunctionDeclaration(
    name="get_time",
    description="The time in a zone.",
    parameters_json_schema={"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
)


def test_client_functions_end_the_turn_and_their_responses_continue_it(gemini):
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[CLOCK])])
    first = types.Content(role="user", parts=[types.Part(text='call get_time {"zone": "UTC"}')])
    r = gemini.models.generate_content(model="mock-model", contents=[first], config=config)
    (call,) = r.function_calls
    assert call.name == "get_time" and call.args == {"zone": "UTC"}
    answer = types.Part.from_function_response(name="get_time", response={"output": "12:00"})
    contents = [first, r.candidates[0].content, types.Content(role="user", parts=[answer])]
    r = gemini.models.generate_content(model="mock-model", contents=contents, config=config)
    assert r.text == "Tool results: [get_time] 12:00"


def test_the_sdk_s_automatic_function_calling_runs_the_client_s_python_function(gemini):
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    chat = gemini.chats.create(model="mock-model", config=types.GenerateContentConfig(tools=[get_weather]))
    r = chat.send_message('call get_weather {"city": "Rome"}')
    assert r.text == 'Tool results: [get_weather] {"result":"sunny in Rome"}'


def test_streamed_client_calls_arrive_whole(gemini):
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[CLOCK])])
    chunks = list(gemini.models.generate_content_stream(model="mock-model", contents='call get_time {"zone": "CET"}', config=config))
    calls = [c for chunk in chunks for c in (chunk.function_calls or [])]
    assert [(c.name, c.args) for c in calls] == [("get_time", {"zone": "CET"})]


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_images_and_files_reach_the_model(gemini, model):
    parts = [
        types.Part(text="what is in this image?"),
        types.Part.from_bytes(data=base64.b64decode(PNG), mime_type="image/png"),
        types.Part.from_uri(file_uri="https://example.com/cat.png", mime_type="image/png"),
    ]
    gemini.models.generate_content(
        model="mock-model", contents=[types.Content(role="user", parts=parts)], config={"http_options": {"headers": {"x-tool-set": "none"}}}
    )
    content = sent(model)[-1]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is in this image?"}
    assert content[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert content[2] == {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def test_structured_output_asks_the_model_for_its_schema(gemini, model):
    schema = {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}
    gemini.models.generate_content(
        model="mock-model",
        contents="where?",
        config=types.GenerateContentConfig(response_mime_type="application/json", response_schema=schema),
    )
    fmt = sent(model)[-1]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_system_instruction_and_sampling_are_translated(gemini, model):
    gemini.models.generate_content(
        model="mock-model",
        contents="hi",
        config=types.GenerateContentConfig(system_instruction="be brief", temperature=0.25, max_output_tokens=77, stop_sequences=["END"]),
    )
    last = sent(model)[-1]
    assert last["messages"][0] == {"role": "system", "content": "be brief"}
    assert (last["temperature"], last["max_tokens"], last["stop"]) == (0.25, 77, ["END"])


def test_tokens_are_counted_and_models_listed(gemini):
    counted = gemini.models.count_tokens(model="mock-model", contents="hello " * 100)
    assert 100 < counted.total_tokens < 400
    names = [m.name for m in gemini.models.list()]
    assert "models/mock-model" in names
    assert gemini.models.get(model="mock-model").name == "models/mock-model"


def test_what_cannot_be_served_is_left_out_with_a_notice(gateway):
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}, {"executableCode": {"language": "PYTHON", "code": "1"}}]}],
        "tools": [{"googleSearch": {}}],
        "generationConfig": {"responseModalities": ["TEXT"]},
    }
    req = urllib.request.Request(
        gateway + "/v1beta/models/mock-model:generateContent",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-tool-set": "none"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        notice = r.headers["x-toolgate-notice"]
        answer = json.loads(r.read())
    assert "googleSearch" in notice and "executableCode" in notice and "responseModalities" in notice, notice
    assert answer["candidates"][0]["content"]["parts"][0]["text"] == "Hello! You said: hi"


def test_errors_come_in_google_s_form(gemini):
    with pytest.raises(errors.ClientError) as e:
        gemini.models.generate_content(model="gpt-9", contents="hi")
    assert e.value.code == 404 and e.value.status == "NOT_FOUND" and "no route serves model" in e.value.message
    with pytest.raises(errors.ClientError) as e:
        gemini.models.generate_content(model="mock-model", contents="hi", config={"http_options": {"headers": {"x-tool-set": "nope"}}})
    assert e.value.code == 404 and "available: small, web" in e.value.message


def google_call(base, method, path, body=None, headers=None):
    req = urllib.request.Request(base + path, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_every_error_of_the_face_is_in_google_s_form(gateway, shipped_gateway):
    json_type = {"content-type": "application/json"}
    ok = json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode()
    cases = [
        (gateway, "/v1beta/models/mock-model:generateContent", b"{}", {"content-type": "text/plain"}, 415),
        (gateway, "/v1beta/models/mock-model:generateContent", b"not json", json_type, 400),
        (gateway, "/v1beta/models/mock-model:generateContent", b"{}", json_type, 400),
        (gateway, "/v1beta/models/mock-model:embedContent", ok, json_type, 404),
        (gateway, "/v1beta/models/mock-model:generateContent", b"x" * (3 * 1024 * 1024), json_type, 413),
        (gateway, "/v1beta/models/mock-model:generateContent", ok, {**json_type, "origin": "http://evil.example"}, 403),
        (gateway, "/v1beta/models/no-such-model:generateContent", ok, json_type, 404),
        (gateway, "/v1beta/tunedModels", None, {}, 404),
        # The shipped gateway has a key: none is 403, a wrong one 400, as
        # Google answers them.
        (shipped_gateway, "/v1beta/models/mock-model:generateContent", ok, json_type, 403),
        (shipped_gateway, "/v1beta/models/mock-model:generateContent", ok, {**json_type, "x-goog-api-key": "wrong"}, 400),
        (shipped_gateway, "/v1beta/models/mock-model:generateContent?key=wrong", ok, json_type, 400),
        (shipped_gateway, "/v1/models", None, {"x-goog-api-key": "wrong"}, 400),
    ]
    for base, path, body, headers, status in cases:
        got, answer = google_call(base, "POST" if body is not None else "GET", path, body, headers)
        assert got == status, (path, headers, got, answer)
        assert set(answer) == {"error"} and {"code", "message", "status"} <= set(answer["error"]), answer
        assert answer["error"]["code"] == status


def test_a_key_is_taken_from_google_s_header_or_the_query(shipped_gateway):
    keyed = client(shipped_gateway, key=KEY)
    r = keyed.models.generate_content(model="mock-model", contents="hello there")
    assert r.text == "Hello! You said: hello there"
    ok = json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode()
    status, answer = google_call(
        shipped_gateway, "POST", f"/v1beta/models/mock-model:generateContent?key={KEY}", ok, {"content-type": "application/json"}
    )
    assert status == 200, answer
    # OpenAI's model list stays OpenAI's; Google's clients get Google's.
    status, openai = google_call(shipped_gateway, "GET", "/v1/models", None, {"authorization": f"Bearer {KEY}"})
    assert status == 200 and openai["object"] == "list"
    status, google = google_call(shipped_gateway, "GET", "/v1/models", None, {"x-goog-api-key": KEY})
    assert status == 200 and "models" in google and "object" not in google


def test_a_stream_without_alt_sse_is_one_json_array(gateway):
    body = json.dumps({"contents": [{"parts": [{"text": 'call lookup {"q": "arr"}'}]}]}).encode()
    status, chunks = google_call(gateway, "POST", "/v1beta/models/mock-model:streamGenerateContent", body, {"content-type": "application/json"})
    assert status == 200 and isinstance(chunks, list)
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"])
    assert text == "Tool results: [lookup] arr"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_a_stream_is_nothing_but_data_events(gateway):
    body = json.dumps({"contents": [{"parts": [{"text": 'call lookup {"q": "sse"}'}]}]}).encode()
    req = urllib.request.Request(
        gateway + "/v1beta/models/mock-model:streamGenerateContent?alt=sse",
        data=body,
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read().decode()
    events = raw.split("\r\n\r\n")
    assert events[-1] == "" and len(events) > 2, raw
    for e in events[:-1]:
        assert e.startswith("data: {") and "\n" not in e, e


LIMITED_YAML = """
upstreams:
  - name: mock
    base_url: {model}
  - name: gone
    base_url: http://127.0.0.1:9/v1
    retries: {{ max_attempts: 1 }}
models:
  - model: "mock-*"
    upstream: mock
  - model: "gone-*"
    upstream: gone
limits:
  max_concurrent_streams: 1
auth:
  keys:
    - name: agent
      key_env: TG_AGENT_KEY
      limits: {{ requests_per_minute: 4 }}
"""


@pytest.fixture
def limited_gateway(tmp_path, backend, model):
    (tmp_path / "tools.d").mkdir()
    (tmp_path / "tool-sets").mkdir()
    (tmp_path / "toolgate.yaml").write_text(LIMITED_YAML.format(model=model))
    (tmp_path / "tools.d" / "t.yaml").write_text(TOOLS_YAML.format(backend=backend))
    (tmp_path / "tool-sets" / "default.yaml").write_text("name: default\ntools: [slow]\n")
    yield from serving(tmp_path, {"TG_AGENT_KEY": KEY})


def test_limits_overload_and_a_failed_upstream_are_in_google_s_form(limited_gateway):
    headers = {"content-type": "application/json", "x-goog-api-key": KEY}
    ok = json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode()
    # An upstream that cannot be reached: 502, UNAVAILABLE.
    status, answer = google_call(limited_gateway, "POST", "/v1beta/models/gone-model:generateContent", ok, headers)
    assert (status, answer["error"]["status"]) == (502, "UNAVAILABLE"), answer
    # One stream at a time: a second one while the first runs a slow tool
    # is 503, UNAVAILABLE.
    slow = json.dumps({"contents": [{"parts": [{"text": 'call slow {"ms": 250}'}]}]}).encode()
    first = urllib.request.Request(
        limited_gateway + "/v1beta/models/mock-model:streamGenerateContent?alt=sse", slow, headers, method="POST"
    )
    with urllib.request.urlopen(first, timeout=10) as held:
        status, answer = google_call(
            limited_gateway, "POST", "/v1beta/models/mock-model:streamGenerateContent?alt=sse", ok, headers
        )
        held.read()
    assert (status, answer["error"]["status"]) == (503, "UNAVAILABLE"), answer
    # Past the key's requests per minute: 429, RESOURCE_EXHAUSTED.
    for _ in range(4):
        status, answer = google_call(limited_gateway, "POST", "/v1beta/models/mock-model:generateContent", ok, headers)
        if status != 200:
            break
    assert (status, answer["error"]["status"]) == (429, "RESOURCE_EXHAUSTED"), answer
    assert set(answer) == {"error"} and {"code", "message", "status"} <= set(answer["error"]), answer
