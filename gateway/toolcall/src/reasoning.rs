//! Reasoning split (done before anything else) and the whitespace policy of
//! the content and reasoning outputs.
//!
//! The first think tag in the text decides:
//! - a closing tag (`</think>`) with no opener before it: everything before
//!   it is reasoning (templates that pre-open `<think>`);
//! - an opening tag: the text before it is body, the text up to the
//!   matching closer (or to the end, if none) is reasoning;
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
//! opener), a call's own start token (`<tool_call>`, Kimi K2's, DeepSeek
//! DSML's) before that closer ends the reasoning where it stands: Qwen3.5,
//! Kimi K2 and DeepSeek V4 call tools before closing their reasoning
//! (vLLM#39056); the closer after the call is dropped. Inside a block the
//! text opened itself (`<think>…`), a call stays reasoning.

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

/// Call start tokens that end pre-opened reasoning where they stand.
const CALL_STARTS: [&str; 5] = [
    "<tool_call>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<｜DSML｜tool_calls>",
    "<｜DSML｜function_calls>",
];

/// Longest tag, minus one: how much text might be an incomplete tag.
const HOLD: usize = 30;

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
    /// Where the first call start token is, once seen (orphan mode only).
    call_at: Option<usize>,
}

impl Front {
    pub fn new(orphan_close: bool) -> Self {
        Front {
            mode: Mode::Scan,
            buf: String::new(),
            scan_from: 0,
            orphan_close,
            call_at: None,
        }
    }

    pub fn push(&mut self, chunk: &str, eof: bool, out: &mut Vec<FrontOut>) {
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
                    if self.orphan_close && self.call_at.is_none() {
                        self.call_at = CALL_STARTS
                            .iter()
                            .filter_map(|c| find_from(&self.buf, c, self.scan_from))
                            .min();
                    }
                    match best {
                        Some((i, k, true)) => {
                            let (_, close, _) = PAIRS[k];
                            // A call before the closer ended the reasoning.
                            let c = self.call_at.filter(|&c| c < i).unwrap_or(i);
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
                                }) || (self.orphan_close
                                    && self.call_at.is_none()
                                    && CALL_STARTS.iter().any(|c| c.starts_with(t)))
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
                    let (_, close, _) = PAIRS[k];
                    match find_from(&self.buf, close, self.scan_from) {
                        Some(i) => {
                            let reason = self.buf.get(..i).unwrap_or("").to_string();
                            let rest = self.buf.get(i + close.len()..).unwrap_or("").to_string();
                            push_text(out, FrontOut::Reason(reason));
                            self.buf = rest;
                            self.mode = Mode::Body;
                        }
                        None => {
                            if eof {
                                push_text(out, FrontOut::Reason(std::mem::take(&mut self.buf)));
                                return;
                            }
                            let keep = hold_from(&self.buf, |t| close.starts_with(t));
                            let head: String = self.buf.drain(..keep).collect();
                            push_text(out, FrontOut::Reason(head));
                            self.scan_from = 0;
                            return;
                        }
                    }
                }
            }
        }
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
        let mut f = Front::new(orphan);
        let mut out = Vec::new();
        for c in chunks {
            f.push(c, false, &mut out);
        }
        f.push("", true, &mut out);
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
