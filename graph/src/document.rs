//! Reading a graph file's text: YAML or JSON syntax into a JSON value, with
//! line and column on syntax errors, and the file line of every node so that
//! later findings can point at it.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::finding::Finding;

/// The syntax of a graph file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML (the default).
    Yaml,
    /// JSON.
    Json,
}

impl Format {
    /// Picks the format from a file name: `.json` is JSON, anything else YAML.
    pub fn from_path(path: &std::path::Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Self::Json,
            _ => Self::Yaml,
        }
    }
}

/// Parses the text into a JSON value; a syntax error carries line and
/// column. A node id given twice in the map form of `nodes:` is not a syntax
/// error: it is reported as a finding naming both lines (the first
/// definition is kept), so every other finding is reported too.
pub fn parse_text_with_duplicates(
    text: &str,
    format: Format,
) -> Result<(Value, Vec<Finding>), Finding> {
    let strict = parse_text(text, format);
    let Err(syntax) = strict else {
        return strict.map(|value| (value, Vec::new()));
    };
    if format != Format::Yaml {
        return Err(syntax);
    }
    let duplicates = duplicate_node_ids(text);
    if duplicates.is_empty() {
        return Err(syntax);
    }
    let mut options = yaml_options();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::FirstWins;
    // Only the node ids were repeated if the text reads with them removed;
    // any other repeated key stays a syntax error.
    let lenient =
        serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|_| syntax.clone())?;
    if parse_text(&without_duplicate_nodes(text, &duplicates), format).is_err() {
        return Err(syntax);
    }
    let findings = duplicates
        .into_iter()
        .map(|(id, first, again)| {
            Finding::error(
                format!("duplicate node id '{id}' (lines {first} and {again})"),
                &[id.as_str()],
            )
        })
        .collect();
    Ok((lenient, findings))
}

/// Each node id defined more than once in the map form of `nodes:`, with
/// the line of its first definition and of the next one.
fn duplicate_node_ids(text: &str) -> Vec<(String, u32, u32)> {
    let mut first: HashMap<String, u32> = HashMap::new();
    let mut duplicates = Vec::new();
    for (id, line) in node_line_entries(text) {
        match first.get(&id) {
            Some(&line_one)
                if !duplicates
                    .iter()
                    .any(|(d, _, _): &(String, u32, u32)| *d == id) =>
            {
                duplicates.push((id, line_one, line));
            }
            Some(_) => {}
            None => {
                first.insert(id, line);
            }
        }
    }
    duplicates
}

/// The text with the repeated node definitions' key lines renamed, to check
/// that nothing else in the file is repeated.
fn without_duplicate_nodes(text: &str, duplicates: &[(String, u32, u32)]) -> String {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let number = i as u32 + 1;
            match duplicates.iter().find(|(_, _, again)| *again == number) {
                Some((id, _, _)) => line.replacen(id.as_str(), &format!("{id}__again{number}"), 1),
                None => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses the text into a JSON value; a syntax error carries line and column.
pub fn parse_text(text: &str, format: Format) -> Result<Value, Finding> {
    match format {
        Format::Json => serde_json::from_str(text).map_err(|error| {
            // serde_json ends its message with the position, said first here.
            let shown = error.to_string();
            let position = format!(" at line {} column {}", error.line(), error.column());
            Finding::error(
                format!(
                    "JSON syntax error at line {}, column {}: {}",
                    error.line(),
                    error.column(),
                    shown.strip_suffix(&position).unwrap_or(&shown)
                ),
                &[],
            )
        }),
        Format::Yaml => {
            serde_saphyr::from_str_with_options::<Value>(text, yaml_options()).map_err(|error| {
                let position = error
                    .location()
                    .map(|loc| format!(" at line {}, column {}", loc.line(), loc.column()))
                    .unwrap_or_default();
                let message = yaml_message(&error.to_string());
                Finding::error(format!("YAML syntax error{position}: {message}"), &[])
            })
        }
    }
}

/// YAML 1.2 core booleans only: `yes`, `no`, `y`, `on` stay strings, so a
/// node or handler named `no` means what it says.
fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options
}

/// The file line of each node, where the syntax gives it (YAML only).
pub fn node_lines(text: &str, format: Format) -> HashMap<String, u32> {
    if format != Format::Yaml {
        return HashMap::new();
    }
    let mut lines = HashMap::new();
    for (id, line) in node_line_entries(text) {
        lines.entry(id).or_insert(line);
    }
    lines
}

/// Every node definition's id and line, in file order, repeats included.
fn node_line_entries(text: &str) -> Vec<(String, u32)> {
    #[derive(Deserialize)]
    struct Top {
        #[serde(default)]
        nodes: Option<NodeLines>,
    }
    let mut options = yaml_options();
    // Repeated keys reach the visitor, which keeps them all.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    match serde_saphyr::from_str_with_options::<Top>(text, options) {
        Ok(Top { nodes: Some(lines) }) => lines.0,
        _ => Vec::new(),
    }
}

/// Node ids and lines, read from either the map form or the list form of
/// `nodes:`.
struct NodeLines(Vec<(String, u32)>);

impl<'de> Deserialize<'de> for NodeLines {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeLinesVisitor)
    }
}

struct NodeLinesVisitor;

#[derive(Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<String>,
}

impl<'de> Visitor<'de> for NodeLinesVisitor {
    type Value = NodeLines;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map or a list of nodes")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodeLines, A::Error> {
        let mut lines = Vec::new();
        while let Some(key) = map.next_key::<serde_saphyr::Spanned<String>>()? {
            map.next_value::<IgnoredAny>()?;
            lines.push((key.value, key.referenced.line() as u32));
        }
        Ok(NodeLines(lines))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NodeLines, A::Error> {
        let mut lines = Vec::new();
        while let Some(item) = seq.next_element::<serde_saphyr::Spanned<IdOnly>>()? {
            if let Some(id) = item.value.id {
                lines.push((id, item.referenced.line() as u32));
            }
        }
        Ok(NodeLines(lines))
    }
}

/// The parser's message without its own position prefix, and a repeated
/// key said plainly (the parser's text names its own option).
fn yaml_message(text: &str) -> String {
    let line = without_position(&first_line(text));
    if let Some(key) = line
        .split("duplicate mapping key: ")
        .nth(1)
        .map(|rest| rest.split(',').next().unwrap_or(rest).trim())
    {
        return format!("the key '{key}' is given twice in the same map");
    }
    line
}

/// The parser's message without the `error: line N column M: ` it starts
/// with (the finding says where, once).
fn without_position(line: &str) -> String {
    let rest = line.strip_prefix("error: ").unwrap_or(line);
    if let Some(after) = rest.strip_prefix("line ")
        && let Some((position, message)) = after.split_once(": ")
        && position
            .split(" column ")
            .all(|n| n.trim().parse::<u32>().is_ok())
    {
        return message.to_owned();
    }
    rest.to_owned()
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or(text).trim().to_owned()
}

/// The closest of `candidates` to `word`, when it is close enough to be a
/// likely misspelling.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    // A typo is a short name a few edits from a known one; anything longer
    // gets no suggestion, so the table below stays small whatever the input.
    const LONGEST: usize = 64;
    if word.len() > LONGEST {
        return None;
    }
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let limit = (word.len().max(candidate.len()) / 3).max(1);
        if candidate.len() > LONGEST || candidate.len().abs_diff(word.len()) > limit {
            continue;
        }
        let distance = edit_distance(word, candidate);
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    let close = best
        .filter(|(distance, candidate)| *distance <= (word.len().max(candidate.len()) / 3).max(1));
    if let Some((_, candidate)) = close {
        return Some(candidate);
    }
    // An inflected form of a known word (`retries` for `retry`, `edges`
    // for `edge`): the word starts with all of the candidate but its last
    // letter, and that stem is long enough to mean something.
    candidates
        .iter()
        .filter(|c| c.len() >= 5 && c.is_ascii() && word.len() > c.len())
        .find(|c| word.starts_with(&c[..c.len() - 1]) && word.len() - c.len() <= 3)
        .copied()
}

/// Edit distance counting an adjacent transposition as one edit, so that
/// `taks` is one step from `task`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_syntax_error_has_line_and_column() {
        let finding = parse_text("version: 1\nnodes:\n  a: [unclosed\n", Format::Yaml).unwrap_err();
        assert!(
            finding.message.starts_with("YAML syntax error at line"),
            "{}",
            finding.message
        );
        assert!(finding.message.contains("column"), "{}", finding.message);
        assert_eq!(
            finding.message.matches("line").count(),
            1,
            "the position is said once: {}",
            finding.message
        );
        let json = parse_text("{\"a\": [1,}", Format::Json).unwrap_err();
        assert_eq!(
            json.message,
            "JSON syntax error at line 1, column 10: expected value"
        );
    }

    #[test]
    fn inflected_forms_get_a_suggestion() {
        assert_eq!(
            did_you_mean("retries", &["retry", "timeout"]),
            Some("retry")
        );
        assert_eq!(did_you_mean("handlr", &["handler"]), Some("handler"));
        assert_eq!(did_you_mean("zzzzzzzz", &["retry"]), None);
    }

    #[test]
    fn yaml_duplicate_key_is_an_error() {
        let finding =
            parse_text("nodes:\n  a: {kind: end}\n  a: {kind: end}\n", Format::Yaml).unwrap_err();
        assert_eq!(
            finding.message,
            "YAML syntax error at line 3, column 3: the key 'a' is given twice in the same map"
        );
        // Repeated node ids are recovered from, and reported with both lines.
        let (value, findings) = parse_text_with_duplicates(
            "nodes:\n  a: {kind: end}\n  a: {kind: task}\n",
            Format::Yaml,
        )
        .unwrap();
        assert_eq!(
            value["nodes"]["a"]["kind"], "end",
            "the first definition is kept"
        );
        assert_eq!(findings[0].message, "duplicate node id 'a' (lines 2 and 3)");
        // Any other repeated key stays a syntax error.
        let error = parse_text_with_duplicates(
            "nodes:\n  a: {kind: end, kind: task}\n  a: {kind: end}\n",
            Format::Yaml,
        )
        .unwrap_err();
        assert!(
            error.message.contains("the key 'kind' is given twice"),
            "{}",
            error.message
        );
    }

    #[test]
    fn yaml_11_booleans_stay_strings() {
        let value = parse_text("a: yes\nb: no\nc: true\n", Format::Yaml).unwrap();
        assert_eq!(value, serde_json::json!({"a": "yes", "b": "no", "c": true}));
    }

    #[test]
    fn json_syntax_error_has_line_and_column() {
        let finding = parse_text("{\n  \"nodes\": ,\n}", Format::Json).unwrap_err();
        assert!(
            finding.message.contains("line 2, column"),
            "{}",
            finding.message
        );
    }

    #[test]
    fn node_lines_in_map_and_list_form() {
        let map = node_lines(
            "version: 1\nnodes:\n  a:\n    kind: end\n  b:\n    kind: end\n",
            Format::Yaml,
        );
        assert_eq!(map.get("a"), Some(&3));
        assert_eq!(map.get("b"), Some(&5));
        let list = node_lines(
            "nodes:\n  - id: a\n    kind: end\n  - kind: end\n    id: b\n",
            Format::Yaml,
        );
        assert_eq!(list.get("a"), Some(&2));
        assert_eq!(list.get("b"), Some(&4));
    }

    #[test]
    fn suggestions_for_misspellings() {
        assert_eq!(
            did_you_mean("hanlder", &["handler", "run"]),
            Some("handler")
        );
        assert_eq!(did_you_mean("zzzzzz", &["handler", "run"]), None);
    }
}
