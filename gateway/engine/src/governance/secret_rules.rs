//! The secrets of third parties found in results, by Betterleaks' rules
//! (MIT; `secret_rules.json`, written by `deploy/secret-rules/generate.py`
//! from the rules Betterleaks ships): a regex per kind of secret, the
//! keywords one of which a text must hold for the rule to be tried, and a
//! filter that discards implausible findings (too little entropy, known
//! examples, placeholders).
//!
//! As in Betterleaks: a rule runs only on a text holding one of its
//! keywords (any case); its finding's secret is the rule's value group,
//! else the first group that matched something, else the whole match; the
//! rule's filter and the global one discard it when true. The filters are
//! read in three-valued logic: a part the gateway cannot evaluate (the text
//! around the finding, a token ratio) is unknown, and a finding is
//! discarded only when what is known proves the filter true — an unknown
//! part never lets a vendor's token through. The generic rules (a password
//! or key beside any word) are the exception: their findings rest on
//! context checks, and one the gateway cannot decide is discarded. The
//! token ratio of a finding is counted with cl100k (`tiktoken-rs`, loaded at
//! the first finding that needs it), as Betterleaks counts it. Regexes are Go's RE2 ones, run on
//! bytes without Unicode classes (`\w`, `\d`, `\s`, `\b` are ASCII, as in
//! Go), each compiled the first time a text holds one of its keywords.

use std::borrow::Cow;
use std::sync::{LazyLock, OnceLock};

use aho_corasick::AhoCorasick;
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// The largest compiled regex of a rule or filter.
const REGEX_SIZE_LIMIT: usize = 32 * 1024 * 1024;
/// The most memory the lazy DFA of one regex may cache (per thread): past
/// it, the regex runs on its slower engines, still in linear time.
const DFA_SIZE_LIMIT: usize = 256 * 1024;
/// The most findings of one rule in one text run through its filter; past
/// them, a finding is undecided (a vendor's rule redacts it, a generic rule
/// does not), so a result made of thousands of candidate secrets costs no
/// more than this many filters.
const MAX_FILTERED: usize = 1000;

#[derive(Deserialize)]
struct Doc {
    filter: Option<Expr>,
    rules: Vec<RuleDecl>,
}

#[derive(Deserialize)]
struct RuleDecl {
    id: String,
    regex: String,
    keywords: Vec<String>,
    #[serde(default)]
    group: Option<usize>,
    #[serde(default)]
    filter: Option<Expr>,
    /// A finding whose filter the gateway cannot decide is discarded: the
    /// generic rules (a password, a key or a user name beside any word),
    /// which rest on the context checks the gateway cannot always run.
    #[serde(default)]
    unknown_discards: bool,
}

/// A filter as written (expr-lang, parsed by the generator): true
/// discards the finding.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Expr {
    Str(String),
    Num(f64),
    Bool(bool),
    Var(String),
    List(Vec<Expr>),
    Call(String, Vec<Expr>),
    Bin(String, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Index(Box<Expr>, Box<Expr>),
    Slice(Box<Expr>, Option<Box<Expr>>, Option<Box<Expr>>),
    Let(Vec<(String, Expr)>, Box<Expr>),
    Unknown(serde::de::IgnoredAny),
}

/// What a filter reads of a finding.
#[derive(Debug, Clone, Copy)]
enum Field {
    Secret,
    Match,
    Text,
    MatchStart,
    MatchEnd,
    LineStart,
    LineEnd,
    /// The line of the match.
    Line,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy)]
enum Func {
    Entropy,
    Len,
    Max,
    Min,
    Split,
    Join,
    Lower,
    ContainsAny,
    /// Characters per cl100k token: high for words, low for random text.
    TokenRatio,
    /// A token ratio too high for a secret, or an English word inside (a
    /// word list the gateway does not hold: only the ratio decides here).
    FailsTokenEfficiency,
    /// Only sets how sure a finding is: true.
    SetConfidence,
}

/// A filter compiled: fields and functions resolved, regexes compiled.
/// What the gateway cannot evaluate (a token ratio, a file's path
/// pattern it does not know) is [`Node::Unknown`].
enum Node {
    Lit(Val<'static>),
    Var(String),
    Field(Field),
    List(Vec<Node>),
    Call(Func, Vec<Node>),
    MatchesAny(Box<Node>, Vec<Regex>),
    FindMatch(Box<Node>, Regex),
    Bin(BinOp, Box<Node>, Box<Node>),
    Not(Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Index(Box<Node>, Box<Node>),
    Slice(Box<Node>, Option<Box<Node>>, Option<Box<Node>>),
    Let(Vec<(String, Node)>, Box<Node>),
    Unknown,
}

/// A value while a filter runs; `Unknown` where the gateway cannot tell.
#[derive(Debug, Clone, PartialEq)]
enum Val<'a> {
    /// Bytes, borrowed from the text where they can be.
    Str(Cow<'a, [u8]>),
    Num(f64),
    Bool(bool),
    List(Vec<Val<'a>>),
    Unknown,
}

fn regex(pattern: &str) -> Option<Regex> {
    // Go's classes are ASCII; a pattern that needs Unicode to compile
    // keeps it.
    RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .build()
        .or_else(|_| {
            RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(DFA_SIZE_LIMIT)
                .build()
        })
        .map_err(|e| tracing::error!("a secret rule's regex does not compile: {e}"))
        .ok()
}

/// The literal strings of `e`, when it is a list of them.
fn literal_strings(e: &Expr) -> Option<Vec<&str>> {
    match e {
        Expr::List(items) => items
            .iter()
            .map(|i| match i {
                Expr::Str(s) => Some(s.as_str()),
                _ => None,
            })
            .collect(),
        Expr::Str(s) => Some(vec![s.as_str()]),
        _ => None,
    }
}

fn compile(e: &Expr) -> Node {
    let boxed = |e: &Expr| Box::new(compile(e));
    match e {
        Expr::Str(s) => Node::Lit(Val::Str(Cow::Owned(s.as_bytes().to_vec()))),
        Expr::Num(n) => Node::Lit(Val::Num(*n)),
        Expr::Bool(b) => Node::Lit(Val::Bool(*b)),
        Expr::Var(v) => Node::Var(v.clone()),
        Expr::List(items) => Node::List(items.iter().map(compile).collect()),
        Expr::Index(of, at) => match (&**of, &**at) {
            (Expr::Var(v), Expr::Str(field)) if v == "finding" => match field.as_str() {
                "secret" => Node::Field(Field::Secret),
                "match" => Node::Field(Field::Match),
                "fragment_raw" => Node::Field(Field::Text),
                "match_start_idx" => Node::Field(Field::MatchStart),
                "match_end_idx" => Node::Field(Field::MatchEnd),
                "match_line_start_idx" => Node::Field(Field::LineStart),
                "match_line_end_idx" => Node::Field(Field::LineEnd),
                "line" => Node::Field(Field::Line),
                _ => Node::Unknown,
            },
            // A result is no file: it has no path.
            (Expr::Var(v), Expr::Str(attr)) if v == "attributes" && attr == "path" => {
                Node::Lit(Val::Str(Cow::Borrowed(&[])))
            }
            _ => Node::Index(boxed(of), boxed(at)),
        },
        Expr::Slice(of, lo, hi) => Node::Slice(
            boxed(of),
            lo.as_deref().map(boxed),
            hi.as_deref().map(boxed),
        ),
        Expr::Call(name, args) => match (name.as_str(), args.as_slice()) {
            ("matchesAny", [of, patterns]) => {
                let compiled: Option<Vec<Regex>> =
                    literal_strings(patterns).and_then(|ps| ps.into_iter().map(regex).collect());
                match compiled {
                    Some(res) => Node::MatchesAny(boxed(of), res),
                    None => Node::Unknown,
                }
            }
            ("findMatch", [of, Expr::Str(pattern)]) => match regex(pattern) {
                Some(re) => Node::FindMatch(boxed(of), re),
                None => Node::Unknown,
            },
            (name, args) => {
                let func = match name {
                    "entropy" => Func::Entropy,
                    "len" => Func::Len,
                    "max" => Func::Max,
                    "min" => Func::Min,
                    "split" => Func::Split,
                    "join" => Func::Join,
                    "lower" => Func::Lower,
                    "containsAny" => Func::ContainsAny,
                    "setConfidence" => Func::SetConfidence,
                    "tokenRatio" => Func::TokenRatio,
                    "failsTokenEfficiency" => Func::FailsTokenEfficiency,
                    _ => return Node::Unknown,
                };
                Node::Call(func, args.iter().map(compile).collect())
            }
        },
        Expr::Bin(op, l, r) => {
            let op = match op.as_str() {
                "||" => BinOp::Or,
                "&&" => BinOp::And,
                "==" => BinOp::Eq,
                "!=" => BinOp::Ne,
                "<" => BinOp::Lt,
                "<=" => BinOp::Le,
                ">" => BinOp::Gt,
                ">=" => BinOp::Ge,
                "contains" => BinOp::Contains,
                "+" => BinOp::Add,
                "-" => BinOp::Sub,
                "*" => BinOp::Mul,
                "/" => BinOp::Div,
                _ => return Node::Unknown,
            };
            Node::Bin(op, boxed(l), boxed(r))
        }
        Expr::Not(inner) => Node::Not(boxed(inner)),
        Expr::Cond(c, a, b) => Node::Cond(boxed(c), boxed(a), boxed(b)),
        Expr::Let(bindings, body) => Node::Let(
            bindings
                .iter()
                .map(|(name, e)| (name.clone(), compile(e)))
                .collect(),
            boxed(body),
        ),
        Expr::Unknown(_) => Node::Unknown,
    }
}

/// Shannon entropy of `s`, in bits per character.
fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::<char, usize>::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_default() += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    counts
        .values()
        .map(|&c| {
            #[allow(clippy::cast_precision_loss)]
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// A finding as a filter reads it: the text, the whole match and the
/// secret (byte ranges of the text), and where the text's lines end.
struct Finding<'a> {
    text: &'a [u8],
    /// The offset of every line break of `text`, in order.
    breaks: &'a [usize],
    whole: std::ops::Range<usize>,
    secret: std::ops::Range<usize>,
}

impl<'a> Finding<'a> {
    /// Where the match's line starts, and where it ends.
    fn line(&self) -> (usize, usize) {
        let before = self.breaks.partition_point(|&b| b < self.whole.start);
        let start = before.checked_sub(1).map_or(0, |i| self.breaks[i] + 1);
        let after = self.breaks.partition_point(|&b| b < self.whole.end);
        let end = self.breaks.get(after).copied().unwrap_or(self.text.len());
        (start, end.max(start))
    }

    #[allow(clippy::cast_precision_loss)]
    fn field(&self, f: Field) -> Val<'a> {
        let num = |n: usize| Val::Num(n as f64);
        let text: &'a [u8] = self.text;
        match f {
            Field::Secret => Val::Str(Cow::Borrowed(&text[self.secret.clone()])),
            Field::Match => Val::Str(Cow::Borrowed(&text[self.whole.clone()])),
            Field::Text => Val::Str(Cow::Borrowed(text)),
            Field::MatchStart => num(self.whole.start),
            Field::MatchEnd => num(self.whole.end),
            Field::LineStart => num(self.line().0),
            Field::LineEnd => num(self.line().1),
            Field::Line => {
                let (start, end) = self.line();
                Val::Str(Cow::Borrowed(&text[start..end]))
            }
        }
    }
}

/// A whole number from a value (an index), if it is one.
fn index_of(v: &Val<'_>) -> Option<usize> {
    match v {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Val::Num(n) if *n >= 0.0 && n.fract() == 0.0 => Some(*n as usize),
        _ => None,
    }
}

/// The most nested `let`s a filter may bind while it runs.
const MAX_BINDINGS: usize = 256;

/// Runs a compiled filter on a finding. `env` holds the `let` bindings in
/// scope, innermost last.
#[allow(clippy::too_many_lines)]
fn eval<'a>(node: &Node, f: &Finding<'a>, env: &mut Vec<(String, Val<'a>)>) -> Val<'a> {
    match node {
        Node::Lit(v) => v.clone(),
        Node::Var(name) => env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(Val::Unknown, |(_, v)| v.clone()),
        Node::Field(field) => f.field(*field),
        Node::List(items) => Val::List(items.iter().map(|i| eval(i, f, env)).collect()),
        Node::MatchesAny(of, res) => match eval(of, f, env) {
            Val::Str(s) => Val::Bool(res.iter().any(|r| r.is_match(&s))),
            _ => Val::Unknown,
        },
        Node::FindMatch(of, re) => match eval(of, f, env) {
            Val::Str(Cow::Borrowed(s)) => {
                Val::Str(Cow::Borrowed(re.find(s).map_or(&s[..0], |m| m.as_bytes())))
            }
            Val::Str(Cow::Owned(s)) => Val::Str(Cow::Owned(
                re.find(&s)
                    .map(|m| m.as_bytes().to_vec())
                    .unwrap_or_default(),
            )),
            _ => Val::Unknown,
        },
        Node::Call(func, args) => {
            let args: Vec<Val<'a>> = args.iter().map(|a| eval(a, f, env)).collect();
            call(*func, &args)
        }
        Node::Bin(BinOp::Or, l, r) => match eval(l, f, env) {
            Val::Bool(true) => Val::Bool(true),
            left => match (left, eval(r, f, env)) {
                (_, Val::Bool(true)) => Val::Bool(true),
                (Val::Bool(false), Val::Bool(false)) => Val::Bool(false),
                _ => Val::Unknown,
            },
        },
        Node::Bin(BinOp::And, l, r) => match eval(l, f, env) {
            Val::Bool(false) => Val::Bool(false),
            left => match (left, eval(r, f, env)) {
                (_, Val::Bool(false)) => Val::Bool(false),
                (Val::Bool(true), Val::Bool(true)) => Val::Bool(true),
                _ => Val::Unknown,
            },
        },
        Node::Bin(op, l, r) => binary(*op, eval(l, f, env), eval(r, f, env)),
        Node::Not(inner) => match eval(inner, f, env) {
            Val::Bool(b) => Val::Bool(!b),
            _ => Val::Unknown,
        },
        Node::Cond(c, a, b) => match eval(c, f, env) {
            Val::Bool(true) => eval(a, f, env),
            Val::Bool(false) => eval(b, f, env),
            _ => Val::Unknown,
        },
        Node::Index(of, at) => match (eval(of, f, env), eval(at, f, env)) {
            (Val::List(items), at) => index_of(&at)
                .and_then(|i| items.get(i).cloned())
                .unwrap_or(Val::Unknown),
            _ => Val::Unknown,
        },
        Node::Slice(of, lo, hi) => {
            let of = eval(of, f, env);
            let len = match &of {
                Val::Str(s) => s.len(),
                Val::List(l) => l.len(),
                _ => return Val::Unknown,
            };
            let lo = match lo {
                Some(lo) => index_of(&eval(lo, f, env)),
                None => Some(0),
            };
            let hi = match hi {
                Some(hi) => index_of(&eval(hi, f, env)),
                None => Some(len),
            };
            match (of, lo, hi) {
                (Val::Str(Cow::Borrowed(s)), Some(lo), Some(hi)) if lo <= hi && hi <= len => {
                    Val::Str(Cow::Borrowed(&s[lo..hi]))
                }
                (Val::Str(Cow::Owned(s)), Some(lo), Some(hi)) if lo <= hi && hi <= len => {
                    Val::Str(Cow::Owned(s[lo..hi].to_vec()))
                }
                (Val::List(l), Some(lo), Some(hi)) if lo <= hi && hi <= len => {
                    Val::List(l[lo..hi].to_vec())
                }
                _ => Val::Unknown,
            }
        }
        Node::Let(bindings, body) => {
            if env.len() + bindings.len() > MAX_BINDINGS {
                return Val::Unknown;
            }
            let depth = env.len();
            for (name, value) in bindings {
                let v = eval(value, f, env);
                env.push((name.clone(), v));
            }
            let out = eval(body, f, env);
            env.truncate(depth);
            out
        }
        Node::Unknown => Val::Unknown,
    }
}

fn binary<'a>(op: BinOp, l: Val<'a>, r: Val<'a>) -> Val<'a> {
    use Val::{Bool, Num, Str};
    match (op, l, r) {
        (_, Val::Unknown, _) | (_, _, Val::Unknown) => Val::Unknown,
        (BinOp::Eq, l, r) => Bool(l == r),
        (BinOp::Ne, l, r) => Bool(l != r),
        (BinOp::Lt, Num(a), Num(b)) => Bool(a < b),
        (BinOp::Le, Num(a), Num(b)) => Bool(a <= b),
        (BinOp::Gt, Num(a), Num(b)) => Bool(a > b),
        (BinOp::Ge, Num(a), Num(b)) => Bool(a >= b),
        (BinOp::Contains, Str(a), Str(b)) => Bool(memchr::memmem::find(&a, &b).is_some()),
        (BinOp::Add, Num(a), Num(b)) => Num(a + b),
        (BinOp::Add, Str(a), Str(b)) => {
            let mut a = a.into_owned();
            a.extend_from_slice(&b);
            Str(Cow::Owned(a))
        }
        (BinOp::Sub, Num(a), Num(b)) => Num(a - b),
        (BinOp::Mul, Num(a), Num(b)) => Num(a * b),
        (BinOp::Div, Num(a), Num(b)) if b != 0.0 => Num(a / b),
        _ => Val::Unknown,
    }
}

#[allow(clippy::cast_precision_loss)]
fn call<'a>(func: Func, args: &[Val<'a>]) -> Val<'a> {
    use Val::{Bool, List, Num, Str};
    match (func, args) {
        (Func::Entropy, [Str(s)]) => Num(entropy(&String::from_utf8_lossy(s))),
        (Func::Len, [Str(s)]) => Num(s.len() as f64),
        (Func::Len, [List(l)]) => Num(l.len() as f64),
        (Func::Max, [Num(a), Num(b)]) => Num(a.max(*b)),
        (Func::Min, [Num(a), Num(b)]) => Num(a.min(*b)),
        (Func::Split, [Str(s), Str(sep)]) if !sep.is_empty() => {
            let mut parts = Vec::new();
            let mut rest: &[u8] = s;
            while let Some(i) = memchr::memmem::find(rest, sep) {
                parts.push(Str(Cow::Owned(rest[..i].to_vec())));
                rest = &rest[i + sep.len()..];
            }
            parts.push(Str(Cow::Owned(rest.to_vec())));
            List(parts)
        }
        (Func::Join, [List(items), Str(sep)]) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Str(s) = item else { return Val::Unknown };
                if i > 0 {
                    out.extend_from_slice(sep);
                }
                out.extend_from_slice(s);
            }
            Str(Cow::Owned(out))
        }
        (Func::Lower, [Str(s)]) => Str(Cow::Owned(s.to_ascii_lowercase())),
        (Func::ContainsAny, [Str(s), List(needles)]) => {
            let mut unknown = false;
            for n in needles {
                match n {
                    Str(n) if memchr::memmem::find(s, n).is_some() => return Bool(true),
                    Str(_) => {}
                    _ => unknown = true,
                }
            }
            if unknown { Val::Unknown } else { Bool(false) }
        }
        (Func::SetConfidence, _) => Bool(true),
        (Func::TokenRatio, [Str(s)]) => token_ratio(s).map_or(Val::Unknown, Num),
        (Func::FailsTokenEfficiency, [Str(s)]) => match token_ratio(s) {
            // Over 2.5 fails whatever the words; under it, the words
            // Betterleaks looks for would decide.
            Some(r) if r >= 2.5 => Bool(true),
            _ => Val::Unknown,
        },
        _ => Val::Unknown,
    }
}

/// Bytes per cl100k token of `s`, as Betterleaks counts them (no special
/// tokens); `None` for a short text with line breaks, which Betterleaks
/// rewrites first.
#[allow(clippy::cast_precision_loss)]
fn token_ratio(s: &[u8]) -> Option<f64> {
    if s.len() < 20 && s.iter().any(|b| matches!(b, b'\n' | b'\r')) {
        return None;
    }
    let text = String::from_utf8_lossy(s);
    let tokens = tiktoken_rs::cl100k_base_singleton().count_ordinary(&text);
    Some(if tokens == 0 {
        0.0
    } else {
        s.len() as f64 / tokens as f64
    })
}

/// A rule, compiled at its first use.
struct Rule {
    decl: RuleDecl,
    compiled: OnceLock<Option<(Regex, Option<Node>)>>,
}

impl Rule {
    fn compiled(&self) -> Option<&(Regex, Option<Node>)> {
        self.compiled
            .get_or_init(|| {
                let re = regex(&self.decl.regex)?;
                Some((re, self.decl.filter.as_ref().map(compile)))
            })
            .as_ref()
    }
}

/// Every rule, and what picks the ones to try on a text.
pub struct Rules {
    rules: Vec<Rule>,
    /// Every keyword; each pattern's rules in `by_keyword`.
    keywords: AhoCorasick,
    by_keyword: Vec<Vec<usize>>,
    /// The rules without keywords, tried on every text.
    always: Vec<usize>,
    global: Option<Node>,
}

/// A secret found: where it is (bytes of the text), and the rule's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub end: usize,
    pub rule: &'static str,
}

/// The rules shipped with the gateway.
pub static RULES: LazyLock<Option<Rules>> = LazyLock::new(|| {
    Rules::parse(include_str!("secret_rules.json"))
        .map_err(|e| tracing::error!("the secret rules cannot be read: {e}"))
        .ok()
});

impl Rules {
    fn parse(json: &str) -> Result<Rules, String> {
        let doc: Doc = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let mut patterns: Vec<String> = Vec::new();
        let mut by_keyword: Vec<Vec<usize>> = Vec::new();
        let mut always = Vec::new();
        for (i, rule) in doc.rules.iter().enumerate() {
            if rule.keywords.is_empty() {
                always.push(i);
            }
            for k in &rule.keywords {
                match patterns.iter().position(|p| p == k) {
                    Some(at) => by_keyword[at].push(i),
                    None => {
                        patterns.push(k.clone());
                        by_keyword.push(vec![i]);
                    }
                }
            }
        }
        let keywords = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(&patterns)
            .map_err(|e| e.to_string())?;
        Ok(Rules {
            rules: doc
                .rules
                .into_iter()
                .map(|decl| Rule {
                    decl,
                    compiled: OnceLock::new(),
                })
                .collect(),
            keywords,
            by_keyword,
            always,
            global: doc.filter.as_ref().map(compile),
        })
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// `true` when there is none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The secrets in `text`, in order, not overlapping.
    pub fn find(&'static self, text: &str) -> Vec<Found> {
        let bytes = text.as_bytes();
        // Most texts hold no keyword: nothing to try, nothing allocated.
        if self.always.is_empty() && !self.keywords.is_match(bytes) {
            return Vec::new();
        }
        let mut tried = vec![false; self.rules.len()];
        for i in &self.always {
            tried[*i] = true;
        }
        for m in self.keywords.find_overlapping_iter(bytes) {
            for i in &self.by_keyword[m.pattern().as_usize()] {
                tried[*i] = true;
            }
        }
        let breaks: Vec<usize> = memchr::memchr_iter(b'\n', bytes).collect();
        let mut found = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if !tried[i] {
                continue;
            }
            let Some((re, filter)) = rule.compiled() else {
                continue;
            };
            for (n, caps) in re.captures_iter(bytes).enumerate() {
                let Some(whole) = caps.get(0) else { continue };
                let secret = rule
                    .decl
                    .group
                    .and_then(|g| caps.get(g))
                    .or_else(|| caps.iter().skip(1).flatten().find(|m| !m.is_empty()))
                    .unwrap_or(whole);
                let finding = Finding {
                    text: bytes,
                    breaks: &breaks,
                    whole: whole.range(),
                    secret: secret.range(),
                };
                // Past the bound, a finding is one the gateway does not
                // decide.
                let discarded = if n < MAX_FILTERED {
                    [filter.as_ref(), self.global.as_ref()]
                        .into_iter()
                        .flatten()
                        .any(|f| match eval(f, &finding, &mut Vec::new()) {
                            Val::Bool(held) => held,
                            _ => rule.decl.unknown_discards,
                        })
                } else {
                    rule.decl.unknown_discards
                };
                if !discarded && !secret.is_empty() {
                    found.push(Found {
                        start: floor_char(text, secret.start()),
                        end: ceil_char(text, secret.end()),
                        rule: rule.decl.id.as_str(),
                    });
                }
            }
        }
        found.sort_by_key(|f| (f.start, std::cmp::Reverse(f.end)));
        let mut merged: Vec<Found> = Vec::new();
        for f in found {
            match merged.last_mut() {
                Some(last) if f.start < last.end => last.end = last.end.max(f.end),
                _ => merged.push(f),
            }
        }
        merged
    }

    /// `text` with every secret replaced by `[redacted: rule]`, when it
    /// holds one.
    pub fn redact(&'static self, text: &str) -> Option<String> {
        let found = self.find(text);
        (!found.is_empty()).then(|| replaced(text, &found))
    }
}

/// `text` with each of `found` (from [`Rules::find`] on it) replaced by
/// `[redacted: rule]`.
pub fn replaced(text: &str, found: &[Found]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in found {
        out.push_str(&text[at..f.start]);
        out.push_str("[redacted: ");
        out.push_str(f.rule);
        out.push(']');
        at = f.end;
    }
    out.push_str(&text[at..]);
    out
}

fn floor_char(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> &'static Rules {
        RULES.as_ref().expect("the shipped rules are read")
    }

    #[test]
    fn every_shipped_rule_compiles() {
        let rules = rules();
        assert!(rules.len() > 400, "{}", rules.len());
        for rule in &rules.rules {
            assert!(rule.compiled().is_some(), "{}", rule.decl.id);
            if let Some(filter) = &rule.decl.filter {
                filter_regexes_compile(filter, &rule.decl.id);
            }
        }
    }

    /// Every regex a filter names compiles (one that did not would make
    /// its test unknown).
    fn filter_regexes_compile(e: &Expr, id: &str) {
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Call(name, args) => {
                    if name == "matchesAny" || name == "findMatch" {
                        for p in args.get(1).and_then(literal_strings).unwrap_or_default() {
                            assert!(regex(p).is_some(), "{id}: {p}");
                        }
                    }
                    stack.extend(args);
                }
                Expr::List(items) => stack.extend(items),
                Expr::Bin(_, l, r) | Expr::Index(l, r) => stack.extend([&**l, &**r]),
                Expr::Not(i) => stack.push(i),
                Expr::Cond(c, a, b) => stack.extend([&**c, &**a, &**b]),
                Expr::Slice(x, lo, hi) => {
                    stack.push(x);
                    stack.extend(lo.as_deref());
                    stack.extend(hi.as_deref());
                }
                Expr::Let(bindings, body) => {
                    stack.extend(bindings.iter().map(|(_, b)| b));
                    stack.push(body);
                }
                Expr::Unknown(_) => panic!("{id}: a filter the generator could not read"),
                Expr::Str(_) | Expr::Num(_) | Expr::Bool(_) | Expr::Var(_) => {}
            }
        }
    }

    #[test]
    fn many_candidates_cost_a_bounded_number_of_filters() {
        // Thousands of candidates: the first ones go through the filter;
        // past them, a vendor's token is redacted and a generic rule's
        // finding is not.
        let text: String = (0..3000)
            .map(|i| format!("password = \"Zq{i}x9Lm2Pw7Rt\"\n"))
            .collect();
        let out = rules().redact(&text).unwrap();
        assert_eq!(
            out.matches("[redacted: generic-password]").count(),
            MAX_FILTERED
        );
        let text: String = (0..3000)
            .map(|i| format!("AIKIDO_TOKEN=AIK_CI_a1B2c3D4e5F6g7H8i9J0k{i:04}\n"))
            .collect();
        let out = rules().redact(&text).unwrap();
        assert_eq!(out.matches("[redacted: aikido-ci-token]").count(), 3000);
    }

    #[test]
    fn a_secret_is_redacted_and_a_placeholder_is_not() {
        let rules = rules();
        let text = "AIKIDO_TOKEN=AIK_CI_a1B2c3D4e5F6g7H8i9J0k1L2 and more";
        assert_eq!(
            rules.redact(text).as_deref(),
            Some("AIKIDO_TOKEN=[redacted: aikido-ci-token] and more")
        );
        assert_eq!(
            rules.redact("AIKIDO_TOKEN=AIK_CI_aaaaaaaaaaaaaaaaaaaaaaaa"),
            None
        );
        assert_eq!(rules.redact("nothing to see here"), None);
    }

    /// `expr` (the generator's JSON) run on a finding of `secret` in
    /// `text`.
    fn run(expr: serde_json::Value, text: &str, secret: &str) -> Val<'static> {
        let expr: Expr = serde_json::from_value(expr).unwrap();
        let at = text.find(secret).unwrap();
        let breaks: Vec<usize> = memchr::memchr_iter(b'\n', text.as_bytes()).collect();
        let f = Finding {
            text: text.as_bytes(),
            breaks: &breaks,
            whole: at..at + secret.len(),
            secret: at..at + secret.len(),
        };
        match eval(&compile(&expr), &f, &mut Vec::new()) {
            Val::Str(s) => Val::Str(Cow::Owned(s.into_owned())),
            Val::List(_) => Val::Unknown,
            Val::Num(n) => Val::Num(n),
            Val::Bool(b) => Val::Bool(b),
            Val::Unknown => Val::Unknown,
        }
    }

    #[test]
    fn an_unknown_part_of_a_filter_never_decides_alone() {
        use serde_json::json;
        let unknown = json!({"unknown": true});
        let low = json!({"bin": ["<=", {"call": ["entropy", [{"index": [{"var": "finding"}, {"str": "secret"}]}]]}, {"num": 3.0}]});
        assert_eq!(
            run(json!({"bin": ["||", unknown, unknown]}), "abc", "abc"),
            Val::Unknown
        );
        assert_eq!(run(json!({"not": unknown}), "abc", "abc"), Val::Unknown);
        assert_eq!(
            run(json!({"bin": ["||", low, unknown]}), "abc", "abc"),
            Val::Bool(true)
        );
        assert_eq!(
            run(
                json!({"bin": ["&&", {"bool": false}, unknown]}),
                "abc",
                "abc"
            ),
            Val::Bool(false)
        );
        // A token ratio: bytes per cl100k token; none for a short text
        // with a line break (Betterleaks rewrites it first).
        assert_eq!(
            run(
                json!({"call": ["tokenRatio", [{"str": "x"}]]}),
                "abc",
                "abc"
            ),
            Val::Num(1.0)
        );
        assert_eq!(
            run(
                json!({"call": ["tokenRatio", [{"str": "a\nb"}]]}),
                "abc",
                "abc"
            ),
            Val::Unknown
        );
    }

    #[test]
    fn a_filter_reads_the_line_around_its_finding() {
        use serde_json::json;
        // let prefix = findMatch(raw[lineStart:matchStart], "[\\w.-]*$");
        // lower(prefix) contains "client"
        let expr = json!({"let": [[["prefix", {"call": ["findMatch", [
            {"slice": [{"index": [{"var": "finding"}, {"str": "fragment_raw"}]},
                       {"index": [{"var": "finding"}, {"str": "match_line_start_idx"}]},
                       {"index": [{"var": "finding"}, {"str": "match_start_idx"}]}]},
            {"str": "[\\w.-]*$"}]]}]],
            {"bin": ["contains", {"call": ["lower", [{"var": "prefix"}]]}, {"str": "client"}]}]});
        assert_eq!(
            run(expr.clone(), "a\nBOX_CLIENT_ID=abc123\nb", "abc123"),
            Val::Bool(false)
        );
        assert_eq!(
            run(expr.clone(), "a\nBOX_CLIENT_abc123\nb", "abc123"),
            Val::Bool(true)
        );
        assert_eq!(run(expr, "x\nSECRET_abc123", "abc123"), Val::Bool(false));
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_searched_without_panic(text in "\\PC{0,300}") {
            let rules = rules();
            if let Some(out) = rules.redact(&text) {
                proptest::prop_assert!(out.contains("[redacted: "));
            }
        }
    }
}
