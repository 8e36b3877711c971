//! A request body's top-level fields, borrowed from it in one pass: what
//! the faces read before they know whether a request is passed through
//! (its history is then never parsed into values).

use std::borrow::Cow;

use serde_json::value::RawValue;
use toolgate_engine::conversation::RequestError;

/// A body's top-level fields, borrowed from it, in order (a name given
/// twice is there twice: its last value counts, as when the raw fields
/// are collected).
pub struct Top<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Top<'a> {
    /// The raw value of the field `name` (its last, when given twice).
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// The field `name` parsed, if the body has it.
    pub fn field<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, RequestError> {
        parsed(name, self.get(name))
    }
}

impl<'de> serde::Deserialize<'de> for Top<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Top<'de>, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Top<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Top<'de>, A::Error> {
                let mut fields = Vec::with_capacity(8);
                while let Some(Key(k)) = map.next_key()? {
                    fields.push((k, map.next_value()?));
                }
                Ok(Top(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// A field name, borrowed from the body unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct Name;
        impl<'de> serde::de::Visitor<'de> for Name {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Name)
    }
}

/// The number of elements of `value` when it is an array: its top-level
/// commas counted in one pass over bytes serde_json has already checked
/// are one JSON value (a proxied request's history is never parsed into
/// values, nor parsed twice).
pub fn array_len(value: &RawValue) -> Option<usize> {
    let bytes = value.get().as_bytes().trim_ascii();
    let inner = bytes.strip_prefix(b"[")?.strip_suffix(b"]")?;
    if inner.trim_ascii().is_empty() {
        return Some(0);
    }
    let (mut depth, mut in_string, mut escaped, mut commas) = (0usize, false, false, 0);
    for &b in inner {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => commas += 1,
            _ => {}
        }
    }
    Some(commas + 1)
}

/// The field `name`'s raw value `raw` parsed, if there is one; malformed,
/// an error naming the field.
pub fn parsed<T: serde::de::DeserializeOwned>(
    name: &str,
    raw: Option<&RawValue>,
) -> Result<Option<T>, RequestError> {
    raw.map(|v| {
        serde_json::from_str(v.get())
            .map_err(|e| RequestError::new(format!("`{name}` is malformed: {e}")).param(name))
    })
    .transpose()
}
