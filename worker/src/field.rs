//! A state field's value as the coordinator sent it: its JSON text, parsed
//! the first time something reads the value, never before.
//!
//! A task carries every field of the state its node may read, and the
//! worker's cache keeps them across tasks. Most steps read few of them: a
//! handler whose state type names one field of a state that also holds a
//! 10 MB document parsed all 10 MB on each new version (50 M instructions,
//! a fifth of a whole run through the cluster), and a script's state file
//! was the values written back into text. Here the text is kept as it
//! arrived (shared with the message, not copied); a script gets it as it
//! is, a handler's state type parses only the fields it names, and a
//! value once parsed stays parsed for the next task that reads it.
//!
//! The text is the coordinator's own writing of a value it holds, so it is
//! JSON; if it ever were not, the step that reads it fails naming the
//! field, as a task whose field could not be read always has.

use std::sync::{Arc, OnceLock};

use serde::de::{Error as _, IntoDeserializer, Visitor};
use serde_json::Value;

/// One field's value: its JSON text, and the value once read.
pub struct FieldValue {
    text: Arc<str>,
    parsed: OnceLock<Result<Value, String>>,
}

impl FieldValue {
    /// A value sent as `text`, read when first needed.
    pub fn from_json(text: Arc<str>) -> Self {
        Self {
            text,
            parsed: OnceLock::new(),
        }
    }

    /// A value already read (its text written once, here).
    pub fn from_value(value: Value) -> Self {
        Self {
            text: weft_proto::json::to_string(&value).into(),
            parsed: OnceLock::from(Ok(value)),
        }
    }

    /// The value's JSON text, as it was sent.
    pub fn json(&self) -> &str {
        &self.text
    }

    /// The value, read from its text the first time it is asked for; or
    /// why the text is not JSON.
    pub fn value(&self) -> Result<&Value, &str> {
        self.parsed
            .get_or_init(|| serde_json::from_str(&self.text).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(String::as_str)
    }

    /// Whether the value has been read from its text.
    pub fn is_parsed(&self) -> bool {
        self.parsed.get().is_some()
    }
}

impl std::fmt::Debug for FieldValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 64;
        let text = match self.text.char_indices().nth(SHOWN) {
            Some((end, _)) => format!("{}… ({} bytes)", &self.text[..end], self.text.len()),
            None => self.text.to_string(),
        };
        f.debug_tuple("FieldValue").field(&text).finish()
    }
}

impl PartialEq for FieldValue {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// A handler's state type reads the field `name` through this: a field it
/// does not name is skipped (`deserialize_ignored_any`) without its text
/// being parsed; any other read parses it once and reads the value.
pub(crate) struct FieldDeserializer<'a> {
    pub(crate) name: &'a str,
    pub(crate) value: &'a FieldValue,
}

impl<'a> IntoDeserializer<'a, serde_json::Error> for FieldDeserializer<'a> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'a> FieldDeserializer<'a> {
    fn value(&self) -> Result<&'a Value, serde_json::Error> {
        self.value.value().map_err(|why| {
            serde_json::Error::custom(format!("field '{}' is not JSON: {why}", self.name))
        })
    }
}

/// Each of `serde::Deserializer`'s reads, done by the parsed value's.
macro_rules! read_by_value {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'a>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Self::Error> {
            serde::Deserializer::$method(self.value()?, $($arg,)* visitor)
        }
    )*};
}

impl<'a> serde::Deserializer<'a> for FieldDeserializer<'a> {
    type Error = serde_json::Error;

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    read_by_value! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Counter {
        counter: u64,
        label: Option<String>,
    }

    fn read<T: serde::de::DeserializeOwned>(
        fields: &[(&str, &FieldValue)],
    ) -> Result<T, serde_json::Error> {
        let pairs = fields
            .iter()
            .map(|&(name, value)| (name, FieldDeserializer { name, value }));
        T::deserialize(serde::de::value::MapDeserializer::<_, serde_json::Error>::new(pairs))
    }

    #[test]
    fn a_state_type_parses_the_fields_it_names_and_no_other() {
        let blob = FieldValue::from_json(format!("\"{}\"", "x".repeat(1000)).into());
        let counter = FieldValue::from_json("41".into());
        let label = FieldValue::from_json("null".into());
        let state: Counter =
            read(&[("blob", &blob), ("counter", &counter), ("label", &label)]).expect("read");
        assert_eq!(
            state,
            Counter {
                counter: 41,
                label: None
            }
        );
        assert!(counter.is_parsed() && label.is_parsed());
        assert!(
            !blob.is_parsed(),
            "a field the type does not name was parsed"
        );
        // A type that takes everything reads everything.
        let all: serde_json::Map<String, Value> =
            read(&[("blob", &blob), ("counter", &counter)]).expect("read");
        assert_eq!(all["counter"], json!(41));
        assert!(blob.is_parsed());
    }

    #[test]
    fn a_field_whose_text_is_not_json_fails_the_read_that_needs_it() {
        let broken = FieldValue::from_json("{\"a\":".into());
        let counter = FieldValue::from_json("1".into());
        let state: Counter = read(&[("counter", &counter), ("notes", &broken)]).expect("skipped");
        assert_eq!(state.counter, 1);
        let error = read::<Counter>(&[("counter", &broken)]).unwrap_err();
        assert!(
            error.to_string().contains("field 'counter' is not JSON"),
            "{error}"
        );
        assert!(broken.value().is_err());
    }

    #[test]
    fn a_value_made_here_reads_back_as_itself() {
        let value = json!({"a": [1, "two", null], "b": "\"quoted\"\n"});
        let field = FieldValue::from_value(value.clone());
        assert_eq!(field.json(), serde_json::to_string(&value).unwrap());
        assert_eq!(field.value().unwrap(), &value);
        assert_eq!(field, FieldValue::from_json(field.json().into()));
    }
}
