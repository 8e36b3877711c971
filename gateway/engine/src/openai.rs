//! The OpenAI chat-completions wire format the upstreams speak: the few
//! parts the gateway reads and writes. Everything else passes through as raw JSON.

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// A request body as an ordered map of raw JSON values: fields the gateway
/// does not touch are forwarded byte for byte.
pub type RawRequest = IndexMap<String, Box<RawValue>>;

/// Serializes `value` as a raw JSON value.
pub fn raw(value: &impl serde::Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| {
        // Serializing a `serde_json::Value` or plain data cannot fail; keep
        // the request well-formed if it ever did.
        RawValue::from_string("null".to_owned()).unwrap_or_default()
    })
}

/// The human message of an error response body: `error.message` when the
/// body is OpenAI-shaped, else the (cut) text.
pub fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("error").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("message").and_then(Value::as_str) {
            return m.to_owned();
        }
    }
    let text = String::from_utf8_lossy(body);
    toolgate::truncate_chars(text.trim(), 500)
}

/// Adds `b` into `a`, field by field (token counts of several iterations).
pub fn add_usage(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                match a.get_mut(k) {
                    Some(av) => add_usage(av, bv),
                    None => {
                        a.insert(k.clone(), bv.clone());
                    }
                }
            }
        }
        (a @ Value::Number(_), Value::Number(b)) => {
            if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = json!(x + y);
            }
        }
        (a @ Value::Null, b) => *a = b.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_up() {
        let mut a = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 1}});
        add_usage(
            &mut a,
            &json!({"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11, "completion_tokens_details": {"reasoning_tokens": 2}}),
        );
        assert_eq!(
            a,
            json!({"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18, "completion_tokens_details": {"reasoning_tokens": 3}})
        );
        let mut n = Value::Null;
        add_usage(&mut n, &json!({"total_tokens": 1}));
        assert_eq!(n, json!({"total_tokens": 1}));
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(br#"{"error": {"message": "bad key"}}"#),
            "bad key"
        );
        assert_eq!(error_message(b"plain failure"), "plain failure");
    }
}
