//! Low-level helpers shared by every family parser: the input view
//! ([`Input`]), the three-way outcome ([`Outcome`]), marker matching ([`MarkerMatch`]) that knows when
//! it needs more input, and a cached substring finder that keeps repeated
//! searches linear.

use std::cell::RefCell;

use super::offered::ParsedCall;
use super::offered::Tools;

/// Outcome of a sub-parser.
///
/// `More` means "the answer depends on text that has not arrived yet"; it is
/// never returned when the input is final (`Input::eof`). Every `Ok`/`No`
/// answer must be the same whatever text is appended later: that property is
/// what makes streaming equal to whole-text parsing.
pub(super) enum Outcome<T> {
    Ok(T),
    No,
    More,
}

/// Result of matching a fixed marker at a position.
pub(super) enum MarkerMatch {
    /// Matched; the value is the end of the marker.
    Yes(usize),
    No,
    More,
}

/// Piece of parsed output, in text order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    /// Byte range of the input that stays content.
    Range(usize, usize),
    /// Synthesised content (e.g. a re-serialised JSON element).
    Text(String),
    Call(ParsedCall),
}

/// A decided stretch of input: `pieces` cover it in order and it ends at `end`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Block {
    pub pieces: Vec<Piece>,
    pub end: usize,
}

impl Block {
    pub fn content(a: usize, b: usize) -> Self {
        Block {
            pieces: vec![Piece::Range(a, b)],
            end: b,
        }
    }
}

/// Input view: the text available so far and whether it is final.
pub(super) struct Input<'a> {
    pub t: &'a str,
    pub b: &'a [u8],
    pub eof: bool,
    pub tools: &'a Tools,
    finder: RefCell<Finder>,
}

impl<'a> Input<'a> {
    pub fn new(t: &'a str, eof: bool, tools: &'a Tools) -> Self {
        Input {
            t,
            b: t.as_bytes(),
            eof,
            tools,
            finder: RefCell::new(Finder::default()),
        }
    }

    /// A view of the same text cut at `end` and treated as final. Positions
    /// stay valid because it is a prefix.
    pub fn bounded(&self, end: usize) -> Input<'a> {
        let end = floor_boundary(self.t, end);
        let t = self.t.get(..end).unwrap_or("");
        Input::new(t, true, self.tools)
    }

    pub fn len(&self) -> usize {
        self.b.len()
    }

    pub fn at(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }

    pub fn slice(&self, a: usize, b: usize) -> &'a str {
        self.t.get(a..b).unwrap_or("")
    }

    /// `More` when the input is not final, `No` otherwise.
    pub fn need<T>(&self) -> Outcome<T> {
        if self.eof { Outcome::No } else { Outcome::More }
    }

    /// Skip ASCII whitespace.
    pub fn skip_ws(&self, mut i: usize) -> usize {
        while let Some(c) = self.at(i) {
            if is_ws(c) {
                i += 1;
            } else {
                break;
            }
        }
        i
    }

    /// Match `m` at `i`, ASCII case-insensitively.
    pub fn marker(&self, i: usize, m: &str) -> MarkerMatch {
        let mb = m.as_bytes();
        for (k, &want) in mb.iter().enumerate() {
            match self.at(i + k) {
                None => {
                    return if self.eof {
                        MarkerMatch::No
                    } else {
                        MarkerMatch::More
                    };
                }
                Some(c) if c.eq_ignore_ascii_case(&want) => {}
                Some(_) => return MarkerMatch::No,
            }
        }
        MarkerMatch::Yes(i + mb.len())
    }

    /// First occurrence of `needle` at or after `from` (cached; amortised
    /// linear over a whole parse).
    pub fn find(&self, needle: &'static str, from: usize) -> Option<usize> {
        self.finder.borrow_mut().find(self.t, needle, from)
    }
}

/// Whitespace the tokenizer wrote as its own byte symbol (MiniCPM's
/// byte-level `Ġ`, U+0120), read as a space inside tags.
const BPE_SPACE: char = '\u{120}';

pub(super) fn is_tag_space(c: char) -> bool {
    c.is_whitespace() || c == BPE_SPACE
}

/// Attributes `key="value"` (or single quotes) of a tag, in order.
pub(super) fn attrs(s: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(is_tag_space);
        let Some(eq) = rest.find('=') else { break };
        let key = rest.get(..eq).unwrap_or("").trim_matches(is_tag_space);
        let after = rest.get(eq + 1..).unwrap_or("").trim_start();
        let Some(q) = after.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            break;
        };
        let body = after.get(1..).unwrap_or("");
        let Some(close) = body.find(q) else { break };
        out.push((key, body.get(..close).unwrap_or("")));
        rest = body.get(close + 1..).unwrap_or("");
    }
    out
}

pub(super) fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

pub(super) fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

pub(super) fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Largest char boundary `<= i`.
pub(super) fn floor_boundary(t: &str, i: usize) -> usize {
    let mut i = i.min(t.len());
    while i > 0 && !t.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Smallest char boundary `>= i`.
pub(super) fn ceil_boundary(t: &str, i: usize) -> usize {
    let mut i = i.min(t.len());
    while i < t.len() && !t.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Per-needle memo of match positions over one fixed text. Every byte is
/// scanned at most once per needle, whatever the order of the queries.
#[derive(Default)]
struct Finder {
    entries: Vec<NeedleMemo>,
}

struct NeedleMemo {
    needle: &'static str,
    /// All match starts in `[lo, hi)`, sorted.
    occ: Vec<usize>,
    lo: usize,
    hi: usize,
}

impl Finder {
    fn find(&mut self, t: &str, needle: &'static str, from: usize) -> Option<usize> {
        if needle.is_empty() || from > t.len() {
            return None;
        }
        let idx = match self.entries.iter().position(|e| e.needle == needle) {
            Some(i) => i,
            None => {
                self.entries.push(NeedleMemo {
                    needle,
                    occ: Vec::new(),
                    lo: from,
                    hi: from,
                });
                self.entries.len() - 1
            }
        };
        let e = self.entries.get_mut(idx)?;
        if from < e.lo {
            // Extend the covered range backwards: matches starting in [from, lo).
            let end = ceil_boundary(t, (e.lo + needle.len()).saturating_sub(1));
            let start = ceil_boundary(t, from);
            let mut found: Vec<usize> = t
                .get(start..end)
                .map(|s| {
                    s.match_indices(needle)
                        .map(|(k, _)| start + k)
                        .filter(|&p| p < e.lo)
                        .collect()
                })
                .unwrap_or_default();
            found.append(&mut e.occ);
            e.occ = found;
            e.lo = from;
        }
        let k = e.occ.partition_point(|&x| x < from);
        if let Some(&p) = e.occ.get(k) {
            return Some(p);
        }
        let mut cur = ceil_boundary(t, e.hi.max(e.lo));
        while cur < t.len() {
            match t.get(cur..).and_then(|s| s.find(needle)) {
                Some(r) => {
                    let p = cur + r;
                    e.occ.push(p);
                    cur = ceil_boundary(t, p + 1);
                    e.hi = cur;
                    if p >= from {
                        return Some(p);
                    }
                }
                None => {
                    e.hi = t.len();
                    return None;
                }
            }
        }
        e.hi = t.len();
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finder_matches_naive_search_in_any_query_order() {
        let t = "ab</x>cd</x>é</x>zz</x";
        let naive = |from: usize| t.get(from..).and_then(|s| s.find("</x>")).map(|k| k + from);
        let orders: [&[usize]; 4] = [
            &[0, 3, 7, 20],
            &[20, 7, 0, 3],
            &[9, 2, 15, 1],
            &[13, 13, 0, 22],
        ];
        for order in orders {
            let mut f = Finder::default();
            for &from in order {
                if t.is_char_boundary(from) {
                    assert_eq!(f.find(t, "</x>", from), naive(from), "from {from}");
                }
            }
        }
    }
}
