//! Sections of special-token items (DeepSeek, Kimi K2 and K3, Step3,
//! MiniMax-M3): a begin token, items each between a call-begin and a
//! call-end token, an end token (optional at the end). Each family gives
//! its tokens and how one item reads; the loop is the same.

use super::offered::ParsedCall;
use super::text::{Block, Input, MarkerMatch, Outcome, Piece};

/// A section of special-token items: a begin token, items each between
/// a call-begin and a call-end token, an end token (optional at the end).
pub(super) struct Section {
    pub(super) begins: &'static [&'static str],
    pub(super) end: &'static str,
    pub(super) call_begin: &'static str,
    pub(super) call_end: &'static str,
    /// DeepSeek's first item may come without its call-begin token.
    pub(super) call_begin_optional: bool,
    /// A token that may stand between items (Step3's `<｜tool_sep｜>`),
    /// dropped there.
    pub(super) sep: Option<&'static str>,
    /// One item in a bounded (final) view ending at its call-end token.
    pub(super) item: fn(&Input, usize) -> Option<ParsedCall>,
}

pub(super) fn section_items(src: &Input, p0: usize, sec: &Section) -> Outcome<Block> {
    let mut pieces = Vec::new();
    let mut ncalls = 0;
    let mut end = p0;
    loop {
        let r = src.skip_ws(end);
        if r >= src.len() {
            if src.eof {
                break;
            }
            return Outcome::More;
        }
        match src.marker(r, sec.end) {
            MarkerMatch::Yes(e) => {
                end = e;
                break;
            }
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No => {}
        }
        if let Some(sep) = sec.sep.filter(|_| ncalls > 0) {
            match src.marker(r, sep) {
                MarkerMatch::Yes(e) => {
                    end = e;
                    continue;
                }
                MarkerMatch::More => return Outcome::More,
                MarkerMatch::No => {}
            }
        }
        let (q, explicit) = match src.marker(r, sec.call_begin) {
            MarkerMatch::Yes(e) => (e, true),
            MarkerMatch::More => return Outcome::More,
            MarkerMatch::No if sec.call_begin_optional => (r, false),
            MarkerMatch::No => {
                // Stray text between the markers (Kimi K2 writes some):
                // content, and the section goes on at its next marker.
                let next = [src.find(sec.call_begin, r), src.find(sec.end, r)]
                    .into_iter()
                    .flatten()
                    .min();
                match next {
                    Some(n) => {
                        pieces.push(Piece::Range(end, n));
                        end = n;
                        continue;
                    }
                    None if src.eof => break,
                    None => return Outcome::More,
                }
            }
        };
        let Some(ce) = src.find(sec.call_end, q) else {
            if src.eof {
                break;
            }
            return Outcome::More;
        };
        match (sec.item)(&src.bounded(ce), q) {
            Some(call) => {
                ncalls += 1;
                pieces.push(Piece::Call(call));
            }
            None if explicit => pieces.push(Piece::Range(r, ce + sec.call_end.len())),
            None => break,
        }
        end = ce + sec.call_end.len();
    }
    if ncalls == 0 {
        return Outcome::No;
    }
    Outcome::Ok(Block { pieces, end })
}
