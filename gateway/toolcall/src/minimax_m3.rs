//! MiniMax-M3: every tag is prefixed with the namespace token
//! `]<]minimax[>[`, and an argument is named by its element:
//!
//! ```text
//! ]<]minimax[>[<tool_call>
//! ]<]minimax[>[<invoke name="f">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>
//! ]<]minimax[>[</tool_call>
//! ```
//!
//! An element holding elements is an object (a name repeated becomes an
//! array), one holding only `<item>` elements an array, any other its text
//! (typed by the tool's schema where calls are emitted). Nesting is kept on
//! the heap and capped like JSON's.

use serde_json::{Map, Value};

use super::coerce::{declares_type, prop_schema};
use super::json_scan::MAX_DEPTH;
use super::offered::ParsedCall;
use super::sections::Section;
use super::text::{Input, MarkerMatch, attrs, is_ident_char};

const NS: &str = "]<]minimax[>[";
const OPEN: &str = "]<]minimax[>[<tool_call>";
const CLOSE: &str = "]<]minimax[>[</tool_call>";
const INVOKE: &str = "]<]minimax[>[<invoke";
const INVOKE_CLOSE: &str = "]<]minimax[>[</invoke>";

/// A block: the calls of one `<tool_call>`, its closer optional at the
/// end. An invoke of a tool that was not offered stays content.
pub(super) const SECTION: Section = Section {
    begins: &[OPEN],
    end: CLOSE,
    call_begin: INVOKE,
    call_end: INVOKE_CLOSE,
    call_begin_optional: false,
    sep: None,
    item: invoke,
};

/// One invoke's attributes and elements, in a view ending at its closer.
fn invoke(src: &Input, p: usize) -> Option<ParsedCall> {
    let te = src.find(">", p)?;
    let attrs = attrs(src.slice(p, te));
    let name = src
        .tools
        .resolve(attrs.iter().find(|(k, _)| *k == "name")?.1)?;
    let args = elements(src, te + 1, src.tools.schema(&name))?;
    Some(ParsedCall::new(name, Value::Object(args)))
}

/// An element being read: its name, its schema, the children read so
/// far, and where its text starts.
struct Open<'s> {
    name: String,
    schema: Option<&'s Value>,
    children: Vec<(String, Value)>,
    text_from: usize,
}

/// The element tag `]<]minimax[>[<name>` (or `</name>`) at `i`: the name,
/// whether it closes, and its end.
fn tag<'a>(src: &Input<'a>, i: usize) -> Option<(&'a str, bool, usize)> {
    let MarkerMatch::Yes(mut j) = src.marker(i, NS) else {
        return None;
    };
    if src.at(j) != Some(b'<') {
        return None;
    }
    j += 1;
    let closing = src.at(j) == Some(b'/');
    if closing {
        j += 1;
    }
    let n0 = j;
    while src.at(j).is_some_and(|c| is_ident_char(c) || c == b'-') {
        j += 1;
    }
    (j > n0 && src.at(j) == Some(b'>')).then(|| (src.slice(n0, j), closing, j + 1))
}

/// The arguments: the elements from `p` to the end of the view. A leaf
/// whose schema gives no type and whose text is a JSON number, `true`,
/// `false` or `null` is that value (the format writes every value as
/// text); a typed one stays text for the schema to convert.
fn elements(src: &Input, p: usize, schema: Option<&Value>) -> Option<Map<String, Value>> {
    let mut stack = vec![Open {
        name: String::new(),
        schema,
        children: Vec::new(),
        text_from: p,
    }];
    let mut i = p;
    while let Some(t) = src.find(NS, i) {
        let (name, closing, e) = tag(src, t)?;
        if !closing {
            if stack.len() > MAX_DEPTH {
                return None;
            }
            let parent = stack.last().and_then(|o| o.schema);
            let schema = if name == "item" {
                parent.and_then(|s| s.get("items"))
            } else {
                prop_schema(parent, name)
            };
            stack.push(Open {
                name: name.to_string(),
                schema,
                children: Vec::new(),
                text_from: e,
            });
        } else {
            let open = stack.pop()?;
            if open.name != name || stack.is_empty() {
                return None;
            }
            let value = if open.children.is_empty() {
                let text = html_escape::decode_html_entities(src.slice(open.text_from, t));
                match serde_json::from_str::<Value>(&text) {
                    Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Null))
                        if !declares_type(open.schema) =>
                    {
                        v
                    }
                    _ => Value::String(text.into_owned()),
                }
            } else {
                compose(open.children)
            };
            stack.last_mut()?.children.push((open.name, value));
        }
        i = e;
    }
    if stack.len() != 1 {
        return None;
    }
    let root = stack.pop()?;
    if root.children.is_empty() {
        return Some(Map::new());
    }
    match compose(root.children) {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// Children as a value: only `<item>`s are an array; otherwise an object
/// whose repeated names hold arrays.
fn compose(children: Vec<(String, Value)>) -> Value {
    if children.iter().all(|(k, _)| k == "item") {
        return Value::Array(children.into_iter().map(|(_, v)| v).collect());
    }
    let mut m = Map::new();
    for (k, v) in children {
        match m.get_mut(&k) {
            Some(Value::Array(items)) => items.push(v),
            Some(prev) => {
                let first = prev.take();
                *prev = Value::Array(vec![first, v]);
            }
            None => {
                m.insert(k, v);
            }
        }
    }
    Value::Object(m)
}
