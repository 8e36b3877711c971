"""Unpacks the data files of the wheels in DIR/wheels into DIR: the
Berkeley Function Calling Leaderboard's question and answer sets into
DIR/bfcl/ (AgentDojo's wheel is read in place by tests/bench/guards.py).

Usage: extract.py DIR
"""

import pathlib
import sys
import zipfile

out = pathlib.Path(sys.argv[1])
(wheel,) = (out / "wheels").glob("bfcl_eval-*.whl")
prefix = "bfcl_eval/data/"
with zipfile.ZipFile(wheel) as z:
    names = [
        n
        for n in z.namelist()
        if n.startswith(prefix) and n.endswith(".json") and n.count("/") <= 3 and "unused_datasets" not in n
    ]
    for name in names:
        target = out / "bfcl" / name[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(z.read(name))
print(f"{len(names)} BFCL data files in {out / 'bfcl'}")

# AgentDojo's user tasks as a tool-retrieval set: each suite's tools (name,
# docstring, parameters) and each user task's prompt with the functions its
# ground truth calls. Read from the source with `ast` (nothing of the
# package is imported or run): tests/tests/e2e/search_public.rs.
import ast
import json

from agentdojo_source import render

(wheel,) = (out / "wheels").glob("agentdojo-*.whl")
with zipfile.ZipFile(wheel) as z:
    src = {n: z.read(n).decode() for n in z.namelist() if n.startswith("agentdojo/default_suites/v1/")}


def doc_parts(doc):
    """A docstring's description and its `:param name: text` lines."""
    description, params, current = [], {}, None
    for line in (doc or "").splitlines():
        s = line.strip()
        if s.startswith(":param "):
            name, _, text = s[len(":param ") :].partition(":")
            current = name.strip()
            params[current] = text.strip()
        elif s.startswith(":return") or s.startswith(":raises"):
            current = None
        elif current and s:
            params[current] += " " + s
        elif s:
            description.append(s)
    return " ".join(description), params


functions = {}
for name, text in src.items():
    if "/tools/" not in name or not name.endswith(".py"):
        continue
    for node in ast.parse(text).body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        description, docs = doc_parts(ast.get_docstring(node))
        properties = {}
        for arg in node.args.args:
            if "Depends" in ast.unparse(arg.annotation or ast.Constant(None)):
                continue
            properties[arg.arg] = {"description": docs.get(arg.arg, "")}
        functions[node.name] = {
            "name": node.name,
            "description": description,
            "parameters": {"type": "object", "properties": properties},
        }


def constants(cls):
    """A task class's constant attributes (what its f-strings refer to)."""
    values = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = stmt.value.value
    return values


suites = {}
for name, text in src.items():
    parts = name.split("/")
    if len(parts) != 5 or parts[4] not in ("task_suite.py", "user_tasks.py"):
        continue
    suite = suites.setdefault(parts[3], {"tools": [], "tasks": []})
    tree = ast.parse(text)
    if parts[4] == "task_suite.py":
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TOOLS" for t in node.targets):
                suite["tools"] = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
        continue
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or not cls.name.startswith("UserTask"):
            continue
        values = constants(cls)
        prompt = None
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PROMPT" for t in stmt.targets):
                prompt = render(stmt.value, values)
        called = []
        for node in ast.walk(cls):
            if isinstance(node, ast.keyword) and node.arg == "function" and isinstance(node.value, ast.Constant):
                if node.value.value not in called:
                    called.append(node.value.value)
        if prompt and called:
            suite["tasks"].append({"id": f"{parts[3]}/{cls.name}", "prompt": prompt, "functions": called})

tools = {}
for suite in suites.values():
    for t in suite["tools"]:
        if t in functions:
            tools[t] = functions[t]
tasks = [t for s in sorted(suites) for t in suites[s]["tasks"] if all(f in tools for f in t["functions"])]
(out / "agentdojo").mkdir(exist_ok=True)
(out / "agentdojo" / "retrieval.json").write_text(json.dumps({"tools": list(tools.values()), "tasks": tasks}, indent=1))
print(f"AgentDojo: {len(tools)} tools, {len(tasks)} user tasks in {out / 'agentdojo'}")
