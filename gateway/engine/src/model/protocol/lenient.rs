//! Reading an answer's fields without building it as a `Value`, as
//! leniently as a `Value` lookup would: a field of another type than the
//! API's reads as missing, never as an error.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// An object read as `T`; anything else (null, a number...) as `T`'s
/// default.
#[derive(Debug, Default)]
pub struct Lenient<T>(pub T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Lenient<T>, D::Error> {
        struct Object<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for Object<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lenient<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Lenient)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Lenient<T>, A::Error> {
                skip_seq(seq).map(|()| Lenient(T::default()))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_str<E>(self, _: &str) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_unit<E>(self) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
        }
        d.deserialize_any(Object(std::marker::PhantomData))
    }
}

/// A string, borrowed from the answer unless it has escapes; anything
/// else reads as none.
#[derive(Debug, Default)]
pub struct Text<'a>(pub Option<Cow<'a, str>>);

impl<'a> Text<'a> {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }

    pub fn into_string(self) -> Option<String> {
        self.0.map(Cow::into_owned)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        struct Str<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Str<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text<'a>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text<'a>, A::Error> {
                skip_seq(seq).map(|()| Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
        }
        d.deserialize_any(Str(std::marker::PhantomData))
    }
}

/// An array's elements read as `T`, or its first alone (`FIRST`);
/// anything else reads as no elements.
#[derive(Debug)]
pub struct List<T, const FIRST: bool = false>(pub Vec<T>);

impl<T, const FIRST: bool> Default for List<T, FIRST> {
    fn default() -> Self {
        List(Vec::new())
    }
}

/// The first element of an array.
pub type First<T> = List<T, true>;

impl<'de, T: Deserialize<'de>, const FIRST: bool> Deserialize<'de> for List<T, FIRST> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<List<T, FIRST>, D::Error> {
        struct Elements<T, const FIRST: bool>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const FIRST: bool> Visitor<'de> for Elements<T, FIRST> {
            type Value = List<T, FIRST>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<T, FIRST>, A::Error> {
                let mut items = Vec::new();
                if FIRST {
                    items.extend(seq.next_element::<T>()?);
                    skip_seq(seq)?;
                } else {
                    while let Some(item) = seq.next_element::<T>()? {
                        items.push(item);
                    }
                }
                Ok(List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<List<T, FIRST>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(List::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<List<T, FIRST>, E> {
                Ok(List::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<List<T, FIRST>, E> {
                Ok(List::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<List<T, FIRST>, E> {
                Ok(List::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<List<T, FIRST>, E> {
                Ok(List::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<List<T, FIRST>, E> {
                Ok(List::default())
            }
            fn visit_unit<E>(self) -> Result<List<T, FIRST>, E> {
                Ok(List::default())
            }
        }
        d.deserialize_any(Elements::<T, FIRST>(std::marker::PhantomData))
    }
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Shape<'a> {
        #[serde(borrow)]
        name: Text<'a>,
        #[serde(borrow)]
        all: List<Text<'a>>,
        #[serde(borrow)]
        first: First<Text<'a>>,
        inner: Lenient<Inner>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Inner {
        n: u64,
    }

    #[test]
    fn a_field_of_another_type_reads_as_missing() {
        let s: Shape = serde_json::from_str(
            r#"{"name":"a\"b","all":["x",1,{"y":2},"z"],"first":["p","q"],"inner":{"n":3}}"#,
        )
        .unwrap();
        assert_eq!(s.name.as_deref(), Some("a\"b"));
        let all: Vec<_> = s.all.0.iter().map(Text::as_deref).collect();
        assert_eq!(all, [Some("x"), None, None, Some("z")]);
        assert_eq!(s.first.0.len(), 1);
        assert_eq!(s.first.0[0].as_deref(), Some("p"));
        assert_eq!(s.inner.0.n, 3);
        for odd in [
            r#"{"name":1,"all":{},"first":"s","inner":[1]}"#,
            r#"{"name":null,"all":null,"first":null,"inner":null}"#,
            r#"{"name":[[]],"all":true,"first":2.5,"inner":"x"}"#,
        ] {
            let s: Shape = serde_json::from_str(odd).unwrap();
            assert!(s.name.as_deref().is_none() && s.all.0.is_empty() && s.first.0.is_empty());
            assert_eq!(s.inner.0.n, 0);
        }
    }
}
