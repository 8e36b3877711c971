//! Reasoning split (done before anything else) and the whitespace policy of
//! the content and reasoning outputs.
//!
//! The first think tag in the text decides:
//! - a closing tag (`</think>`) with no opener before it: everything before
//!   it is reasoning (templates that pre-open `<think>`);
//! - an opening tag: the text before it is body, the text up to the
//!   matching closer (if none, to the end or a call: see below) is
//!   reasoning;
//! - no tag: everything is body.
//!
//! Only one reasoning block is split off; later tags are ordinary text.
//! Recognised pairs: `<think>`, `<thinking>`, `<seed:think>`, Harmony's
//! `<|channel|>analysis<|message|>`…`<|end|>`, Gemma 4's
//! `<|channel>thought`…`<channel|>`, Apertus's `<|inner_prefix|>`…
//! `<|inner_suffix|>`, Kimi K3's `<|open|>think<|sep|>`…
//! `<|close|>think<|sep|>`. A closer with no opener counts only for the
//! pairs whose templates pre-open reasoning.
//!
//! Where the template opened the reasoning itself (a closer with no
//! opener), a call marker of any family (`<tool_call>`, Kimi K2's, DeepSeek
//! DSML's, Gemma 4's `<|tool_call>`, `<function=`, `[TOOL_CALLS]`,
//! namespaced XML, … — [`CALL_STARTS`]) before that closer ends the
//! reasoning where it stands, when a call of an offered tool reads from
//! there: Qwen3.5, Kimi K2 and DeepSeek V4 call tools before closing their
//! reasoning (vLLM#39056); the closer after the call is dropped. A marker
//! that starts no call is reasoning like any text.
//!
//! A block the text opened itself (`<think>…`) and closed later stays
//! reasoning as a whole, calls included: the model was thinking about them.
//! One still open at the end of the output (the serving engine returned
//! the template's `<think>` and the model called without closing it) ends
//! the same way at a call marker from which a call of an offered tool
//! reads, to the end of the output: the text before it is reasoning, the
//! rest is read as the body. Only the first [`MAX_TRIED`] markers within
//! [`MAX_HELD`] bytes of the end are tried. A stream holds the text of an
//! open block back from the first marker from which a call may still read
//! (at most [`MAX_HELD`] bytes of it) until the closer, the end, or a
//! decision that no call reads from there.

use std::collections::VecDeque;

use super::engine::{call_from, starts_call};
use super::offered::Tools;

/// An opener, its closer, and whether the closer alone ends reasoning.
const PAIRS: [(&str, &str, bool); 7] = [
    ("<think>", "</think>", true),
    ("<thinking>", "</thinking>", true),
    ("<seed:think>", "</seed:think>", true),
    ("<|channel|>analysis<|message|>", "<|end|>", false),
    ("<|channel>thought", "<channel|>", false),
    ("<|inner_prefix|>", "<|inner_suffix|>", false),
    ("<|open|>think<|sep|>", "<|close|>think<|sep|>", true),
];

/// Call markers, one or more per family, that end reasoning where they
/// stand when a call reads from there (besides namespaced XML tags,
/// `<ns:name>`, found by shape).
const CALL_STARTS: &[&str] = &[
    "<tool_call>",
    "<TOOL_CALL>",
    "<tool_calls>",
    "<|tool_call|>",
    "<|tool_call>",
    "<call>",
    "<start_function_call>",
    "<function=",
    "<function ",
    "<function_calls>",
    "<toolcall>",
    "<TOOLCALL>",
    "<dots_function_call>",
    "<｜DSML｜",
    "<|python_start|>",
    "<|python_tag|>",
    "<|tool_call_start|>",
    "<|action_start|>",
    "<|tools_prefix|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls｜>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<｜tool_calls_begin｜>",
    "<|open|>tools<|sep|>",
    "<ifm|tool_calls>",
    "<ifm|tool_call>",
    "[TOOL_CALLS]",
    "]<]minimax[>[<tool_call>",
];

/// How many call markers in one stretch of reasoning are tried (each is
/// parsed to its end): the rest stay reasoning.
const MAX_TRIED: usize = 8;

/// Longest tag, minus one: how much text might be an incomplete tag.
const HOLD: usize = 30;

/// How far from the end of the output a call marker inside a reasoning
/// block still open there is tried, and so how much of an open block a
/// stream holds back from a marker: a call longer than this stays
/// reasoning.
pub(super) const MAX_HELD: usize = 1 << 16;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum FrontOut {
    Reason(String),
    Body(String),
    /// The body is interrupted by the reasoning block here.
    Break,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No tag seen yet.
    Scan,
    /// Inside a reasoning block ending with `PAIRS[k].1`.
    Think(usize),
    /// Reasoning is over: everything else is body.
    Body,
}

pub(super) struct Front {
    mode: Mode,
    buf: String,
    scan_from: usize,
    /// Honour a closing tag with no opener (holds all text back until the
    /// first tag or the end).
    orphan_close: bool,
    /// The block the text opened, in [`Mode::Think`].
    open: Open,
}

/// A reasoning block the text opened, while it is open. Positions are
/// byte offsets in the block; `Front::buf` holds it from `base` on.
#[derive(Default)]
struct Open {
    /// Offset of `buf`'s first byte (what precedes was emitted, dropped).
    base: usize,
    /// Emitted as reasoning up to here.
    head: usize,
    /// The closer is looked for from here.
    close_from: usize,
    /// Call markers are looked for from here: the end of the text, or an
    /// incomplete marker's start (held back).
    marks_from: usize,
    /// Call markers not emitted yet and not known to start no call.
    marks: VecDeque<usize>,
    /// A call reads from the first of `marks`.
    live: bool,
    /// The block's length from which the first of `marks` is looked at
    /// (again): after as much text again as the last look read, so that
    /// looking stays linear.
    gate: usize,
    /// The last [`MAX_TRIED`] markers found to start no call.
    dead: VecDeque<usize>,
}

impl Open {
    /// Record the markers of `buf` (the block from `base`) not seen yet.
    fn scan_marks(&mut self, buf: &str) {
        let b = buf.as_bytes();
        let mut i = self.marks_from.saturating_sub(self.base);
        while let Some(&c) = b.get(i) {
            if matches!(c, b'<' | b'[' | b']') {
                match marker_at(buf.get(i..).unwrap_or(""), false) {
                    Some(true) => self.marks.push_back(self.base + i),
                    Some(false) => {}
                    None => {
                        self.marks_from = self.base + i;
                        return;
                    }
                }
            }
            i += 1;
        }
        self.marks_from = self.base + b.len();
    }
}

impl Front {
    pub fn new(orphan_close: bool) -> Self {
        Front {
            mode: Mode::Scan,
            buf: String::new(),
            scan_from: 0,
            orphan_close,
            open: Open::default(),
        }
    }

    pub fn push(&mut self, chunk: &str, eof: bool, tools: &Tools, out: &mut Vec<FrontOut>) {
        if self.mode == Mode::Body {
            if !chunk.is_empty() {
                out.push(FrontOut::Body(chunk.to_string()));
            }
            return;
        }
        self.buf.push_str(chunk);
        loop {
            match self.mode {
                Mode::Body => {
                    if !self.buf.is_empty() {
                        out.push(FrontOut::Body(std::mem::take(&mut self.buf)));
                    }
                    return;
                }
                Mode::Scan => {
                    // Earliest opener or (when honoured) closer.
                    let mut best: Option<(usize, usize, bool)> = None;
                    for (k, (open, close, orphan)) in PAIRS.iter().enumerate() {
                        for (tag, is_close) in [(*open, false), (*close, true)] {
                            if is_close && !(self.orphan_close && *orphan) {
                                continue;
                            }
                            if let Some(i) = find_from(&self.buf, tag, self.scan_from)
                                && best.is_none_or(|(b, _, _)| i < b)
                            {
                                best = Some((i, k, is_close));
                            }
                        }
                    }
                    match best {
                        Some((i, k, true)) => {
                            let (_, close, _) = PAIRS[k];
                            // A call before the closer ended the reasoning.
                            let before = self.buf.get(..i).unwrap_or("");
                            let c = call_split(before, 0, MAX_TRIED, tools).unwrap_or(i);
                            let reason = self.buf.get(..c).unwrap_or("").to_string();
                            let call = self.buf.get(c..i).unwrap_or("").to_string();
                            let rest = self.buf.get(i + close.len()..).unwrap_or("").to_string();
                            push_text(out, FrontOut::Reason(reason));
                            push_text(out, FrontOut::Body(call));
                            self.buf = rest;
                            self.mode = Mode::Body;
                        }
                        Some((i, k, false)) => {
                            let (open, _, _) = PAIRS[k];
                            let before = self.buf.get(..i).unwrap_or("").to_string();
                            let rest = self.buf.get(i + open.len()..).unwrap_or("").to_string();
                            push_text(out, FrontOut::Body(before));
                            out.push(FrontOut::Break);
                            self.buf = rest;
                            self.scan_from = 0;
                            self.open = Open::default();
                            self.mode = Mode::Think(k);
                        }
                        None => {
                            if eof {
                                push_text(out, FrontOut::Body(std::mem::take(&mut self.buf)));
                                return;
                            }
                            let keep = hold_from(&self.buf, |t| {
                                PAIRS.iter().any(|(o, c, orphan)| {
                                    o.starts_with(t)
                                        || (self.orphan_close && *orphan && c.starts_with(t))
                                })
                            });
                            if self.orphan_close {
                                self.scan_from = keep;
                            } else {
                                let head: String = self.buf.drain(..keep).collect();
                                push_text(out, FrontOut::Body(head));
                                self.scan_from = 0;
                            }
                            return;
                        }
                    }
                }
                Mode::Think(k) => {
                    if !self.think(PAIRS[k].1, eof, tools, out) {
                        return;
                    }
                }
            }
        }
    }

    /// Go on inside an open reasoning block ending with `close`; true when
    /// it ended (the mode is then [`Mode::Body`]).
    fn think(&mut self, close: &str, eof: bool, tools: &Tools, out: &mut Vec<FrontOut>) -> bool {
        let o = &mut self.open;
        let len = o.base + self.buf.len();
        let head = o.head.saturating_sub(o.base);
        if let Some(i) = find_from(&self.buf, close, o.close_from.saturating_sub(o.base)) {
            // Closed: all of it is reasoning, calls included.
            let reason = self.buf.get(head..i).unwrap_or("").to_string();
            self.buf = self.buf.get(i + close.len()..).unwrap_or("").to_string();
            push_text(out, FrontOut::Reason(reason));
            self.mode = Mode::Body;
            return true;
        }
        let window = len.saturating_sub(MAX_HELD);
        if eof {
            // Never closed: a call of an offered tool at one of the first
            // markers within the window ends it. Those emitted already
            // started none, but count.
            let text = self.buf.get(head..).unwrap_or("");
            let tried = o
                .dead
                .iter()
                .filter(|&&d| d >= window && d < o.head)
                .count();
            let from = window.saturating_sub(o.head);
            let c = call_split(text, from, MAX_TRIED.saturating_sub(tried), tools);
            let c = c.unwrap_or(text.len());
            push_text(
                out,
                FrontOut::Reason(text.get(..c).unwrap_or("").to_string()),
            );
            push_text(out, FrontOut::Body(text.get(c..).unwrap_or("").to_string()));
            self.buf.clear();
            self.mode = Mode::Body;
            return true;
        }
        o.close_from = len.saturating_sub(close.len().saturating_sub(1));
        o.scan_marks(&self.buf);
        // Markers out of the window stay reasoning whatever follows.
        while o.marks.front().is_some_and(|&m| m < window) {
            o.marks.pop_front();
            o.live = false;
        }
        if let Some(&m) = o.marks.front()
            && !o.live
            && len >= o.gate
        {
            let t = self.buf.get(m.saturating_sub(o.base)..).unwrap_or("");
            o.gate = len + (len - m).max(1);
            match call_from(t, false, tools) {
                Some(true) => o.live = true,
                Some(false) => {
                    o.marks.pop_front();
                    o.dead.push_back(m);
                    if o.dead.len() > MAX_TRIED {
                        o.dead.pop_front();
                    }
                }
                None => {}
            }
        }
        // Emit up to the first marker a call may read from (or an
        // incomplete one), the window's start at least, and never a
        // possible closer's start.
        let held = o
            .marks
            .front()
            .map_or(o.marks_from, |&m| m.min(o.marks_from));
        let held = held.max(o.base + floor_boundary(&self.buf, window.saturating_sub(o.base)));
        let closer = o.base + hold_from(&self.buf, |t| close.starts_with(t));
        let to = held.min(closer).max(o.head);
        let reason = self.buf.get(head..to - o.base).unwrap_or("").to_string();
        push_text(out, FrontOut::Reason(reason));
        o.head = to;
        // Drop what was emitted once it is most of the buffer.
        let done = o.head - o.base;
        if done > self.buf.len() / 2 {
            self.buf.drain(..done);
            o.base = o.head;
        }
        false
    }
}

/// Where the possibly-incomplete tag at the end of `buf` starts (the
/// length of `buf` when there is none).
fn hold_from(buf: &str, is_tag_prefix: impl Fn(&str) -> bool) -> usize {
    let window = floor_boundary(buf, buf.len().saturating_sub(HOLD));
    let tail = buf.get(window..).unwrap_or("");
    for (i, _) in tail.match_indices('<') {
        let t = tail.get(i..).unwrap_or("");
        if is_tag_prefix(t) {
            return window + i;
        }
    }
    buf.len()
}

/// Whether a call marker starts `t`: one of [`CALL_STARTS`] or a
/// namespaced XML tag (`<ns:name>`); `None` when `t` (not the whole text:
/// `eof` false) ends inside what may still become one.
fn marker_at(t: &str, eof: bool) -> Option<bool> {
    if CALL_STARTS.iter().any(|c| t.starts_with(c)) {
        return Some(true);
    }
    let ns = ns_tag(t);
    if ns == Some(true) {
        return Some(true);
    }
    if !eof && (ns.is_none() || CALL_STARTS.iter().any(|c| c.starts_with(t))) {
        return None;
    }
    Some(false)
}

/// `<ns:name>` at the start of `t`, a namespaced XML tag: `None` when `t`
/// ends before that is decided.
fn ns_tag(t: &str) -> Option<bool> {
    let b = t.as_bytes();
    // The end of a name (1 to 64 of its characters) from `from`; `None`
    // when the text ends inside it.
    let name = |from: usize| {
        let n = b
            .iter()
            .skip(from)
            .take_while(|&&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
            .take(65)
            .count();
        if n > 64 {
            Some(None)
        } else if from + n >= b.len() {
            None
        } else {
            Some((n > 0).then_some(from + n))
        }
    };
    if b.first() != Some(&b'<') {
        return Some(false);
    }
    let Some(e) = name(1)? else {
        return Some(false);
    };
    if b.get(e) != Some(&b':') {
        return Some(false);
    }
    let Some(e) = name(e + 1)? else {
        return Some(false);
    };
    Some(b.get(e) == Some(&b'>'))
}

/// Where call markers stand in `text` at or after `from`, in order, at
/// most `max` of them.
fn call_markers(text: &str, from: usize, max: usize) -> Vec<usize> {
    let b = text.as_bytes();
    (from..b.len())
        .filter(|&i| {
            matches!(b.get(i), Some(b'<' | b'[' | b']'))
                && marker_at(text.get(i..).unwrap_or(""), true) == Some(true)
        })
        .take(max)
        .collect()
}

/// Where a call of an offered tool starts in `text` (reasoning), at one of
/// its first `max` call markers at or after `from`; `None` when none does.
fn call_split(text: &str, from: usize, max: usize, tools: &Tools) -> Option<usize> {
    call_markers(text, from, max)
        .into_iter()
        .find(|&c| starts_call(text.get(c..).unwrap_or(""), tools))
}

fn push_text(out: &mut Vec<FrontOut>, o: FrontOut) {
    match &o {
        FrontOut::Reason(s) | FrontOut::Body(s) if s.is_empty() => {}
        _ => out.push(o),
    }
}

fn find_from(s: &str, needle: &str, from: usize) -> Option<usize> {
    let from = floor_boundary(s, from);
    s.get(from..)?.find(needle).map(|i| i + from)
}

fn floor_boundary(s: &str, i: usize) -> usize {
    super::text::floor_boundary(s, i)
}

/// Whitespace policy for content: leading and trailing whitespace of the
/// whole content is dropped; the whitespace around a removed call collapses
/// to one separator (`"\n"` if it contained a line break, `" "` if it
/// contained other whitespace, nothing otherwise). Whitespace elsewhere is
/// kept as written. Works incrementally: trailing whitespace is held back
/// until it is known not to be trailing.
#[derive(Default)]
pub(super) struct Sink {
    started: bool,
    pending_ws: String,
    boundary: bool,
}

impl Sink {
    /// Feed text; returns what can be emitted now.
    pub fn text(&mut self, s: &str) -> String {
        let mut out = String::new();
        let core_start = s.len() - s.trim_start().len();
        if core_start == s.len() {
            self.pending_ws.push_str(s);
            return out;
        }
        let core_end = s.trim_end().len();
        self.pending_ws.push_str(s.get(..core_start).unwrap_or(""));
        if self.started {
            if self.boundary {
                if self.pending_ws.contains('\n') {
                    out.push('\n');
                } else if !self.pending_ws.is_empty() {
                    out.push(' ');
                }
            } else {
                out.push_str(&self.pending_ws);
            }
        }
        out.push_str(s.get(core_start..core_end).unwrap_or(""));
        self.started = true;
        self.boundary = false;
        self.pending_ws = s.get(core_end..).unwrap_or("").to_string();
        out
    }

    /// A call (or reasoning block) was removed here.
    pub fn boundary(&mut self) {
        if self.started {
            self.boundary = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str], orphan: bool) -> (String, String) {
        let tools = Tools::default();
        let mut f = Front::new(orphan);
        let mut out = Vec::new();
        for c in chunks {
            f.push(c, false, &tools, &mut out);
        }
        f.push("", true, &tools, &mut out);
        let mut r = String::new();
        let mut b = String::new();
        for o in out {
            match o {
                FrontOut::Reason(s) => r.push_str(&s),
                FrontOut::Body(s) => b.push_str(&s),
                FrontOut::Break => b.push('|'),
            }
        }
        (r, b)
    }

    #[test]
    fn splits() {
        assert_eq!(run(&["<think>a</think>b"], true), ("a".into(), "|b".into()));
        assert_eq!(
            run(&["<thi", "nk>a</th", "ink>b"], true),
            ("a".into(), "|b".into())
        );
        assert_eq!(run(&["x a</think>b"], true), ("x a".into(), "b".into()));
        assert_eq!(
            run(&["x a</think>b"], false),
            ("".into(), "x a</think>b".into())
        );
        assert_eq!(run(&["<think>open"], true), ("open".into(), "|".into()));
        assert_eq!(
            run(&["pre <think>r</think> post"], true),
            ("r".into(), "pre | post".into())
        );
        assert_eq!(run(&["no tags"], true), ("".into(), "no tags".into()));
        assert_eq!(
            run(&["<seed:think>r</seed:think>b</think>"], true),
            ("r".into(), "|b</think>".into())
        );
    }

    #[test]
    fn sink_policy() {
        let mut s = Sink::default();
        let mut out = String::new();
        out += &s.text("  Hello ");
        s.boundary();
        out += &s.text(" \n ");
        out += &s.text(" world  ");
        out += &s.text("again ");
        assert_eq!(out, "Hello\nworld  again");
    }
}
