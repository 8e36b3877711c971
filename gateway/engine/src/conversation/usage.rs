//! Token counts of model calls, summed over a loop.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Native, Protocol};

/// What model calls cost in tokens. `input` counts every input token,
/// cached ones included (`cache_read` and `cache_write` say how many of
/// them were read from or written to a prompt cache); `output` counts
/// every output token, reasoning included (`reasoning` says how many).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
    /// How many model calls told their usage.
    pub calls: u32,
    /// The upstream's own usage object, summed field by field while every
    /// call spoke one protocol (a face of that protocol shows it as the
    /// model sent it).
    /// Boxed: most loops keep two counts, and a face of another protocol
    /// never reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<Box<Native>>,
    /// Calls of several protocols were summed: `native` is gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mixed: bool,
}

impl Usage {
    /// No call told its usage.
    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }

    pub fn total(&self) -> u64 {
        self.input + self.output
    }

    /// Adds one call's usage (its native object moved in, not copied,
    /// where this one has none yet).
    pub fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.reasoning += other.reasoning;
        self.calls += other.calls;
        match (&mut self.native, other.native) {
            _ if self.mixed => {}
            (None, Some(n)) if self.calls == other.calls => self.native = Some(n),
            (Some(a), Some(b)) if a.protocol == b.protocol => add_json(&mut a.value, &b.value),
            (_, None) if other.calls == 0 => {}
            _ => {
                self.native = None;
                self.mixed = true;
            }
        }
    }

    /// The counts alone, without the native object.
    pub fn counts(&self) -> Usage {
        Usage {
            native: None,
            ..*self
        }
    }

    /// The native usage of `protocol`, when every call spoke it.
    pub fn native_of(&self, protocol: Protocol) -> Option<&Value> {
        self.native
            .as_ref()
            .filter(|n| n.protocol == protocol)
            .map(|n| &n.value)
    }
}

/// Adds `b` into `a`, field by field (token counts of several calls).
pub fn add_json(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                match a.get_mut(k) {
                    Some(av) => add_json(av, bv),
                    None => {
                        a.insert(k.clone(), bv.clone());
                    }
                }
            }
        }
        (a @ Value::Number(_), Value::Number(b)) => {
            if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = Value::from(x + y);
            }
        }
        (a @ Value::Null, b) => *a = b.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(prompt: u64, completion: u64) -> Usage {
        Usage {
            input: prompt,
            output: completion,
            calls: 1,
            native: Some(Box::new(Native {
                protocol: Protocol::OpenaiChat,
                what: "usage".into(),
                value: json!({"prompt_tokens": prompt, "completion_tokens": completion, "completion_tokens_details": {"reasoning_tokens": 1}}),
            })),
            ..Usage::default()
        }
    }

    #[test]
    fn usage_adds_up_typed_and_native() {
        let mut u = Usage::default();
        u.add(chat(3, 4));
        u.add(chat(10, 1));
        assert_eq!((u.input, u.output, u.calls), (13, 5, 2));
        assert_eq!(
            u.native_of(Protocol::OpenaiChat),
            Some(
                &json!({"prompt_tokens": 13, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 2}})
            )
        );
        // Another protocol's call: the typed counts go on, the native goes.
        let mut other = chat(1, 1);
        other.native.as_mut().unwrap().protocol = Protocol::Anthropic;
        u.add(other);
        assert_eq!(u.input, 14);
        assert!(u.native.is_none() && u.mixed);
        u.add(chat(1, 1));
        assert!(u.native.is_none());
    }

    #[test]
    fn a_call_that_told_nothing_changes_nothing() {
        let mut u = Usage::default();
        u.add(Usage::default());
        assert!(u.is_empty());
        u.add(chat(1, 2));
        u.add(Usage::default());
        assert!(u.native.is_some());
    }
}
