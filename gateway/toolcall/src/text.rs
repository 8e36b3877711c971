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
    pub fn find(&self, needle: &str, from: usize) -> Option<usize> {
        self.finder.borrow_mut().find(self.t, needle, from)
    }
}

/// Whitespace the tokenizer wrote as its own byte symbol (MiniCPM's
/// byte-level `Ġ`, U+0120), read as a space inside tags.
const BPE_SPACE: char = '\u{120}';

pub(super) fn is_tag_space(c: char) -> bool {
    c.is_whitespace() || c == BPE_SPACE
}

/// Attributes `key="value"` (or single quotes, or a bare value up to the
/// next space: `name=get_weather`) of a tag, in order.
pub(super) fn attrs(s: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(is_tag_space);
        let Some(eq) = rest.find('=') else { break };
        let key = rest.get(..eq).unwrap_or("").trim_matches(is_tag_space);
        let after = rest.get(eq + 1..).unwrap_or("").trim_start();
        match after.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let body = after.get(1..).unwrap_or("");
                let Some(close) = body.find(q) else { break };
                out.push((key, body.get(..close).unwrap_or("")));
                rest = body.get(close + 1..).unwrap_or("");
            }
            Some(_) => {
                let end = after
                    .find(|c: char| is_tag_space(c) || c == '/')
                    .unwrap_or(after.len());
                out.push((key, after.get(..end).unwrap_or("")));
                rest = after.get(end..).unwrap_or("");
            }
            None => break,
        }
    }
    out
}

/// A double-quoted string at `i` with JSON's backslash escapes, in
/// notations that otherwise read bare words: where its closing quote is
/// (`None` when the text ends first; the caller decides whether that may be
/// repaired). Inside the quotes the notation's separators are text; decode
/// the text between the quotes with [`unescape`].
pub(super) fn json_quoted(src: &Input, i: usize) -> Outcome<Option<usize>> {
    let mut j = i + 1;
    loop {
        match src.at(j) {
            None => {
                return if src.eof {
                    Outcome::Ok(None)
                } else {
                    Outcome::More
                };
            }
            Some(b'"') => return Outcome::Ok(Some(j)),
            Some(b'\\') => j += 2,
            Some(_) => j += 1,
        }
    }
}

/// The text of a double-quoted string with JSON's escapes decoded (`\"`,
/// `\\`, `\n`, `\u00e9`, surrogate pairs). An unknown or cut escape keeps
/// its backslash; a raw line break is kept.
pub(super) fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut it = raw.char_indices();
    while let Some((k, ch)) = it.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        let Some((_, e)) = it.next() else {
            out.push('\\');
            break;
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            '"' | '\\' | '/' => out.push(e),
            'u' => {
                let Some(hi) = hex4(raw, k + 2) else {
                    out.push_str("\\u");
                    continue;
                };
                let mut skip = 4;
                let mut c = hi;
                if (0xd800..0xdc00).contains(&hi)
                    && raw.get(k + 6..k + 8) == Some("\\u")
                    && let Some(lo) = hex4(raw, k + 8).filter(|lo| (0xdc00..0xe000).contains(lo))
                {
                    c = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
                    skip = 10;
                }
                for _ in 0..skip {
                    it.next();
                }
                out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

fn hex4(s: &str, j: usize) -> Option<u32> {
    let h = s.get(j..j + 4)?;
    if h.bytes().all(|c| c.is_ascii_hexdigit()) {
        u32::from_str_radix(h, 16).ok()
    } else {
        None
    }
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

/// The end of a dotted name at `i` (ASCII letters, digits, `_`, `-`,
/// `.`), or `None` past `max` bytes; the input's end when it runs there.
pub(super) fn dotted_name_end(src: &Input, i: usize, max: usize) -> Option<usize> {
    let mut j = i;
    while src
        .at(j)
        .is_some_and(|c| is_ident_char(c) || c == b'-' || c == b'.')
    {
        j += 1;
        if j - i > max {
            return None;
        }
    }
    Some(j)
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
    needle: String,
    /// All match starts in `[lo, hi)`, sorted.
    occ: Vec<usize>,
    lo: usize,
    hi: usize,
}

impl Finder {
    fn find(&mut self, t: &str, needle: &str, from: usize) -> Option<usize> {
        if needle.is_empty() || from > t.len() {
            return None;
        }
        let idx = match self.entries.iter().position(|e| e.needle == needle) {
            Some(i) => i,
            None => {
                self.entries.push(NeedleMemo {
                    needle: needle.to_string(),
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
