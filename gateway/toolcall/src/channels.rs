//! Formats whose output is a series of framed messages rather than text
//! with calls in it: gpt-oss Harmony (`<|channel|>commentary
//! to=functions.f <|constrain|>json<|message|>{…}<|call|>`) and Kimi K3's
//! XTML (`<|open|>call tool="f"<|sep|>…<|close|>call<|sep|>`), and the
//! frame tokens of both, which are dropped.
//!
//! The first reasoning message of each (Harmony's `analysis` channel, K3's
//! `think`) is split off by the reasoning pass like `<think>`; what reaches
//! these parsers is the rest.

use serde_json::{Map, Value};

use super::calls::json_args;
use super::coerce::{coerce_text, prop_schema};
use super::offered::ParsedCall;
use super::sections::Section;
use super::text::{Block, Input, MarkerMatch, Outcome, Piece, attrs};

/// How far a header may run before it is not one.
const MAX_HEADER: usize = 512;

/// Frame tokens that carry nothing once the messages are read: dropped.
const FRAMES: &[&str] = &[
    "<|start|>assistant",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|open|>response<|sep|>",
    "<|close|>response<|sep|>",
    "<|close|>message<|sep|>",
];

/// A Harmony message or a lone frame token at `s`.
pub(super) fn block(src: &Input, s: usize) -> Outcome<Block> {
    let mut more = false;
    match harmony(src, s) {
        Outcome::No => {}
        Outcome::More => more = true,
        ok => return ok,
    }
    for f in FRAMES {
        match src.marker(s, f) {
            MarkerMatch::Yes(e) if !more => {
                return Outcome::Ok(Block {
                    pieces: Vec::new(),
                    end: e,
                });
            }
            MarkerMatch::Yes(_) | MarkerMatch::More => more = true,
            MarkerMatch::No => {}
        }
    }
    if more { Outcome::More } else { Outcome::No }
}

/// The position of `needle` at or after `from` and before `from + limit`;
/// `More` when it may still arrive, `No` when it cannot.
fn find_within(src: &Input, needle: &'static str, from: usize, limit: usize) -> Outcome<usize> {
    match src.find(needle, from) {
        Some(i) if i <= from + limit => Outcome::Ok(i),
        Some(_) => Outcome::No,
        None if src.eof || src.len() > from + limit + needle.len() => Outcome::No,
        None => Outcome::More,
    }
}

/// The `to=` recipient among a header's words.
fn recipient(header: &str) -> Option<&str> {
    header
        .split_whitespace()
        .find_map(|w| w.strip_prefix("to="))
}

/// One Harmony message: `[<|start|>ROLE[ to=R]]<|channel|>CHANNEL[ to=R][
/// <|constrain|>TYPE]<|message|>BODY` ending at `<|end|>`, `<|call|>`,
/// `<|return|>`, the next `<|start|>` or the end. A message to a function
/// tool is its call (JSON arguments); a message without a recipient is
/// content (`final`, `commentary`, and an `analysis` message after the
/// first, which the reasoning pass split off); a message to a tool that
/// was not offered stays content as written.
fn harmony(src: &Input, s: usize) -> Outcome<Block> {
    let mut role_to = None;
    let ch = match src.marker(s, "<|start|>") {
        MarkerMatch::Yes(e) => match find_within(src, "<|channel|>", e, MAX_HEADER) {
            Outcome::Ok(c) => {
                let role = src.slice(e, c);
                if role.contains('<') {
                    return Outcome::No;
                }
                role_to = recipient(role);
                c
            }
            Outcome::More => return Outcome::More,
            Outcome::No => return Outcome::No,
        },
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => s,
    };
    let h0 = match src.marker(ch, "<|channel|>") {
        MarkerMatch::Yes(e) => e,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    let m = match find_within(src, "<|message|>", h0, MAX_HEADER) {
        Outcome::Ok(m) => m,
        Outcome::More => return Outcome::More,
        Outcome::No => return Outcome::No,
    };
    let header = src.slice(h0, m).replace("<|constrain|>", " ");
    if header.contains('<') {
        return Outcome::No;
    }
    let to = recipient(&header).or(role_to);
    let b0 = m + "<|message|>".len();
    let ends = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];
    let found = ends
        .iter()
        .filter_map(|e| src.find(e, b0).map(|i| (i, *e)))
        .min_by_key(|(i, _)| *i);
    let (b1, end) = match found {
        Some((i, "<|start|>")) => (i, i),
        Some((i, e)) => (i, i + e.len()),
        None if src.eof => (src.len(), src.len()),
        None => return Outcome::More,
    };
    let pieces = match to {
        Some(r) => match src.tools.resolve(r) {
            Some(name) => {
                let body = src.bounded(b1);
                let q = body.skip_ws(b0);
                let call = match json_args(&body, q) {
                    Outcome::Ok((args, e)) if body.skip_ws(e) >= body.len() => {
                        ParsedCall::new(name, Value::Object(args))
                    }
                    _ => ParsedCall::unreadable(
                        name,
                        "the arguments are not one JSON object: write the call again with its arguments as a JSON object".to_string(),
                    ),
                };
                vec![Piece::Call(call)]
            }
            None => vec![Piece::Range(s, end)],
        },
        None => vec![Piece::Range(b0, b1)],
    };
    Outcome::Ok(Block { pieces, end })
}

const XTML_OPEN: &str = "<|open|>tools<|sep|>";
const XTML_CLOSE: &str = "<|close|>tools<|sep|>";
const XTML_CALL: &str = "<|open|>call";
const XTML_CALL_CLOSE: &str = "<|close|>call<|sep|>";
const XTML_ARG: &str = "<|open|>argument";
const XTML_ARG_CLOSE: &str = "<|close|>argument<|sep|>";
const XTML_SEP: &str = "<|sep|>";

/// Kimi K3's tool block: `<|open|>tools<|sep|>` then calls
/// `<|open|>call tool="f" index="1"<|sep|>` with arguments
/// `<|open|>argument key="k" type="T"<|sep|>V<|close|>argument<|sep|>`
/// (`type="string"`: V as written; any other: a JSON literal, unless the
/// tool's schema types the argument), `<|close|>call<|sep|>`, and
/// `<|close|>tools<|sep|>` (optional at the end). A call of a tool that was
/// not offered stays content.
pub(super) const XTML: Section = Section {
    begins: &[XTML_OPEN],
    end: XTML_CLOSE,
    call_begin: XTML_CALL,
    call_end: XTML_CALL_CLOSE,
    call_begin_optional: false,
    sep: None,
    item: xtml_call,
};

/// One K3 call in a bounded view ending at its `<|close|>call<|sep|>`.
fn xtml_call(src: &Input, q: usize) -> Option<ParsedCall> {
    let te = src.find(XTML_SEP, q)?;
    let call_attrs = attrs(src.slice(q, te));
    let tool = call_attrs.iter().find(|(k, _)| *k == "tool")?.1;
    let name = src
        .tools
        .resolve(&html_escape::decode_html_entities(tool))?;
    let schema = src.tools.schema(&name);
    let mut args = Map::new();
    let mut cur = te + XTML_SEP.len();
    while let Some(a) = src.find(XTML_ARG, cur) {
        let ae = src.find(XTML_SEP, a)?;
        let arg_attrs = attrs(src.slice(a + XTML_ARG.len(), ae));
        let key = html_escape::decode_html_entities(arg_attrs.iter().find(|(k, _)| *k == "key")?.1);
        let hint = match arg_attrs.iter().find(|(k, _)| *k == "type") {
            Some((_, "string")) => "string",
            _ => "json",
        };
        let v0 = ae + XTML_SEP.len();
        let v1 = src.find(XTML_ARG_CLOSE, v0)?;
        let value = coerce_text(src.slice(v0, v1), prop_schema(schema, &key), Some(hint));
        args.insert(key.into_owned(), value);
        cur = v1 + XTML_ARG_CLOSE.len();
    }
    Some(ParsedCall::new(name, Value::Object(args)))
}
