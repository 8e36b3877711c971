//! A model's usage object read into counts: one struct for the fields of
//! every protocol (each names its own), read straight from the answer's
//! bytes when only the counts are wanted (a passed-through answer), or
//! from a decoded value. A count that is not a whole number counts as 0,
//! as a missing one does.

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::lenient::Lenient;
use crate::conversation::{Native, Protocol, Usage};

/// The usage object's counts, of whichever protocol.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Counts {
    // OpenAI chat completions.
    prompt_tokens: Num,
    completion_tokens: Num,
    prompt_tokens_details: Lenient<Details>,
    completion_tokens_details: Lenient<Details>,
    // OpenAI Responses and Anthropic Messages.
    input_tokens: Num,
    output_tokens: Num,
    input_tokens_details: Lenient<Details>,
    output_tokens_details: Lenient<Details>,
    cache_read_input_tokens: Num,
    cache_creation_input_tokens: Num,
    // Gemini.
    #[serde(rename = "promptTokenCount")]
    prompt_token_count: Num,
    #[serde(rename = "toolUsePromptTokenCount")]
    tool_use_prompt_token_count: Num,
    #[serde(rename = "candidatesTokenCount")]
    candidates_token_count: Num,
    #[serde(rename = "cachedContentTokenCount")]
    cached_content_token_count: Num,
    #[serde(rename = "thoughtsTokenCount")]
    thoughts_token_count: Num,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Details {
    cached_tokens: Num,
    cache_write_tokens: Num,
    reasoning_tokens: Num,
    thinking_tokens: Num,
}

impl Counts {
    /// The counts as `protocol` means them.
    fn usage(&self, protocol: Protocol) -> Usage {
        let mut usage = Usage {
            calls: 1,
            ..Usage::default()
        };
        match protocol {
            Protocol::OpenaiChat => {
                usage.input = self.prompt_tokens.0;
                usage.output = self.completion_tokens.0;
                usage.cache_read = self.prompt_tokens_details.0.cached_tokens.0;
                usage.reasoning = self.completion_tokens_details.0.reasoning_tokens.0;
            }
            Protocol::OpenaiResponses => {
                usage.input = self.input_tokens.0;
                usage.output = self.output_tokens.0;
                usage.cache_read = self.input_tokens_details.0.cached_tokens.0;
                usage.cache_write = self.input_tokens_details.0.cache_write_tokens.0;
                usage.reasoning = self.output_tokens_details.0.reasoning_tokens.0;
            }
            // Anthropic's input excludes what was read from or written to
            // the cache; the gateway's input is all of it.
            Protocol::Anthropic => {
                usage.cache_read = self.cache_read_input_tokens.0;
                usage.cache_write = self.cache_creation_input_tokens.0;
                usage.input = self
                    .input_tokens
                    .0
                    .saturating_add(usage.cache_read)
                    .saturating_add(usage.cache_write);
                usage.output = self.output_tokens.0;
                usage.reasoning = self.output_tokens_details.0.thinking_tokens.0;
            }
            // Gemini counts thoughts apart from the answer; both are output.
            Protocol::Gemini => {
                usage.reasoning = self.thoughts_token_count.0;
                usage.input = self
                    .prompt_token_count
                    .0
                    .saturating_add(self.tool_use_prompt_token_count.0);
                usage.output = self
                    .candidates_token_count
                    .0
                    .saturating_add(usage.reasoning);
                usage.cache_read = self.cached_content_token_count.0;
            }
        }
        usage
    }
}

/// `protocol`'s usage object `u`: its counts, and the object itself (a
/// face of that protocol shows it as the model sent it).
pub fn of_value(protocol: Protocol, u: Value) -> Usage {
    let counts = Lenient::<Counts>::deserialize(&u).unwrap_or_default().0;
    Usage {
        native: Some(Box::new(Native {
            protocol,
            what: "usage".into(),
            value: u,
        })),
        ..counts.usage(protocol)
    }
}

/// The counts of the JSON object `bytes` begins with (what follows it is
/// not read), `None` when it begins with no usage object.
pub fn of_slice(protocol: Protocol, bytes: &[u8]) -> Option<Usage> {
    if !bytes.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    if let Some(counts) = plain::counts(bytes) {
        return Some(counts.usage(protocol));
    }
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Counts>();
    match values.next() {
        Some(Ok(counts)) => Some(counts.usage(protocol)),
        _ => None,
    }
}

/// A plain usage object (what every API sends) read in one pass over its
/// bytes; anything less plain is left to serde (`None`), which reads the
/// same counts (`plain_and_serde_agree`).
mod plain {
    use super::{Counts, Details, Num};
    use crate::model::protocol::lenient::Lenient;

    /// The counts of `bytes`' first object when it is plain: keys of ASCII
    /// letters, digits and `_`, each once; values whole numbers (no sign,
    /// fraction or exponent), `null`, `true`, `false`, strings of printable
    /// ASCII without escapes, or objects of those (one level down).
    pub(super) fn counts(bytes: &[u8]) -> Option<Counts> {
        let mut c = Cursor { b: bytes, i: 0 };
        let mut counts = Counts::default();
        let mut seen = 0u32;
        c.object(|key, c| {
            let (bit, slot): (u32, Slot<'_>) = match key {
                b"prompt_tokens" => (0, Slot::Num(&mut counts.prompt_tokens)),
                b"completion_tokens" => (1, Slot::Num(&mut counts.completion_tokens)),
                b"prompt_tokens_details" => (2, Slot::Details(&mut counts.prompt_tokens_details)),
                b"completion_tokens_details" => {
                    (3, Slot::Details(&mut counts.completion_tokens_details))
                }
                b"input_tokens" => (4, Slot::Num(&mut counts.input_tokens)),
                b"output_tokens" => (5, Slot::Num(&mut counts.output_tokens)),
                b"input_tokens_details" => (6, Slot::Details(&mut counts.input_tokens_details)),
                b"output_tokens_details" => (7, Slot::Details(&mut counts.output_tokens_details)),
                b"cache_read_input_tokens" => (8, Slot::Num(&mut counts.cache_read_input_tokens)),
                b"cache_creation_input_tokens" => {
                    (9, Slot::Num(&mut counts.cache_creation_input_tokens))
                }
                b"promptTokenCount" => (10, Slot::Num(&mut counts.prompt_token_count)),
                b"toolUsePromptTokenCount" => {
                    (11, Slot::Num(&mut counts.tool_use_prompt_token_count))
                }
                b"candidatesTokenCount" => (12, Slot::Num(&mut counts.candidates_token_count)),
                b"cachedContentTokenCount" => {
                    (13, Slot::Num(&mut counts.cached_content_token_count))
                }
                b"thoughtsTokenCount" => (14, Slot::Num(&mut counts.thoughts_token_count)),
                _ => return c.skip(true),
            };
            // serde refuses a field given twice.
            if seen & (1 << bit) != 0 {
                return None;
            }
            seen |= 1 << bit;
            match slot {
                Slot::Num(n) => *n = Num(c.scalar()?),
                Slot::Details(d) => *d = Lenient(c.details()?),
            }
            Some(())
        })?;
        Some(counts)
    }

    enum Slot<'a> {
        Num(&'a mut Num),
        Details(&'a mut Lenient<Details>),
    }

    /// The bytes of a plain key: ASCII letters, digits and `_`.
    static KEY_BYTE: [bool; 256] = {
        let mut table = [false; 256];
        let mut c = 0;
        while c < 256 {
            let b = c as u8;
            table[c] = b.is_ascii_alphanumeric() || b == b'_';
            c += 1;
        }
        table
    };

    struct Cursor<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl<'a> Cursor<'a> {
        fn peek(&mut self) -> Option<u8> {
            while let Some(&c) = self.b.get(self.i) {
                if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                    return Some(c);
                }
                self.i += 1;
            }
            None
        }

        fn eat(&mut self, want: u8) -> bool {
            let found = self.peek() == Some(want);
            self.i += usize::from(found);
            found
        }

        /// An object, each of its fields read by `field` (given the key,
        /// it reads the value).
        fn object(
            &mut self,
            mut field: impl FnMut(&'a [u8], &mut Self) -> Option<()>,
        ) -> Option<()> {
            if !self.eat(b'{') {
                return None;
            }
            if self.eat(b'}') {
                return Some(());
            }
            loop {
                let key = self.key()?;
                if !self.eat(b':') {
                    return None;
                }
                field(key, self)?;
                if self.eat(b'}') {
                    return Some(());
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }

        fn key(&mut self) -> Option<&'a [u8]> {
            if !self.eat(b'"') {
                return None;
            }
            let start = self.i;
            let len = memchr::memchr(b'"', &self.b[start..])?;
            let key = &self.b[start..start + len];
            self.i += len + 1;
            key.iter().all(|c| KEY_BYTE[usize::from(*c)]).then_some(key)
        }

        fn eat_now(&mut self, want: u8) -> bool {
            let found = self.b.get(self.i) == Some(&want);
            self.i += usize::from(found);
            found
        }

        /// A details object's counts.
        fn details(&mut self) -> Option<Details> {
            let mut d = Details::default();
            let mut seen = 0u8;
            self.object(|key, c| {
                let (bit, n) = match key {
                    b"cached_tokens" => (0, &mut d.cached_tokens),
                    b"cache_write_tokens" => (1, &mut d.cache_write_tokens),
                    b"reasoning_tokens" => (2, &mut d.reasoning_tokens),
                    b"thinking_tokens" => (3, &mut d.thinking_tokens),
                    _ => return c.skip(false),
                };
                if seen & (1 << bit) != 0 {
                    return None;
                }
                seen |= 1 << bit;
                *n = Num(c.scalar()?);
                Some(())
            })?;
            Some(d)
        }

        /// A value passed over: a scalar, or (`nested`) an object of them.
        fn skip(&mut self, nested: bool) -> Option<()> {
            if nested && self.peek() == Some(b'{') {
                return self.object(|_, c| c.skip(false));
            }
            self.scalar().map(|_| ())
        }

        /// A scalar, as a count: a whole number is itself; `null`, a
        /// boolean or a string counts 0.
        fn scalar(&mut self) -> Option<u64> {
            match self.peek()? {
                b'0'..=b'9' => {
                    let digits = self.b[self.i..]
                        .iter()
                        .position(|c| !c.is_ascii_digit())
                        .unwrap_or(self.b.len() - self.i);
                    let text = &self.b[self.i..self.i + digits];
                    self.i += digits;
                    if (text.len() > 1 && text[0] == b'0')
                        || matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E'))
                    {
                        return None;
                    }
                    text.iter().try_fold(0u64, |n, d| {
                        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                    })
                }
                b'n' => self.word(b"null"),
                b't' => self.word(b"true"),
                b'f' => self.word(b"false"),
                b'"' => {
                    self.i += 1;
                    let len = self.b[self.i..]
                        .iter()
                        .position(|c| !(b' '..=b'~').contains(c) || *c == b'"' || *c == b'\\')?;
                    self.i += len;
                    self.eat_now(b'"').then_some(0)
                }
                _ => None,
            }
        }

        fn word(&mut self, word: &[u8]) -> Option<u64> {
            let found = self.b[self.i..].starts_with(word);
            self.i += if found { word.len() } else { 0 };
            found.then_some(0)
        }
    }
}

/// A count: a whole number, else 0.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Num(u64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct Count;
        impl<'de> Visitor<'de> for Count {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num(u64::try_from(v).unwrap_or(0)))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Num, E> {
                Ok(Num(0))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Num, E> {
                Ok(Num(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<Num, E> {
                Ok(Num(0))
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num(0))
            }
            fn visit_none<E>(self) -> Result<Num, E> {
                Ok(Num(0))
            }
            fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Num, D::Error> {
                d.deserialize_any(Count)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Num, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num(0))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Num, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num(0))
            }
        }
        d.deserialize_any(Count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn each_protocol_reads_its_own_fields() {
        let chat = json!({"prompt_tokens": 7, "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}});
        let u = of_value(Protocol::OpenaiChat, chat.clone());
        assert_eq!(
            (
                u.input,
                u.output,
                u.cache_read,
                u.cache_write,
                u.reasoning,
                u.calls
            ),
            (7, 3, 4, 0, 2, 1)
        );
        assert_eq!(u.native.map(|n| n.value), Some(chat));
        let anthropic = json!({"input_tokens": 5, "output_tokens": 9, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20, "output_tokens_details": {"thinking_tokens": 6}});
        let u = of_value(Protocol::Anthropic, anthropic);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write, u.reasoning),
            (125, 9, 100, 20, 6)
        );
        let responses = json!({"input_tokens": 5, "output_tokens": 9,
            "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 1}, "output_tokens_details": {"reasoning_tokens": 4}});
        let u = of_value(Protocol::OpenaiResponses, responses);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cache_write, u.reasoning),
            (5, 9, 3, 1, 4)
        );
        let gemini = json!({"promptTokenCount": 5, "toolUsePromptTokenCount": 2, "candidatesTokenCount": 9,
            "cachedContentTokenCount": 3, "thoughtsTokenCount": 4});
        let u = of_value(Protocol::Gemini, gemini);
        assert_eq!(
            (u.input, u.output, u.cache_read, u.reasoning),
            (7, 13, 3, 4)
        );
    }

    #[test]
    fn what_is_not_a_count_counts_as_none() {
        let odd = json!({"prompt_tokens": -3, "completion_tokens": 2.5,
            "prompt_tokens_details": null, "completion_tokens_details": [1], "total_tokens": "x"});
        let u = of_value(Protocol::OpenaiChat, odd.clone());
        assert_eq!(
            (u.input, u.output, u.cache_read, u.reasoning, u.calls),
            (0, 0, 0, 0, 1)
        );
        let from_bytes = of_slice(Protocol::OpenaiChat, odd.to_string().as_bytes()).unwrap();
        assert_eq!((from_bytes.input, from_bytes.calls), (0, 1));
        assert!(of_slice(Protocol::OpenaiChat, b"null, \"usage\": {}").is_none());
        let u = of_slice(
            Protocol::OpenaiChat,
            br#" {"prompt_tokens": 7} }, "id": "x"}"#,
        )
        .unwrap();
        assert_eq!(u.input, 7, "what follows the object is not read");
    }

    /// The counts of `bytes` as serde reads them.
    fn by_serde(protocol: Protocol, bytes: &[u8]) -> Option<Usage> {
        let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Counts>();
        match values.next() {
            Some(Ok(counts)) => Some(counts.usage(protocol)),
            _ => None,
        }
    }

    fn numbers(u: &Usage) -> [u64; 5] {
        [u.input, u.output, u.cache_read, u.cache_write, u.reasoning]
    }

    #[test]
    fn every_protocols_usage_object_is_plain() {
        let objects = [
            r#"{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#,
            r#"{ "input_tokens": 2095, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}, "output_tokens": 503, "service_tier": "standard", "server_tool_use": null }"#,
            r#"{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}"#,
            "{\n  \"promptTokenCount\": 8,\n  \"candidatesTokenCount\": 12,\n  \"totalTokenCount\": 20,\n  \"thoughtsTokenCount\": 3\n}",
        ];
        for (o, protocol) in objects.iter().zip([
            Protocol::OpenaiChat,
            Protocol::Anthropic,
            Protocol::OpenaiResponses,
            Protocol::Gemini,
        ]) {
            let fast = plain::counts(o.as_bytes()).expect(o).usage(protocol);
            let slow = by_serde(protocol, o.as_bytes()).unwrap();
            assert_eq!(numbers(&fast), numbers(&slow), "{o}");
            assert_ne!(numbers(&fast), [0; 5], "{o}");
        }
        for odd in [
            r#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            r#"{"prompt_tokens":1.5}"#,
            r#"{"prompt_tokens":-1}"#,
            r#"{"prompt_tokens":01}"#,
            r#"{"prompt_tokens":1,}"#,
            r#"{"a\u0062":1}"#,
            r#"{"x":[1]}"#,
            r#"{"x":{"y":{}}}"#,
            r#"{"prompt_tokens":99999999999999999999}"#,
        ] {
            assert!(plain::counts(odd.as_bytes()).is_none(), "{odd}");
        }
    }

    /// A usage-like object's text: known and unknown keys, counts and
    /// other scalars, details objects, odd spacing and odd numbers.
    fn usage_text() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            8 => prop::sample::select(vec![
                "prompt_tokens",
                "completion_tokens",
                "prompt_tokens_details",
                "output_tokens_details",
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "promptTokenCount",
                "candidatesTokenCount",
                "cached_tokens",
                "reasoning_tokens",
                "total_tokens",
            ])
            .prop_map(str::to_owned),
            1 => "[a-zA-Z_\\\\\"é]{0,6}",
        ];
        let scalar = prop_oneof![
            6 => any::<u64>().prop_map(|n| n.to_string()),
            6 => (0u32..1000).prop_map(|n| n.to_string()),
            1 => prop::sample::select(vec![
                "-3", "2.5", "1e3", "007", "18446744073709551616", "null", "true", "nul", "[1]",
            ])
            .prop_map(str::to_owned),
            1 => "\"[ -~é\\\\]{0,5}\"",
        ];
        let space = prop_oneof![Just(""), Just(" "), Just("\n\t")];
        let field = (key.clone(), scalar.clone(), space.clone())
            .prop_map(|(k, v, s)| format!("{s}\"{k}\"{s}:{s}{v}"));
        let inner = proptest::collection::vec(field.clone(), 0..4)
            .prop_map(|f| format!("{{{}}}", f.join(",")));
        let value = prop_oneof![
            scalar,
            inner.clone(),
            inner.prop_map(|o| format!("{{\"x\":{o}}}"))
        ];
        let outer = (key, value, space).prop_map(|(k, v, s)| format!("{s}\"{k}\":{s}{v}{s}"));
        (
            proptest::collection::vec(outer, 0..8),
            any::<bool>(),
            "[ ,}\\]x]{0,3}",
        )
            .prop_map(|(f, comma, tail)| {
                format!("{{{}{}}}{tail}", f.join(","), if comma { "," } else { "" })
            })
    }

    proptest! {
        /// What the one-pass reader reads, serde reads the same; what it
        /// leaves, serde reads.
        #[test]
        fn plain_and_serde_agree(text in usage_text(), which in 0usize..4) {
            let protocol = [Protocol::OpenaiChat, Protocol::OpenaiResponses, Protocol::Anthropic, Protocol::Gemini][which];
            if let Some(fast) = plain::counts(text.as_bytes()) {
                let slow = by_serde(protocol, text.as_bytes());
                prop_assert!(slow.is_some(), "{} read plain, refused by serde", text);
                prop_assert_eq!(numbers(&fast.usage(protocol)), numbers(&slow.unwrap_or_default()));
            }
        }

        /// Any bytes: read or left, never a panic.
        #[test]
        fn any_bytes_are_read_or_left(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = plain::counts(&bytes);
        }

        /// The counts read from bytes are the counts read from the value.
        #[test]
        fn bytes_and_value_agree(v in crate::support::any_json::any_json(), which in 0usize..4) {
            let protocol = [Protocol::OpenaiChat, Protocol::OpenaiResponses, Protocol::Anthropic, Protocol::Gemini][which];
            let from_value = of_value(protocol, v.clone());
            if let Some(from_bytes) = of_slice(protocol, v.to_string().as_bytes()) {
                prop_assert_eq!(
                    (from_bytes.input, from_bytes.output, from_bytes.cache_read, from_bytes.cache_write, from_bytes.reasoning),
                    (from_value.input, from_value.output, from_value.cache_read, from_value.cache_write, from_value.reasoning)
                );
            }
        }
    }
}
