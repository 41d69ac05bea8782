//! Links between a knowledge base's documents, for graph search.
//!
//! A Markdown document links with `[text](path)` — a relative path (no
//! scheme, not an anchor of its own page), its `#anchor` and `?query` cut,
//! resolved against the document's own directory — and with `[[name]]`
//! or `[[name|label]]`, which names a document by its file's stem (`[[setup]]`
//! is `docs/setup.md`) or its source. A JSON Lines record names the
//! sources it links to in `links`. A link to nothing in the knowledge base
//! is no link. The graph is kept both ways: a document's neighbours are
//! those it links to and those that link to it.

use std::collections::{BTreeSet, HashMap};

use crate::document::{Document, Format};

/// Where a Markdown link points, before it is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A path, resolved against the linking document's directory.
    Path(String),
    /// A wiki link's name.
    Wiki(String),
}

/// The links of a Markdown text of document `source`, in order.
pub fn markdown_links(source: &str, text: &str) -> Vec<Target> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find([')', ' ', '\n', '\t']).unwrap_or(after.len());
        let target = after[..end].trim_matches(['<', '>']);
        // `![alt](picture)` shows a picture; it links nothing.
        let image = rest[..at]
            .rfind('[')
            .is_some_and(|open| rest[..open].ends_with('!'));
        if !image && let Some(path) = relative(source, target) {
            targets.push(Target::Path(path));
        }
        rest = &after[end..];
    }
    let mut rest = text;
    while let Some(at) = rest.find("[[") {
        let after = &rest[at + 2..];
        let Some(end) = after.find("]]") else { break };
        let inner = &after[..end];
        let name = inner.split('|').next().unwrap_or_default().trim();
        if !name.is_empty() && !inner.contains('\n') {
            targets.push(Target::Wiki(name.to_owned()));
        }
        rest = &after[end + 2..];
    }
    targets
}

/// A link target as a path of the knowledge base, or `None` for one that
/// leaves it (a URL, a mail address, an anchor on the same page, a path
/// above the bundle).
fn relative(source: &str, target: &str) -> Option<String> {
    if target.is_empty() || target.starts_with('#') || target.starts_with('/') {
        return None;
    }
    if let Some(colon) = target.find(':') {
        // `https:`, `mailto:`: a scheme before any `/`.
        if !target[..colon].contains('/') {
            return None;
        }
    }
    let target = target.split(['#', '?']).next().unwrap_or_default();
    let mut parts: Vec<&str> = source.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// Which documents link to which, both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkGraph {
    neighbours: Vec<Vec<usize>>,
}

impl LinkGraph {
    /// The links among `documents` (by their places in it).
    pub fn of(documents: &[Document]) -> Self {
        let mut by_source: HashMap<&str, usize> = HashMap::new();
        let mut by_stem: HashMap<String, usize> = HashMap::new();
        for (index, document) in documents.iter().enumerate() {
            by_source.entry(document.source.as_str()).or_insert(index);
            by_stem.entry(stem(&document.source)).or_insert(index);
        }
        let mut sets = vec![BTreeSet::new(); documents.len()];
        for (from, document) in documents.iter().enumerate() {
            let mut targets: Vec<usize> = document
                .links
                .iter()
                .filter_map(|source| by_source.get(source.as_str()).copied())
                .collect();
            if document.format == Format::Markdown {
                targets.extend(
                    markdown_links(&document.source, &document.text)
                        .into_iter()
                        .filter_map(|target| match target {
                            Target::Path(path) => by_source.get(path.as_str()).copied(),
                            Target::Wiki(name) => by_source
                                .get(name.as_str())
                                .or_else(|| by_stem.get(&name.to_lowercase()))
                                .copied(),
                        }),
                );
            }
            for to in targets.into_iter().filter(|&to| to != from) {
                sets[from].insert(to);
                sets[to].insert(from);
            }
        }
        Self {
            neighbours: sets.into_iter().map(|s| s.into_iter().collect()).collect(),
        }
    }

    /// The documents `document` links to or is linked from.
    pub fn neighbours(&self, document: usize) -> &[usize] {
        self.neighbours.get(document).map_or(&[], Vec::as_slice)
    }
}

/// A source's file name without its extension, lowercased: what a wiki
/// link names.
fn stem(source: &str) -> String {
    let name = source.rsplit('/').next().unwrap_or(source);
    let name = name.split('#').next().unwrap_or(name);
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    stem.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(source: &str, text: &str) -> Document {
        let format = if source.ends_with(".md") {
            Format::Markdown
        } else {
            Format::Text
        };
        Document {
            source: source.into(),
            text: text.into(),
            format,
            links: Vec::new(),
        }
    }

    #[test]
    fn markdown_links_are_resolved_against_their_document() {
        let links = markdown_links(
            "docs/guide/start.md",
            "See [setup](setup.md#debian), [up](../faq.md?x=1), [web](https://example.com/a.md), \
             [mail](mailto:a@b.c), [here](#top), ![img](pic.png) and [[Billing]] or [[refunds|the refunds]].",
        );
        assert_eq!(
            links,
            vec![
                Target::Path("docs/guide/setup.md".into()),
                Target::Path("docs/faq.md".into()),
                Target::Wiki("Billing".into()),
                Target::Wiki("refunds".into()),
            ]
        );
        assert_eq!(markdown_links("a.md", "[out](../../x.md)"), vec![]);
    }

    #[test]
    fn the_graph_holds_links_both_ways_and_only_to_known_documents() {
        let mut records = doc("faq.jsonl#1", "refunds take a week");
        records.links = vec!["docs/billing.md".into(), "nowhere".into()];
        let documents = vec![
            doc(
                "docs/start.md",
                "Read [billing](billing.md) and [[Refunds]] and [gone](gone.md).",
            ),
            doc("docs/billing.md", "Prices."),
            doc("docs/refunds.md", "Refund rules."),
            records,
            doc("notes.txt", "[not](docs/start.md) a markdown link"),
        ];
        let graph = LinkGraph::of(&documents);
        assert_eq!(graph.neighbours(0), &[1, 2]);
        assert_eq!(
            graph.neighbours(1),
            &[0, 3],
            "linked from start and the record"
        );
        assert_eq!(graph.neighbours(2), &[0]);
        assert_eq!(graph.neighbours(3), &[1]);
        assert_eq!(
            graph.neighbours(4),
            &[] as &[usize],
            "a text file's brackets are text"
        );
    }
}
