//! Graph bundles: a graph file and the files it names, uploaded with a run
//! so that workers need no shared file system. Files are addressed by their
//! SHA-256, so a worker fetches each one once and caches it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

use crate::graph::{self, Finding, Format, Graph, GraphError};

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
    /// A path escapes the bundle or is absolute.
    #[error("bundle path '{0}' must be relative and stay inside the bundle")]
    UnsafePath(String),
    /// A path no file system can hold as a file (empty, `.`, control
    /// characters, over-long).
    #[error("bundle path {0:?} {1}")]
    BadPath(String, &'static str),
    /// Two files at one path, or one path used as both a file and a
    /// directory.
    #[error("bundle path '{0}' {1}")]
    Clash(String, &'static str),
    /// The graph file is missing from the bundle.
    #[error("the bundle does not hold its graph file '{0}'")]
    MissingGraph(String),
    /// The graph file is not UTF-8 text.
    #[error("graph file '{0}' is not UTF-8 text")]
    NotText(String),
    /// The bundle is larger than the configured limit.
    #[error("the bundle is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// Its size.
        size: usize,
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

/// Hex SHA-256 of some bytes.
pub fn sha256_hex(content: &[u8]) -> String {
    let digest = Sha256::digest(content);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Longest bundle path, in bytes; each part at most 255 (file systems' own limit).
const MAX_PATH_BYTES: usize = 1024;

/// Checks that a bundle path is relative, cannot climb out of the bundle,
/// and names a file a worker can create.
pub fn check_path(path: &str) -> Result<(), BundleError> {
    let parsed = Path::new(path);
    let safe = !path.is_empty()
        && parsed
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !safe {
        return Err(BundleError::UnsafePath(path.to_owned()));
    }
    let bad = |why| Err(BundleError::BadPath(path.to_owned(), why));
    if path.chars().any(char::is_control) {
        return bad("holds a control character");
    }
    if path.len() > MAX_PATH_BYTES || parsed.components().any(|c| c.as_os_str().len() > 255) {
        return bad("is too long for a file system");
    }
    if path.ends_with('/')
        || !parsed
            .components()
            .any(|c| matches!(c, Component::Normal(_)))
    {
        return bad("names a directory, not a file");
    }
    Ok(())
}

/// A path with `.` parts dropped: `./a.py` and `a.py` are one file.
fn normal_form(path: &str) -> String {
    Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Refuses two files at one path, and a path that is a file and also the
/// directory of another.
fn check_layout<'a>(paths: impl Iterator<Item = &'a String>) -> Result<(), BundleError> {
    let mut files = std::collections::HashSet::new();
    let mut dirs = std::collections::HashSet::new();
    for path in paths {
        let normal = normal_form(path);
        for (slash, _) in normal.match_indices('/') {
            dirs.insert(normal[..slash].to_owned());
        }
        if !files.insert(normal) {
            return Err(BundleError::Clash(path.clone(), "appears twice"));
        }
    }
    if let Some(both) = files.iter().find(|f| dirs.contains(*f)) {
        return Err(BundleError::Clash(
            both.clone(),
            "is both a file and a directory",
        ));
    }
    Ok(())
}

impl Bundle {
    /// Assembles a bundle from `(path, content, mode)` triples.
    pub fn new(
        graph_path: String,
        files: impl IntoIterator<Item = (String, Vec<u8>, u32)>,
        limit: usize,
    ) -> Result<Self, BundleError> {
        let mut map = BTreeMap::new();
        let mut size = 0usize;
        let mut paths = Vec::new();
        for (path, content, mode) in files {
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
        check_layout(paths.iter())?;
        check_path(&graph_path)?;
        if !map.contains_key(&graph_path) {
            return Err(BundleError::MissingGraph(graph_path));
        }
        Ok(Self {
            graph_path,
            files: map,
        })
    }

    /// Loads and validates the bundle's graph; the Python files it names
    /// are read from the bundle, beside it.
    pub fn load_graph(&self) -> Result<(Graph, Vec<Finding>), BundleError> {
        let text = self.graph_text()?;
        let path = Path::new(&self.graph_path);
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("graph");
        let beside = |relative: &str| self.text_beside_graph(relative);
        let (mut graph, findings) =
            graph::load_str_with(text, Format::from_path(path), stem, &beside)?;
        graph.dir = self.graph_dir();
        Ok((graph, findings))
    }

    /// Parses the bundle's graph and returns every finding, valid or not.
    pub fn findings(&self) -> Result<Vec<Finding>, BundleError> {
        let text = self.graph_text()?;
        let path = Path::new(&self.graph_path);
        let beside = |relative: &str| self.text_beside_graph(relative);
        Ok(graph::parse_graph_with(text, Format::from_path(path), "graph", &beside).1)
    }

    /// The directory of the graph file within the bundle (`""` at its
    /// root).
    fn graph_dir(&self) -> String {
        Path::new(&self.graph_path)
            .parent()
            .and_then(Path::to_str)
            .unwrap_or_default()
            .to_owned()
    }

    /// A text file of the bundle, by path relative to the graph's
    /// directory.
    fn text_beside_graph(&self, relative: &str) -> Option<String> {
        let path = crate::bundle_family::resolve(&self.graph_path, relative)?;
        let file = self.files.get(&path)?;
        String::from_utf8(file.content.to_vec()).ok()
    }

    fn graph_text(&self) -> Result<&str, BundleError> {
        let file = &self.files[&self.graph_path];
        std::str::from_utf8(&file.content)
            .map_err(|_| BundleError::NotText(self.graph_path.clone()))
    }
}

/// The bundle files of the runs the coordinator holds, by content hash,
/// for workers to fetch. Each file is counted by the runs that use it and
/// dropped with the last one's [`BlobLease`].
#[derive(Clone, Default)]
pub struct BlobStore {
    blobs: Arc<RwLock<HashMap<String, Held>>>,
}

/// A file and how many runs use it.
struct Held {
    content: Arc<Vec<u8>>,
    runs: usize,
}

/// One run's use of its bundle's files; dropping it releases them.
pub struct BlobLease {
    store: BlobStore,
    hashes: Vec<String>,
}

impl BlobStore {
    /// Keeps every file of a bundle for as long as the returned lease lives.
    pub fn add_bundle(&self, bundle: &Bundle) -> BlobLease {
        let mut blobs = self.blobs.write().unwrap_or_else(|e| e.into_inner());
        let mut hashes: Vec<String> = Vec::with_capacity(bundle.files.len());
        for file in bundle.files.values() {
            if hashes.contains(&file.sha256) {
                continue;
            }
            hashes.push(file.sha256.clone());
            blobs
                .entry(file.sha256.clone())
                .or_insert_with(|| Held {
                    content: file.content.clone(),
                    runs: 0,
                })
                .runs += 1;
        }
        record_bytes(&blobs);
        BlobLease {
            store: self.clone(),
            hashes,
        }
    }

    /// A file's content by hash.
    pub fn get(&self, sha256: &str) -> Option<Arc<Vec<u8>>> {
        let blobs = self.blobs.read().unwrap_or_else(|e| e.into_inner());
        blobs.get(sha256).map(|held| held.content.clone())
    }

    /// Files held, and their bytes.
    pub fn held(&self) -> (usize, usize) {
        let blobs = self.blobs.read().unwrap_or_else(|e| e.into_inner());
        (blobs.len(), bytes_of(&blobs))
    }
}

impl Drop for BlobLease {
    fn drop(&mut self) {
        let mut blobs = self.store.blobs.write().unwrap_or_else(|e| e.into_inner());
        for hash in &self.hashes {
            if let Some(held) = blobs.get_mut(hash) {
                held.runs -= 1;
                if held.runs == 0 {
                    blobs.remove(hash);
                }
            }
        }
        record_bytes(&blobs);
    }
}

fn bytes_of(blobs: &HashMap<String, Held>) -> usize {
    blobs.values().map(|h| h.content.len()).sum()
}

fn record_bytes(blobs: &HashMap<String, Held>) {
    metrics::gauge!(crate::metrics::BUNDLE_BYTES).set(bytes_of(blobs) as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_inside_the_bundle() {
        assert!(check_path("scripts/a.py").is_ok());
        assert!(check_path("./a.py").is_ok());
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "",
            ".",
            "./",
            "a/",
            "a\0b",
            "a\nb",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path(&"x".repeat(300)).is_err());
    }

    #[test]
    fn files_are_dropped_with_the_last_run_that_uses_them() {
        let graph = "nodes:\n  a: {kind: end, start: true}\n";
        let bundle = |extra: &str| {
            Bundle::new(
                "g.yaml".into(),
                vec![
                    ("g.yaml".to_owned(), graph.as_bytes().to_vec(), 0o644),
                    ("big.bin".to_owned(), extra.as_bytes().to_vec(), 0o644),
                ],
                1 << 20,
            )
            .unwrap()
        };
        let store = BlobStore::default();
        let first = store.add_bundle(&bundle("shared"));
        let second = store.add_bundle(&bundle("shared"));
        let other = store.add_bundle(&bundle("other"));
        assert_eq!(store.held().0, 3, "graph, shared file, other file");
        drop(first);
        assert_eq!(store.held().0, 3, "the second run still uses them");
        drop(second);
        assert_eq!(store.held().0, 2);
        drop(other);
        assert_eq!(store.held(), (0, 0));
    }

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
}
