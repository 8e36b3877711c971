//! Small JSON and text helpers every layer uses.

use serde_json::Value;

/// JSON with object keys sorted, so equal values have equal text.
///
/// serde_json's maps are sorted maps (its `preserve_order` feature is off
/// in this workspace, and `canonical_json_sorts_keys` fails if it is
/// turned on), so a value's text is already canonical: no sorted copy is
/// made.
pub fn canonical_json(value: &Value) -> String {
    value.to_string()
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
