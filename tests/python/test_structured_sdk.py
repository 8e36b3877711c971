"""Models without function calling, through the official `openai` SDK: the
scripted model answers in text (Hermes tags, JSON, pythonic, Mistral), the
gateway parses the calls out, runs them and loops — streaming and not."""

import json

import pytest


def user(text):
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("fmt", ["hermes", "json", "pythonic", "mistral"])
def test_structured_loop(client, fmt):
    r = client.chat.completions.create(
        model="text-model", messages=user(f'[[mock:text={fmt}]] call lookup {{"q": "{fmt}"}}')
    )
    assert r.choices[0].message.content == f"Tool results: [lookup] {fmt}"
    report = r.model_extra["toolgate"]
    assert report["formatter"] == "structured_prompt"
    assert report["tool_calls"][0]["success"] is True


@pytest.mark.parametrize("fmt", ["hermes", "pythonic"])
def test_structured_loop_streaming(client, fmt):
    chunks = list(
        client.chat.completions.create(
            model="text-model", messages=user(f'[[mock:text={fmt}]] call lookup {{"q": "s"}}'), stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Tool results: [lookup] s"
    assert all(not (c.choices and c.choices[0].delta.tool_calls) for c in chunks)


def test_auto_falls_back_when_tools_are_rejected(client):
    r = client.chat.completions.create(
        model="mock-picky", messages=user('[[mock:reject-tools]] call lookup {"q": "auto"}')
    )
    assert r.choices[0].message.content == "Tool results: [lookup] auto"
    assert r.model_extra["toolgate"]["formatter"] == "structured_prompt"


def test_client_tools_for_a_text_model(client):
    tool = {"type": "function", "function": {"name": "ask_user", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    r = client.chat.completions.create(
        model="text-model", messages=user('[[mock:text=json]] call ask_user {"q": "why?"}'), tools=[tool]
    )
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls[0].function.name == "ask_user"


BOOK = {
    "type": "function",
    "function": {
        "name": "book",
        "description": "Book a table.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
            "required": ["city", "day"],
        },
    },
}


def test_attribute_style_xml_calls_reach_the_client_with_their_entities_decoded(client):
    r = client.chat.completions.create(
        model="text-model",
        tools=[BOOK],
        messages=user('[[mock:text=xml-attrs]] call book {"city": "S&P <Town>", "day": "Tue"}'),
        extra_body={"tool_set": "none"},
    )
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "book"
    assert json.loads(call.function.arguments) == {"city": "S&P <Town>", "day": "Tue"}


def test_a_call_whose_markup_is_broken_is_told_to_the_model_never_sent_as_arguments(client, model):
    args = {"city": "Paris & Co", "day": "Tue"}
    r = client.chat.completions.create(
        model="text-model",
        tools=[BOOK],
        messages=user(f"[[mock:text=xml-unclosed]] call book {json.dumps(args)} fix book {json.dumps(args)}"),
        extra_body={"tool_set": "none"},
    )
    # The first call held `<param name="day">` in the value of `city`: not
    # an argument. The model was told, wrote it again, and only that call
    # reached the client.
    (call,) = r.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == args
    told = r.model_extra["toolgate"]["tool_calls"][0]
    assert told["success"] is False and "could not be read" in json.dumps(told)
    assert all("<param" not in json.dumps(c.get("function", {}).get("arguments", "")) for c in [told])
