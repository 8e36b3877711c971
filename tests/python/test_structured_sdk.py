"""Models without function calling, through the official `openai` SDK: the
scripted model answers in text (Hermes tags, JSON, pythonic, Mistral), the
gateway parses the calls out, runs them and loops — streaming and not."""

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
