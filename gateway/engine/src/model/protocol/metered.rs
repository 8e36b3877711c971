//! The usage of an answer passed through untouched (a proxied request),
//! read from its bytes as they pass: a whole answer decoded once it ended,
//! a stream's events decoded one by one. Bounded: past the limits below,
//! the answer is not metered (its usage is counted as none told).

use super::{Delta, StreamDecoder};
use crate::conversation::{Protocol, Usage};

/// The longest whole answer read for its usage.
const MAX_WHOLE: usize = 8 << 20;
/// The longest line of a stream read.
const MAX_LINE: usize = 1 << 20;

/// Reads the usage of one answer of `protocol`.
#[derive(Debug)]
pub struct UsageReader {
    protocol: Protocol,
    /// A stream's unfinished line (or a whole answer, joined at its end).
    buf: Vec<u8>,
    /// A whole answer's pieces so far (shared, not copied).
    pieces: Vec<bytes::Bytes>,
    /// Their length.
    whole_len: usize,
    /// A stream's decoder and the event being read (its name and data).
    stream: Option<(StreamDecoder, String, String)>,
    usage: Usage,
    given_up: bool,
}

impl UsageReader {
    /// A reader of a whole answer, or (`stream`) of server-sent events.
    pub fn new(protocol: Protocol, stream: bool) -> UsageReader {
        UsageReader {
            protocol,
            buf: Vec::new(),
            pieces: Vec::new(),
            whole_len: 0,
            stream: stream.then(|| (StreamDecoder::new(protocol), String::new(), String::new())),
            usage: Usage::default(),
            given_up: false,
        }
    }

    /// The next piece of the answer (kept as it is when the answer is
    /// whole).
    pub fn push_bytes(&mut self, chunk: &bytes::Bytes) {
        if self.stream.is_some() || self.given_up {
            return self.push(chunk);
        }
        self.whole_len += chunk.len();
        if self.whole_len > MAX_WHOLE {
            self.give_up();
        } else {
            self.pieces.push(chunk.clone());
        }
    }

    /// The next bytes of the answer.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.given_up {
            return;
        }
        if self.stream.is_none() {
            return self.push_bytes(&bytes::Bytes::copy_from_slice(chunk));
        }
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            self.buf.extend_from_slice(&rest[..at]);
            rest = &rest[at + 1..];
            let line = std::mem::take(&mut self.buf);
            self.line(&line);
        }
        if self.buf.len() + rest.len() > MAX_LINE {
            self.give_up();
        } else {
            self.buf.extend_from_slice(rest);
        }
    }

    fn give_up(&mut self) {
        self.given_up = true;
        self.buf = Vec::new();
        self.pieces = Vec::new();
    }

    /// One line of a stream: a field of the event being read, or the
    /// blank line that ends it.
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some((decoder, name, data)) = &mut self.stream else {
            return;
        };
        if line.is_empty() {
            if !data.is_empty()
                && let Ok(step) = decoder.event(name, data)
            {
                for d in step.deltas {
                    if let Delta::Usage(u) = d {
                        self.usage.add(u);
                    }
                }
            }
            name.clear();
            data.clear();
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = text.split_once(':').unwrap_or((&text, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => *name = value.to_owned(),
            "data" => {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value);
            }
            _ => {}
        }
    }

    /// The answer's usage (none when it told none or was not read).
    pub fn finish(mut self) -> Usage {
        if self.given_up {
            return Usage::default();
        }
        if self.stream.is_some() {
            // A last event without its blank line.
            let rest = std::mem::take(&mut self.buf);
            if !rest.is_empty() {
                self.line(&rest);
            }
            self.line(b"");
            return self.usage;
        }
        if let [one] = self.pieces.as_slice() {
            return whole_usage(self.protocol, one);
        }
        let joined: Vec<u8> = self.pieces.concat();
        whole_usage(self.protocol, &joined)
    }
}

/// The usage of a whole answer: its usage object, found from the end
/// (where every API writes it), else by reading the whole answer.
fn whole_usage(protocol: Protocol, buf: &[u8]) -> Usage {
    if let Some(u) = usage_object(protocol, buf) {
        return u;
    }
    #[derive(serde::Deserialize)]
    struct Whole {
        #[serde(alias = "usageMetadata")]
        usage: Option<serde_json::Value>,
    }
    match serde_json::from_slice::<Whole>(buf) {
        Ok(Whole { usage: Some(u) }) if u.is_object() => super::usage::of_value(protocol, u),
        _ => Usage::default(),
    }
}

/// The counts of the object after the last `"usage":` or
/// `"usageMetadata":` key of a JSON answer (a key, not words of a string:
/// its quote is not escaped), when it parses as one.
fn usage_object(protocol: Protocol, buf: &[u8]) -> Option<Usage> {
    static KEYS: std::sync::LazyLock<[memchr::memmem::FinderRev<'static>; 2]> =
        std::sync::LazyLock::new(|| {
            [
                memchr::memmem::FinderRev::new(b"\"usage\""),
                memchr::memmem::FinderRev::new(b"\"usageMetadata\""),
            ]
        });
    for finder in KEYS.iter() {
        let key = finder.needle();
        let mut end = buf.len();
        while let Some(at) = finder.rfind(&buf[..end]) {
            end = at;
            if at > 0 && buf[at - 1] == b'\\' {
                continue;
            }
            let rest = buf[at + key.len()..].trim_ascii_start();
            let Some(value) = rest.strip_prefix(b":") else {
                continue;
            };
            if let Some(u) = super::usage::of_slice(protocol, value) {
                return Some(u);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WHOLE: &[u8] = br#"{"id":"x","choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#;
    const STREAM: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";

    #[test]
    fn the_usage_key_is_found_from_the_end_and_never_in_a_string() {
        let quoted =
            br#"{"content":"my \"usage\": {\"prompt_tokens\": 99}","usage":{"prompt_tokens":7}}"#;
        assert_eq!(usage_object(Protocol::OpenaiChat, quoted).unwrap().input, 7);
        let only_words = br#"{"content":"the \"usage\": none"}"#;
        assert!(usage_object(Protocol::OpenaiChat, only_words).is_none());
        let gemini = br#"{"candidates":[],"usageMetadata" : {"promptTokenCount":3}}"#;
        assert_eq!(usage_object(Protocol::Gemini, gemini).unwrap().input, 3);
    }

    #[test]
    fn a_whole_answer_and_a_stream_tell_their_usage() {
        let mut r = UsageReader::new(Protocol::OpenaiChat, false);
        r.push(&WHOLE[..10]);
        r.push(&WHOLE[10..]);
        let u = r.finish();
        assert_eq!((u.input, u.output, u.cache_read), (7, 3, 4));
        let mut r = UsageReader::new(Protocol::OpenaiChat, true);
        for b in STREAM.as_bytes().chunks(7) {
            r.push(b);
        }
        let u = r.finish();
        assert_eq!((u.input, u.output), (7, 3));
    }

    proptest! {
        #[test]
        fn any_bytes_in_any_chunks_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), cut in 1usize..64, stream: bool) {
            let mut r = UsageReader::new(Protocol::Anthropic, stream);
            for c in bytes.chunks(cut) {
                r.push(c);
            }
            let _ = r.finish();
        }
    }
}
