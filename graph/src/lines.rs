//! Where each part of a graph file is: the line of every map key and list
//! entry, read once from the YAML text, so that findings about conditions,
//! edges, state fields and settings say where they are, as findings about
//! nodes do (SPEC 6). A JSON file, or text the reader cannot follow, has no
//! lines; findings then go without.

use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::document::Format;

/// One step of a path into the document.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<'a> {
    /// A map's key.
    Key(&'a str),
    /// A list's entry.
    Index(usize),
}

/// The lines of a graph file's keys and entries.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    root: Tree,
}

#[derive(Debug, Default)]
enum Tree {
    Map(Vec<(String, u32, Tree)>),
    Seq(Vec<(u32, Tree)>),
    #[default]
    Leaf,
}

impl Lines {
    /// Reads the lines of `text`.
    pub(crate) fn read(text: &str, format: Format) -> Self {
        if format != Format::Yaml {
            return Self::default();
        }
        let mut options = serde_saphyr::Options::default();
        options.strict_booleans = true;
        options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
        let root = serde_saphyr::from_str_with_options::<Tree>(text, options).unwrap_or_default();
        Self { root }
    }

    /// The line of what `path` names: a key's line, or a list entry's.
    pub(crate) fn line(&self, path: &[Step<'_>]) -> Option<u32> {
        let mut tree = &self.root;
        let mut line = None;
        for step in path {
            let (at, inner) = match (tree, step) {
                (Tree::Map(entries), Step::Key(key)) => entries
                    .iter()
                    .find(|(name, _, _)| name == key)
                    .map(|(_, at, inner)| (*at, inner))?,
                (Tree::Seq(entries), Step::Index(i)) => {
                    entries.get(*i).map(|(at, inner)| (*at, inner))?
                }
                _ => return None,
            };
            line = Some(at);
            tree = inner;
        }
        line
    }
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

/// Any scalar, as a key's text.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(KeyText(match value {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        }))
    }
}

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
            let inner = map.next_value::<Tree>()?;
            entries.push((key.value.0, key.referenced.line() as u32, inner));
        }
        Ok(Tree::Map(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
        let mut entries = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Tree>>()? {
            entries.push((item.referenced.line() as u32, item.value));
        }
        Ok(Tree::Seq(entries))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_str<E>(self, _: &str) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_unit<E>(self) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_none<E>(self) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, inner: D) -> Result<Tree, D::Error> {
        Tree::deserialize(inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
state:
  n: { type: integer }
conditions:
  big: \"state.n > 3\"
nodes:
  a: { kind: script, run: [true] }
edges:
  - { from: a, to: END }
  - from: a
    to: END
";

    #[test]
    fn keys_and_entries_have_their_lines() {
        let lines = Lines::read(TEXT, Format::Yaml);
        assert_eq!(lines.line(&[Step::Key("state"), Step::Key("n")]), Some(2));
        assert_eq!(
            lines.line(&[Step::Key("conditions"), Step::Key("big")]),
            Some(4)
        );
        assert_eq!(lines.line(&[Step::Key("edges"), Step::Index(0)]), Some(8));
        assert_eq!(lines.line(&[Step::Key("edges"), Step::Index(1)]), Some(9));
        assert_eq!(lines.line(&[Step::Key("edges"), Step::Index(2)]), None);
        assert_eq!(lines.line(&[Step::Key("nowhere")]), None);
    }

    #[test]
    fn json_has_no_lines() {
        let lines = Lines::read("{\"state\": {}}", Format::Json);
        assert_eq!(lines.line(&[Step::Key("state")]), None);
    }
}
