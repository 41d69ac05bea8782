//! A step's scope (a map item's binding), read where it is used.
//!
//! Every map item's task carries its scope as JSON text, and most handlers
//! read one value of it by name (`ctx.scope("item")`). Parsing the text
//! into an object first made three allocations per item (the object's
//! entries, its index and the name) for a value the handler then copied
//! out. A [`Scope`] keeps the text it arrived as, checked when the task is
//! read: [`Scope::value`] deserializes the one value asked for straight
//! from the text, and the object is parsed only when something reads it
//! as a map (it derefs to one), once.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use weft_proto::SharedText;

/// A step's scope: its values by name. Read it as a map (`scope.get(…)`,
/// `scope["item"]`; it derefs to one), or take one value with
/// [`Scope::value`], which reads it without making the map.
#[derive(Clone, Default)]
pub struct Scope {
    /// The text it arrived as, checked to be a JSON object (or empty, or
    /// `null`, for no values); empty for a scope made from a map.
    text: SharedText,
    /// The object, once something read it as one (or it was made from
    /// one); from then on, what the scope holds.
    parsed: OnceLock<Map<String, Value>>,
}

impl Scope {
    /// The scope `text` says, checked to be a JSON object (empty text and
    /// `null` are a scope with no values); why not, if it is not.
    pub fn read(text: SharedText) -> Result<Self, String> {
        let bytes = text.as_bytes().trim_ascii();
        if bytes.is_empty() || bytes == b"null" {
            return Ok(Self::default());
        }
        // Checked without being built: UTF-8, one JSON value and an
        // object. (What is wrong is said as parsing it whole says it.)
        let checked = std::str::from_utf8(bytes).is_ok()
            && bytes.starts_with(b"{")
            && serde_json::from_slice::<IgnoredAny>(bytes).is_ok();
        if !checked {
            return match serde_json::from_slice::<Value>(bytes) {
                Err(error) => Err(format!("the step's scope: {error}")),
                Ok(other) => Err(format!("the step's scope is not an object: {other}")),
            };
        }
        Ok(Self {
            text,
            parsed: OnceLock::new(),
        })
    }

    /// The value named `name`, deserialized: `None` when the scope has
    /// none. Read from the text without parsing the rest, unless the
    /// scope was read as a map already.
    pub fn value<T: DeserializeOwned>(&self, name: &str) -> Option<Result<T, serde_json::Error>> {
        if self.parsed.get().is_none() && !self.text.is_empty() {
            let mut reader = serde_json::Deserializer::from_slice(self.text.as_bytes());
            let found = FindValue::<T> {
                name,
                found: PhantomData,
            };
            // A value that does not deserialize is refused below, as the
            // map's value says it (no position in a text the handler
            // never saw).
            if let Ok(found) = serde::Deserializer::deserialize_map(&mut reader, found) {
                return found.map(Ok);
            }
        }
        let value = self.get(name)?;
        Some(T::deserialize(value))
    }

    /// The scope as a map of its own.
    pub fn into_map(mut self) -> Map<String, Value> {
        self.parsed.get_or_init(|| parse(&self.text));
        self.parsed.take().unwrap_or_default()
    }
}

/// The object a checked scope's text holds.
fn parse(text: &SharedText) -> Map<String, Value> {
    serde_json::from_slice(text.as_bytes()).unwrap_or_default()
}

impl Deref for Scope {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        self.parsed.get_or_init(|| parse(&self.text))
    }
}

impl DerefMut for Scope {
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.parsed.get_or_init(|| parse(&self.text));
        self.parsed.get_mut().expect("initialized just above")
    }
}

impl From<Map<String, Value>> for Scope {
    fn from(map: Map<String, Value>) -> Self {
        Self {
            text: SharedText::default(),
            parsed: OnceLock::from(map),
        }
    }
}

impl serde::Serialize for Scope {
    /// As the map it holds.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl PartialEq for Scope {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Reads an object for the value of one key, skipping the others: the
/// last one of that name, as the map would hold it.
struct FindValue<'n, T> {
    name: &'n str,
    found: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> Visitor<'de> for FindValue<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scope object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(named) = map.next_key_seed(KeyIs(self.name))? {
            if named {
                found = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether an object's key is `.0`, read without keeping it.
struct KeyIs<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, key: D) -> Result<bool, D::Error> {
        key.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scope(text: &str) -> Scope {
        Scope::read(SharedText::from(text)).unwrap()
    }

    #[test]
    fn a_value_is_read_from_the_text_as_the_map_would_give_it() {
        let text = r#"{"other":{"deep":[1,{"x":"\u00e9"}]},"item":{"n":7,"tags":["a"]},"n":-3,"f":2.5,"s":"caf\u00e9"}"#;
        let read = scope(text);
        let parsed: Map<String, Value> = serde_json::from_str(text).unwrap();
        for name in ["other", "item", "n", "f", "s"] {
            let direct: Value = read.value(name).unwrap().unwrap();
            assert_eq!(direct, parsed[name], "{name}");
        }
        assert_eq!(read.value::<i64>("n").unwrap().unwrap(), -3);
        assert_eq!(read.value::<String>("s").unwrap().unwrap(), "café");
        assert!(read.value::<Value>("missing").is_none());
        assert!(read.parsed.get().is_none(), "read without the map");
        // A value of the wrong type is refused as the map's value says it.
        let error = read.value::<i64>("s").unwrap().unwrap_err().to_string();
        assert_eq!(error, "invalid type: string \"café\", expected i64");
        // A key given twice: the last, as in the map.
        assert_eq!(
            scope(r#"{"k":1,"k":2}"#)
                .value::<i64>("k")
                .unwrap()
                .unwrap(),
            2
        );
        // An escaped key is found by what it spells.
        assert_eq!(
            scope(r#"{"it\u0065m":5}"#)
                .value::<i64>("item")
                .unwrap()
                .unwrap(),
            5
        );
    }

    #[test]
    fn a_scope_read_as_a_map_is_parsed_once_and_then_is_what_it_holds() {
        let mut read = scope(r#"{"item":1}"#);
        assert_eq!(read["item"], json!(1));
        read.insert("item".into(), json!(2));
        assert_eq!(read.value::<i64>("item").unwrap().unwrap(), 2);
        assert_eq!(read.clone().into_map()["item"], json!(2));
        let made = Scope::from(Map::from_iter([("x".to_owned(), json!(true))]));
        assert!(made.value::<bool>("x").unwrap().unwrap());
        assert_eq!(made, scope(r#"{"x":true}"#));
        assert_eq!(json!({"scope": made}), json!({"scope": {"x": true}}));
    }

    #[test]
    fn a_scope_that_is_not_an_object_is_refused_with_why() {
        for empty in ["", "  ", "null"] {
            assert!(scope(empty).is_empty(), "{empty:?}");
        }
        assert_eq!(
            Scope::read(SharedText::from("[1]")).unwrap_err(),
            "the step's scope is not an object: [1]"
        );
        let broken = Scope::read(SharedText::from("{\"a\":")).unwrap_err();
        assert!(broken.starts_with("the step's scope: EOF"), "{broken}");
        let trailing = Scope::read(SharedText::from("{} x")).unwrap_err();
        assert!(trailing.contains("trailing characters"), "{trailing}");
    }
}
