//! Small JSON and text helpers every layer uses.

use serde_json::Value;

/// JSON with object keys sorted, so equal values have equal text.
///
/// serde_json's maps are sorted maps unless its `preserve_order` feature
/// is on (it is off in this workspace; a crate built elsewhere may turn it
/// on): while they are, a value's text is already canonical and no sorted
/// copy is made.
pub fn canonical_json(value: &Value) -> String {
    static SORTED_MAPS: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        let mut map = serde_json::Map::new();
        map.insert("b".into(), Value::Null);
        map.insert("a".into(), Value::Null);
        map.keys().next().is_some_and(|k| k == "a")
    });
    if *SORTED_MAPS {
        return value.to_string();
    }
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
        // Built in another order, a map still writes its keys sorted.
        let mut map = serde_json::Map::new();
        map.insert("z".into(), json!(1));
        map.insert("m".into(), json!({"q": 1, "p": 2}));
        assert_eq!(
            canonical_json(&Value::Object(map)),
            r#"{"m":{"p":2,"q":1},"z":1}"#
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
