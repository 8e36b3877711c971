//! Offered tools, name resolution and recognising call-shaped JSON.

use serde_json::{Map, Value};

use super::json_scan::{self, Scan};
use super::offered::{ParsedCall, Tools};
use super::text::{Input, Piece};

/// Name and arguments of a call-shaped JSON object, before checking the name.
///
/// Accepted shapes: `{"name", "arguments"|"parameters"|"args"}`, the same
/// with `tool_name` or a string `function` instead of `name`, and OpenAI's
/// `{"function": {"name", "arguments"}}`. Arguments must be an object, a
/// JSON string holding an object, or null (meaning none). A tool's
/// *definition* — a `description` beside `parameters` that is a JSON Schema
/// (`type` and `properties`) — is not a call.
pub(super) fn call_shape(v: &Value) -> Option<(String, Map<String, Value>)> {
    let obj = v.as_object()?;
    if let Some(inner @ Value::Object(_)) = obj.get("function") {
        return call_shape(inner);
    }
    if obj.get("description").is_some_and(Value::is_string)
        && obj
            .get("parameters")
            .and_then(Value::as_object)
            .is_some_and(|p| {
                p.contains_key("type") && p.get("properties").is_some_and(Value::is_object)
            })
    {
        return None;
    }
    let name = ["name", "tool_name", "function"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))?;
    let args = ["arguments", "parameters", "args"]
        .iter()
        .find_map(|k| obj.get(*k))?;
    Some((name.to_string(), args_object(args)?))
}

/// Arguments as an object: an object as is, a JSON string decoded, null as
/// no arguments.
pub(super) fn args_object(v: &Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m.clone()),
        Value::Null => Some(Map::new()),
        Value::String(s) => {
            let s = s.trim();
            if s.is_empty() {
                return Some(Map::new());
            }
            match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(m)) => Some(m),
                _ => None,
            }
        }
        _ => None,
    }
}

/// One element of a call-shaped value: a call of an offered tool, or a
/// call-shaped element naming a tool that was not offered.
pub(super) enum Elem<'v> {
    Call(ParsedCall),
    Unoffered(&'v Value),
}

/// Recognise a JSON value that holds calls: one call object, an array of
/// them, or `{"tool_calls": [...]}`. `None` when the value is not of that
/// shape (every element must be call-shaped, and there must be one).
pub(super) fn classify<'v>(v: &'v Value, tools: &Tools) -> Option<Vec<Elem<'v>>> {
    let list: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => match o.get("tool_calls") {
            Some(Value::Array(a)) if call_shape(v).is_none() => a.iter().collect(),
            _ => vec![v],
        },
        _ => return None,
    };
    if list.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        let (name, args) = call_shape(e)?;
        out.push(match tools.resolve(&name) {
            Some(name) => Elem::Call(ParsedCall::new(name, Value::Object(args))),
            None => Elem::Unoffered(e),
        });
    }
    Some(out)
}

/// Parse the complete JSON value at `span` (optionally from repaired text)
/// and turn it into pieces: calls, and content for call-shaped elements
/// naming unoffered tools. `elems` are the element spans of a top-level
/// array when known. `None` when the value is not call-shaped; otherwise the
/// pieces and how many of them are calls (possibly zero).
pub(super) fn span_pieces(
    src: &Input,
    span: (usize, usize),
    repaired: Option<&str>,
    elems: &[(usize, usize)],
) -> Option<(Vec<Piece>, usize)> {
    let text = repaired.unwrap_or_else(|| src.slice(span.0, span.1));
    let v: Value = serde_json::from_str(text).ok()?;
    let list = classify(&v, src.tools)?;
    let spans_usable = v.is_array() && elems.len() == list.len();
    let single = !v.is_array() && list.len() == 1;
    let mut pieces = Vec::with_capacity(list.len());
    let mut n = 0;
    for (k, e) in list.into_iter().enumerate() {
        match e {
            Elem::Call(c) => {
                n += 1;
                pieces.push(Piece::Call(c));
            }
            Elem::Unoffered(raw) => match elems.get(k) {
                Some(&(a, b)) if spans_usable => pieces.push(Piece::Range(a, b)),
                _ if single => pieces.push(Piece::Range(span.0, span.1)),
                _ => pieces.push(Piece::Text(raw.to_string())),
            },
        }
    }
    Some((pieces, n))
}

/// Scan and parse one JSON object at `s` as arguments (for forms where the
/// name is outside the JSON). Returns the object and its end.
pub(super) fn json_args(
    src: &Input,
    s: usize,
) -> super::text::Outcome<(Map<String, Value>, usize)> {
    use super::text::Outcome;
    match src.at(s) {
        Some(b'{') => {}
        Some(_) => return Outcome::No,
        None => return src.need(),
    }
    match json_scan::scan(src.b, s, src.eof, false) {
        Scan::More => Outcome::More,
        Scan::Fail(_) => Outcome::No,
        Scan::Complete(c) => match serde_json::from_str::<Value>(src.slice(s, c.end)) {
            Ok(Value::Object(m)) => Outcome::Ok((m, c.end)),
            _ => Outcome::No,
        },
    }
}
