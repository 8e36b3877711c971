//! A message of a request body as a protocol writes it: the wire JSON a
//! turn came with, or one written from its items.

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// One message: as it came, or `{"role": role, key: items}` written from
/// items (`key`: Messages' `content`, Gemini's `parts`).
pub enum Written<'a> {
    Raw(&'a RawValue),
    Built {
        role: &'static str,
        key: &'static str,
        items: Vec<Value>,
    },
}

impl Serialize for Written<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Written::Raw(v) => v.serialize(s),
            Written::Built { role, key, items } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("role", role)?;
                m.serialize_entry(key, items)?;
                m.end()
            }
        }
    }
}

/// Appends `item` to the message of `role` being written, or starts one:
/// a protocol whose roles alternate makes consecutive turns of one role
/// one message.
pub fn push(list: &mut Vec<Written<'_>>, role: &'static str, key: &'static str, item: Value) {
    match list.last_mut() {
        Some(Written::Built { role: r, items, .. }) if *r == role => items.push(item),
        _ => list.push(Written::Built {
            role,
            key,
            items: vec![item],
        }),
    }
}
