"""Writes prices.json, the shipped price table, from the model price list
that the `litellm` package publishes (fetched by its name with pip, never
edited by hand). Run with `make prices`.

Kept: chat models of OpenAI, Anthropic, Google's Gemini API, DeepSeek,
Mistral and xAI, by the model name their APIs take (Gemini's without its
`gemini/` prefix), in US dollars per million tokens.
"""

import datetime
import json
import pathlib
import subprocess
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).parent
PROVIDERS = {"openai", "anthropic", "gemini", "deepseek", "mistral", "xai"}
FIELDS = {
    "input": "input_cost_per_token",
    "output": "output_cost_per_token",
    "cached_input": "cache_read_input_token_cost",
    "cache_write": "cache_creation_input_token_cost",
    "reasoning": "output_cost_per_reasoning_token",
}


def fetch(folder):
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "litellm", "--no-deps", "--only-binary=:all:", "-d", folder, "-q"],
        check=True,
    )
    wheel = next(pathlib.Path(folder).glob("litellm-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("model_prices_and_context_window_backup.json"))
        return wheel.name.split("-")[1], name, json.loads(z.read(name))


def per_million(cost):
    return round(cost * 1_000_000, 6)


def table(models):
    out = {}
    for name, m in sorted(models.items()):
        if not isinstance(m, dict) or m.get("litellm_provider") not in PROVIDERS:
            continue
        if m.get("mode") not in ("chat", "responses") or "input_cost_per_token" not in m:
            continue
        name = name.removeprefix(m["litellm_provider"] + "/")
        if "/" in name:
            continue
        out[name] = {k: per_million(m[v]) for k, v in FIELDS.items() if isinstance(m.get(v), (int, float))}
    return out


def main():
    with tempfile.TemporaryDirectory() as folder:
        version, path, models = fetch(folder)
    prices = {
        "source": f"the litellm package {version}, {path}",
        "date": datetime.date.today().isoformat(),
        "unit": "US dollars per million tokens",
        "models": table(models),
    }
    (HERE / "prices.json").write_text(json.dumps(prices, indent=1) + "\n")
    print(f"{len(prices['models'])} models from litellm {version}")


if __name__ == "__main__":
    main()
