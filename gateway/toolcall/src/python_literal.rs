//! Python literals: strings (both quote styles, triple quotes, escapes),
//! ints, floats, `True`/`False`/`None` (and the JSON spellings
//! `true`/`false`/`null`), lists, tuples, sets (read as lists) and dicts,
//! nested. A quoted string may hold a raw line break (models write them
//! where Python would want `\n`). The parser keeps
//! its container stack on the heap and caps nesting at
//! [`MAX_DEPTH`](super::json_scan::MAX_DEPTH).

use serde_json::{Map, Number, Value};

use super::json_scan::MAX_DEPTH;
use super::offered::Tools;
use super::text::{Input, Outcome, is_ident_char, is_ident_start};

/// Skip whitespace (newlines included: arguments may span lines).
pub(super) fn ws(src: &Input, mut i: usize) -> usize {
    while matches!(src.at(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Parse a whole string as one Python literal (used to coerce text values).
pub(super) fn literal_str(s: &str) -> Option<Value> {
    let tools = Tools::default();
    let src = Input::new(s, true, &tools);
    match literal(&src, 0) {
        Outcome::Ok((v, e)) if src.skip_ws(e) == s.len() => Some(v),
        _ => None,
    }
}

enum Cont {
    List(Vec<Value>, u8),
    Dict(Map<String, Value>, Option<String>),
}

/// A Python literal at `i` (non-recursive).
pub(super) fn literal(src: &Input, mut i: usize) -> Outcome<(Value, usize)> {
    let mut stack: Vec<Cont> = Vec::new();
    'value: loop {
        i = ws(src, i);
        let Some(c) = src.at(i) else {
            return src.need();
        };
        let mut v = match c {
            b'[' | b'(' | b'{' => {
                if stack.len() >= MAX_DEPTH {
                    return Outcome::No;
                }
                let close = match c {
                    b'[' => b']',
                    b'(' => b')',
                    _ => b'}',
                };
                i = ws(src, i + 1);
                match src.at(i) {
                    None => return src.need(),
                    Some(x) if x == close => {
                        i += 1;
                        if c == b'{' {
                            Value::Object(Map::new())
                        } else {
                            Value::Array(Vec::new())
                        }
                    }
                    Some(_) => {
                        stack.push(if c == b'{' {
                            Cont::Dict(Map::new(), None)
                        } else {
                            Cont::List(Vec::new(), close)
                        });
                        continue 'value;
                    }
                }
            }
            b'\'' | b'"' => match string(src, i, false) {
                Outcome::Ok((s, e)) => {
                    i = e;
                    Value::String(s)
                }
                Outcome::No => return Outcome::No,
                Outcome::More => return Outcome::More,
            },
            b'0'..=b'9' | b'-' | b'+' | b'.' => match number(src, i) {
                Outcome::Ok((n, e)) => {
                    i = e;
                    n
                }
                Outcome::No => return Outcome::No,
                Outcome::More => return Outcome::More,
            },
            c if is_ident_start(c) => {
                let mut j = i;
                while src.at(j).is_some_and(is_ident_char) {
                    j += 1;
                }
                if j >= src.len() && !src.eof {
                    return Outcome::More;
                }
                let word = src.slice(i, j);
                if matches!(src.at(j), Some(b'\'' | b'"')) && is_string_prefix(word) {
                    // Bytes and unicode strings read as text; raw strings
                    // keep their backslashes.
                    match string(src, j, word.bytes().any(|c| c == b'r' || c == b'R')) {
                        Outcome::Ok((s, e)) => {
                            i = e;
                            Value::String(s)
                        }
                        Outcome::No => return Outcome::No,
                        Outcome::More => return Outcome::More,
                    }
                } else {
                    let v = match word {
                        "True" | "true" => Value::Bool(true),
                        "False" | "false" => Value::Bool(false),
                        "None" | "null" => Value::Null,
                        _ => return Outcome::No,
                    };
                    i = j;
                    v
                }
            }
            _ => return Outcome::No,
        };
        // A value is complete: attach it to the enclosing container(s).
        loop {
            let Some(top) = stack.last_mut() else {
                return Outcome::Ok((v, i));
            };
            i = ws(src, i);
            match top {
                Cont::Dict(map, None)
                    if map.is_empty() && matches!(src.at(i), Some(b',' | b'}')) =>
                {
                    // `{1, 2}`: a set, read as a list (LFM2 writes them).
                    *top = Cont::List(Vec::new(), b'}');
                }
                Cont::Dict(_, key @ None) => {
                    let k = match v {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => return Outcome::No,
                    };
                    match src.at(i) {
                        None => return src.need(),
                        Some(b':') => i += 1,
                        Some(_) => return Outcome::No,
                    }
                    *key = Some(k);
                    continue 'value;
                }
                Cont::Dict(map, key) => {
                    if let Some(k) = key.take() {
                        map.insert(k, v);
                    }
                    match sep_or_close(src, i, b'}') {
                        Sep::More => return src.need(),
                        Sep::No => return Outcome::No,
                        Sep::Next(e) => {
                            i = e;
                            continue 'value;
                        }
                        Sep::Close(e) => {
                            i = e;
                            v = match stack.pop() {
                                Some(Cont::Dict(m, _)) => Value::Object(m),
                                _ => return Outcome::No,
                            };
                        }
                    }
                }
                Cont::List(items, close) => {
                    let close = *close;
                    items.push(v);
                    match sep_or_close(src, i, close) {
                        Sep::More => return src.need(),
                        Sep::No => return Outcome::No,
                        Sep::Next(e) => {
                            i = e;
                            continue 'value;
                        }
                        Sep::Close(e) => {
                            i = e;
                            v = match stack.pop() {
                                Some(Cont::List(items, _)) => Value::Array(items),
                                _ => return Outcome::No,
                            };
                        }
                    }
                }
            }
        }
    }
}

enum Sep {
    /// A comma; another element starts at the position.
    Next(usize),
    /// The container closed (possibly after a trailing comma).
    Close(usize),
    More,
    No,
}

fn sep_or_close(src: &Input, i: usize, close: u8) -> Sep {
    match src.at(i) {
        None => Sep::More,
        Some(c) if c == close => Sep::Close(i + 1),
        Some(b',') => {
            let j = ws(src, i + 1);
            match src.at(j) {
                None => Sep::More,
                Some(c) if c == close => Sep::Close(j + 1),
                Some(_) => Sep::Next(j),
            }
        }
        Some(_) => Sep::No,
    }
}

fn number(src: &Input, i: usize) -> Outcome<(Value, usize)> {
    let mut j = i;
    while matches!(
        src.at(j),
        Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'_')
    ) {
        j += 1;
    }
    if j >= src.len() && !src.eof {
        return Outcome::More;
    }
    let raw: String = src.slice(i, j).chars().filter(|&c| c != '_').collect();
    let raw = raw.strip_prefix('+').unwrap_or(&raw);
    if let Ok(n) = raw.parse::<i64>() {
        return Outcome::Ok((Value::from(n), j));
    }
    let is_float = raw.bytes().any(|c| c.is_ascii_digit())
        && raw
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'));
    match raw
        .parse::<f64>()
        .ok()
        .filter(|_| is_float)
        .and_then(Number::from_f64)
    {
        Some(n) => Outcome::Ok((Value::Number(n), j)),
        None => Outcome::No,
    }
}

/// How many of its own quotes a single-quoted string may hold unescaped
/// (taken as text, see [`closes_string`]); past that it is no string.
/// This bounds how far one string is looked for, so that retrying from
/// every bracket of a long text stays linear.
const MAX_INNER_QUOTES: usize = 16;

/// At the end of the text: `true` when it is final, else `More`.
fn at_end(src: &Input) -> Outcome<bool> {
    if src.eof {
        Outcome::Ok(true)
    } else {
        Outcome::More
    }
}

fn is_string_prefix(w: &str) -> bool {
    matches!(
        w.to_ascii_lowercase().as_str(),
        "b" | "u" | "r" | "rb" | "br"
    )
}

/// Whether the quote just before `k` ends its string: what follows it
/// (spaces and line breaks aside) must be what may follow a value — a
/// comma and the next argument or element, a colon, closing brackets, or
/// the end. Models write the string's own quote unescaped inside it
/// (`command='sed -n '1,5p' f'`); such a quote, followed by anything
/// else, is text. After closing brackets, a quote right against them is
/// not Python either (`mul_symbol='\,'))"'`).
fn closes_string(src: &Input, k: usize) -> Outcome<bool> {
    let mut k = ws(src, k);
    let mut closers = 0;
    let mut tight = false;
    while let Some(b')' | b']' | b'}') = src.at(k) {
        closers += 1;
        let after = ws(src, k + 1);
        tight = after == k + 1;
        k = after;
    }
    let Some(c) = src.at(k) else {
        return at_end(src);
    };
    Outcome::Ok(match c {
        b',' => {
            let j = ws(src, k + 1);
            match element_start(src, j) {
                Outcome::Ok(b) => b,
                other => return other,
            }
        }
        b':' => true,
        _ if closers == 0 => false,
        b'\'' | b'"' => !tight,
        _ => true,
    })
}

/// Whether an argument or element (or a closing bracket, after a trailing
/// comma) starts at `j`.
fn element_start(src: &Input, j: usize) -> Outcome<bool> {
    let Some(c) = src.at(j) else {
        return at_end(src);
    };
    if !is_ident_start(c) {
        return Outcome::Ok(matches!(
            c,
            b'\'' | b'"' | b'0'
                ..=b'9' | b'-' | b'+' | b'.' | b'[' | b'{' | b'(' | b')' | b']' | b'}'
        ));
    }
    let mut e = j;
    while src.at(e).is_some_and(is_ident_char) {
        e += 1;
        if e - j > 256 {
            return Outcome::Ok(false);
        }
    }
    let word = src.slice(j, e);
    if matches!(word, "True" | "False" | "None" | "true" | "false" | "null") {
        return Outcome::Ok(true);
    }
    let mut k = e;
    while matches!(src.at(k), Some(b' ' | b'\t')) {
        k += 1;
    }
    match (src.at(k), src.at(k + 1)) {
        (None, _) | (Some(b'='), None) => at_end(src),
        (Some(b'='), Some(b'=')) => Outcome::Ok(false),
        (Some(b'=' | b'(' | b'.'), _) => Outcome::Ok(true),
        (Some(b'\'' | b'"'), _) => Outcome::Ok(is_string_prefix(word) && k == e),
        _ => Outcome::Ok(false),
    }
}

/// A Python string literal at `i` (`'...'`, `"..."`, or triple-quoted;
/// `raw`: its backslashes kept). A single-quoted string ends at the first
/// quote of its kind that [`closes_string`], among its first
/// [`MAX_INNER_QUOTES`] + 1.
fn string(src: &Input, i: usize, raw: bool) -> Outcome<(String, usize)> {
    let Some(q) = src.at(i) else {
        return src.need();
    };
    let triple = match (src.at(i + 1), src.at(i + 2)) {
        (Some(a), Some(b)) => a == q && b == q,
        (Some(a), None) if a == q => return src.need(),
        _ => false,
    };
    let mut j = if triple { i + 3 } else { i + 1 };
    let mut out = String::new();
    let mut taken = 0;
    loop {
        let Some(rest) = src.t.get(j..) else {
            return Outcome::No;
        };
        let Some(ch) = rest.chars().next() else {
            return src.need();
        };
        match ch {
            '\\' if raw => {
                let Some(e) = rest.get(1..).and_then(|r| r.chars().next()) else {
                    return src.need();
                };
                out.push('\\');
                out.push(e);
                j += 1 + e.len_utf8();
            }
            '\\' => {
                let Some(e) = rest.get(1..).and_then(|r| r.chars().next()) else {
                    return src.need();
                };
                j += 1 + e.len_utf8();
                match e {
                    '\n' => {}
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '0' => out.push('\0'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' | '\'' | '"' => out.push(e),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex = src.slice(j, j + n);
                        if hex.len() < n {
                            if src.eof || src.len() >= j + n {
                                return Outcome::No;
                            }
                            return Outcome::More;
                        }
                        let Some(c) = u32::from_str_radix(hex, 16).ok() else {
                            return Outcome::No;
                        };
                        out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
                        j += n;
                    }
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
            }
            c if c as u32 == u32::from(q) => {
                if !triple {
                    match closes_string(src, j + 1) {
                        Outcome::Ok(true) => return Outcome::Ok((out, j + 1)),
                        Outcome::Ok(false) if taken < MAX_INNER_QUOTES => {
                            taken += 1;
                            out.push(c);
                            j += 1;
                            continue;
                        }
                        Outcome::Ok(false) => return Outcome::No,
                        Outcome::More => return Outcome::More,
                        Outcome::No => return Outcome::No,
                    }
                }
                match (src.at(j + 1), src.at(j + 2)) {
                    (Some(a), Some(b)) if a == q && b == q => return Outcome::Ok((out, j + 3)),
                    (None, _) => return src.need(),
                    (Some(a), None) if a == q => return src.need(),
                    _ => {
                        out.push(c);
                        j += 1;
                    }
                }
            }
            c => {
                out.push(c);
                j += c.len_utf8();
            }
        }
    }
}
