//! A graph and the graphs its `subgraph` nodes embed (SPEC 3): every one
//! of them is a file of the same bundle, named relative to the graph that
//! embeds it. At submission the whole family is loaded and validated;
//! findings of an embedded graph name its file, and a graph that embeds
//! itself, directly or through others, is refused.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Bundle, BundleError};
use crate::graph::{Graph, NodeKind};

/// The graphs a bundle's graph embeds, transitively, by bundle path: loaded
/// and validated once at submission, shared by every run of the tree.
#[derive(Debug, Default)]
pub struct Family {
    graphs: HashMap<String, Arc<Graph>>,
}

impl Family {
    /// The embedded graph at `path`.
    pub fn graph(&self, path: &str) -> Option<Arc<Graph>> {
        self.graphs.get(path).cloned()
    }

    /// Every embedded graph.
    pub fn graphs(&self) -> impl Iterator<Item = &Graph> {
        self.graphs.values().map(|graph| &**graph)
    }
}

/// The `graph:` files a graph's subgraph nodes name, with the nodes.
pub fn embedded(graph: &Graph) -> Vec<(&str, &str)> {
    graph
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            NodeKind::Subgraph(config) => Some((node.id.as_str(), config.graph.as_str())),
            _ => None,
        })
        .collect()
}

impl Bundle {
    /// This bundle with another of its graph files as its graph.
    pub fn with_graph(&self, path: &str) -> Result<Bundle, BundleError> {
        if !self.files.contains_key(path) {
            return Err(BundleError::MissingGraph(path.to_owned()));
        }
        Ok(Bundle {
            graph_path: path.to_owned(),
            files: self.files.clone(),
        })
    }

    /// Loads and validates every graph the bundle's graph embeds,
    /// transitively; each problem names the file and the node.
    /// Returns them by path, each parsed once for the whole tree of runs.
    pub fn check_family(&self, graph: &Graph) -> Result<Family, BundleError> {
        let mut problems = Vec::new();
        let mut family = Family::default();
        let mut stack = vec![self.graph_path.clone()];
        self.check_embedded(
            &self.graph_path,
            graph,
            &mut stack,
            &mut family,
            &mut problems,
        );
        if problems.is_empty() {
            Ok(family)
        } else {
            Err(BundleError::Family(problems))
        }
    }

    fn check_embedded(
        &self,
        path: &str,
        graph: &Graph,
        stack: &mut Vec<String>,
        family: &mut Family,
        problems: &mut Vec<String>,
    ) {
        for (node, named) in embedded(graph) {
            let Some(child) = weft_bundle::join(weft_bundle::dir_of(path), named) else {
                problems.push(format!(
                    "{path}: node '{node}': graph '{named}' is not a path inside the bundle"
                ));
                continue;
            };
            if let Some(at) = stack.iter().position(|p| *p == child) {
                let mut cycle: Vec<&str> = stack[at..].iter().map(String::as_str).collect();
                cycle.push(&child);
                problems.push(format!(
                    "{path}: node '{node}': subgraph recursion: {} (a graph cannot embed itself)",
                    cycle.join(" → ")
                ));
                continue;
            }
            let loaded = self
                .with_graph(&child)
                .and_then(|bundle| bundle.load_graph());
            match loaded {
                Ok((child_graph, _)) => {
                    stack.push(child.clone());
                    self.check_embedded(&child, &child_graph, stack, family, problems);
                    stack.pop();
                    family.graphs.insert(child, Arc::new(child_graph));
                }
                Err(BundleError::Graph(crate::graph::GraphError::Invalid(findings))) => {
                    problems.extend(
                        findings
                            .iter()
                            .filter(|f| f.is_error())
                            .map(|f| format!("{child} (embedded by node '{node}' of {path}): {f}")),
                    );
                }
                Err(error) => problems.push(format!("{path}: node '{node}': {error}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[(&str, &str)]) -> Bundle {
        Bundle::new(
            files[0].0.to_owned(),
            files
                .iter()
                .map(|(path, text)| ((*path).to_owned(), text.as_bytes().to_vec(), 0o644)),
            1 << 20,
        )
        .unwrap()
    }

    #[test]
    fn paths_are_named_relative_to_the_embedding_graph() {
        let top = bundle(&[("main.yaml", "nodes: {}")]);
        assert_eq!(top.resolve("child.yaml").as_deref(), Some("child.yaml"));
        assert_eq!(top.resolve("../outside.yaml"), None);
        assert_eq!(top.resolve("/etc/passwd"), None);
        let nested = bundle(&[("flows/main.yaml", "nodes: {}")]);
        assert_eq!(
            nested.resolve("../lib/c.yaml").as_deref(),
            Some("lib/c.yaml")
        );
    }

    #[test]
    fn a_graph_that_embeds_itself_is_refused_naming_the_cycle() {
        let b = bundle(&[
            (
                "a.yaml",
                "nodes:\n  x: { kind: subgraph, graph: b.yaml, start: true }\n",
            ),
            (
                "b.yaml",
                "nodes:\n  y: { kind: subgraph, graph: a.yaml, start: true }\n",
            ),
        ]);
        let (graph, _) = b.load_graph().unwrap();
        let error = b.check_family(&graph).unwrap_err().to_string();
        assert!(
            error.contains("subgraph recursion: a.yaml → b.yaml → a.yaml"),
            "{error}"
        );
    }

    #[test]
    fn an_invalid_or_missing_child_is_named() {
        let b = bundle(&[
            (
                "a.yaml",
                "nodes:\n  x: { kind: subgraph, graph: c.yaml, start: true, next: z }\n  z: { kind: subgraph, graph: gone.yaml }\n",
            ),
            ("c.yaml", "nodes:\n  y: { kind: task, start: true }\n"),
        ]);
        let (graph, _) = b.load_graph().unwrap();
        let error = b.check_family(&graph).unwrap_err().to_string();
        assert!(
            error.contains("c.yaml (embedded by node 'x' of a.yaml): error: node 'y': kind 'task' requires field 'handler'"),
            "{error}"
        );
        assert!(
            error.contains("a.yaml: node 'z': the bundle does not hold its graph file 'gone.yaml'"),
            "{error}"
        );
    }
}
