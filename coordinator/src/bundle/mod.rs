//! Graph bundles: a graph file and the files it names, uploaded with a run
//! so that workers need no shared file system. Files are addressed by their
//! SHA-256, so a worker fetches each one once and caches it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use weft_bundle::{check_layout, check_path};

use crate::graph::{self, Finding, Format, Graph, GraphError};

mod blobs;
mod embedded_graphs;

pub use blobs::{BlobLease, BlobStore};
pub use embedded_graphs::{Family, embedded};

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    /// The content.
    pub content: Arc<Vec<u8>>,
    /// Hex SHA-256 of the content.
    pub sha256: String,
    /// Unix permission bits.
    pub mode: u32,
}

/// A graph file and the files it names, by relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// Path of the graph file among `files`.
    pub graph_path: String,
    /// Every file, by relative path.
    pub files: BTreeMap<String, BundleFile>,
}

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A path escapes the bundle, is absolute, or names no file a worker
    /// can create.
    #[error(transparent)]
    Path(#[from] weft_bundle::PathError),
    /// Two files at one path, or one path used as both a file and a
    /// directory.
    #[error(transparent)]
    Layout(#[from] weft_bundle::LayoutError),
    /// The graph file is missing from the bundle.
    #[error("the bundle does not hold its graph file '{0}'")]
    MissingGraph(String),
    /// The graph file is not UTF-8 text.
    #[error("graph file '{0}' is not UTF-8 text")]
    NotText(String),
    /// The bundle is larger than the configured limit.
    #[error("the bundle is {size} bytes, more than the limit of {limit} (max_bundle_bytes)")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bundle holds more files than a bundle may.
    #[error(
        "the bundle holds more than {limit} files; a bundle holds at most {limit} (a graph's directory with its scripts, not a whole tree)"
    )]
    TooManyFiles {
        /// The limit.
        limit: usize,
    },
    /// The graph is invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A graph it embeds is missing, invalid, or embeds its embedder.
    #[error("{}", .0.join("\n"))]
    Family(Vec<String>),
}

/// Hex SHA-256 of some bytes, as workers and clients spell it.
pub use weft_proto::index_pieces::sha256_hex;

/// Files one bundle may hold: a million empty files (14 MB on the wire)
/// took a coordinator to 1.45 GB, two million aborted it.
pub const MAX_BUNDLE_FILES: usize = 10_000;

impl Bundle {
    /// Assembles a bundle from `(path, content, mode)` triples; more than
    /// [`MAX_BUNDLE_FILES`] of them are refused before any is kept.
    pub fn new(
        graph_path: String,
        files: impl IntoIterator<Item = (String, Vec<u8>, u32)>,
        limit: usize,
    ) -> Result<Self, BundleError> {
        let mut map = BTreeMap::new();
        let mut size = 0usize;
        let mut paths = Vec::new();
        for (count, (path, content, mode)) in files.into_iter().enumerate() {
            if count >= MAX_BUNDLE_FILES {
                return Err(BundleError::TooManyFiles {
                    limit: MAX_BUNDLE_FILES,
                });
            }
            check_path(&path)?;
            paths.push(path.clone());
            size += content.len();
            if size > limit {
                return Err(BundleError::TooLarge { size, limit });
            }
            let sha256 = sha256_hex(&content);
            map.insert(
                path,
                BundleFile {
                    content: Arc::new(content),
                    sha256,
                    // No setuid, setgid or sticky bit, nothing world-writable.
                    mode: mode & 0o755,
                },
            );
        }
        check_layout(paths.iter().map(String::as_str))?;
        check_path(&graph_path)?;
        if !map.contains_key(&graph_path) {
            return Err(BundleError::MissingGraph(graph_path));
        }
        Ok(Self {
            graph_path,
            files: map,
        })
    }

    /// A digest of the whole bundle: its graph's path and every file's
    /// path, mode and content digest. Equal digests, equal bundles.
    pub fn digest(&self) -> String {
        let mut listing = Sha256::new();
        listing.update(self.graph_path.as_bytes());
        for (path, file) in &self.files {
            listing.update([0]);
            listing.update(path.as_bytes());
            listing.update([0]);
            listing.update(file.mode.to_le_bytes());
            listing.update(file.sha256.as_bytes());
        }
        hex::encode(listing.finalize())
    }

    /// Loads and validates the bundle's graph; the Python files it names
    /// are read from the bundle, beside it.
    pub fn load_graph(&self) -> Result<(Graph, Vec<Finding>), BundleError> {
        let text = self.graph_text()?;
        let path = Path::new(&self.graph_path);
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("graph");
        let beside = |relative: &str| self.text_beside_graph(relative);
        let (mut graph, mut findings) =
            graph::load_str_with(text, Format::from_path(path), stem, &beside)?;
        let mut missing =
            graph::missing_script_files(&graph, &|relative| self.has_beside_graph(relative));
        missing.extend(self.missing_sources(&graph));
        if !missing.is_empty() {
            findings.splice(0..0, missing);
            return Err(GraphError::Invalid(findings).into());
        }
        graph.dir = self.graph_dir();
        Ok((graph, findings))
    }

    /// Parses the bundle's graph and returns every finding, valid or not.
    pub fn findings(&self) -> Result<Vec<Finding>, BundleError> {
        let text = self.graph_text()?;
        let path = Path::new(&self.graph_path);
        let beside = |relative: &str| self.text_beside_graph(relative);
        let (graph, mut findings) =
            graph::parse_graph_with(text, Format::from_path(path), "graph", &beside);
        if !findings.iter().any(Finding::is_error) {
            let mut missing =
                graph::missing_script_files(&graph, &|relative| self.has_beside_graph(relative));
            missing.extend(self.missing_sources(&graph));
            findings.splice(0..0, missing);
        }
        Ok(findings)
    }

    /// The bundle's files under its graph's directory, by their paths
    /// relative to it, with their sizes: what a knowledge base's sources
    /// are matched against.
    pub fn files_beside_graph(&self) -> Vec<(&str, u64)> {
        let dir = self.graph_dir();
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        self.files
            .iter()
            .filter_map(|(path, file)| {
                let relative = path.strip_prefix(prefix.as_str())?;
                Some((relative, file.content.len() as u64))
            })
            .collect()
    }

    /// An error for each knowledge source glob of `graph` that matches
    /// none of the bundle's files.
    fn missing_sources(&self, graph: &Graph) -> Vec<Finding> {
        if graph.knowledge.is_empty() {
            return Vec::new();
        }
        let files = self.files_beside_graph();
        let paths: Vec<&str> = files.iter().map(|(path, _)| *path).collect();
        graph::missing_knowledge_sources(graph, &paths)
    }

    /// The directory of the graph file within the bundle (`""` at its
    /// root).
    fn graph_dir(&self) -> String {
        weft_bundle::dir_of(&self.graph_path).to_owned()
    }

    /// A text file of the bundle, by path relative to the graph's
    /// directory.
    fn text_beside_graph(&self, relative: &str) -> Option<String> {
        let path = self.resolve(relative)?;
        let file = self.files.get(&path)?;
        String::from_utf8(file.content.to_vec()).ok()
    }

    /// Whether the bundle holds a file named `relative` to its graph.
    fn has_beside_graph(&self, relative: &str) -> bool {
        self.resolve(relative)
            .is_some_and(|path| self.files.contains_key(&path))
    }

    /// Where a file named `relative` to the bundle's graph lies in the
    /// bundle; `None` when the name climbs out of it.
    pub fn resolve(&self, relative: &str) -> Option<String> {
        weft_bundle::join(weft_bundle::dir_of(&self.graph_path), relative)
    }

    fn graph_text(&self) -> Result<&str, BundleError> {
        let file = &self.files[&self.graph_path];
        std::str::from_utf8(&file.content)
            .map_err(|_| BundleError::NotText(self.graph_path.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clashing_paths_and_modes_are_handled_at_submission() {
        let graph = "nodes:\n  a: {kind: end, start: true}\n";
        let file = |path: &str, mode| (path.to_owned(), b"x".to_vec(), mode);
        let bundle = |extra: Vec<(String, Vec<u8>, u32)>| {
            let mut files = vec![("g.yaml".to_owned(), graph.as_bytes().to_vec(), 0o644)];
            files.extend(extra);
            Bundle::new("g.yaml".into(), files, 1 << 20)
        };
        let error = bundle(vec![file("a", 0o644), file("a/b", 0o644)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "bundle path 'a' is both a file and a directory"
        );
        let error = bundle(vec![file("a.py", 0o644), file("./a.py", 0o644)]).unwrap_err();
        assert_eq!(error.to_string(), "bundle path './a.py' appears twice");
        let ok = bundle(vec![file("run.sh", 0o6777)]).unwrap();
        assert_eq!(ok.files["run.sh"].mode, 0o755);
    }

    #[test]
    fn bundle_checks_size_and_graph_presence() {
        let graph = "nodes:\n  a: {kind: end, start: true}\n"
            .as_bytes()
            .to_vec();
        let bundle = Bundle::new(
            "g.yaml".into(),
            [("g.yaml".into(), graph.clone(), 0o644)],
            1 << 20,
        )
        .unwrap();
        assert_eq!(bundle.files["g.yaml"].sha256, sha256_hex(&graph));
        assert!(bundle.load_graph().is_ok());
        let missing = Bundle::new(
            "h.yaml".into(),
            [("g.yaml".into(), graph.clone(), 0o644)],
            1 << 20,
        );
        assert!(matches!(missing, Err(BundleError::MissingGraph(_))));
        let big = Bundle::new("g.yaml".into(), [("g.yaml".into(), graph, 0o644)], 4);
        assert!(matches!(big, Err(BundleError::TooLarge { .. })));
    }

    #[test]
    fn a_bundle_of_too_many_files_is_refused_before_it_is_assembled() {
        let files = (0..MAX_BUNDLE_FILES + 1).map(|i| (format!("f{i}"), Vec::new(), 0o644));
        let refused = Bundle::new("f0".into(), files, 1 << 20).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the bundle holds more than 10000 files; a bundle holds at most 10000 (a graph's directory with its scripts, not a whole tree)"
        );
    }
}
