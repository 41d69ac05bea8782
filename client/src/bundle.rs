//! Bundling a graph file with the files it names, so workers need no
//! shared file system: script paths (`script:` and argv elements that name
//! files beside the graph) travel with the run.

use std::path::{Component, Path, PathBuf};

use weft_graph::{self as graph, GraphError, NodeKind};

/// A graph and its files, ready to submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphBundle {
    /// Path of the graph file among `files`.
    pub graph_path: String,
    /// `(relative path, content, unix mode)`.
    pub files: Vec<(String, Vec<u8>, u32)>,
}

/// Why a graph could not be bundled.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The graph is invalid or unreadable.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A file it names could not be read.
    #[error("cannot read '{path}': {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl GraphBundle {
    /// Reads a graph file, validates it, and gathers the files it names.
    pub fn from_file(path: &Path) -> Result<Self, BundleError> {
        let (graph, _) = graph::load_file(path)?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let graph_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("graph.yaml")
            .to_owned();
        let mut files = vec![(graph_name.clone(), read(path)?, 0o644)];
        let mut named: Vec<String> = Vec::new();
        for node in &graph.nodes {
            if let NodeKind::Script { argv, .. } = &node.kind {
                for arg in argv {
                    if is_relative_inside(arg) && dir.join(arg).is_file() && !named.contains(arg) {
                        named.push(arg.clone());
                    }
                }
            }
        }
        for relative in named {
            let full: PathBuf = dir.join(&relative);
            let mode = mode_of(&full);
            files.push((relative, read(&full)?, mode));
        }
        Ok(Self {
            graph_path: graph_name,
            files,
        })
    }

    /// A bundle of one in-memory graph (YAML or JSON by `graph_path`).
    pub fn from_text(graph_path: &str, text: &str) -> Self {
        Self {
            graph_path: graph_path.to_owned(),
            files: vec![(graph_path.to_owned(), text.as_bytes().to_vec(), 0o644)],
        }
    }
}

fn is_relative_inside(arg: &str) -> bool {
    let path = Path::new(arg);
    !arg.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn read(path: &Path) -> Result<Vec<u8>, BundleError> {
    std::fs::read(path).map_err(|source| BundleError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_the_scripts_a_graph_names() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/critique-loop.yaml");
        let bundle = GraphBundle::from_file(&examples).unwrap();
        assert_eq!(bundle.graph_path, "critique-loop.yaml");
        let paths: Vec<&str> = bundle.files.iter().map(|(p, _, _)| p.as_str()).collect();
        assert!(paths.contains(&"scripts/critique.py"), "{paths:?}");
        assert!(!paths.contains(&"python3"), "{paths:?}");
    }

    #[test]
    fn paths_outside_the_graph_directory_are_not_bundled() {
        assert!(is_relative_inside("scripts/a.py"));
        assert!(!is_relative_inside("../a.py"));
        assert!(!is_relative_inside("/usr/bin/env"));
    }
}
