//! The usage of an answer passed through untouched (a proxied request),
//! read from its bytes as they pass: a whole answer decoded once it ended,
//! a stream's events decoded one by one. Bounded: past the limits below,
//! the answer is not metered (its usage is counted as none told).

use super::{Delta, StreamDecoder, decode};
use crate::conversation::{Protocol, Usage};

/// The longest whole answer read for its usage.
const MAX_WHOLE: usize = 8 << 20;
/// The longest line of a stream read.
const MAX_LINE: usize = 1 << 20;

/// Reads the usage of one answer of `protocol`.
#[derive(Debug)]
pub struct UsageReader {
    protocol: Protocol,
    /// The whole answer so far, or a stream's unfinished line.
    buf: Vec<u8>,
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
            stream: stream.then(|| (StreamDecoder::new(protocol), String::new(), String::new())),
            usage: Usage::default(),
            given_up: false,
        }
    }

    /// The next bytes of the answer.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.given_up {
            return;
        }
        if self.stream.is_none() {
            if self.buf.len() + chunk.len() > MAX_WHOLE {
                self.give_up();
            } else {
                self.buf.extend_from_slice(chunk);
            }
            return;
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
                        self.usage.add(&u);
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
        let mut usage = Usage::default();
        if let Ok(decoded) = decode(self.protocol, &self.buf) {
            for d in decoded.deltas {
                if let Delta::Usage(u) = d {
                    usage.add(&u);
                }
            }
        }
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WHOLE: &[u8] = br#"{"id":"x","choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#;
    const STREAM: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";

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
