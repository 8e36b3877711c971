//! Parsers for the marked call families: wrapper tags (`<tool_call>` and its
//! variants), code fences, `[TOOL_CALLS]`, `functools`, `<function=...>`
//! XML, DeepSeek and Kimi special tokens, and the items inside them.
//!
//! Every parser here starts at a known position, returns [`Outcome::More`] only
//! when the input is not final and the answer depends on what follows, and
//! is bounded by the text it actually inspects.

use serde_json::{Map, Value};

use super::calls::{args_object, call_shape, json_args, span_pieces};
use super::coerce::{coerce_text, prop_schema};
use super::json_scan::{self, Scan};
use super::offered::ParsedCall;
use super::python;
use super::sections::{Section, section_items};
use super::text::{
    Block, Input, MarkerMatch, Outcome, Piece, attrs, dotted_name_end, is_ident_char,
    is_ident_start, is_ws,
};
use super::{channels, gemma, minimax_m3};

/// A wrapper tag around call items, with the closers that may end it. The
/// closer is optional (models stop without it), except for GLM-style items.
struct Wrapper {
    open: &'static str,
    closes: &'static [&'static str],
    /// Allow GLM-4 items (`name\n<arg_key>k</arg_key><arg_value>v</arg_value>`,
    /// or `name\n{json}`), their tags behind this namespace (`ifm|`).
    glm: Option<&'static str>,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        open: "<tool_call>",
        closes: &["</tool_call>"],
        glm: Some(""),
    },
    Wrapper {
        open: "<|tool_call|>",
        closes: &["<|/tool_call|>", "</tool_call>"],
        glm: None,
    },
    Wrapper {
        open: "<tool_calls>",
        closes: &["</tool_calls>"],
        glm: None,
    },
    Wrapper {
        open: "<tools>",
        closes: &["</tools>"],
        glm: None,
    },
    Wrapper {
        open: "<tool>",
        closes: &["</tool>"],
        glm: None,
    },
    Wrapper {
        open: "<function_call>",
        closes: &["</function_call>"],
        glm: None,
    },
    Wrapper {
        open: "<function_calls>",
        closes: &["</function_calls>"],
        glm: None,
    },
    Wrapper {
        open: "<functions>",
        closes: &["</functions>"],
        glm: None,
    },
    Wrapper {
        open: "<response>",
        closes: &["</response>"],
        glm: None,
    },
    Wrapper {
        open: "<json>",
        closes: &["</json>"],
        glm: None,
    },
    Wrapper {
        open: "<xml>",
        closes: &["</xml>"],
        glm: None,
    },
    // Kimi K2 "horizon" (`<ifm|tool_calls><ifm|tool_call>…`).
    Wrapper {
        open: "<ifm|tool_calls>",
        closes: &["</ifm|tool_calls>"],
        glm: None,
    },
    Wrapper {
        open: "<ifm|tool_call>",
        closes: &["</ifm|tool_call>"],
        glm: Some("ifm|"),
    },
    Wrapper {
        open: "<minimax:tool_call>",
        closes: &["</minimax:tool_call>"],
        glm: None,
    },
    Wrapper {
        open: "<｜DSML｜function_calls>",
        closes: &["</｜DSML｜function_calls>"],
        glm: None,
    },
    Wrapper {
        open: "<｜DSML｜tool_calls>",
        closes: &["</｜DSML｜tool_calls>"],
        glm: None,
    },
    Wrapper {
        open: "<｜DSML｜ calls>",
        closes: &["</｜DSML｜ calls>"],
        glm: None,
    },
    Wrapper {
        open: "<dots_function_call>",
        closes: &["</dots_function_call>"],
        glm: None,
    },
    Wrapper {
        open: "<seed:tool_call>",
        closes: &["</seed:tool_call>"],
        glm: None,
    },
    Wrapper {
        open: "<toolcall>",
        closes: &["</toolcall>"],
        glm: None,
    },
    Wrapper {
        open: "<|python_start|>",
        closes: &["<|python_end|>"],
        glm: None,
    },
    Wrapper {
        open: "<|python_tag|>",
        closes: &["<|eom_id|>", "<|eot_id|>"],
        glm: None,
    },
    Wrapper {
        open: "<|tool_call_start|>",
        closes: &["<|tool_call_end|>"],
        glm: None,
    },
    Wrapper {
        open: "<|action_start|><|plugin|>",
        closes: &["<|action_end|>"],
        glm: None,
    },
];

const FENCE: &str = "```";

/// What items a block may contain.
#[derive(Clone, Copy)]
struct Ctx {
    /// Repair mismatched JSON closers and keep the complete leading
    /// elements of a broken array (explicitly marked blocks only).
    repair: bool,
    xml: bool,
    /// GLM-4 items, their tags behind this namespace.
    glm: Option<&'static str>,
    py_bare: bool,
    mistral11: bool,
    /// How many levels of nested blocks (fence in tag, tag in fence) remain.
    nest: u8,
    closers: &'static [&'static str],
}

const JSON_ONLY: Ctx = Ctx {
    repair: true,
    xml: false,
    glm: None,
    py_bare: false,
    mistral11: false,
    nest: 0,
    closers: &[],
};

/// A marked block (tag, fence, marker word) at `s`. `nest` is how many
/// levels of nested blocks its items may contain.
pub(super) fn block_at(src: &Input, s: usize, nest: u8) -> Outcome<Block> {
    match src.at(s) {
        Some(b'<') => tag_block(src, s, nest),
        Some(b'`') => fence_block(src, s, nest),
        Some(b'[') => marker_block(src, s, "[TOOL_CALLS]", &["[/TOOL_CALLS]"], true),
        Some(b'f') => marker_block(src, s, "functools", &[], false),
        _ => Outcome::No,
    }
}

fn tag_block(src: &Input, s: usize, nest: u8) -> Outcome<Block> {
    let mut more = false;
    for w in WRAPPERS {
        match src.marker(s, w.open) {
            MarkerMatch::Yes(p) => return wrapper_block(src, p, w, nest),
            MarkerMatch::More => more = true,
            MarkerMatch::No => {}
        }
    }
    let parsers: [fn(&Input, usize) -> Outcome<Block>; 6] = [
        bare_function,
        section_block,
        apertus_block,
        channels::block,
        gemma::block,
        ns_block,
    ];
    for parser in parsers {
        match parser(src, s) {
            Outcome::Ok(b) => return Outcome::Ok(b),
            Outcome::More => more = true,
            Outcome::No => {}
        }
    }
    if more { Outcome::More } else { Outcome::No }
}

fn wrapper_block(src: &Input, p: usize, w: &Wrapper, nest: u8) -> Outcome<Block> {
    let ctx = Ctx {
        repair: true,
        xml: true,
        glm: w.glm,
        py_bare: true,
        mistral11: false,
        nest,
        closers: w.closes,
    };
    match items(src, p, ctx) {
        Outcome::Ok(b) => close_block(src, b, w.closes),
        Outcome::No => Outcome::No,
        Outcome::More => Outcome::More,
    }
}

fn fence_block(src: &Input, s: usize, nest: u8) -> Outcome<Block> {
    let mut p = match src.marker(s, FENCE) {
        MarkerMatch::Yes(p) => p,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    // Optional language tag.
    let lang_start = p;
    while src
        .at(p)
        .is_some_and(|c| is_ident_char(c) || c == b'-' || c == b'+')
    {
        p += 1;
        if p - lang_start > 32 {
            return Outcome::No;
        }
    }
    if p >= src.len() {
        return src.need();
    }
    let ctx = Ctx {
        repair: true,
        xml: true,
        glm: None,
        py_bare: true,
        mistral11: false,
        nest,
        closers: &[FENCE],
    };
    match items(src, p, ctx) {
        Outcome::Ok(b) => close_block(src, b, &[FENCE]),
        Outcome::No => Outcome::No,
        Outcome::More => Outcome::More,
    }
}

/// `[TOOL_CALLS]` (Mistral) or `functools` (Phi-4-mini, FireFunction).
fn marker_block(
    src: &Input,
    s: usize,
    marker: &str,
    closers: &'static [&'static str],
    mistral: bool,
) -> Outcome<Block> {
    let p = match src.marker(s, marker) {
        MarkerMatch::Yes(p) => p,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    let ctx = Ctx {
        mistral11: mistral,
        closers,
        ..JSON_ONLY
    };
    match items(src, p, ctx) {
        Outcome::Ok(b) => close_block(src, b, closers),
        Outcome::No => Outcome::No,
        Outcome::More => Outcome::More,
    }
}

/// After the items: consume an optional closer (after whitespace).
fn close_block(src: &Input, b: Block, closers: &[&str]) -> Outcome<Block> {
    let q = src.skip_ws(b.end);
    if q >= src.len() {
        return if src.eof {
            Outcome::Ok(b)
        } else {
            Outcome::More
        };
    }
    for c in closers {
        match src.marker(q, c) {
            MarkerMatch::Yes(e) => {
                return Outcome::Ok(Block {
                    pieces: b.pieces,
                    end: e,
                });
            }
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No => {}
        }
    }
    Outcome::Ok(b)
}

fn count_calls(pieces: &[Piece]) -> usize {
    pieces
        .iter()
        .filter(|p| matches!(p, Piece::Call(_)))
        .count()
}

/// A run of items separated by whitespace, `,` or `;`. The first item must
/// contain a call; later non-call items stay content.
fn items(src: &Input, p0: usize, ctx: Ctx) -> Outcome<Block> {
    let mut pieces = Vec::new();
    let mut ncalls = 0;
    let mut end = p0;
    loop {
        let mut q = src.skip_ws(end);
        if q >= src.len() {
            if src.eof {
                break;
            }
            return Outcome::More;
        }
        if ncalls > 0 && matches!(src.at(q), Some(b',' | b';')) {
            q = src.skip_ws(q + 1);
            if q >= src.len() {
                if src.eof {
                    break;
                }
                return Outcome::More;
            }
        }
        match item(src, q, ctx, ncalls > 0) {
            Outcome::More => return Outcome::More,
            Outcome::No => break,
            Outcome::Ok(b) => {
                let n = count_calls(&b.pieces);
                if (ncalls == 0 && n == 0) || b.end <= q {
                    break;
                }
                ncalls += n;
                pieces.extend(b.pieces);
                end = b.end;
            }
        }
    }
    if ncalls == 0 {
        Outcome::No
    } else {
        Outcome::Ok(Block { pieces, end })
    }
}

fn call_block(call: ParsedCall, end: usize) -> Block {
    Block {
        pieces: vec![Piece::Call(call)],
        end,
    }
}

fn item(src: &Input, q: usize, ctx: Ctx, after_first: bool) -> Outcome<Block> {
    let Some(c) = src.at(q) else {
        return src.need();
    };
    match c {
        b'{' | b'[' => json_item(src, q, ctx, after_first),
        b'<' => {
            if ctx.xml {
                match xml_function(src, q) {
                    Outcome::No => {}
                    other => return other,
                }
                match invoke_item(src, q) {
                    Outcome::No => {}
                    other => return other,
                }
            }
            if ctx.nest > 0 {
                return tag_block(src, q, ctx.nest - 1);
            }
            Outcome::No
        }
        b'`' if ctx.nest > 0 => fence_block(src, q, ctx.nest - 1),
        c if is_ident_start(c) => {
            if ctx.py_bare {
                match python::py_call(src, q) {
                    Outcome::Ok((call, e)) => return Outcome::Ok(call_block(call, e)),
                    Outcome::More => return Outcome::More,
                    Outcome::No => {}
                }
            }
            if let Some(ns) = ctx.glm {
                match glm_item(src, q, ctx.closers, ns) {
                    Outcome::No => {}
                    other => return other,
                }
            }
            if ctx.mistral11 {
                return mistral11_item(src, q);
            }
            Outcome::No
        }
        _ => Outcome::No,
    }
}

fn json_item(src: &Input, q: usize, ctx: Ctx, after_first: bool) -> Outcome<Block> {
    let is_array = src.at(q) == Some(b'[');
    match json_scan::scan(src.b, q, src.eof, ctx.repair) {
        Scan::More => Outcome::More,
        Scan::Complete(c) => {
            if let Some((pieces, n)) = span_pieces(src, (q, c.end), c.repaired.as_deref(), &c.elems)
                && n > 0
            {
                let pieces = if c.repaired.is_some() {
                    mark_repaired(pieces)
                } else {
                    pieces
                };
                return Outcome::Ok(Block { pieces, end: c.end });
            }
            if is_array {
                match python::py_list(src, q) {
                    Outcome::Ok((pieces, end)) => return Outcome::Ok(Block { pieces, end }),
                    Outcome::More => return Outcome::More,
                    Outcome::No => {}
                }
            }
            if after_first {
                Outcome::Ok(Block::content(q, c.end))
            } else {
                Outcome::No
            }
        }
        Scan::Fail(f) => {
            if is_array {
                match python::py_list(src, q) {
                    Outcome::Ok((pieces, end)) => return Outcome::Ok(Block { pieces, end }),
                    Outcome::More => return Outcome::More,
                    Outcome::No => {}
                }
            }
            if ctx.repair
                && let Some(fixed) = f
                    .open_string
                    .and_then(|q0| unclosed_json_string(src, q, q0, &f.open_closers, ctx.closers))
                && let Some((pieces, n)) = span_pieces(src, (q, src.len()), Some(&fixed), &[])
                && n > 0
            {
                // The last string never closed, and the output ends with
                // exactly what closes the rest (see `unclosed_json_string`).
                return Outcome::Ok(Block {
                    pieces: mark_repaired(pieces),
                    end: src.len(),
                });
            }
            if ctx.repair && f.closable {
                // The block's closer arrived while brackets were still open
                // (`{"name": "f", "arguments": {}</tool_call>`): close them.
                for c in ctx.closers {
                    match src.marker(f.at, c) {
                        MarkerMatch::Yes(_) => {
                            let mut fixed = src.slice(q, f.at).trim_end().to_string();
                            fixed.extend(f.open_closers.iter().map(|&b| char::from(b)));
                            if let Some((pieces, n)) =
                                span_pieces(src, (q, f.at), Some(&fixed), &[])
                                && n > 0
                            {
                                return Outcome::Ok(Block {
                                    pieces: mark_repaired(pieces),
                                    end: f.at,
                                });
                            }
                            break;
                        }
                        MarkerMatch::More => return Outcome::More,
                        MarkerMatch::No => {}
                    }
                }
            }
            if is_array && ctx.repair && f.top_is_array && !f.top_scalar && !f.top_elems.is_empty()
            {
                // A broken or truncated array after an explicit marker: keep
                // its complete leading elements.
                let mut pieces = Vec::new();
                let mut n = 0;
                let mut end = q;
                for &(a, b) in &f.top_elems {
                    match span_pieces(src, (a, b), None, &[]) {
                        Some((ps, k)) => {
                            n += k;
                            pieces.extend(ps);
                            end = b;
                        }
                        None => return Outcome::No,
                    }
                }
                if n > 0 {
                    return Outcome::Ok(Block { pieces, end });
                }
                return Outcome::No;
            }
            if !is_array && after_first {
                // An invalid line among valid ones (one object per line):
                // leave the line as content and continue after it.
                let Some(nl) = src.find("\n", q) else {
                    return src.need();
                };
                for c in ctx.closers {
                    if src.find(c, q).is_some_and(|cp| cp < nl) {
                        return Outcome::No;
                    }
                }
                return Outcome::Ok(Block::content(q, nl));
            }
            Outcome::No
        }
    }
}

/// The JSON at `q` repaired, when its last string (opened at `q0`) runs to
/// the end of the output and what follows its opening quote ends with
/// exactly the closers of the open containers (`open`, innermost first)
/// and/or one of the block's `closers`, whitespace allowed around them:
/// the string closed where they begin. `None` when the output ends
/// otherwise (cut off: nothing is read).
fn unclosed_json_string(
    src: &Input,
    q: usize,
    q0: usize,
    open: &[u8],
    closers: &[&str],
) -> Option<String> {
    let mut rest = src.slice(q0 + 1, src.len()).trim_end();
    let mut marker = false;
    if let Some(c) = closers.iter().find(|c| rest.ends_with(**c)) {
        rest = rest.get(..rest.len() - c.len())?.trim_end();
        marker = true;
    }
    let mut cut = rest;
    let mut matched = 0;
    for &c in open.iter().rev() {
        match cut.trim_end().strip_suffix(char::from(c)) {
            Some(before) => {
                cut = before;
                matched += 1;
            }
            None => break,
        }
    }
    let content = if matched == open.len() {
        cut
    } else if matched == 0 && marker {
        rest
    } else {
        return None;
    };
    let mut fixed = String::with_capacity(q0 + 1 - q + content.len() + 1 + open.len());
    fixed.push_str(src.slice(q, q0 + 1));
    fixed.push_str(content);
    fixed.push('"');
    fixed.extend(open.iter().map(|&c| char::from(c)));
    Some(fixed)
}

/// The calls among `pieces`, marked as read from repaired text.
fn mark_repaired(pieces: Vec<Piece>) -> Vec<Piece> {
    pieces
        .into_iter()
        .map(|p| match p {
            Piece::Call(c) => Piece::Call(c.mark_repaired()),
            other => other,
        })
        .collect()
}

fn calls_block(calls: Vec<ParsedCall>, end: usize) -> Block {
    Block {
        pieces: calls.into_iter().map(Piece::Call).collect(),
        end,
    }
}

/// What may separate a tag's name from its attributes at `p`: whitespace,
/// a byte-level `Ġ`, or nothing before `name=` (MiniCPM collapses
/// `<function name=` into `<functionname=`).
fn attr_gap(src: &Input, p: usize) -> Outcome<()> {
    match src.at(p) {
        None => src.need(),
        Some(c) if is_ws(c) => Outcome::Ok(()),
        Some(_) => {
            for gap in ["\u{120}", "name="] {
                match src.marker(p, gap) {
                    MarkerMatch::Yes(_) => return Outcome::Ok(()),
                    MarkerMatch::More => return Outcome::More,
                    MarkerMatch::No => {}
                }
            }
            Outcome::No
        }
    }
}

/// The `>` that ends the tag whose attributes start at `from`, skipping
/// quoted attribute values (`value="a > b"`); `None` when the input has
/// none before `limit`.
fn tag_end(src: &Input, from: usize, limit: usize) -> Option<usize> {
    let mut quote = None;
    let mut i = from;
    while i < limit {
        match (src.at(i)?, quote) {
            (b'"' | b'\'', None) => quote = src.at(i),
            (c, Some(q)) if c == q => quote = None,
            (b'>', None) => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Strip one leading and one trailing newline (the XML value layout).
fn strip_nl(v: &str) -> &str {
    let v = v
        .strip_prefix("\r\n")
        .or_else(|| v.strip_prefix('\n'))
        .unwrap_or(v);
    v.strip_suffix("\r\n")
        .or_else(|| v.strip_suffix('\n'))
        .unwrap_or(v)
}

/// An XML value as the model meant it: a CDATA section's text as it is,
/// otherwise with its entities decoded (`S&amp;P` is `S&P`). A value
/// holding `markup`, the item tags of its own format, is not a value (the
/// model forgot a closer, or wrote one item inside another): `Err` says
/// which, and the call is not run but told about.
fn xml_value(key: &str, raw: &str, markup: &[&str]) -> Result<String, String> {
    let trimmed = raw.trim();
    if let Some(inner) = trimmed
        .strip_prefix("<![CDATA[")
        .and_then(|r| r.strip_suffix("]]>"))
    {
        return Ok(inner.to_owned());
    }
    if let Some(m) = markup.iter().find(|m| raw.contains(**m)) {
        return Err(format!(
            "the value of `{key}` holds `{m}`, this format's own markup: a closing tag is missing or misplaced. Write the call again with every parameter closed"
        ));
    }
    Ok(html_escape::decode_html_entities(raw).into_owned())
}

/// Item tags a value of each XML format cannot hold.
const PARAMETER_MARKUP: &[&str] = &["<parameter=", "<function=", "</function>"];
const PARAM_MARKUP: &[&str] = &[
    "<param ",
    "<param>",
    "</param>",
    "<params>",
    "</params>",
    "<function",
    "</function>",
];

const MAX_NAME: usize = 256;

/// A `<function=…>` call outside any wrapper, and the `</tool_call>` that
/// may follow it: Qwen3-Coder leaves the opener out but writes the closer
/// (Ollama#16686), which is then not left in the content.
fn bare_function(src: &Input, s: usize) -> Outcome<Block> {
    match xml_function(src, s) {
        Outcome::Ok(b) => close_block(src, b, &["</tool_call>", "</seed:tool_call>"]),
        other => other,
    }
}

/// `<function=NAME>` or `<function name="NAME">`, with a JSON object body
/// (Llama 3.1 / Functionary) or `<parameter=k>v</parameter>` /
/// `<param name="k">v</param>` children (Qwen3-Coder, BFCL).
fn xml_function(src: &Input, s: usize) -> Outcome<Block> {
    let (name_raw, p) = match src.marker(s, "<function=") {
        MarkerMatch::Yes(p) => {
            let mut j = p;
            loop {
                match src.at(j) {
                    None => return src.need(),
                    Some(b'>') => break,
                    Some(b'<' | b'\n') => return Outcome::No,
                    Some(_) => j += 1,
                }
                if j - p > MAX_NAME {
                    return Outcome::No;
                }
            }
            (src.slice(p, j), j + 1)
        }
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => {
            let p = match src.marker(s, "<function") {
                MarkerMatch::Yes(p) => p,
                MarkerMatch::More => return Outcome::More,
                MarkerMatch::No => return Outcome::No,
            };
            match attr_gap(src, p) {
                Outcome::Ok(()) => {}
                Outcome::More => return Outcome::More,
                Outcome::No => return Outcome::No,
            }
            let mut j = p;
            loop {
                match src.at(j) {
                    None => return src.need(),
                    Some(b'>') => break,
                    Some(b'<') => return Outcome::No,
                    Some(_) => j += 1,
                }
                if j - p > 4 * MAX_NAME {
                    return Outcome::No;
                }
            }
            let a = attrs(src.slice(p, j));
            let Some(&(_, name)) = a.iter().find(|(k, _)| *k == "name") else {
                return Outcome::No;
            };
            (name, j + 1)
        }
    };
    let Some(name) = src.tools.resolve(name_raw) else {
        return Outcome::No;
    };
    let q = src.skip_ws(p);
    if q >= src.len() {
        return src.need();
    }
    if src.at(q) == Some(b'{') {
        let (m, e) = match json_args(src, q) {
            Outcome::Ok(x) => x,
            Outcome::No => return Outcome::No,
            Outcome::More => return Outcome::More,
        };
        let call = ParsedCall::new(name, Value::Object(m));
        let r = src.skip_ws(e);
        if r >= src.len() {
            return if src.eof {
                Outcome::Ok(call_block(call, e))
            } else {
                Outcome::More
            };
        }
        return match src.marker(r, "</function>") {
            MarkerMatch::Yes(e2) => Outcome::Ok(call_block(call, e2)),
            MarkerMatch::More => Outcome::More,
            MarkerMatch::No => Outcome::Ok(call_block(call, e)),
        };
    }
    let Some(close) = src.find("</function>", p) else {
        return src.need();
    };
    let schema = src.tools.schema(&name);
    let mut args = Map::new();
    let mut unreadable = None;
    let mut cur = p;
    while let Some(k) = src.find("<param", cur).filter(|&k| k < close) {
        if let MarkerMatch::Yes(ks) = src.marker(k, "<parameter=") {
            let Some(ke) = src.find(">", ks).filter(|&e| e < close) else {
                break;
            };
            let key = src.slice(ks, ke).trim();
            if key.is_empty() || key.contains(['<', '\n']) {
                cur = k + 1;
                continue;
            }
            let v0 = ke + 1;
            let (mut v1, mut next) = (close, close);
            if let Some(e) = src.find("</parameter>", v0).filter(|&e| e < v1) {
                v1 = e;
                next = e + "</parameter>".len();
            }
            if let Some(e) = src.find("<parameter=", v0).filter(|&e| e < v1) {
                v1 = e;
                next = e;
            }
            match xml_value(key, strip_nl(src.slice(v0, v1)), PARAMETER_MARKUP) {
                Ok(value) => {
                    args.insert(
                        key.to_string(),
                        coerce_text(&value, prop_schema(schema, key), None),
                    );
                }
                Err(why) => unreadable = unreadable.or(Some(why)),
            }
            cur = next;
        } else if src.at(k + 6) == Some(b'>') || matches!(attr_gap(src, k + 6), Outcome::Ok(())) {
            let Some(ke) = tag_end(src, k, close) else {
                break;
            };
            let tag = src.slice(k + 6, ke);
            let a = attrs(tag);
            let hint = a.iter().find(|(k, _)| *k == "type").map(|(_, t)| *t);
            let key = a.iter().find(|(k, _)| *k == "name").map(|(_, n)| *n);
            // `<param name="k" value="v"/>`: the value is an attribute.
            let (value, next) = if tag.trim_end().ends_with('/') {
                let v = a
                    .iter()
                    .find(|(k, _)| *k == "value")
                    .map_or("", |(_, v)| *v);
                (
                    Ok(html_escape::decode_html_entities(v).into_owned()),
                    ke + 1,
                )
            } else {
                let v0 = ke + 1;
                let (v1, next) = match src.find("</param>", v0).filter(|&e| e < close) {
                    Some(e) => (e, e + "</param>".len()),
                    None => (close, close),
                };
                let raw = strip_nl(src.slice(v0, v1));
                (xml_value(key.unwrap_or("?"), raw, PARAM_MARKUP), next)
            };
            if let Some(key) = key {
                match value {
                    Ok(value) => {
                        args.insert(
                            key.to_string(),
                            coerce_text(&value, prop_schema(schema, key), hint),
                        );
                    }
                    Err(why) => unreadable = unreadable.or(Some(why)),
                }
            }
            cur = next.max(k + 1);
        } else {
            cur = k + 1;
        }
    }
    let call = match unreadable {
        Some(why) => ParsedCall::unreadable(name, why),
        None => ParsedCall::new(name, Value::Object(args)),
    };
    Outcome::Ok(call_block(call, close + "</function>".len()))
}

/// The spellings of one `<invoke>` family: MiniMax-M2 and dots (plain),
/// DeepSeek V3.2/V4 DSML, DeepSeek V4.1's spaced DSML, Step3's `steptml`,
/// and any other namespace ([`ns_invoke`]).
struct InvokeDialect<'a> {
    invoke: &'a str,
    invoke_close: &'a str,
    param: &'a str,
    param_close: &'a str,
    markup: &'a [&'a str],
}

const INVOKE_DIALECTS: &[InvokeDialect<'static>] = &[
    InvokeDialect {
        invoke: "<invoke",
        invoke_close: "</invoke>",
        param: "<parameter",
        param_close: "</parameter>",
        markup: &["<parameter name=", "<invoke", "</invoke>"],
    },
    InvokeDialect {
        invoke: "<｜DSML｜invoke",
        invoke_close: "</｜DSML｜invoke>",
        param: "<｜DSML｜parameter",
        param_close: "</｜DSML｜parameter>",
        markup: &["<｜DSML｜parameter", "<｜DSML｜invoke", "</｜DSML｜invoke>"],
    },
    InvokeDialect {
        invoke: "<｜DSML｜ invoke",
        invoke_close: "</｜DSML｜ invoke>",
        param: "<｜DSML｜ parameter",
        param_close: "</｜DSML｜ parameter>",
        markup: &[
            "<｜DSML｜ parameter",
            "<｜DSML｜ invoke",
            "</｜DSML｜ invoke>",
        ],
    },
    InvokeDialect {
        invoke: "<steptml:invoke",
        invoke_close: "</steptml:invoke>",
        param: "<steptml:parameter",
        param_close: "</steptml:parameter>",
        markup: &["<steptml:parameter", "<steptml:invoke", "</steptml:invoke>"],
    },
];

/// An `<invoke name="f">` item in any of [`INVOKE_DIALECTS`], or behind
/// any other namespace prefix ([`ns_invoke`]).
fn invoke_item(src: &Input, s: usize) -> Outcome<Block> {
    let mut more = false;
    for d in INVOKE_DIALECTS {
        match dialect_invoke(src, s, d) {
            Outcome::No => {}
            Outcome::More => more = true,
            ok => return ok,
        }
    }
    if more {
        return Outcome::More;
    }
    ns_invoke(src, s)
}

/// The longest namespace prefix or element name of namespaced XML read.
const MAX_XML_NAME: usize = 64;

/// An XML name at `i` (letters, digits, `_`, `-`, `.`), up to
/// [`MAX_XML_NAME`] bytes: its end.
fn xml_name(src: &Input, i: usize) -> Outcome<usize> {
    let Some(j) = dotted_name_end(src, i, MAX_XML_NAME) else {
        return Outcome::No;
    };
    if j >= src.len() {
        return src.need();
    }
    if j == i || !src.at(i).is_some_and(is_ident_start) {
        return Outcome::No;
    }
    Outcome::Ok(j)
}

/// `<PREFIX:` at `s`: the prefix (without the colon) and the end.
fn ns_prefix<'a>(src: &Input<'a>, s: usize) -> Outcome<(&'a str, usize)> {
    if src.at(s) != Some(b'<') {
        return Outcome::No;
    }
    let e = match xml_name(src, s + 1) {
        Outcome::Ok(e) => e,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    if src.at(e) != Some(b':') {
        return Outcome::No;
    }
    Outcome::Ok((src.slice(s + 1, e), e + 1))
}

/// A namespaced `<P:invoke name="f">` item with `<P:parameter name="k">`
/// children, whatever the prefix `P` (Claude's older `antml:` and the
/// like); read as the plain dialect is.
fn ns_invoke(src: &Input, s: usize) -> Outcome<Block> {
    let (prefix, _) = match ns_prefix(src, s) {
        Outcome::Ok(x) => x,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let invoke = format!("<{prefix}:invoke");
    let invoke_close = format!("</{prefix}:invoke>");
    let param = format!("<{prefix}:parameter");
    let param_close = format!("</{prefix}:parameter>");
    let markup = [param.as_str(), invoke.as_str(), invoke_close.as_str()];
    let d = InvokeDialect {
        invoke: &invoke,
        invoke_close: &invoke_close,
        param: &param,
        param_close: &param_close,
        markup: &markup,
    };
    dialect_invoke(src, s, &d)
}

/// Namespaced XML calls: `<P:function_calls>` (any element name, any
/// prefix) whose first child is an invoke, plain or behind a prefix, then
/// more invokes, then the wrapper's closer (optional at the end).
fn ns_block(src: &Input, s: usize) -> Outcome<Block> {
    let (prefix, p) = match ns_prefix(src, s) {
        Outcome::Ok(x) => x,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let e = match xml_name(src, p) {
        Outcome::Ok(e) => e,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let local = src.slice(p, e);
    if local.eq_ignore_ascii_case("invoke") || src.at(e) != Some(b'>') {
        return Outcome::No;
    }
    let close = format!("</{prefix}:{local}>");
    let mut pieces = Vec::new();
    let mut end = e + 1;
    loop {
        let q = src.skip_ws(end);
        if q >= src.len() {
            if src.eof {
                break;
            }
            return Outcome::More;
        }
        if pieces.is_empty() || src.at(q) == Some(b'<') {
            match src.marker(q, &close) {
                MarkerMatch::Yes(c) if !pieces.is_empty() => {
                    end = c;
                    break;
                }
                MarkerMatch::More => return Outcome::More,
                _ => {}
            }
        }
        match invoke_item(src, q) {
            Outcome::Ok(b) if b.end > q => {
                pieces.extend(b.pieces);
                end = b.end;
            }
            Outcome::More => return Outcome::More,
            _ => break,
        }
    }
    if pieces.is_empty() {
        return Outcome::No;
    }
    Outcome::Ok(Block { pieces, end })
}

/// MiniMax-M2's item (also Claude's older XML): `<invoke name="f">` with
/// `<parameter name="k">v</parameter>` children, up to `</invoke>`, and the
/// same in the other dialects. A value is taken as written, whitespace and
/// entities included (these templates write values raw, inline). A value
/// may itself hold `</parameter>` (code, vLLM#44060): it ends at the
/// `</parameter>` that the next parameter or `</invoke>` follows; a value
/// whose closer is misspelled short (`</｜DSML｜>`, a prefix of the
/// closer) ends there when the next parameter follows it. DSML's
/// `string="true"` is a hint that the value is text, `string="false"` that
/// it is a JSON literal; the tool's schema, when it types the parameter,
/// wins over both.
fn dialect_invoke(src: &Input, s: usize, d: &InvokeDialect) -> Outcome<Block> {
    let p = match src.marker(s, d.invoke) {
        MarkerMatch::Yes(p) => p,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    match src.at(p) {
        None => return src.need(),
        Some(c) if is_ws(c) => {}
        Some(_) => return Outcome::No,
    }
    let Some(te) = tag_end(src, p, src.len().min(p + 4 * MAX_NAME)) else {
        return if src.len() - p > 4 * MAX_NAME {
            Outcome::No
        } else {
            src.need()
        };
    };
    let a = attrs(src.slice(p, te));
    let Some(name) = a
        .iter()
        .find(|(k, _)| *k == "name")
        .and_then(|(_, n)| src.tools.resolve(n))
    else {
        return Outcome::No;
    };
    let Some(close) = src.find(d.invoke_close, te) else {
        return src.need();
    };
    let schema = src.tools.schema(&name);
    let mut args = Map::new();
    let mut unreadable = None;
    let mut cur = te + 1;
    while let Some(k) = src.find(d.param, cur).filter(|&k| k < close) {
        let Some(ke) = tag_end(src, k, close) else {
            break;
        };
        let pa = attrs(src.slice(k + d.param.len(), ke));
        let Some(&(_, key)) = pa.iter().find(|(k, _)| *k == "name") else {
            cur = ke + 1;
            continue;
        };
        let hint = match pa.iter().find(|(k, _)| *k == "string") {
            Some((_, "true")) => Some("string"),
            Some((_, "false")) => Some("json"),
            _ => None,
        };
        let v0 = ke + 1;
        // The closer the next parameter or the item's end follows.
        let mut v1 = None;
        let mut from = v0;
        while let Some(e) = src.find(d.param_close, from).filter(|&e| e < close) {
            let after = src.skip_ws(e + d.param_close.len());
            if after >= close || src.slice(after, close).starts_with(d.param) {
                v1 = Some(e);
                break;
            }
            from = e + 1;
        }
        // A closer only after the next parameter's opener: maybe this
        // value's closer was misspelled.
        let runs_on = v1.is_none_or(|e| src.find(d.param, v0).is_some_and(|n| n < e));
        let (v1, next) = match (
            runs_on.then(|| short_closer(src, v0, close, d)).flatten(),
            v1,
        ) {
            (Some((e, n)), _) => (e, n),
            (None, Some(e)) => (e, e + d.param_close.len()),
            (None, None) => (close, close),
        };
        match raw_value(key, src.slice(v0, v1), d.markup) {
            Ok(value) => {
                args.insert(
                    key.to_string(),
                    coerce_text(&value, prop_schema(schema, key), hint),
                );
            }
            Err(why) => unreadable = unreadable.or(Some(why)),
        }
        cur = next.max(k + 1);
    }
    let call = match unreadable {
        Some(why) => ParsedCall::unreadable(name, why),
        None => ParsedCall::new(name, Value::Object(args)),
    };
    Outcome::Ok(call_block(call, close + d.invoke_close.len()))
}

/// A parameter closer misspelled short: the value starting at `v0` runs
/// into the next parameter, and just before it (whitespace aside) stands
/// `</…>` whose text is a prefix of the proper closer (`</｜DSML｜>` for
/// `</｜DSML｜parameter>`). The value's end and where the next parameter
/// starts.
fn short_closer(src: &Input, v0: usize, close: usize, d: &InvokeDialect) -> Option<(usize, usize)> {
    let next = src.find(d.param, v0).filter(|&n| n < close)?;
    let before = src.slice(v0, next).trim_end();
    let body = before.strip_suffix('>')?;
    let open = body.rfind("</")?;
    let written = body.get(open..)?;
    let proper = d.param_close.strip_suffix('>')?;
    (written.len() > 2 && written.len() < proper.len() && proper.starts_with(written))
        .then_some((v0 + open, next))
}

/// An invoke dialect's value as written (a CDATA section's text as it is).
/// A value holding `markup`, the item tags of its own format, is not a
/// value (see [`xml_value`]).
fn raw_value(key: &str, raw: &str, markup: &[&str]) -> Result<String, String> {
    if let Some(inner) = raw
        .trim()
        .strip_prefix("<![CDATA[")
        .and_then(|r| r.strip_suffix("]]>"))
    {
        return Ok(inner.to_owned());
    }
    match xml_value(key, raw, markup) {
        Ok(_) => Ok(raw.to_owned()),
        Err(why) => Err(why),
    }
}

/// GLM-4 item inside `<tool_call>`: `name` (Hunyuan HY v3: `name<tool_sep>`)
/// then `<arg_key>`/`<arg_value>` pairs (an `<arg_type>` between them is
/// the model's type hint, used where the schema declares none); the
/// wrapper's closer must follow. The tags may sit behind a namespace
/// (`ns`: Kimi K2 "horizon" writes `<ifm|arg_key>`). Also GLM's variant
/// with JSON arguments after the name (`get_weather\n{"city": "Paris"}`),
/// the wrapper's closer (or the end of the output) after them.
fn glm_item(src: &Input, q: usize, closers: &[&str], ns: &str) -> Outcome<Block> {
    let mut j = q;
    loop {
        match src.at(j) {
            None => return src.need(),
            Some(c) if is_ws(c) || c == b'<' || c == b'{' => break,
            Some(_) => j += 1,
        }
        if j - q > MAX_NAME {
            return Outcome::No;
        }
    }
    let Some(name) = src.tools.resolve(src.slice(q, j)) else {
        return Outcome::No;
    };
    let r = src.skip_ws(j);
    if r >= src.len() {
        return src.need();
    }
    if src.at(r) == Some(b'{') {
        return glm_json(src, name, r, closers);
    }
    let key_open = format!("<{ns}arg_key>");
    let key_close = format!("</{ns}arg_key>");
    let type_open = format!("<{ns}arg_type>");
    let type_close = format!("</{ns}arg_type>");
    let value_open = format!("<{ns}arg_value>");
    let value_close = format!("</{ns}arg_value>");
    let markup = [
        key_open.as_str(),
        key_close.as_str(),
        value_open.as_str(),
        "<tool_call>",
        "</tool_call>",
    ];
    let schema = src.tools.schema(&name);
    let mut args = Map::new();
    let mut unreadable = None;
    // Hunyuan HY v3 writes `name<tool_sep>` before the pairs.
    let mut p = match src.marker(j, "<tool_sep>") {
        MarkerMatch::Yes(e) => e,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => j,
    };
    loop {
        let r = src.skip_ws(p);
        if r >= src.len() {
            return src.need();
        }
        match src.marker(r, &key_open) {
            MarkerMatch::Yes(k0) => {
                let Some(ke) = src.find(&key_close, k0) else {
                    return src.need();
                };
                let key = src.slice(k0, ke).trim();
                if key.contains('<') {
                    return Outcome::No;
                }
                let mut r2 = src.skip_ws(ke + key_close.len());
                let mut hint = None;
                match src.marker(r2, &type_open) {
                    MarkerMatch::Yes(t0) => {
                        let Some(te) = src.find(&type_close, t0) else {
                            return src.need();
                        };
                        hint = Some(src.slice(t0, te).trim());
                        r2 = src.skip_ws(te + type_close.len());
                    }
                    MarkerMatch::More => return Outcome::More,
                    MarkerMatch::No => {}
                }
                let v0 = match src.marker(r2, &value_open) {
                    MarkerMatch::Yes(v0) => v0,
                    MarkerMatch::More => return Outcome::More,
                    MarkerMatch::No => return Outcome::No,
                };
                let Some(ve) = src.find(&value_close, v0) else {
                    return src.need();
                };
                match xml_value(key, src.slice(v0, ve), &markup) {
                    Ok(value) => {
                        args.insert(
                            key.to_string(),
                            coerce_text(&value, prop_schema(schema, key), hint),
                        );
                    }
                    Err(why) => unreadable = unreadable.or(Some(why)),
                }
                p = ve + value_close.len();
            }
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No => {
                for c in closers {
                    match src.marker(r, c) {
                        MarkerMatch::Yes(_) => {
                            let call = match unreadable {
                                Some(why) => ParsedCall::unreadable(name, why),
                                None => ParsedCall::new(name, Value::Object(args)),
                            };
                            return Outcome::Ok(call_block(call, p));
                        }
                        MarkerMatch::More => return Outcome::More,
                        MarkerMatch::No => {}
                    }
                }
                return Outcome::No;
            }
        }
    }
}

/// GLM's `name` then JSON arguments (`{…}` at `r`), then the wrapper's
/// closer or the end of the output. A whole call object of the same name
/// after the name (`get_weather\n{"name": "get_weather", "arguments": {…}}`)
/// gives its arguments.
fn glm_json(src: &Input, name: String, r: usize, closers: &[&str]) -> Outcome<Block> {
    let (mut m, e) = match json_args(src, r) {
        Outcome::Ok(x) => x,
        Outcome::No => return Outcome::No,
        Outcome::More => return Outcome::More,
    };
    let inner = Value::Object(m);
    m = match call_shape(&inner) {
        Some((n, args)) if src.tools.resolve(&n).as_deref() == Some(name.as_str()) => args,
        _ => match inner {
            Value::Object(o) => o,
            _ => Map::new(),
        },
    };
    let t = src.skip_ws(e);
    if t >= src.len() {
        return match src.need::<()>() {
            Outcome::More => Outcome::More,
            _ => Outcome::Ok(call_block(ParsedCall::new(name, Value::Object(m)), e)),
        };
    }
    for c in closers {
        match src.marker(t, c) {
            MarkerMatch::Yes(_) => {
                return Outcome::Ok(call_block(ParsedCall::new(name, Value::Object(m)), e));
            }
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No => {}
        }
    }
    Outcome::No
}

/// Mistral tokenizer v11+: `[TOOL_CALLS]name{json}` (optionally
/// `name[ARGS]{json}`).
fn mistral11_item(src: &Input, q: usize) -> Outcome<Block> {
    let Some(j) = dotted_name_end(src, q, MAX_NAME) else {
        return Outcome::No;
    };
    if j >= src.len() {
        return src.need();
    }
    let Some(name) = src.tools.resolve(src.slice(q, j)) else {
        return Outcome::No;
    };
    let mut p = j;
    match src.marker(p, "[ARGS]") {
        MarkerMatch::Yes(e) => p = e,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => {}
    }
    let p = src.skip_ws(p);
    match json_args(src, p) {
        Outcome::Ok((m, e)) => Outcome::Ok(call_block(ParsedCall::new(name, Value::Object(m)), e)),
        Outcome::No => Outcome::No,
        Outcome::More => Outcome::More,
    }
}

const DS_SEP: &str = "<｜tool▁sep｜>";

const DEEPSEEK: Section = Section {
    begins: &["<｜tool▁calls▁begin｜>", "<｜tool▁calls｜>"],
    end: "<｜tool▁calls▁end｜>",
    call_begin: "<｜tool▁call▁begin｜>",
    call_end: "<｜tool▁call▁end｜>",
    call_begin_optional: true,
    sep: None,
    item: deepseek_item,
};

const KIMI: Section = Section {
    begins: &["<|tool_calls_section_begin|>"],
    end: "<|tool_calls_section_end|>",
    call_begin: "<|tool_call_begin|>",
    call_end: "<|tool_call_end|>",
    call_begin_optional: false,
    sep: None,
    item: kimi_item,
};

const STEP3: Section = Section {
    begins: &["<｜tool_calls_begin｜>"],
    end: "<｜tool_calls_end｜>",
    call_begin: "<｜tool_call_begin｜>",
    call_end: "<｜tool_call_end｜>",
    call_begin_optional: false,
    sep: Some("<｜tool_sep｜>"),
    item: step3_item,
};

/// DeepSeek V3 / R1 / V3.1 special-token blocks, Kimi K2 sections
/// (`functions.NAME:IDX <|tool_call_argument_begin|> {json}`), Step3's
/// `function<｜tool_sep｜><steptml:invoke …>` items, Kimi K3's tool block,
/// MiniMax-M3's namespaced one.
pub(super) fn section_block(src: &Input, s: usize) -> Outcome<Block> {
    let mut more = false;
    for sec in [
        &DEEPSEEK,
        &KIMI,
        &STEP3,
        &channels::XTML,
        &minimax_m3::SECTION,
    ] {
        for b in sec.begins {
            match src.marker(s, b) {
                MarkerMatch::Yes(p) => return section_items(src, p, sec),
                MarkerMatch::More => more = true,
                MarkerMatch::No => {}
            }
        }
    }
    if more { Outcome::More } else { Outcome::No }
}

/// Step3: an optional `function<｜tool_sep｜>` (the name may follow on its
/// own line), then one `<steptml:invoke>` item.
fn step3_item(src: &Input, q: usize) -> Option<ParsedCall> {
    let r = src.skip_ws(q);
    let p = match src.marker(r, "function<｜tool_sep｜>") {
        MarkerMatch::Yes(p) => p,
        _ => r,
    };
    let d = INVOKE_DIALECTS
        .iter()
        .find(|d| d.invoke == "<steptml:invoke")?;
    let i = src.find(d.invoke, p)?;
    match dialect_invoke(src, i, d) {
        Outcome::Ok(b) if src.skip_ws(b.end) >= src.len() => match b.pieces.into_iter().next() {
            Some(Piece::Call(c)) => Some(c),
            _ => None,
        },
        _ => None,
    }
}

/// Skip an optional code fence opener (```` ```json ````) at `i`.
fn skip_fence_open(src: &Input, i: usize) -> usize {
    let i = src.skip_ws(i);
    if let MarkerMatch::Yes(mut p) = src.marker(i, FENCE) {
        while src.at(p).is_some_and(is_ident_char) {
            p += 1;
        }
        return src.skip_ws(p);
    }
    i
}

/// Only whitespace and an optional closing fence remain after `i`.
fn only_tail(src: &Input, i: usize) -> bool {
    let mut i = src.skip_ws(i);
    if let MarkerMatch::Yes(p) = src.marker(i, FENCE) {
        i = src.skip_ws(p);
    }
    i >= src.len()
}

/// One DeepSeek call in a bounded (final) view ending at its end token:
/// `function<sep>NAME\n```json\n{...}\n```` or `NAME<sep>{...}`.
fn deepseek_item(src: &Input, q: usize) -> Option<ParsedCall> {
    let q = src.skip_ws(q);
    let sep = src.find(DS_SEP, q)?;
    let head = src.slice(q, sep).trim();
    let after = sep + DS_SEP.len();
    let (name_raw, json_from) = if head == "function" {
        let mut j = after;
        while src
            .at(j)
            .is_some_and(|c| c != b'\n' && c != b'`' && c != b'{')
        {
            j += 1;
        }
        (src.slice(after, j).trim(), j)
    } else {
        (head, after)
    };
    let name = src.tools.resolve(name_raw)?;
    let p = skip_fence_open(src, json_from);
    match json_args(src, p) {
        Outcome::Ok((m, e)) if only_tail(src, e) => Some(ParsedCall::new(name, Value::Object(m))),
        _ => None,
    }
}

const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";

fn kimi_item(src: &Input, q: usize) -> Option<ParsedCall> {
    let ap = src.find(KIMI_ARGS, q)?;
    let id = src.slice(q, ap).trim();
    let (name_raw, idx) = id.rsplit_once(':')?;
    if idx.is_empty() || !idx.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let name = src.tools.resolve(name_raw)?;
    let p = src.skip_ws(ap + KIMI_ARGS.len());
    match json_args(src, p) {
        Outcome::Ok((m, e)) if src.skip_ws(e) >= src.len() => {
            Some(ParsedCall::new(name, Value::Object(m)))
        }
        _ => None,
    }
}

const APERTUS_OPEN: &str = "<|tools_prefix|>";
const APERTUS_CLOSE: &str = "<|tools_suffix|>";

/// Apertus: `<|tools_prefix|>[{"NAME": {args}}, …]<|tools_suffix|>`, a
/// JSON array of one-member objects whose key is the tool's name. Every
/// element must name an offered tool; the closer is optional at the end.
fn apertus_block(src: &Input, s: usize) -> Outcome<Block> {
    let p = match src.marker(s, APERTUS_OPEN) {
        MarkerMatch::Yes(e) => src.skip_ws(e),
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    if p >= src.len() {
        return src.need();
    }
    if src.at(p) != Some(b'[') {
        return Outcome::No;
    }
    let e = match json_scan::scan(src.b, p, src.eof, false) {
        Scan::Complete(c) => c.end,
        Scan::More => return Outcome::More,
        Scan::Fail(_) => return Outcome::No,
    };
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(src.slice(p, e)) else {
        return Outcome::No;
    };
    let mut calls = Vec::with_capacity(items.len());
    for item in &items {
        let Some(obj) = item.as_object().filter(|o| o.len() == 1) else {
            return Outcome::No;
        };
        let Some((name, args)) = obj.iter().next() else {
            return Outcome::No;
        };
        let (Some(name), Some(args)) = (src.tools.resolve(name), args_object(args)) else {
            return Outcome::No;
        };
        calls.push(ParsedCall::new(name, Value::Object(args)));
    }
    if calls.is_empty() {
        return Outcome::No;
    }
    close_block(src, calls_block(calls, e), &[APERTUS_CLOSE])
}
