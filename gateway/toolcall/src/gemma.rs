//! Gemma 4 (`<|tool_call>call:NAME{k:<|"|>v<|"|>,n:1}<tool_call|>`) and
//! FunctionGemma (`<start_function_call>call:NAME{k:<escape>v<escape>}
//! <end_function_call>`): one call per block, its arguments in Gemma's own
//! notation — keys bare or quoted, strings between the dialect's quote
//! token, numbers, `true`/`false`/`null` and other words bare, nested
//! objects and arrays. The commas between members may be missing
//! (FunctionGemma leaves them out). Nesting is kept on the heap and capped
//! like JSON's.
//!
//! Variants read alike: a stray colon after the opener
//! (`<|tool_call>:call:f{…}`), the `call:` word left out, the opener split
//! into `<call>` (multimodal prompts), and a bare `call:NAME{…}` with no
//! opener at all (after a thought channel, or on its own line); a bare call
//! needs an offered name and arguments that read to their end.
//!
//! A key or value in double quotes (`q:"a,b:c"`) is one string with JSON's
//! escapes: the notation's separators inside it are text.
//!
//! Repairs, at the end of the output only and counted
//! ([`ParsedCall::repaired`]): a last string the model never closed, when
//! what follows its opening quote ends with exactly the closers of the open
//! containers and/or the block's closing marker (`command:<|"|>ls}<tool_call|>`
//! is `{"command": "ls"}`); and containers left open by a complete last
//! value that the block's closing marker follows (`n:1<tool_call|>`). A
//! string or number the text merely stops in is not repaired.

use serde_json::{Map, Value};

use super::json_scan::MAX_DEPTH;
use super::offered::ParsedCall;
use super::text::{
    Block, Input, MarkerMatch, Outcome, Piece, dotted_name_end, is_ident_char, is_ws, json_quoted,
    unescape,
};

struct Dialect {
    open: &'static str,
    closes: &'static [&'static str],
    quote: &'static str,
}

const GEMMA4: Dialect = Dialect {
    open: "<|tool_call>",
    closes: &["<tool_call|>", "<turn|>"],
    quote: "<|\"|>",
};

const FUNCTION_GEMMA: Dialect = Dialect {
    open: "<start_function_call>",
    closes: &["<end_function_call>"],
    quote: "<escape>",
};

/// Gemma 4's opener as multimodal prompts split it: `<call>NAME{…}`.
const SPLIT_OPENER: Dialect = Dialect {
    open: "<call>",
    closes: &["</call>", "<tool_call|>", "<turn|>"],
    quote: "<|\"|>",
};

const DIALECTS: &[&Dialect] = &[&GEMMA4, &FUNCTION_GEMMA, &SPLIT_OPENER];

/// The longest name, key or bare value read.
const MAX_WORD: usize = 4096;

/// A Gemma call block at `s`.
pub(super) fn block(src: &Input, s: usize) -> Outcome<Block> {
    let mut more = false;
    for d in DIALECTS {
        match src.marker(s, d.open) {
            MarkerMatch::Yes(p) => {
                let mut p = src.skip_ws(p);
                // A stray colon after the opener (`<|tool_call>:call:f{…}`).
                match src.at(p) {
                    None => return src.need(),
                    Some(b':') => p += 1,
                    Some(_) => {}
                }
                return call(src, p, d);
            }
            MarkerMatch::More => more = true,
            MarkerMatch::No => {}
        }
    }
    if more { Outcome::More } else { Outcome::No }
}

/// A bare `call:NAME{…}` at `s`, with no opener (the caller checked that a
/// word starts there). The arguments may use either dialect's quote token.
pub(super) fn bare_block(src: &Input, s: usize) -> Outcome<Block> {
    match src.marker(s, "call:") {
        MarkerMatch::Yes(_) => {}
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    }
    // In order: a later dialect is tried only once the earlier one said no.
    for d in [&GEMMA4, &FUNCTION_GEMMA] {
        match call(src, s, d) {
            Outcome::No => {}
            other => return other,
        }
    }
    Outcome::No
}

/// `call:NAME{args}` (the `call:` optional) at `p`, then the dialect's
/// closing marker (optional at the end, and after a bare call).
fn call(src: &Input, p: usize, d: &Dialect) -> Outcome<Block> {
    let n0 = match src.marker(p, "call:") {
        MarkerMatch::Yes(e) => e,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => p,
    };
    let Some(j) = dotted_name_end(src, n0, MAX_WORD) else {
        return Outcome::No;
    };
    if j >= src.len() {
        return src.need();
    }
    if src.at(j) != Some(b'{') {
        return Outcome::No;
    }
    let Some(name) = src.tools.resolve(src.slice(n0, j)) else {
        return Outcome::No;
    };
    let (args, e, repaired) = match value(src, j, d) {
        Outcome::Ok((Value::Object(m), e, r)) => (m, e, r),
        Outcome::Ok(_) | Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let c = src.skip_ws(e);
    if c >= src.len() {
        return if src.eof {
            Outcome::Ok(one(name, args, e, repaired))
        } else {
            Outcome::More
        };
    }
    for close in d.closes {
        match src.marker(c, close) {
            MarkerMatch::Yes(end) => return Outcome::Ok(one(name, args, end, repaired)),
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No => {}
        }
    }
    Outcome::Ok(one(name, args, e, repaired))
}

fn one(name: String, args: Map<String, Value>, end: usize, repaired: bool) -> Block {
    let mut c = ParsedCall::new(name, Value::Object(args));
    if repaired {
        c = c.mark_repaired();
    }
    Block {
        pieces: vec![Piece::Call(c)],
        end,
    }
}

enum Cont {
    Obj(Map<String, Value>, Option<String>),
    Arr(Vec<Value>),
}

impl Cont {
    fn closer(&self) -> u8 {
        match self {
            Cont::Obj(..) => b'}',
            Cont::Arr(_) => b']',
        }
    }
}

/// A string at `i` (the dialect's quote token, or `"` with JSON escapes):
/// its text and end, or its text up to the end of the output when it is
/// never closed (`None` for the end).
fn string(src: &Input, i: usize, d: &Dialect) -> Outcome<(String, Option<usize>)> {
    if src.at(i) == Some(b'"') {
        return match json_quoted(src, i) {
            Outcome::Ok(Some(q1)) => Outcome::Ok((unescape(src.slice(i + 1, q1)), Some(q1 + 1))),
            Outcome::Ok(None) => Outcome::Ok((src.slice(i + 1, src.len()).to_string(), None)),
            Outcome::No => Outcome::No,
            Outcome::More => Outcome::More,
        };
    }
    let q0 = i + d.quote.len();
    match src.find(d.quote, q0) {
        Some(q1) => Outcome::Ok((src.slice(q0, q1).to_string(), Some(q1 + d.quote.len()))),
        None if src.eof => Outcome::Ok((src.slice(q0, src.len()).to_string(), None)),
        None => Outcome::More,
    }
}

/// Whether a string starts at `i`.
fn string_at(src: &Input, i: usize, d: &Dialect) -> MarkerMatch {
    if src.at(i) == Some(b'"') {
        return MarkerMatch::Yes(i + 1);
    }
    src.marker(i, d.quote)
}

/// The repair of a last string never closed, whose text (from its opening
/// quote to the end of the output) is `tail`: the string's own text, when
/// the tail ends with exactly the closers of the open containers (`stack`,
/// innermost last) and/or one of the block's closing markers, whitespace
/// allowed around them. `None` when the tail ends otherwise, or with only
/// some of the closers: then the output was cut off, and nothing is read.
fn unclosed_tail<'t>(tail: &'t str, stack: &[Cont], d: &Dialect) -> Option<&'t str> {
    let mut rest = tail.trim_end();
    let mut marker = false;
    if let Some(m) = d.closes.iter().find(|m| rest.ends_with(**m)) {
        rest = rest.get(..rest.len() - m.len())?.trim_end();
        marker = true;
    }
    let mut matched = 0;
    let mut cut = rest;
    for c in stack.iter().rev() {
        let r = cut.trim_end();
        match r.strip_suffix(char::from(c.closer())) {
            Some(before) => {
                cut = before;
                matched += 1;
            }
            None => break,
        }
    }
    if matched == stack.len() {
        Some(cut)
    } else if matched == 0 && marker {
        Some(rest)
    } else {
        None
    }
}

/// A bare word at `i`, up to a delimiter of the notation.
fn bare<'a>(src: &Input<'a>, i: usize, stops: &[u8]) -> Outcome<(&'a str, usize)> {
    let mut j = i;
    loop {
        match src.at(j) {
            None => return src.need(),
            Some(c) if stops.contains(&c) => break,
            Some(_) => j += 1,
        }
        if j - i > MAX_WORD {
            return Outcome::No;
        }
    }
    let w = src.slice(i, j).trim();
    if w.is_empty() {
        return Outcome::No;
    }
    Outcome::Ok((w, j))
}

/// A bare value read as what it spells: a number, `true`, `false`,
/// `null`, else the word as a string.
fn scalar(w: &str) -> Value {
    match w {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        _ => match serde_json::from_str::<Value>(w) {
            Ok(v @ Value::Number(_)) => v,
            _ => Value::String(w.to_string()),
        },
    }
}

/// Close every open container around the complete value `v`: the
/// outermost value.
fn close_all(stack: &mut Vec<Cont>, mut v: Value) -> Value {
    while let Some(top) = stack.pop() {
        v = match top {
            Cont::Obj(mut m, key) => {
                if let Some(k) = key {
                    m.insert(k, v);
                }
                Value::Object(m)
            }
            Cont::Arr(mut items) => {
                items.push(v);
                Value::Array(items)
            }
        };
    }
    v
}

/// One value of the notation at `i` (non-recursive): the value, its end,
/// and whether it was repaired.
fn value(src: &Input, mut i: usize, d: &Dialect) -> Outcome<(Value, usize, bool)> {
    let mut stack: Vec<Cont> = Vec::new();
    'value: loop {
        i = src.skip_ws(i);
        // Inside an object, a key (or the object's end) comes first.
        if let Some(Cont::Obj(_, None)) = stack.last() {
            let Some(c) = src.at(i) else {
                return src.need();
            };
            let v = if c == b'}' {
                i += 1;
                match stack.pop() {
                    Some(Cont::Obj(m, _)) => Value::Object(m),
                    _ => return Outcome::No,
                }
            } else {
                let (k, e) = match string_at(src, i, d) {
                    MarkerMatch::Yes(_) => match string(src, i, d) {
                        Outcome::Ok((k, Some(e))) => (k, e),
                        Outcome::Ok((_, None)) | Outcome::No => return Outcome::No,
                        Outcome::More => return Outcome::More,
                    },
                    MarkerMatch::More => return Outcome::More,
                    MarkerMatch::No => match bare(src, i, b":,{}[]<") {
                        Outcome::Ok((w, e)) => (w.to_string(), e),
                        Outcome::No => return Outcome::No,
                        Outcome::More => return Outcome::More,
                    },
                };
                let c = src.skip_ws(e);
                match src.at(c) {
                    None => return src.need(),
                    Some(b':') => {}
                    Some(_) => return Outcome::No,
                }
                if let Some(Cont::Obj(_, key)) = stack.last_mut() {
                    *key = Some(k);
                }
                i = c + 1;
                continue 'value;
            };
            match attach(&mut stack, v, src, i, d) {
                Attached::Done(v, e, r) => return Outcome::Ok((v, e, r)),
                Attached::Next(e) => {
                    i = e;
                    continue 'value;
                }
                Attached::Need => return src.need(),
                Attached::Bad => return Outcome::No,
            }
        }
        let Some(c) = src.at(i) else {
            return src.need();
        };
        let (v, e) = match c {
            b'{' | b'[' => {
                if stack.len() >= MAX_DEPTH {
                    return Outcome::No;
                }
                let q = src.skip_ws(i + 1);
                if c == b'[' && src.at(q) == Some(b']') {
                    (Value::Array(Vec::new()), q + 1)
                } else {
                    stack.push(if c == b'{' {
                        Cont::Obj(Map::new(), None)
                    } else {
                        Cont::Arr(Vec::new())
                    });
                    i += 1;
                    continue 'value;
                }
            }
            _ => match string_at(src, i, d) {
                MarkerMatch::Yes(_) => match string(src, i, d) {
                    Outcome::Ok((s, Some(e))) => (Value::String(s), e),
                    Outcome::Ok((tail, None)) => {
                        // Never closed: the last string of the output.
                        let Some(text) = unclosed_tail(&tail, &stack, d) else {
                            return Outcome::No;
                        };
                        let text = if src.at(i) == Some(b'"') {
                            unescape(text)
                        } else {
                            text.to_string()
                        };
                        let v = close_all(&mut stack, Value::String(text));
                        return Outcome::Ok((v, src.len(), true));
                    }
                    Outcome::No => return Outcome::No,
                    Outcome::More => return Outcome::More,
                },
                MarkerMatch::More => return Outcome::More,
                MarkerMatch::No => match bare(src, i, b",}]<") {
                    Outcome::Ok((w, e)) => (scalar(w), e),
                    Outcome::No => return Outcome::No,
                    Outcome::More => return Outcome::More,
                },
            },
        };
        match attach(&mut stack, v, src, e, d) {
            Attached::Done(v, e, r) => return Outcome::Ok((v, e, r)),
            Attached::Next(e) => i = e,
            Attached::Need => return src.need(),
            Attached::Bad => return Outcome::No,
        }
    }
}

enum Attached {
    /// The outermost value is complete (and whether it was repaired).
    Done(Value, usize, bool),
    /// The next member or element starts here.
    Next(usize),
    Need,
    Bad,
}

/// Put a complete value into its container, closing every container that
/// ends right after it. Containers the block's closing marker leaves open
/// are closed when only whitespace follows the marker to the end of the
/// output (a repair).
fn attach(stack: &mut Vec<Cont>, mut v: Value, src: &Input, mut i: usize, d: &Dialect) -> Attached {
    loop {
        if stack.is_empty() {
            return Attached::Done(v, i, false);
        }
        i = src.skip_ws(i);
        if src.at(i) == Some(b'<') {
            for m in d.closes {
                match src.marker(i, m) {
                    MarkerMatch::Yes(e) => {
                        let after = src.skip_ws(e);
                        if after < src.len() {
                            return Attached::Bad;
                        }
                        if !src.eof {
                            return Attached::Need;
                        }
                        return Attached::Done(close_all(stack, v), i, true);
                    }
                    MarkerMatch::More => return Attached::Need,
                    MarkerMatch::No => {}
                }
            }
        }
        let Some(top) = stack.last_mut() else {
            return Attached::Done(v, i, false);
        };
        let close = top.closer();
        match top {
            Cont::Obj(m, key) => {
                if let Some(k) = key.take() {
                    m.insert(k, v);
                }
            }
            Cont::Arr(items) => items.push(v),
        }
        match src.at(i) {
            None => return Attached::Need,
            Some(b',') => return Attached::Next(i + 1),
            Some(c) if c == close => {
                i += 1;
                v = match stack.pop() {
                    Some(Cont::Obj(m, _)) => Value::Object(m),
                    Some(Cont::Arr(items)) => Value::Array(items),
                    None => return Attached::Bad,
                };
            }
            // FunctionGemma may leave the comma out between members.
            Some(_) if close == b'}' => return Attached::Next(i),
            Some(_) => return Attached::Bad,
        }
    }
}

/// Whether `c` may precede a bare `call:` (the start of a word).
pub(super) fn starts_word(prev: Option<u8>) -> bool {
    prev.is_none_or(|c| is_ws(c) || !(is_ident_char(c) || c == b'.' || c == b'-' || c == b':'))
}
