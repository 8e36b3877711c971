//! A validating, non-recursive JSON scanner.
//!
//! It finds where a JSON object or array that starts at a given byte ends,
//! understanding strings and escapes (so a `}` or `</tool_call>` inside a
//! string never ends anything), without building a value. Its container
//! stack lives on the heap and is capped at [`MAX_DEPTH`], so adversarial
//! nesting can neither overflow the call stack nor cost more than linear
//! time. Once the extent is known, `serde_json` builds the value.
//!
//! On failure it reports what a caller needs to resume scanning without
//! re-reading the same bytes: the position of the error, the outermost
//! containers that did close (complete JSON values in their own right) and
//! the innermost container still open.

/// Deepest nesting accepted. Matches `serde_json`'s own recursion limit, so
/// every complete value the scanner accepts can also be built.
pub(super) const MAX_DEPTH: usize = 128;

#[derive(Debug)]
pub(super) struct Complete {
    /// One past the closing bracket.
    pub end: usize,
    /// Spans of the top-level container's children that are containers.
    pub elems: Vec<(usize, usize)>,
    /// The text with missing closers inserted, when repair mode fixed it.
    pub repaired: Option<String>,
}

#[derive(Debug)]
pub(super) struct Failure {
    /// Where scanning stopped (an unexpected byte, or the end of the input).
    pub at: usize,
    /// Outermost containers that closed before the failure, in text order.
    pub closed: Vec<(usize, usize)>,
    /// Start of the innermost container still open at the failure.
    pub innermost: usize,
    /// Children of the top-level container that closed (subset of `closed`).
    pub top_elems: Vec<(usize, usize)>,
    pub top_scalar: bool,
    pub top_is_array: bool,
    /// The innermost open container could be closed right here (it just had
    /// a complete value, or is empty).
    pub closable: bool,
    /// Closers of the open containers, innermost first.
    pub open_closers: Vec<u8>,
    /// The opening quote of a value string the (final) text ended in.
    pub open_string: Option<usize>,
}

#[derive(Debug)]
pub(super) enum Scan {
    Complete(Complete),
    Fail(Failure),
    More,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Obj,
    Arr,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum St {
    /// Just after the opening bracket.
    First,
    /// Object, after a comma: a key must follow.
    Key,
    /// Object, after a key.
    Colon,
    /// After a colon or an array comma: a value must follow.
    Value,
    /// After a value: comma or closing bracket.
    After,
}

struct Frame {
    kind: Kind,
    start: usize,
    st: St,
    /// Index into the shared span list where this frame's children start.
    cstart: usize,
    scalar: bool,
}

impl Frame {
    fn closer(&self) -> u8 {
        match self.kind {
            Kind::Obj => b'}',
            Kind::Arr => b']',
        }
    }
}

enum Tok {
    Ok(usize),
    More,
    Fail(usize),
}

/// Scan the container starting at `s` (`{` or `[`).
///
/// With `repair`, a closing bracket that skips over an unclosed container
/// (`[{"a": 1]`) closes it implicitly; the repaired text is returned.
pub(super) fn scan(b: &[u8], s: usize, eof: bool, repair: bool) -> Scan {
    let mut stack: Vec<Frame> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut inserts: Vec<(usize, u8)> = Vec::new();
    let kind = match b.get(s) {
        Some(b'{') => Kind::Obj,
        Some(b'[') => Kind::Arr,
        _ => {
            return Scan::Fail(Failure {
                at: s,
                closed: Vec::new(),
                innermost: s,
                top_elems: Vec::new(),
                top_scalar: false,
                top_is_array: false,
                closable: false,
                open_closers: Vec::new(),
                open_string: None,
            });
        }
    };
    stack.push(Frame {
        kind,
        start: s,
        st: St::First,
        cstart: 0,
        scalar: false,
    });
    let mut i = s + 1;
    // A value string being read: where it opened.
    let mut in_string: Option<usize> = None;

    macro_rules! fail {
        ($at:expr) => {
            return failure(&stack, spans, $at, in_string.filter(|_| $at >= b.len()))
        };
    }
    macro_rules! tok {
        ($r:expr) => {
            match $r {
                Tok::Ok(e) => e,
                Tok::More => {
                    if eof {
                        fail!(b.len())
                    }
                    return Scan::More;
                }
                Tok::Fail(at) => fail!(at),
            }
        };
    }

    loop {
        while let Some(&c) = b.get(i) {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                i += 1;
            } else {
                break;
            }
        }
        let Some(&c) = b.get(i) else {
            if eof {
                fail!(i)
            }
            return Scan::More;
        };
        let depth = stack.len();
        let Some(top) = stack.last_mut() else {
            fail!(i)
        };
        let is_obj = top.kind == Kind::Obj;
        match top.st {
            St::First | St::Key if is_obj => {
                if c == b'"' {
                    i = tok!(string(b, i));
                    top.st = St::Colon;
                } else if c == b'}' && top.st == St::First {
                    match close(&mut stack, &mut spans, i, &inserts, b, s) {
                        Some(done) => return done,
                        None => i += 1,
                    }
                } else {
                    fail!(i)
                }
            }
            St::Colon => {
                if c == b':' {
                    top.st = St::Value;
                    i += 1;
                } else {
                    fail!(i)
                }
            }
            St::First | St::Key | St::Value => {
                if c == b']' && !is_obj && top.st == St::First {
                    match close(&mut stack, &mut spans, i, &inserts, b, s) {
                        Some(done) => return done,
                        None => i += 1,
                    }
                    continue;
                }
                match c {
                    b'{' | b'[' => {
                        if depth >= MAX_DEPTH {
                            fail!(i)
                        }
                        top.st = St::After;
                        let cstart = spans.len();
                        stack.push(Frame {
                            kind: if c == b'{' { Kind::Obj } else { Kind::Arr },
                            start: i,
                            st: St::First,
                            cstart,
                            scalar: false,
                        });
                        i += 1;
                    }
                    b'"' => {
                        in_string = Some(i);
                        i = tok!(string(b, i));
                        in_string = None;
                        if let Some(top) = stack.last_mut() {
                            top.st = St::After;
                            top.scalar = true;
                        }
                    }
                    b'-' | b'0'..=b'9' => {
                        i = tok!(number(b, i));
                        top.st = St::After;
                        top.scalar = true;
                    }
                    b't' => {
                        i = tok!(literal(b, i, b"true"));
                        top.st = St::After;
                        top.scalar = true;
                    }
                    b'f' => {
                        i = tok!(literal(b, i, b"false"));
                        top.st = St::After;
                        top.scalar = true;
                    }
                    b'n' => {
                        i = tok!(literal(b, i, b"null"));
                        top.st = St::After;
                        top.scalar = true;
                    }
                    _ => fail!(i),
                }
            }
            St::After => match c {
                b',' => {
                    top.st = if is_obj { St::Key } else { St::Value };
                    i += 1;
                }
                b'}' | b']' => {
                    if c != top.closer() {
                        let outer_matches = stack.iter().rev().skip(1).any(|f| f.closer() == c);
                        if !(repair && outer_matches) {
                            fail!(i)
                        }
                        // Close the unclosed inner containers where the
                        // closer should have been.
                        while let Some(f) = stack.last() {
                            if f.closer() == c {
                                break;
                            }
                            let Some(f) = stack.pop() else { break };
                            inserts.push((i, f.closer()));
                            spans.truncate(f.cstart);
                            spans.push((f.start, i));
                        }
                    }
                    match close(&mut stack, &mut spans, i, &inserts, b, s) {
                        Some(done) => return done,
                        None => i += 1,
                    }
                }
                _ => fail!(i),
            },
        }
    }
}

/// Close the innermost frame at `i` (its closer). Returns the final result
/// when the top-level container closed.
fn close(
    stack: &mut Vec<Frame>,
    spans: &mut Vec<(usize, usize)>,
    i: usize,
    inserts: &[(usize, u8)],
    b: &[u8],
    s: usize,
) -> Option<Scan> {
    let f = stack.pop()?;
    let children = spans.split_off(f.cstart.min(spans.len()));
    if stack.is_empty() {
        let end = i + 1;
        let repaired = if inserts.is_empty() {
            None
        } else {
            let mut out: Vec<u8> = Vec::with_capacity(end - s + inserts.len());
            let mut last = s;
            for &(pos, ch) in inserts {
                out.extend_from_slice(b.get(last..pos).unwrap_or(&[]));
                out.push(ch);
                last = pos;
            }
            out.extend_from_slice(b.get(last..end).unwrap_or(&[]));
            String::from_utf8(out).ok()
        };
        return Some(Scan::Complete(Complete {
            end,
            elems: children,
            repaired,
        }));
    }
    spans.push((f.start, i + 1));
    None
}

fn failure(
    stack: &[Frame],
    spans: Vec<(usize, usize)>,
    at: usize,
    open_string: Option<usize>,
) -> Scan {
    let top_end = stack
        .get(1)
        .map_or(spans.len(), |f| f.cstart.min(spans.len()));
    let top_elems = spans.get(..top_end).map(<[_]>::to_vec).unwrap_or_default();
    Scan::Fail(Failure {
        at,
        innermost: stack.last().map_or(at, |f| f.start),
        top_elems,
        top_scalar: stack.first().is_some_and(|f| f.scalar),
        top_is_array: stack.first().is_some_and(|f| f.kind == Kind::Arr),
        closable: stack
            .last()
            .is_some_and(|f| matches!(f.st, St::After | St::First)),
        open_closers: stack.iter().rev().map(Frame::closer).collect(),
        open_string,
        closed: spans,
    })
}

fn string(b: &[u8], i: usize) -> Tok {
    let mut j = i + 1;
    loop {
        let Some(&c) = b.get(j) else {
            return Tok::More;
        };
        match c {
            b'"' => return Tok::Ok(j + 1),
            b'\\' => {
                let Some(&e) = b.get(j + 1) else {
                    return Tok::More;
                };
                match e {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                    b'u' => {
                        for k in 0..4 {
                            match b.get(j + 2 + k) {
                                None => return Tok::More,
                                Some(h) if h.is_ascii_hexdigit() => {}
                                Some(_) => return Tok::Fail(j + 2 + k),
                            }
                        }
                        j += 6;
                    }
                    _ => return Tok::Fail(j + 1),
                }
            }
            0..=0x1f => return Tok::Fail(j),
            _ => j += 1,
        }
    }
}

fn digits(b: &[u8], mut j: usize) -> (usize, usize) {
    let start = j;
    while b.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    (j, j - start)
}

fn number(b: &[u8], i: usize) -> Tok {
    let mut j = i;
    if b.get(j) == Some(&b'-') {
        j += 1;
    }
    match b.get(j) {
        None => return Tok::More,
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => j = digits(b, j).0,
        Some(_) => return Tok::Fail(j),
    }
    if b.get(j) == Some(&b'.') {
        let (e, n) = digits(b, j + 1);
        if n == 0 {
            return if e >= b.len() {
                Tok::More
            } else {
                Tok::Fail(e)
            };
        }
        j = e;
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let (e, n) = digits(b, j);
        if n == 0 {
            return if e >= b.len() {
                Tok::More
            } else {
                Tok::Fail(e)
            };
        }
        j = e;
    }
    if j >= b.len() {
        // The number may continue in text not yet received.
        return Tok::More;
    }
    Tok::Ok(j)
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Tok {
    for (k, &w) in word.iter().enumerate() {
        match b.get(i + k) {
            None => return Tok::More,
            Some(&c) if c == w => {}
            Some(_) => return Tok::Fail(i + k),
        }
    }
    Tok::Ok(i + word.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_of(s: &str) -> Option<usize> {
        match scan(s.as_bytes(), 0, true, false) {
            Scan::Complete(c) => Some(c.end),
            _ => None,
        }
    }

    #[test]
    fn finds_extent_with_strings_and_escapes() {
        assert_eq!(end_of(r#"{"a": "}"} tail"#), Some(10));
        assert_eq!(end_of(r#"{"a": "\"}"}x"#), Some(12));
        assert_eq!(end_of(r#"[1, -2.5e3, true, null, {"k": []}] x"#), Some(34));
        assert_eq!(end_of(r#"{"a": "</tool_call>"}"#), Some(21));
        assert_eq!(end_of("{}"), Some(2));
        assert_eq!(end_of("[]"), Some(2));
    }

    #[test]
    fn rejects_invalid() {
        for bad in [
            "{a}",
            "{\"a\" 1}",
            "[1,]",
            "{\"a\":1,}",
            "[01]",
            "{\"a\":\"\n\"}",
            "[tru]",
        ] {
            assert!(end_of(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn needs_more_when_not_final() {
        for part in [
            "{",
            "{\"a\"",
            "{\"a\": 1",
            "[1, 2",
            "{\"a\": \"x",
            "[tr",
            "[1.",
            "[-",
        ] {
            assert!(
                matches!(scan(part.as_bytes(), 0, false, false), Scan::More),
                "{part}"
            );
        }
    }

    #[test]
    fn failure_reports_closed_children_and_innermost() {
        let s = r#"[{"a": 1}, {"b": [2, x"#;
        match scan(s.as_bytes(), 0, true, false) {
            Scan::Fail(f) => {
                assert_eq!(f.closed, vec![(1, 9)]);
                assert_eq!(f.top_elems, vec![(1, 9)]);
                assert_eq!(f.innermost, 17);
                assert_eq!(f.at, 21);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn repair_closes_skipped_containers() {
        let s = r#"[{"a": {"b": 1}]"#;
        match scan(s.as_bytes(), 0, true, true) {
            Scan::Complete(c) => {
                assert_eq!(c.repaired.as_deref(), Some(r#"[{"a": {"b": 1}}]"#));
                assert_eq!(c.elems, vec![(1, 15)]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn depth_is_capped() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        match scan(deep.as_bytes(), 0, true, false) {
            Scan::Fail(f) => assert_eq!(f.at, MAX_DEPTH),
            other => panic!("{other:?}"),
        }
    }
}
