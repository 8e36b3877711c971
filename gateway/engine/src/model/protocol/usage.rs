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
        native: Some(Native {
            protocol,
            what: "usage".into(),
            value: u,
        }),
        ..counts.usage(protocol)
    }
}

/// The counts of the JSON object `bytes` begins with (what follows it is
/// not read), `None` when it begins with no usage object.
pub fn of_slice(protocol: Protocol, bytes: &[u8]) -> Option<Usage> {
    if !bytes.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Counts>();
    match values.next() {
        Some(Ok(counts)) => Some(counts.usage(protocol)),
        _ => None,
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

    proptest! {
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
