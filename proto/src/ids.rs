//! The ids every crate passes around: a run's, a worker's, a node's, and a
//! map item's key.
//!
//! Each id is its own type, so a run id is never handed where a node id
//! belongs. Text ids are cheap to clone (an `Arc<str>` inside), read as `&str`
//! wherever text is wanted (`Deref`, `Borrow<str>`, so a map keyed by ids
//! is looked up with a `&str`), and serialize as plain strings: records,
//! events and JSON look as they did when ids were strings.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The id `id`.
            pub fn new(id: impl Into<Arc<str>>) -> Self {
                Self(id.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(Arc::from(id))
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(Arc::from(id))
            }
        }

        impl From<Arc<str>> for $name {
            fn from(id: Arc<str>) -> Self {
                Self(id)
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                Self(Arc::from(id.as_str()))
            }
        }

        impl From<$name> for Arc<str> {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0.to_string()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                **self == *other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                **self == *other.0
            }
        }
    };
}

id! {
    /// A run's id (`run-…`), given at submission; a child run has its own.
    RunId
}

/// A worker's id: the number the coordinator it joins gives it, for that
/// connection (a worker that joins again gets a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(pub u64);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

id! {
    /// A node's id, as its graph names it.
    NodeId
}

/// One dispatched task attempt within a run. Keys are never reused, so a
/// late result from an earlier attempt is recognised for what it is; a
/// retry gets a new key.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct TaskKey(pub u64);

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TaskKey {
    /// The key after this one.
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

/// A map item: the map node and the item's index. It reads `MAP/INDEX`, a
/// teammate's identity, and serializes as that text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemKey {
    /// The map (or loop) node.
    pub map: NodeId,
    /// The item's index in the map's list.
    pub index: u64,
}

impl ItemKey {
    /// Item `index` of `map`.
    pub fn new(map: impl Into<NodeId>, index: u64) -> Self {
        Self {
            map: map.into(),
            index,
        }
    }

    /// The item named by a teammate identity, `MAP/INDEX`.
    pub fn parse(identity: &str) -> Option<Self> {
        let (map, index) = identity.rsplit_once('/')?;
        Some(Self::new(map, index.parse().ok()?))
    }
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.map, self.index)
    }
}

impl Serialize for ItemKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ItemKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("'{text}' is not a map item (MAP/INDEX)"))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn ids_read_as_text_and_serialize_as_strings() {
        let id = RunId::from("run-1");
        assert_eq!(id, "run-1");
        assert_eq!(id.len(), 5);
        assert_eq!(format!("{id} {id:?}"), r#"run-1 "run-1""#);
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""run-1""#);
        let back: RunId = serde_json::from_str(r#""run-1""#).unwrap();
        assert_eq!(back, id);
        let runs = HashMap::from([(id.clone(), 1)]);
        assert_eq!(runs.get("run-1"), Some(&1), "looked up by &str");
    }

    #[test]
    fn an_item_key_is_a_teammate_identity() {
        let item = ItemKey::new("fan", 2);
        assert_eq!(item.to_string(), "fan/2");
        assert_eq!(ItemKey::parse("fan/2"), Some(item));
        assert_eq!(ItemKey::parse("a/b/3"), Some(ItemKey::new("a/b", 3)));
        assert_eq!(ItemKey::parse("fan"), None);
        assert_eq!(ItemKey::parse("fan/x"), None);
        let json = serde_json::to_string(&ItemKey::new("fan", 2)).unwrap();
        assert_eq!(json, r#""fan/2""#);
        assert_eq!(
            serde_json::from_str::<ItemKey>(&json).unwrap(),
            ItemKey::new("fan", 2)
        );
        assert!(serde_json::from_str::<ItemKey>(r#""fan""#).is_err());
    }
}
