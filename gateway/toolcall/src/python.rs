//! Pythonic tool calls: `[get_weather(city="Paris"), add(a=1, b=2)]`.
//!
//! Arguments must be keyword arguments whose values are Python literals:
//! strings (both quote styles, triple quotes, escapes), ints, floats,
//! `True`/`False`/`None` (and the JSON spellings `true`/`false`/`null`),
//! lists, tuples and dicts, nested (parsed by `python_literal`).

use serde_json::{Map, Value};

use super::offered::ParsedCall;
use super::python_literal::{literal, ws};
use super::text::{Input, Outcome, is_ident_char, is_ident_start};

/// A dotted identifier at `i`: its end, or `More`/`No`.
fn dotted_name(src: &Input, i: usize) -> Outcome<usize> {
    let mut j = i;
    loop {
        match src.at(j) {
            Some(c) if is_ident_start(c) => j += 1,
            Some(_) => return Outcome::No,
            None => return src.need(),
        }
        while src.at(j).is_some_and(is_ident_char) {
            j += 1;
        }
        match src.at(j) {
            None => return src.need(),
            Some(b'.') => j += 1,
            Some(_) => return Outcome::Ok(j),
        }
    }
}

/// One call `name(k=v, ...)` at `s`. The name must be an offered tool (its
/// values are coerced to the tool's schema where every call is emitted).
pub(super) fn py_call(src: &Input, s: usize) -> Outcome<(ParsedCall, usize)> {
    let name_end = match dotted_name(src, s) {
        Outcome::Ok(e) => e,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let mut i = name_end;
    while matches!(src.at(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    match src.at(i) {
        None => return src.need(),
        Some(b'(') => {}
        Some(_) => return Outcome::No,
    }
    let Some(name) = src.tools.resolve(src.slice(s, name_end)) else {
        return Outcome::No;
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
            Some(c) if is_ident_start(c) || c >= 0x80 => {}
            Some(_) => return Outcome::No,
        }
        // Python's identifiers may hold letters beyond ASCII (`año=2024`):
        // a byte of a multi-byte character is taken as part of the name.
        let k0 = i;
        while src.at(i).is_some_and(|c| is_ident_char(c) || c >= 0x80) {
            i += 1;
        }
        let key = src.slice(k0, i).to_string();
        i = ws(src, i);
        match (src.at(i), src.at(i + 1)) {
            (None, _) => return src.need(),
            (Some(b'='), None) => return src.need(),
            (Some(b'='), Some(b'=')) => return Outcome::No,
            (Some(b'='), Some(_)) => i += 1,
            _ => return Outcome::No,
        }
        i = ws(src, i);
        let (v, e) = match literal(src, i) {
            Outcome::Ok(x) => x,
            Outcome::No => return Outcome::No,
            Outcome::More => return Outcome::More,
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
            Some(_) => return Outcome::No,
        }
    }
    Outcome::Ok((ParsedCall::new(name, Value::Object(args)), i))
}

/// A bracketed list of calls `[a(...), b(...)]` at `s`. Every element must
/// be a call of an offered tool; the list must not be empty.
pub(super) fn py_list(src: &Input, s: usize) -> Outcome<(Vec<ParsedCall>, usize)> {
    if src.at(s) != Some(b'[') {
        return Outcome::No;
    }
    let mut i = s + 1;
    let mut calls = Vec::new();
    loop {
        i = ws(src, i);
        match src.at(i) {
            None => return src.need(),
            Some(b']') if !calls.is_empty() => return Outcome::Ok((calls, i + 1)),
            _ => {}
        }
        match py_call(src, i) {
            Outcome::Ok((c, e)) => {
                calls.push(c);
                i = ws(src, e);
            }
            Outcome::No => return Outcome::No,
            Outcome::More => return Outcome::More,
        }
        match src.at(i) {
            None => return src.need(),
            Some(b',') => i += 1,
            Some(b']') => return Outcome::Ok((calls, i + 1)),
            Some(_) => return Outcome::No,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::offered::OfferedTool;
    use super::super::python_literal::literal_str;
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
        let tools = super::super::offered::Tools::new(&[
            OfferedTool {
                name: "f".into(),
                parameters: json!({"type": "object"}),
            },
            OfferedTool {
                name: "a.b".into(),
                parameters: json!({"type": "object"}),
            },
        ]);
        let src = Input::new("[f(x=1, y='z'), a.b()] tail", true, &tools);
        match py_list(&src, 0) {
            Outcome::Ok((c, e)) => {
                assert_eq!(c.len(), 2);
                assert_eq!(c[0].arguments, json!({"x": 1, "y": "z"}));
                assert_eq!(c[1].name, "a.b");
                assert_eq!(e, 22);
            }
            _ => panic!("no parse"),
        }
        let src = Input::new("[f(1)]", true, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::No));
        let src = Input::new("[g(x=1)]", true, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::No));
        let src = Input::new("[f(x='a", false, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::More));
    }
}
