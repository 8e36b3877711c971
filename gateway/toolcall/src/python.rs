//! Pythonic tool calls: `[get_weather(city="Paris"), add(a=1, b=2)]`.
//!
//! Arguments must be keyword arguments whose values are Python literals:
//! strings (both quote styles, triple quotes, escapes), ints, floats,
//! `True`/`False`/`None` (and the JSON spellings `true`/`false`/`null`),
//! lists, tuples and dicts, nested (parsed by `python_literal`).

use serde_json::{Map, Value};

use super::json_scan::MAX_DEPTH;
use super::offered::ParsedCall;
use super::python_literal::{literal, ws};
use super::text::{Input, Outcome, Piece, is_ident_char, is_ident_start};

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

/// A bracketed list of calls `[a(...), b(...)]` at `s`: the calls, in
/// order. A well-formed call of a tool that was not offered stays content
/// where it stands (as an unoffered element of a JSON array does); any
/// other element makes the list no list of calls, and so does a list
/// without one call of an offered tool.
pub(super) fn py_list(src: &Input, s: usize) -> Outcome<(Vec<Piece>, usize)> {
    if src.at(s) != Some(b'[') {
        return Outcome::No;
    }
    let mut i = s + 1;
    let mut pieces = Vec::new();
    let mut ncalls = 0;
    loop {
        i = ws(src, i);
        match src.at(i) {
            None => return src.need(),
            Some(b']') if !pieces.is_empty() => break,
            _ => {}
        }
        match py_call(src, i) {
            Outcome::Ok((c, e)) => {
                pieces.push(Piece::Call(c));
                ncalls += 1;
                i = ws(src, e);
            }
            Outcome::More => return Outcome::More,
            Outcome::No => match unoffered_call(src, i) {
                Outcome::Ok(e) => {
                    pieces.push(Piece::Range(i, e));
                    i = ws(src, e);
                }
                Outcome::More => return Outcome::More,
                Outcome::No => return Outcome::No,
            },
        }
        match src.at(i) {
            None => return src.need(),
            Some(b',') => i += 1,
            Some(b']') => break,
            Some(_) => return Outcome::No,
        }
    }
    if ncalls == 0 {
        return Outcome::No;
    }
    Outcome::Ok((pieces, i + 1))
}

/// The end of a call `name(…)` at `i` whose name is not an offered tool:
/// its parentheses balanced, quoted text skipped. `No` for an offered name
/// (its arguments did not read) and for anything that is not call-shaped.
fn unoffered_call(src: &Input, i: usize) -> Outcome<usize> {
    let name_end = match dotted_name(src, i) {
        Outcome::Ok(e) => e,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    if src.tools.resolve(src.slice(i, name_end)).is_some() {
        return Outcome::No;
    }
    let mut j = name_end;
    while matches!(src.at(j), Some(b' ' | b'\t')) {
        j += 1;
    }
    match src.at(j) {
        None => return src.need(),
        Some(b'(') => {}
        Some(_) => return Outcome::No,
    }
    let mut depth: usize = 0;
    let mut quote: Option<u8> = None;
    loop {
        let Some(c) = src.at(j) else {
            return src.need();
        };
        match (quote, c) {
            (Some(_), b'\\') => j += 1,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(c),
            (None, b'(' | b'[' | b'{') => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Outcome::No;
                }
            }
            (None, b')' | b']' | b'}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return if c == b')' {
                        Outcome::Ok(j + 1)
                    } else {
                        Outcome::No
                    };
                }
            }
            _ => {}
        }
        j += 1;
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
                parameters: (json!({"type": "object"})).into(),
            },
            OfferedTool {
                name: "a.b".into(),
                parameters: (json!({"type": "object"})).into(),
            },
        ]);
        let src = Input::new("[f(x=1, y='z'), a.b()] tail", true, &tools);
        match py_list(&src, 0) {
            Outcome::Ok((p, e)) => {
                let c: Vec<&ParsedCall> = p
                    .iter()
                    .filter_map(|p| match p {
                        Piece::Call(c) => Some(c),
                        _ => None,
                    })
                    .collect();
                assert_eq!(c.len(), 2);
                assert_eq!(c[0].arguments, json!({"x": 1, "y": "z"}));
                assert_eq!(c[1].name, "a.b");
                assert_eq!(e, 22);
            }
            _ => panic!("no parse"),
        }
        // A well-formed call of a tool not offered stays content; a list of
        // none but those is no list of calls.
        let src = Input::new("[f(x=1), g(y=b'z')]", true, &tools);
        match py_list(&src, 0) {
            Outcome::Ok((p, _)) => assert_eq!(p[1], Piece::Range(9, 18)),
            _ => panic!("no parse"),
        }
        let src = Input::new("[f(x=1), not_a_call]", true, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::No));
        let src = Input::new("[f(1)]", true, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::No));
        let src = Input::new("[g(x=1)]", true, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::No));
        let src = Input::new("[f(x='a", false, &tools);
        assert!(matches!(py_list(&src, 0), Outcome::More));
    }
}
