//! The stored form of the progress's node and edge statuses: one letter
//! each, in one string (`"DDRPP"`), instead of a list of names.
//!
//! A run's progress is serialized at every checkpoint, and it holds a
//! status for every node and edge of the graph: as names, a 200-node chain
//! wrote 400 quoted strings per wave, a cost that grew with the graph
//! rather than with what the wave changed. Records written before read as
//! they always did: a list of names is still accepted.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

/// A status with a one-letter form.
pub(super) trait Letter: Sized + Copy + DeserializeOwned {
    /// Its letter.
    fn letter(self) -> char;
    /// The status a letter stands for.
    fn of_letter(letter: char) -> Option<Self>;
    /// What the statuses are, for an error.
    const WHAT: &'static str;
}

/// Serializes the statuses as one string of letters.
pub(super) fn serialize<S: Serializer, T: Letter>(
    statuses: &[T],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    // Every letter is ASCII: one byte each, collected into room made once
    // (collecting `char`s encoded each one and grew the string as it
    // went, a tenth of a long chain's progress JSON).
    let letters: Vec<u8> = statuses
        .iter()
        .map(|s| {
            let letter = s.letter();
            debug_assert!(letter.is_ascii());
            letter as u8
        })
        .collect();
    let letters = String::from_utf8(letters).expect("status letters are ASCII");
    serializer.serialize_str(&letters)
}

/// Reads a string of letters, or a list of names as earlier records hold.
pub(super) fn deserialize<'de, D: Deserializer<'de>, T: Letter>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    deserializer.deserialize_any(Statuses(PhantomData))
}

struct Statuses<T>(PhantomData<T>);

impl<'de, T: Letter> Visitor<'de> for Statuses<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} as a string of letters or a list of names", T::WHAT)
    }

    fn visit_str<E: de::Error>(self, letters: &str) -> Result<Vec<T>, E> {
        letters
            .chars()
            .map(|c| {
                T::of_letter(c)
                    .ok_or_else(|| E::custom(format!("'{c}' is not one of the {}", T::WHAT)))
            })
            .collect()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut names: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(names.size_hint().unwrap_or(0));
        while let Some(status) = names.next_element::<T>()? {
            out.push(status);
        }
        Ok(out)
    }
}

impl Letter for super::NodeStatus {
    fn letter(self) -> char {
        use super::NodeStatus::*;
        match self {
            Pending => 'P',
            Running => 'R',
            Waiting => 'W',
            Done => 'D',
            Skipped => 'S',
            Failed => 'F',
        }
    }

    fn of_letter(letter: char) -> Option<Self> {
        use super::NodeStatus::*;
        Some(match letter {
            'P' => Pending,
            'R' => Running,
            'W' => Waiting,
            'D' => Done,
            'S' => Skipped,
            'F' => Failed,
            _ => return None,
        })
    }

    const WHAT: &'static str = "node statuses";
}

impl Letter for super::EdgeStatus {
    fn letter(self) -> char {
        use super::EdgeStatus::*;
        match self {
            Unresolved => 'U',
            Taken => 'T',
            NotTaken => 'N',
        }
    }

    fn of_letter(letter: char) -> Option<Self> {
        use super::EdgeStatus::*;
        Some(match letter {
            'U' => Unresolved,
            'T' => Taken,
            'N' => NotTaken,
            _ => return None,
        })
    }

    const WHAT: &'static str = "edge statuses";
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::super::{EdgeStatus, NodeStatus};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Both {
        #[serde(with = "super")]
        nodes: Vec<NodeStatus>,
        #[serde(with = "super")]
        edges: Vec<EdgeStatus>,
    }

    #[test]
    fn statuses_are_stored_as_letters_and_read_back() {
        use NodeStatus::*;
        let both = Both {
            nodes: vec![Pending, Running, Waiting, Done, Skipped, Failed],
            edges: vec![
                EdgeStatus::Unresolved,
                EdgeStatus::Taken,
                EdgeStatus::NotTaken,
            ],
        };
        let json = serde_json::to_string(&both).unwrap();
        assert_eq!(json, r#"{"nodes":"PRWDSF","edges":"UTN"}"#);
        assert_eq!(serde_json::from_str::<Both>(&json).unwrap(), both);
    }

    #[test]
    fn earlier_records_with_lists_of_names_still_read() {
        let old = r#"{"nodes":["Done","Running","Pending"],"edges":["Taken","Unresolved"]}"#;
        let both: Both = serde_json::from_str(old).unwrap();
        assert_eq!(
            both.nodes,
            [NodeStatus::Done, NodeStatus::Running, NodeStatus::Pending]
        );
        assert_eq!(both.edges, [EdgeStatus::Taken, EdgeStatus::Unresolved]);
    }

    #[test]
    fn an_unknown_letter_is_refused_by_name() {
        let error = serde_json::from_str::<Both>(r#"{"nodes":"PX","edges":""}"#).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("'X' is not one of the node statuses"),
            "{error}"
        );
    }
}
