//! Pythonic tool calls: `[get_weather(city="Paris"), add(a=1, b=2)]`.
//!
//! Arguments must be keyword arguments whose values are Python literals:
//! strings (both quote styles, triple quotes, escapes), ints, floats,
//! `True`/`False`/`None` (and the JSON spellings `true`/`false`/`null`),
//! lists, tuples and dicts, nested. The literal parser keeps its container
//! stack on the heap and caps nesting at [`MAX_DEPTH`](super::json_scan::MAX_DEPTH).

use serde_json::{Map, Number, Value};

use super::ParsedCall;
use super::coerce;
use super::json_scan::MAX_DEPTH;
use super::text::{P, Src, is_ident_char, is_ident_start};

/// Skip whitespace (newlines included: arguments may span lines).
fn ws(src: &Src, mut i: usize) -> usize {
    while matches!(src.at(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// A dotted identifier at `i`: its end, or `More`/`No`.
fn dotted_name(src: &Src, i: usize) -> P<usize> {
    let mut j = i;
    loop {
        match src.at(j) {
            Some(c) if is_ident_start(c) => j += 1,
            Some(_) => return P::No,
            None => return src.need(),
        }
        while src.at(j).is_some_and(is_ident_char) {
            j += 1;
        }
        match src.at(j) {
            None => return src.need(),
            Some(b'.') => j += 1,
            Some(_) => return P::Ok(j),
        }
    }
}

/// One call `name(k=v, ...)` at `s`. The name must be an offered tool; the
/// values are coerced to the tool's schema.
pub(super) fn py_call(src: &Src, s: usize) -> P<(ParsedCall, usize)> {
    let name_end = match dotted_name(src, s) {
        P::Ok(e) => e,
        P::No => return P::No,
        P::More => return P::More,
    };
    let mut i = name_end;
    while matches!(src.at(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    match src.at(i) {
        None => return src.need(),
        Some(b'(') => {}
        Some(_) => return P::No,
    }
    let Some(name) = src.tools.resolve(src.slice(s, name_end)) else {
        return P::No;
    };
    i += 1;
    let mut args = Map::new();
    loop {
        i = ws(src, i);
        match src.at(i) {
            None => return src.need(),
            Some(b')') => {
                i += 1;
                break;
            }
            Some(c) if is_ident_start(c) => {}
            Some(_) => return P::No,
        }
        let k0 = i;
        while src.at(i).is_some_and(is_ident_char) {
            i += 1;
        }
        let key = src.slice(k0, i).to_string();
        i = ws(src, i);
        match (src.at(i), src.at(i + 1)) {
            (None, _) => return src.need(),
            (Some(b'='), None) => return src.need(),
            (Some(b'='), Some(b'=')) => return P::No,
            (Some(b'='), Some(_)) => i += 1,
            _ => return P::No,
        }
        i = ws(src, i);
        let (v, e) = match literal(src, i) {
            P::Ok(x) => x,
            P::No => return P::No,
            P::More => return P::More,
        };
        args.insert(key, v);
        i = ws(src, e);
        match src.at(i) {
            None => return src.need(),
            Some(b',') => i += 1,
            Some(b')') => {
                i += 1;
                break;
            }
            Some(_) => return P::No,
        }
    }
    let schema = src.tools.schema(&name);
    let arguments = Value::Object(coerce::coerce_map(args, schema));
    P::Ok((ParsedCall { name, arguments }, i))
}

/// A bracketed list of calls `[a(...), b(...)]` at `s`. Every element must
/// be a call of an offered tool; the list must not be empty.
pub(super) fn py_list(src: &Src, s: usize) -> P<(Vec<ParsedCall>, usize)> {
    if src.at(s) != Some(b'[') {
        return P::No;
    }
    let mut i = s + 1;
    let mut calls = Vec::new();
    loop {
        i = ws(src, i);
        match src.at(i) {
            None => return src.need(),
            Some(b']') if !calls.is_empty() => return P::Ok((calls, i + 1)),
            _ => {}
        }
        match py_call(src, i) {
            P::Ok((c, e)) => {
                calls.push(c);
                i = ws(src, e);
            }
            P::No => return P::No,
            P::More => return P::More,
        }
        match src.at(i) {
            None => return src.need(),
            Some(b',') => i += 1,
            Some(b']') => return P::Ok((calls, i + 1)),
            Some(_) => return P::No,
        }
    }
}

/// Parse a whole string as one Python literal (used to coerce text values).
pub(super) fn literal_str(s: &str) -> Option<Value> {
    let tools = super::calls::Tools::default();
    let src = Src::new(s, true, &tools);
    match literal(&src, 0) {
        P::Ok((v, e)) if src.skip_ws(e) == s.len() => Some(v),
        _ => None,
    }
}

enum Cont {
    List(Vec<Value>, u8),
    Dict(Map<String, Value>, Option<String>),
}

/// A Python literal at `i` (non-recursive).
pub(super) fn literal(src: &Src, mut i: usize) -> P<(Value, usize)> {
    let mut stack: Vec<Cont> = Vec::new();
    'value: loop {
        i = ws(src, i);
        let Some(c) = src.at(i) else {
            return src.need();
        };
        let mut v = match c {
            b'[' | b'(' | b'{' => {
                if stack.len() >= MAX_DEPTH {
                    return P::No;
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
            b'\'' | b'"' => match string(src, i) {
                P::Ok((s, e)) => {
                    i = e;
                    Value::String(s)
                }
                P::No => return P::No,
                P::More => return P::More,
            },
            b'0'..=b'9' | b'-' | b'+' | b'.' => match number(src, i) {
                P::Ok((n, e)) => {
                    i = e;
                    n
                }
                P::No => return P::No,
                P::More => return P::More,
            },
            c if is_ident_start(c) => {
                let mut j = i;
                while src.at(j).is_some_and(is_ident_char) {
                    j += 1;
                }
                if j >= src.len() && !src.eof {
                    return P::More;
                }
                let v = match src.slice(i, j) {
                    "True" | "true" => Value::Bool(true),
                    "False" | "false" => Value::Bool(false),
                    "None" | "null" => Value::Null,
                    _ => return P::No,
                };
                i = j;
                v
            }
            _ => return P::No,
        };
        // A value is complete: attach it to the enclosing container(s).
        loop {
            let Some(top) = stack.last_mut() else {
                return P::Ok((v, i));
            };
            i = ws(src, i);
            match top {
                Cont::Dict(_, key @ None) => {
                    let k = match v {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => return P::No,
                    };
                    match src.at(i) {
                        None => return src.need(),
                        Some(b':') => i += 1,
                        Some(_) => return P::No,
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
                        Sep::No => return P::No,
                        Sep::Next(e) => {
                            i = e;
                            continue 'value;
                        }
                        Sep::Close(e) => {
                            i = e;
                            v = match stack.pop() {
                                Some(Cont::Dict(m, _)) => Value::Object(m),
                                _ => return P::No,
                            };
                        }
                    }
                }
                Cont::List(items, close) => {
                    let close = *close;
                    items.push(v);
                    match sep_or_close(src, i, close) {
                        Sep::More => return src.need(),
                        Sep::No => return P::No,
                        Sep::Next(e) => {
                            i = e;
                            continue 'value;
                        }
                        Sep::Close(e) => {
                            i = e;
                            v = match stack.pop() {
                                Some(Cont::List(items, _)) => Value::Array(items),
                                _ => return P::No,
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

fn sep_or_close(src: &Src, i: usize, close: u8) -> Sep {
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

fn number(src: &Src, i: usize) -> P<(Value, usize)> {
    let mut j = i;
    while matches!(
        src.at(j),
        Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'_')
    ) {
        j += 1;
    }
    if j >= src.len() && !src.eof {
        return P::More;
    }
    let raw: String = src.slice(i, j).chars().filter(|&c| c != '_').collect();
    let raw = raw.strip_prefix('+').unwrap_or(&raw);
    if let Ok(n) = raw.parse::<i64>() {
        return P::Ok((Value::from(n), j));
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
        Some(n) => P::Ok((Value::Number(n), j)),
        None => P::No,
    }
}

/// A Python string literal at `i` (`'...'`, `"..."`, or triple-quoted).
fn string(src: &Src, i: usize) -> P<(String, usize)> {
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
    loop {
        let Some(rest) = src.t.get(j..) else {
            return P::No;
        };
        let Some(ch) = rest.chars().next() else {
            return src.need();
        };
        match ch {
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
                                return P::No;
                            }
                            return P::More;
                        }
                        let Some(c) = u32::from_str_radix(hex, 16).ok() else {
                            return P::No;
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
                    return P::Ok((out, j + 1));
                }
                match (src.at(j + 1), src.at(j + 2)) {
                    (Some(a), Some(b)) if a == q && b == q => return P::Ok((out, j + 3)),
                    (None, _) => return src.need(),
                    (Some(a), None) if a == q => return src.need(),
                    _ => {
                        out.push(c);
                        j += 1;
                    }
                }
            }
            '\n' if !triple => return P::No,
            c => {
                out.push(c);
                j += c.len_utf8();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::OfferedTool;
    use super::*;
    use serde_json::json;

    fn lit(s: &str) -> Option<Value> {
        literal_str(s)
    }

    #[test]
    fn literals() {
        assert_eq!(lit("'a\\'b'"), Some(json!("a'b")));
        assert_eq!(lit("\"x\\\"y\\n\""), Some(json!("x\"y\n")));
        assert_eq!(lit("'''tri'ple'''"), Some(json!("tri'ple")));
        assert_eq!(lit("-12"), Some(json!(-12)));
        assert_eq!(lit("1_000"), Some(json!(1000)));
        assert_eq!(lit("2.5e1"), Some(json!(25.0)));
        assert_eq!(
            lit("[1, 'a', None, True, false, (2, 3), {'k': [ ]},]"),
            Some(json!([1, "a", null, true, false, [2, 3], {"k": []}]))
        );
        assert_eq!(lit("{1: 'x'}"), Some(json!({"1": "x"})));
        assert_eq!(lit("'\\u00e9\\x41'"), Some(json!("éA")));
        assert_eq!(lit("[1, 2"), None);
        assert_eq!(lit("foo"), None);
        assert_eq!(lit("'unterminated"), None);
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(lit(&deep), None);
    }

    #[test]
    fn calls() {
        let tools = super::super::calls::Tools::new(&[
            OfferedTool {
                name: "f".into(),
                parameters: json!({"type": "object"}),
            },
            OfferedTool {
                name: "a.b".into(),
                parameters: json!({"type": "object"}),
            },
        ]);
        let src = Src::new("[f(x=1, y='z'), a.b()] tail", true, &tools);
        match py_list(&src, 0) {
            P::Ok((c, e)) => {
                assert_eq!(c.len(), 2);
                assert_eq!(c[0].arguments, json!({"x": 1, "y": "z"}));
                assert_eq!(c[1].name, "a.b");
                assert_eq!(e, 22);
            }
            _ => panic!("no parse"),
        }
        let src = Src::new("[f(1)]", true, &tools);
        assert!(matches!(py_list(&src, 0), P::No));
        let src = Src::new("[g(x=1)]", true, &tools);
        assert!(matches!(py_list(&src, 0), P::No));
        let src = Src::new("[f(x='a", false, &tools);
        assert!(matches!(py_list(&src, 0), P::More));
    }
}
