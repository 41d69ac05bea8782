//! Which state fields a handler reads, told by its state type.
//!
//! A handler's state type is a serde type, and a struct deriving
//! `Deserialize` names its fields (with their aliases) when it is read: the
//! `fields` it passes to `deserialize_struct`. The worker asks each handler
//! type once, at registration, by reading it from a deserializer that only
//! listens, and tells the coordinator in its hello; a task of that handler
//! then carries only those fields. A node beside a 10 MB document whose
//! handler reads a counter never receives the document: not sent, not
//! received, not kept in this worker's cache.
//!
//! `IgnoredAny` reads none. A type that does not name its fields — a map, a
//! `Value`, a struct with a `#[serde(flatten)]` field, a newtype, anything
//! read otherwise — reads every field, as every handler did before.

use std::fmt;

use serde::de::{DeserializeOwned, Visitor};
use serde::forward_to_deserialize_any;

/// The state fields `S` reads, when it names them (a struct); `None` when
/// it may read any field.
pub(crate) fn fields_read<S: DeserializeOwned>() -> Option<Vec<String>> {
    match S::deserialize(Listener) {
        Err(Heard::Fields(fields)) => Some(fields.iter().map(|f| (*f).to_owned()).collect()),
        Err(Heard::Anything) | Ok(_) => None,
    }
}

/// A deserializer that hears how a type asks to be read, and reads nothing.
struct Listener;

/// What the listener heard.
#[derive(Debug)]
enum Heard {
    /// A struct with these fields (its aliases among them).
    Fields(&'static [&'static str]),
    /// Anything else: a map, a value, a type that reads itself its own way.
    Anything,
}

impl fmt::Display for Heard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fields(fields) => write!(f, "a struct of {fields:?}"),
            Self::Anything => f.write_str("not a struct"),
        }
    }
}

impl std::error::Error for Heard {}

impl serde::de::Error for Heard {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Self::Anything
    }
}

impl<'de> serde::Deserializer<'de> for Listener {
    type Error = Heard;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Heard> {
        Err(Heard::Anything)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Heard> {
        Err(Heard::Fields(fields))
    }

    /// `IgnoredAny`, a handler that takes no state: it reads no field.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Heard> {
        Err(Heard::Fields(&[]))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;
    use serde_json::{Map, Value};

    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Counter {
        counter: i64,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Renamed {
        long_name: String,
        #[serde(alias = "old")]
        new: Option<u32>,
        #[serde(skip)]
        local: u8,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Flattened {
        a: u8,
        #[serde(flatten)]
        rest: Map<String, Value>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Wrapped(Counter);

    #[test]
    fn a_struct_reads_the_fields_it_names_by_their_names_in_the_state() {
        assert_eq!(fields_read::<Counter>().unwrap(), ["counter"]);
        // Renamed as the state spells them, aliases included, skipped
        // fields left out.
        assert_eq!(
            fields_read::<Renamed>().unwrap(),
            ["longName", "new", "old"]
        );
        // A handler that takes no state reads none of it.
        assert_eq!(fields_read::<serde::de::IgnoredAny>().unwrap(), [""; 0]);
    }

    #[test]
    fn a_type_that_does_not_name_its_fields_reads_them_all() {
        assert_eq!(fields_read::<Value>(), None);
        assert_eq!(fields_read::<Map<String, Value>>(), None);
        assert_eq!(fields_read::<HashMap<String, i64>>(), None);
        assert_eq!(fields_read::<Flattened>(), None);
        assert_eq!(fields_read::<Wrapped>(), None);
        assert_eq!(fields_read::<Option<Counter>>(), None);
    }
}
