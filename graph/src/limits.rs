//! Size limits on a graph, checked on the parsed document before anything
//! is built from it.
//!
//! Graph files come from users and over the network; every later stage
//! (building, validation, "did you mean", the diagram, the run machine) is
//! at most linear or quadratic in the graph's size, so bounding the size
//! here bounds them all, for YAML and JSON alike. The limits are far above
//! any hand-written or generated workflow.

use serde_json::{Map, Value};

use super::finding::Finding;

/// Largest graph text, in bytes.
pub const MAX_GRAPH_BYTES: usize = 4 * 1024 * 1024;
/// Most nodes in one graph.
pub const MAX_NODES: usize = 5_000;
/// Most edges in one graph: `edges:` entries plus `next`, `depends_on`,
/// `fallback` and router targets.
pub const MAX_EDGES: usize = 20_000;
/// Longest node id, state field or condition name, and node reference.
pub const MAX_NAME_CHARS: usize = 128;

/// Node fields that name other nodes.
const REFERENCE_FIELDS: [&str; 5] = ["next", "depends_on", "fallback", "branch", "body"];

/// Checks the text's size before it is parsed.
pub fn check_text(text: &str) -> Option<Finding> {
    (text.len() > MAX_GRAPH_BYTES).then(|| {
        Finding::error(
            format!(
                "the graph is {} bytes; graphs are at most {MAX_GRAPH_BYTES} bytes",
                text.len()
            ),
            &[],
        )
    })
}

/// Checks counts and name lengths on the parsed document. Any finding here
/// stops loading: nothing is built from a document over the limits.
pub fn check_document(document: &Value) -> Vec<Finding> {
    let mut findings = Vec::new();
    let Some(top) = document.as_object() else {
        return findings;
    };
    let nodes: Vec<(Option<&str>, &Value)> = match top.get("nodes") {
        Some(Value::Object(map)) => map.iter().map(|(k, v)| (Some(k.as_str()), v)).collect(),
        Some(Value::Array(list)) => list.iter().map(|v| (None, v)).collect(),
        _ => Vec::new(),
    };
    if nodes.len() > MAX_NODES {
        findings.push(Finding::error(
            format!(
                "the graph has {} nodes; graphs have at most {MAX_NODES}",
                nodes.len()
            ),
            &[],
        ));
        return findings;
    }
    let mut names = NameCheck::default();
    let mut edges = top
        .get("edges")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for (key, node) in &nodes {
        if let Some(key) = key {
            names.check("node id", key);
        }
        let Some(node) = node.as_object() else {
            continue;
        };
        if let Some(Value::String(id)) = node.get("id") {
            names.check("node id", id);
        }
        edges += count_references(node, &mut names);
    }
    for edge in top
        .get("edges")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for end in ["from", "to"] {
            if let Some(Value::String(name)) = edge.get(end) {
                names.check("edge end", name);
            }
        }
    }
    for (section, what) in [
        ("state", "state field"),
        ("initial_state", "state field"),
        ("conditions", "condition name"),
    ] {
        for key in top
            .get(section)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(Map::keys)
        {
            names.check(what, key);
        }
    }
    if edges > MAX_EDGES {
        findings.push(Finding::error(
            format!("the graph has {edges} edges; graphs have at most {MAX_EDGES}"),
            &[],
        ));
    }
    findings.extend(names.findings);
    findings
}

/// Counts the edges a node's fields make, checking the names they use.
fn count_references(node: &Map<String, Value>, names: &mut NameCheck) -> usize {
    let mut count = 0;
    for field in REFERENCE_FIELDS {
        match node.get(field) {
            Some(Value::String(name)) => {
                count += 1;
                names.check("node reference", name);
            }
            Some(Value::Array(list)) => {
                count += list.len();
                for name in list.iter().filter_map(Value::as_str) {
                    names.check("node reference", name);
                }
            }
            _ => {}
        }
    }
    if let Some(map) = node
        .get("routes")
        .and_then(|r| r.get("map"))
        .and_then(Value::as_object)
    {
        count += map.len();
        for name in map.values().filter_map(Value::as_str) {
            names.check("node reference", name);
        }
    }
    count
}

/// Reports names over [`MAX_NAME_CHARS`], showing only their start.
#[derive(Default)]
struct NameCheck {
    findings: Vec<Finding>,
}

impl NameCheck {
    fn check(&mut self, what: &str, name: &str) {
        let chars = name.chars().count();
        if chars <= MAX_NAME_CHARS {
            return;
        }
        // A graph full of long names gets ten findings, not one per name.
        if self.findings.len() >= 10 {
            return;
        }
        let start: String = name.chars().take(24).collect();
        self.findings.push(Finding::error(
            format!(
                "{what} '{start}…' is {chars} characters long; names are at most {MAX_NAME_CHARS}"
            ),
            &[],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_names_are_refused_showing_only_their_start() {
        let long = "x".repeat(30_000);
        let document = json!({"nodes": {long.clone(): {"kind": "end", "next": long}}});
        let findings = check_document(&document);
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert!(
            findings[0]
                .message
                .starts_with("node id 'xxxxxxxxxxxxxxxxxxxxxxxx…' is 30000 characters long")
        );
        assert!(findings[0].message.len() < 200);
    }

    #[test]
    fn counts_are_bounded() {
        let nodes: Map<String, Value> = (0..=MAX_NODES)
            .map(|i| (format!("n{i}"), json!({"kind": "end"})))
            .collect();
        let findings = check_document(&json!({ "nodes": nodes }));
        assert_eq!(
            findings[0].message,
            format!(
                "the graph has {} nodes; graphs have at most {MAX_NODES}",
                MAX_NODES + 1
            )
        );
        let edges: Vec<Value> = (0..=MAX_EDGES)
            .map(|_| json!({"from": "a", "to": "b"}))
            .collect();
        let findings = check_document(&json!({ "nodes": {"a": {"kind": "end"}}, "edges": edges }));
        assert!(
            findings[0].message.starts_with("the graph has 20001 edges"),
            "{findings:?}"
        );
        assert!(check_text(&"#".repeat(MAX_GRAPH_BYTES + 1)).is_some());
    }
}
