//! Gemma 4 (`<|tool_call>call:NAME{k:<|"|>v<|"|>,n:1}<tool_call|>`) and
//! FunctionGemma (`<start_function_call>call:NAME{k:<escape>v<escape>}
//! <end_function_call>`): one call per block, its arguments in Gemma's own
//! notation — keys bare or quoted, strings between the dialect's quote
//! token, numbers, `true`/`false`/`null` and other words bare, nested
//! objects and arrays. The commas between members may be missing
//! (FunctionGemma leaves them out). Nesting is kept on the heap and capped
//! like JSON's.

use serde_json::{Map, Value};

use super::json_scan::MAX_DEPTH;
use super::offered::ParsedCall;
use super::text::{Block, Input, MarkerMatch, Outcome, Piece, is_ident_char};

struct Dialect {
    open: &'static str,
    closes: &'static [&'static str],
    quote: &'static str,
}

const DIALECTS: &[Dialect] = &[
    Dialect {
        open: "<|tool_call>",
        closes: &["<tool_call|>", "<turn|>"],
        quote: "<|\"|>",
    },
    Dialect {
        open: "<start_function_call>",
        closes: &["<end_function_call>"],
        quote: "<escape>",
    },
];

/// The longest name, key or bare value read.
const MAX_WORD: usize = 4096;

/// A Gemma call block at `s`.
pub(super) fn block(src: &Input, s: usize) -> Outcome<Block> {
    let mut more = false;
    for d in DIALECTS {
        match src.marker(s, d.open) {
            MarkerMatch::Yes(p) => return call(src, p, d),
            MarkerMatch::More => more = true,
            MarkerMatch::No => {}
        }
    }
    if more { Outcome::More } else { Outcome::No }
}

fn call(src: &Input, p: usize, d: &Dialect) -> Outcome<Block> {
    let p = src.skip_ws(p);
    let n0 = match src.marker(p, "call:") {
        MarkerMatch::Yes(e) => e,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    let mut j = n0;
    while src
        .at(j)
        .is_some_and(|c| is_ident_char(c) || c == b'-' || c == b'.')
    {
        j += 1;
        if j - n0 > MAX_WORD {
            return Outcome::No;
        }
    }
    if j >= src.len() {
        return src.need();
    }
    if src.at(j) != Some(b'{') {
        return Outcome::No;
    }
    let Some(name) = src.tools.resolve(src.slice(n0, j)) else {
        return Outcome::No;
    };
    let (args, e) = match value(src, j, d.quote) {
        Outcome::Ok((Value::Object(m), e)) => (m, e),
        Outcome::Ok(_) | Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let c = src.skip_ws(e);
    if c >= src.len() {
        return if src.eof {
            Outcome::Ok(one(name, args, e))
        } else {
            Outcome::More
        };
    }
    for close in d.closes {
        match src.marker(c, close) {
            MarkerMatch::Yes(end) => return Outcome::Ok(one(name, args, end)),
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No => {}
        }
    }
    Outcome::Ok(one(name, args, e))
}

fn one(name: String, args: Map<String, Value>, end: usize) -> Block {
    Block {
        pieces: vec![Piece::Call(ParsedCall::new(name, Value::Object(args)))],
        end,
    }
}

enum Cont {
    Obj(Map<String, Value>, Option<String>),
    Arr(Vec<Value>),
}

/// A quoted string at `i` (the quote token matched there): its text and end.
fn quoted(src: &Input, i: usize, quote: &'static str) -> Outcome<(String, usize)> {
    let q0 = i + quote.len();
    match src.find(quote, q0) {
        Some(q1) => Outcome::Ok((src.slice(q0, q1).to_string(), q1 + quote.len())),
        None => src.need(),
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

/// One value of the notation at `i` (non-recursive).
fn value(src: &Input, mut i: usize, quote: &'static str) -> Outcome<(Value, usize)> {
    let mut stack: Vec<Cont> = Vec::new();
    'value: loop {
        i = src.skip_ws(i);
        // Inside an object, a key (or the object's end) comes first.
        if let Some(Cont::Obj(_, key @ None)) = stack.last_mut() {
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
                let (k, e) = match src.marker(i, quote) {
                    MarkerMatch::Yes(_) => match quoted(src, i, quote) {
                        Outcome::Ok(x) => x,
                        Outcome::No => return Outcome::No,
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
                *key = Some(k);
                i = c + 1;
                continue 'value;
            };
            match attach(&mut stack, v, src, i) {
                Attached::Done(v, e) => return Outcome::Ok((v, e)),
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
            _ => match src.marker(i, quote) {
                MarkerMatch::Yes(_) => match quoted(src, i, quote) {
                    Outcome::Ok((s, e)) => (Value::String(s), e),
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
        match attach(&mut stack, v, src, e) {
            Attached::Done(v, e) => return Outcome::Ok((v, e)),
            Attached::Next(e) => i = e,
            Attached::Need => return src.need(),
            Attached::Bad => return Outcome::No,
        }
    }
}

enum Attached {
    /// The outermost value is complete.
    Done(Value, usize),
    /// The next member or element starts here.
    Next(usize),
    Need,
    Bad,
}

/// Put a complete value into its container, closing every container that
/// ends right after it.
fn attach(stack: &mut Vec<Cont>, mut v: Value, src: &Input, mut i: usize) -> Attached {
    loop {
        let Some(top) = stack.last_mut() else {
            return Attached::Done(v, i);
        };
        i = src.skip_ws(i);
        let close = match top {
            Cont::Obj(m, key) => {
                if let Some(k) = key.take() {
                    m.insert(k, v);
                }
                b'}'
            }
            Cont::Arr(items) => {
                items.push(v);
                b']'
            }
        };
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
