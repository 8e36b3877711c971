//! The body engine: finds possible call starts in the text (after reasoning
//! was split off), decides each one with the family parsers, and emits
//! content and calls in order.
//!
//! The same engine serves whole-text and streaming parsing: text is
//! appended, and `advance` decides as much as the text seen so far allows.
//! A candidate whose outcome still depends on unseen text is retried only
//! once its pending text has doubled (or at the end), so the total work
//! stays linear however the text is chunked.

use serde_json::Value;

use super::calls::{json_args, span_pieces};
use super::coerce::coerce_map;
use super::families::{block_at, section_block};
use super::json_scan::{self, Scan};
use super::offered::ParsedCall;
use super::offered::Tools;
use super::text::{
    Block, Input, MarkerMatch, Outcome, Piece, ceil_boundary, is_ident_char, is_ident_start,
};
use super::{gemma, python};

/// Output of the engine, in text order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Out {
    Text(String),
    Call(ParsedCall),
}

#[derive(Default)]
pub(super) struct Engine {
    buf: String,
    /// Everything before `pos` has been decided and emitted.
    pos: usize,
    /// Only whitespace was emitted since the last call.
    after_call: bool,
    /// Candidate start and the buffer length at which to retry it.
    gate: Option<(usize, usize)>,
    /// The start of the body was looked at (Functionary's first call).
    began: bool,
    /// The buffer length at which an undecided start is looked at again.
    start_retry: usize,
}

impl Engine {
    pub fn push(&mut self, s: &str) {
        self.buf.push_str(s);
    }

    /// Decide as much as possible. With `eof`, everything is decided.
    pub fn advance(&mut self, eof: bool, tools: &Tools, out: &mut Vec<Out>) {
        let src = Input::new(&self.buf, eof, tools);
        let len = src.len();
        if !self.began {
            // Retried only once the text has doubled, like any candidate.
            if !eof && len < self.start_retry {
                return;
            }
            match functionary_start(&src) {
                Outcome::More if !eof => {
                    self.start_retry = 2 * len.max(1);
                    return;
                }
                Outcome::Ok(b) => {
                    for p in b.pieces {
                        if let Piece::Call(c) = p {
                            self.after_call = true;
                            out.push(Out::Call(coerced(c, tools)));
                        }
                    }
                    self.pos = b.end;
                }
                _ => {}
            }
            self.began = true;
        }
        let mut st = Emit {
            out,
            tools,
            after_call: self.after_call,
        };
        while self.pos < len {
            let mut s = if st.after_call {
                let q = src.skip_ws(self.pos);
                if q > self.pos {
                    st.range(&src, self.pos, q);
                    self.pos = q;
                }
                if q >= len {
                    break;
                }
                if matches!(src.at(q), Some(b';' | b',')) {
                    q
                } else {
                    next_trigger(&src, q)
                }
            } else {
                next_trigger(&src, self.pos)
            };
            s = s.min(len);
            if s > self.pos {
                st.range(&src, self.pos, s);
                self.pos = s;
            }
            if s >= len {
                break;
            }
            if !eof && self.gate.is_some_and(|(gs, min)| gs == s && len < min) {
                break;
            }
            match try_at(&src, s, st.after_call) {
                Outcome::More if !eof => {
                    let pending = (len - s).max(1);
                    self.gate = Some((s, s + 2 * pending));
                    break;
                }
                Outcome::Ok(b) if b.end > s => {
                    for p in b.pieces {
                        st.piece(&src, p);
                    }
                    self.pos = ceil_boundary(src.t, b.end.min(len));
                }
                _ => {
                    let e = ceil_boundary(src.t, s + 1);
                    st.range(&src, s, e);
                    self.pos = e;
                }
            }
            self.gate = None;
        }
        self.after_call = st.after_call;
    }
}

struct Emit<'o> {
    out: &'o mut Vec<Out>,
    tools: &'o Tools,
    after_call: bool,
}

impl Emit<'_> {
    fn text(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        if !t.chars().all(char::is_whitespace) {
            self.after_call = false;
        }
        if let Some(Out::Text(prev)) = self.out.last_mut() {
            prev.push_str(t);
        } else {
            self.out.push(Out::Text(t.to_string()));
        }
    }

    fn range(&mut self, src: &Input, a: usize, b: usize) {
        self.text(src.slice(a, b));
    }

    fn piece(&mut self, src: &Input, p: Piece) {
        match p {
            Piece::Range(a, b) => self.range(src, a, b),
            Piece::Text(t) => self.text(&t),
            Piece::Call(c) => {
                self.after_call = true;
                self.out.push(Out::Call(coerced(c, self.tools)));
            }
        }
    }
}

/// One rule for every family: a value the schema types otherwise is
/// converted where it reads as that type (a JSON string "5" for an integer,
/// a set for an array).
fn coerced(mut c: ParsedCall, tools: &Tools) -> ParsedCall {
    if let Value::Object(args) = &mut c.arguments {
        *args = coerce_map(std::mem::take(args), tools.schema(&c.name));
    }
    c
}

/// Functionary v3.2: `>>>NAME` and the JSON arguments on the next line;
/// `>>>all` (a message to the user) is a frame, dropped.
fn functionary(src: &Input, s: usize) -> Outcome<Block> {
    let p = match src.marker(s, ">>>") {
        MarkerMatch::Yes(p) => p,
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => return Outcome::No,
    };
    match src.marker(p, "all\n") {
        MarkerMatch::Yes(e) => {
            return Outcome::Ok(Block {
                pieces: Vec::new(),
                end: e,
            });
        }
        MarkerMatch::More => return Outcome::More,
        MarkerMatch::No => {}
    }
    recipient_call(src, p)
}

/// Functionary v3.2's first message, whose `>>>` the prompt wrote: the
/// body starts with an offered tool's name alone on its line, then JSON.
fn functionary_start(src: &Input) -> Outcome<Block> {
    recipient_call(src, 0)
}

/// `NAME\n{json}` at `p`, NAME an offered tool.
fn recipient_call(src: &Input, p: usize) -> Outcome<Block> {
    let mut j = p;
    while src.at(j).is_some_and(is_ident_char) {
        j += 1;
        if j - p > 256 {
            return Outcome::No;
        }
    }
    if j >= src.len() {
        return src.need();
    }
    if j == p || src.at(j) != Some(b'\n') {
        return Outcome::No;
    }
    let Some(name) = src.tools.resolve(src.slice(p, j)) else {
        return Outcome::No;
    };
    let q = src.skip_ws(j + 1);
    if q >= src.len() {
        return src.need();
    }
    match json_args(src, q) {
        Outcome::Ok((m, e)) => Outcome::Ok(calls_block(
            vec![ParsedCall::new(name, Value::Object(m))],
            e,
        )),
        Outcome::More => Outcome::More,
        Outcome::No => Outcome::No,
    }
}

/// Whether a call of an offered tool reads from the start of `text` (a
/// call marker found in reasoning, the text up to the reasoning's end).
pub(super) fn starts_call(text: &str, tools: &Tools) -> bool {
    call_from(text, true, tools) == Some(true)
}

/// [`starts_call`] on text that may go on (`eof` false): `None` while
/// undecided. A decision is final: the same as on any continuation.
pub(super) fn call_from(text: &str, eof: bool, tools: &Tools) -> Option<bool> {
    let src = Input::new(text, eof, tools);
    match try_at(&src, 0, false) {
        Outcome::Ok(b) => Some(b.pieces.iter().any(|p| matches!(p, Piece::Call(_)))),
        Outcome::More if !eof => None,
        _ => Some(false),
    }
}

/// The next byte at or after `from` where a call could start.
fn next_trigger(src: &Input, from: usize) -> usize {
    let b = src.b;
    let mut i = from;
    while let Some(&c) = b.get(i) {
        match c {
            b'<' | b'[' | b'{' | b'`' => return i,
            // MiniMax-M3's namespace token `]<]minimax[>[`.
            b']' if b.get(i + 1).is_none_or(|&c| c == b'<') => return i,
            // `>>>` (what follows may not have arrived yet).
            b'>' if b.iter().skip(i + 1).take(2).all(|&c| c == b'>') => return i,
            b'f' if i == 0 || !b.get(i - 1).copied().is_some_and(is_ident_char) => return i,
            // Gemma's bare `call:NAME{…}`, at the start of a word.
            b'c' if gemma::starts_word(i.checked_sub(1).and_then(|k| b.get(k).copied())) => {
                return i;
            }
            _ => i += 1,
        }
    }
    b.len()
}

/// Decide the candidate at `s`.
fn try_at(src: &Input, s: usize, after_call: bool) -> Outcome<Block> {
    match src.at(s) {
        Some(b';' | b',') if after_call => separator(src, s),
        Some(b'{') => bare(src, s),
        Some(b'[') => match block_at(src, s, 1) {
            Outcome::No => bare(src, s),
            other => other,
        },
        Some(b'<' | b'`' | b'f') => block_at(src, s, 1),
        Some(b'>') => functionary(src, s),
        Some(b'c') => gemma::bare_block(src, s),
        Some(b']') => section_block(src, s),
        _ => Outcome::No,
    }
}

/// `;` or `,` right after a call, followed by another call: consumed with
/// it (Llama 3 writes `{call}; {call}`).
fn separator(src: &Input, s: usize) -> Outcome<Block> {
    let q = src.skip_ws(s + 1);
    if q >= src.len() {
        return src.need();
    }
    match src.at(q) {
        Some(b';' | b',') => Outcome::No,
        _ => match try_at(src, q, false) {
            Outcome::Ok(b) if matches!(b.pieces.first(), Some(Piece::Call(_))) => Outcome::Ok(b),
            Outcome::More => Outcome::More,
            _ => Outcome::No,
        },
    }
}

/// A bare JSON value or pythonic list at `s` (`{` or `[`), with no marker.
///
/// A complete value is calls (when call-shaped with an offered name) or
/// content as a whole: nothing inside a complete non-call value is looked at.
/// A value that breaks off is content up to its innermost still-open
/// container (scanning resumes there) or up to the failure; complete
/// call-shaped values that closed inside it are still accepted.
fn bare(src: &Input, s: usize) -> Outcome<Block> {
    let is_array = src.at(s) == Some(b'[');
    // Cheap pre-check: what follows the bracket must be able to start a
    // member (object) or an element (array, JSON or pythonic).
    let q = src.skip_ws(s + 1);
    match src.at(q) {
        None => return src.need(),
        Some(b'"' | b'}') if !is_array => {}
        Some(b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b']') if is_array => {}
        Some(c) if is_array && is_ident_start(c) => {}
        Some(_) => return Outcome::Ok(Block::content(s, s + 1)),
    }
    match json_scan::scan(src.b, s, src.eof, false) {
        Scan::More => Outcome::More,
        Scan::Complete(c) => {
            if let Some((pieces, n)) = span_pieces(src, (s, c.end), None, &c.elems)
                && n > 0
            {
                return Outcome::Ok(Block { pieces, end: c.end });
            }
            if is_array {
                match python::py_list(src, s) {
                    Outcome::Ok((pieces, end)) => return Outcome::Ok(Block { pieces, end }),
                    Outcome::More => return Outcome::More,
                    Outcome::No => {}
                }
            }
            Outcome::Ok(Block::content(s, c.end))
        }
        Scan::Fail(f) => {
            if is_array {
                match python::py_list(src, s) {
                    Outcome::Ok((pieces, end)) => return Outcome::Ok(Block { pieces, end }),
                    Outcome::More => return Outcome::More,
                    Outcome::No => {}
                }
            }
            let resume = ceil_boundary(
                src.t,
                if f.innermost > s {
                    f.innermost
                } else {
                    f.at.max(s + 1)
                },
            );
            let mut pieces = Vec::new();
            let mut cur = s;
            for &(a, b) in &f.closed {
                if a < cur || b > resume {
                    continue;
                }
                if let Some((ps, n)) = span_pieces(src, (a, b), None, &[])
                    && n > 0
                {
                    if a > cur {
                        pieces.push(Piece::Range(cur, a));
                    }
                    pieces.extend(ps);
                    cur = b;
                }
            }
            if resume > cur {
                pieces.push(Piece::Range(cur, resume));
            }
            Outcome::Ok(Block {
                pieces,
                end: resume,
            })
        }
    }
}

fn calls_block(calls: Vec<ParsedCall>, end: usize) -> Block {
    Block {
        pieces: calls.into_iter().map(Piece::Call).collect(),
        end,
    }
}
