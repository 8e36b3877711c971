"""A spent budget, as the official SDKs see it: OpenAI's (chat completions
and Responses), Anthropic's and Google's raise the error they raise for a
rate limit, with the gateway's `budget_exceeded` and when it resets; and
what a request cost, in its `toolgate` report and its `X-Toolgate-Cost`
header.
"""

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors, types

from conftest import serving

KEY = "spender-key-0123456789"

YAML = """
builtins:
  enabled: [calculator]
upstreams:
  - name: mock
    base_url: {model}
models:
  - model: "*"
    upstream: mock
    price: {{ input: 1000, output: 1000 }}
auth:
  keys:
    - name: spender
      key_env: SPENDER_KEY
spend:
  budgets:
    - name: spender-daily
      for: {{ key: spender }}
      limit: {{ usd: 0.001 }}
      period: day
"""


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory, model):
    config = tmp_path_factory.mktemp("spend")
    (config / "toolgate.yaml").write_text(YAML.format(model=model))
    (config / "tool-sets").mkdir()
    (config / "tool-sets" / "default.yaml").write_text("name: default\ntools: [calculator]\n")
    yield from serving(config, {"SPENDER_KEY": KEY})


def test_every_sdk_raises_its_rate_limit_error_for_a_spent_budget(budgeted):
    client = openai.OpenAI(base_url=budgeted + "/v1", api_key=KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="mock-model", messages=[{"role": "user", "content": "hello there"}]
    )
    answer = raw.parse()
    cost = answer.model_extra["toolgate"]["cost"]["usd"]
    assert cost > 0.001, answer.model_extra["toolgate"]
    assert raw.headers["x-toolgate-cost"] == f"{cost:.6f}"

    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "again"}])
    assert e.value.code == "budget_exceeded" and "spender-daily" in e.value.message
    assert int(e.value.response.headers["retry-after"]) >= 1
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="mock-model", input="again")

    claude = anthropic.Anthropic(base_url=budgeted, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as e:
        claude.messages.create(model="mock-model", max_tokens=64, messages=[{"role": "user", "content": "again"}])
    assert "spender-daily" in str(e.value)

    gemini = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=budgeted, api_version="v1beta"))
    with pytest.raises(errors.ClientError) as e:
        gemini.models.generate_content(model="mock-model", contents="again")
    assert e.value.code == 429 and e.value.status == "RESOURCE_EXHAUSTED", e.value
