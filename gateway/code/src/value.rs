//! Values across the interpreter's edge: a tool's JSON result into a Python
//! value, and a program's Python values (arguments, its result) into JSON.
//! Both directions are bounded in depth; what JSON cannot hold (bytes, sets,
//! dates, objects) becomes the nearest JSON value or its `repr`.

use monty_types::{DictPairs, MontyObject};
use serde_json::{Map, Number, Value};

/// Deeper values are cut (`"…"`): a program cannot make the gateway recurse
/// without bound.
pub const MAX_DEPTH: usize = 64;

/// JSON to a Python value: objects to dicts (insertion order kept), arrays
/// to lists, integers that fit `i64` to ints, other numbers to floats.
pub fn to_python(value: &Value) -> MontyObject {
    to_python_at(value, 0)
}

fn to_python_at(value: &Value, depth: usize) -> MontyObject {
    if depth >= MAX_DEPTH {
        return MontyObject::String("…".to_owned());
    }
    match value {
        Value::Null => MontyObject::None,
        Value::Bool(b) => MontyObject::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => MontyObject::Int(i),
            None => MontyObject::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => MontyObject::String(s.clone()),
        Value::Array(items) => {
            MontyObject::List(items.iter().map(|v| to_python_at(v, depth + 1)).collect())
        }
        Value::Object(map) => MontyObject::Dict(DictPairs::from(
            map.iter()
                .map(|(k, v)| (MontyObject::String(k.clone()), to_python_at(v, depth + 1)))
                .collect::<Vec<_>>(),
        )),
    }
}

/// A Python value to JSON: dict keys as strings (their `str`), tuples and
/// sets as arrays, non-finite floats as `null`, big integers as numbers
/// when they fit and as decimal strings when they do not, bytes as text
/// when they are UTF-8, and everything else as its `repr`.
pub fn to_json(value: &MontyObject) -> Value {
    to_json_at(value, 0)
}

fn to_json_at(value: &MontyObject, depth: usize) -> Value {
    if depth >= MAX_DEPTH {
        return Value::String("…".to_owned());
    }
    let seq = |items: &[MontyObject]| {
        Value::Array(items.iter().map(|v| to_json_at(v, depth + 1)).collect())
    };
    match value {
        MontyObject::None => Value::Null,
        MontyObject::Bool(b) => Value::Bool(*b),
        MontyObject::Int(i) => Value::Number((*i).into()),
        MontyObject::BigInt(b) => {
            let text = b.to_string();
            text.parse::<u64>()
                .map(|u| Value::Number(u.into()))
                .unwrap_or(Value::String(text))
        }
        MontyObject::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        MontyObject::String(s) => Value::String(s.clone()),
        MontyObject::Bytes(b) => match std::str::from_utf8(b) {
            Ok(text) => Value::String(text.to_owned()),
            Err(_) => Value::String(value.py_repr()),
        },
        MontyObject::List(items)
        | MontyObject::Tuple(items)
        | MontyObject::Set(items)
        | MontyObject::FrozenSet(items) => seq(items),
        MontyObject::NamedTuple {
            field_names,
            values,
            ..
        } => Value::Object(
            field_names
                .iter()
                .zip(values)
                .map(|(k, v)| (k.clone(), to_json_at(v, depth + 1)))
                .collect(),
        ),
        MontyObject::Dict(pairs) => Value::Object(object(pairs, depth)),
        MontyObject::Dataclass { attrs, .. } => Value::Object(object(attrs, depth)),
        other => Value::String(other.to_string()),
    }
}

fn object(pairs: &DictPairs, depth: usize) -> Map<String, Value> {
    pairs
        .into_iter()
        .map(|(k, v)| {
            let key = match k {
                MontyObject::String(s) => s.clone(),
                other => other.to_string(),
            };
            (key, to_json_at(v, depth + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn json_comes_back_as_it_went_in() {
        let v = json!({"a": [1, 2.5, "x", null, true], "b": {"c": -7}});
        assert_eq!(to_json(&to_python(&v)), v);
    }

    #[test]
    fn what_json_cannot_hold_is_its_nearest_value() {
        assert_eq!(to_json(&MontyObject::Float(f64::NAN)), Value::Null);
        assert_eq!(
            to_json(&MontyObject::Tuple(vec![MontyObject::Int(1)])),
            json!([1])
        );
        assert_eq!(to_json(&MontyObject::Bytes(b"hi".to_vec())), json!("hi"));
        let dict = MontyObject::Dict(DictPairs::from(vec![(
            MontyObject::Int(3),
            MontyObject::Bool(false),
        )]));
        assert_eq!(to_json(&dict), json!({"3": false}));
    }

    #[test]
    fn depth_is_bounded_both_ways() {
        let mut v = json!(1);
        for _ in 0..200 {
            v = json!([v]);
        }
        let mut deep = to_json(&to_python(&v));
        let mut depth = 0;
        while let Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(Value::Null);
            depth += 1;
        }
        assert_eq!(depth, MAX_DEPTH);
        assert_eq!(deep, json!("…"));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-z]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_round_trips(v in arb_json()) {
            prop_assert_eq!(to_json(&to_python(&v)), v);
        }
    }
}
