//! Small JSON and text helpers every layer uses.

use serde_json::Value;

/// JSON with object keys sorted, so equal values have equal text.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// The first `max` characters of `s`, with a marker when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((cut, _)) => format!(
            "{}… [{} more characters]",
            &s[..cut],
            s[cut..].chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": 2, "c": [ {"y":1,"x":2} ]}})),
            r#"{"a":{"c":[{"x":2,"y":1}],"d":2},"b":1}"#
        );
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_chars("héllo", 10), "héllo");
        assert_eq!(
            truncate_chars("héllo world", 5),
            "héllo… [6 more characters]"
        );
    }
}
