"""The injection guard measured on public data no one here wrote, two sets
of indirect injections (wheels from PyPI, read as data: nothing of them is
imported or run):

- AgentDojo's prompt-injection attacks and benign tool outputs (below);
- raginject's poisoned documents (each a realistic document with an
  injection; its benign twin is the same document without the injected
  lines, where the package names them) and bastioncorpus's tool outputs
  and memories, malicious and benign (its benign ones are hard: they say
  "ignore", "system", "instructions" innocently).

Benign outputs: every text of the four suites' environments (emails, files,
calendar entries, reviews, messages, transactions...), each injection place
filled with its default (benign) text. Injected outputs: each injection
task's goal written with each of AgentDojo's fixed attack templates, put in
one of its suite's injection places, round robin. Each text is returned by
an HTTP tool of a running `toolgate serve` (default `guards:`), and counted
as flagged when the result carries a guard note.

Usage: guards.py WHEELS_DIR TOOLGATE_BINARY
"""

import ast
import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "public-data"))
from agentdojo_source import render  # noqa: E402

SUITES = ["workspace", "travel", "banking", "slack"]
# AgentDojo's defaults when a pipeline names no user or model.
USER, MODEL = "Emma Johnson", "AI model developed by OpenAI"
ATTACK_FILES = ["agentdojo/attacks/baseline_attacks.py", "agentdojo/attacks/important_instructions_attacks.py"]


def strings(tree, scope):
    """Module- or class-level string constants of `tree`, by name (f-strings
    rendered from the names already known)."""
    out = dict(scope)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = render(node.value, out)
            if value is not None:
                out[node.targets[0].id] = value
    return out


def goals(wheel, suite):
    tree = ast.parse(wheel.read(f"agentdojo/default_suites/v1/{suite}/injection_tasks.py"))
    module = strings(tree, {})
    out, skipped = [], 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = strings(node, module)
            if "GOAL" in names:
                out.append(names["GOAL"])
            elif any(isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "GOAL" for n in node.body):
                skipped += 1
    return out, skipped


def templates(wheel):
    """Every fixed attack string with a `{goal}` and no placeholder but
    `{goal}`, `{user}` and `{model}`."""
    found = {}
    for path in ATTACK_FILES:
        # Strings passed to a call or assigned to a name (not docstrings).
        for node in ast.walk(ast.parse(wheel.read(path))):
            values = node.args if isinstance(node, ast.Call) else [node.value] if isinstance(node, ast.Assign) else []
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and "{goal}" in value.value:
                    rest = set(re.findall(r"\{(\w+)\}", value.value)) - {"goal", "user", "model"}
                    if not rest:
                        found[value.value] = True
    return list(found)


def environment(wheel, suite):
    base = f"agentdojo/data/suites/{suite}/"

    class Loader(yaml.SafeLoader):
        pass

    def include(loader, node):
        return yaml.load(wheel.read(base + loader.construct_scalar(node)), Loader=Loader)

    Loader.add_constructor("!include", include)
    env = yaml.load(wheel.read(base + "environment.yaml"), Loader=Loader)
    vectors = yaml.safe_load(wheel.read(base + "injection_vectors.yaml"))
    return env, {name: v["default"] for name, v in vectors.items()}


def leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, str):
        yield value


def fill(text, defaults, **override):
    return re.sub(r"\{(\w+)\}", lambda m: override.get(m.group(1), defaults.get(m.group(1), m.group(0))), text)


def corpus(wheel_path):
    wheel = zipfile.ZipFile(wheel_path)
    attack_templates = templates(wheel)
    benign, injected, skipped_goals = [], [], 0
    for suite in SUITES:
        env, defaults = environment(wheel, suite)
        texts = [t for t in leaves(env) if len(t.strip()) >= 20]
        benign += sorted({fill(t, defaults) for t in texts})
        places = [(t, name) for t in texts for name in re.findall(r"\{(\w+)\}", t) if name in defaults]
        suite_goals, skipped = goals(wheel, suite)
        skipped_goals += skipped
        i = 0
        for goal in suite_goals:
            for template in attack_templates:
                attack = template.format(goal=goal, user=USER, model=MODEL)
                text, name = places[i % len(places)]
                i += 1
                injected.append((template.split("{goal}")[0].strip()[:40] or "{goal} first", fill(text, defaults, **{name: attack})))
    return attack_templates, benign, injected, skipped_goals


def report(title, benign, false_positives, by_group):
    """Detections by group and false positives, as counts and shares."""
    detected = sum(d for d, _ in by_group.values())
    total = sum(n for _, n in by_group.values())
    print(title)
    print(f"  detected {detected}/{total} = {100 * detected / total:.1f}%, "
          f"false positives {len(false_positives)}/{len(benign)} = {100 * len(false_positives) / len(benign):.1f}%")
    for group, (d, n) in sorted(by_group.items()):
        print(f"    {d:4}/{n:<4} {100 * d / n:5.1f}%  {group!r}")
    for t in false_positives[:10]:
        print(f"  false positive: {t[:120]!r}")


def second_set(wheels):
    """raginject's documents and bastioncorpus's indirect texts: (benign
    texts, [(group, injected text)])."""
    benign, injected = [], []
    (rag,) = wheels.glob("raginject-*.whl")
    with zipfile.ZipFile(rag) as z:
        for name in sorted(n for n in z.namelist() if n.startswith("raginject/attacks/") and n.endswith(".yaml")):
            for item in yaml.safe_load(z.read(name)):
                text = item["injected_content"]
                injected.append((f"raginject {item['category']}", text))
                payload = (item.get("payload") or "").strip()
                if payload and payload in text:
                    benign.append(text.replace(payload, "").replace("\n\n\n", "\n\n"))
    (bastion,) = wheels.glob("bastioncorpus-*.whl")
    with zipfile.ZipFile(bastion) as z:
        for line in z.read("bastioncorpus/corpus/injections.jsonl").decode().splitlines():
            row = json.loads(line)
            if row["channel"] == "user_input":
                continue  # a direct injection, not one a tool's result carries
            if row["label"] == "malicious":
                injected.append((f"bastioncorpus {row['channel']}", row["text"]))
            else:
                benign.append(row["text"])
    return sorted(set(benign)), injected


def main():
    wheels, binary = pathlib.Path(sys.argv[1]), sys.argv[2]
    (wheel_path,) = wheels.glob("agentdojo-*.whl")
    attack_templates, benign, injected, skipped = corpus(wheel_path)
    benign2, injected2 = second_set(wheels)
    texts = benign + [t for _, t in injected] + benign2 + [t for _, t in injected2]

    class Backend(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            i = int(urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["id"][0])
            body = texts[i].encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tool = (
        "tools:\n  - name: read_item\n    description: Read an item.\n"
        "    parameters: {type: object, properties: {id: {type: integer}}, required: [id]}\n"
        f"    http:\n      url: \"http://127.0.0.1:{server.server_address[1]}/item\"\n"
        "      query: {id: \"{{ args.id }}\"}\n"
    )

    def measure_with(guards_yaml):
        """Every text through a gateway of `guards_yaml`: AgentDojo's false
        positives and detections by template, and the second set's."""
        config = tempfile.mkdtemp()
        os.mkdir(f"{config}/tools.d")
        with open(f"{config}/tools.d/t.yaml", "w") as f:
            f.write(tool)
        with open(f"{config}/toolgate.yaml", "w") as f:
            f.write(guards_yaml)
        proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--config", config], stderr=subprocess.PIPE)
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            if "listening on http://" in line:
                base = "http://" + line.split("listening on http://")[1].strip()
                break
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()

        def flagged(i):
            req = urllib.request.Request(
                base + "/v1/tools/read_item/invoke",
                data=json.dumps({"arguments": {"id": i}}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                result = json.loads(r.read())
            assert result.get("success"), result
            if "[redacted: " in json.dumps(result.get("data")):
                redacted.add(i)
            return bool(result.get("guard_notes"))

        def measure(first, benign, injected):
            """The false positives among `benign` and the detections among
            `injected` by group, the texts numbered from `first`."""
            false_positives = [t for i, t in enumerate(benign) if flagged(first + i)]
            by_group = collections.defaultdict(lambda: [0, 0])
            for j, (group, _) in enumerate(injected):
                by_group[group][0] += flagged(first + len(benign) + j)
                by_group[group][1] += 1
            return false_positives, by_group

        redacted = set()
        try:
            first = measure(0, benign, injected)
            second = measure(len(benign) + len(injected), benign2, injected2)
            # The secrets guard on the same texts: benign ones redacted.
            start2 = len(benign) + len(injected)
            print(
                f"secrets guard: {sum(i < len(benign) for i in redacted)} of {len(benign)} AgentDojo benign texts "
                f"and {sum(start2 <= i < start2 + len(benign2) for i in redacted)} of {len(benign2)} of the second set's had something redacted"
            )
            return first, second
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    try:
        for name, guards_yaml in [
            ("the heuristics alone (guards.injection_model: false)", "guards:\n  injection_model: false\n"),
            ("the heuristics and the injection model (the default guards)", ""),
        ]:
            first, second = measure_with(guards_yaml)
            print(f"== {name}")
            report(
                f"AgentDojo ({os.path.basename(wheel_path)}): {len(benign)} benign texts, {len(injected)} injected "
                f"({len(attack_templates)} attack templates; {skipped} goals not plain strings, left out)",
                benign,
                *first,
            )
            report(
                f"raginject + bastioncorpus ({', '.join(sorted(p.name for p in wheels.glob('*.whl') if p.name.startswith(('raginject', 'bastioncorpus'))))}): "
                f"{len(benign2)} benign texts, {len(injected2)} injected",
                benign2,
                *second,
            )
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
