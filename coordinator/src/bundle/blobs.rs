//! The bundle files of the runs a coordinator holds, kept in memory by
//! content hash for workers to fetch.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::Bundle;

/// The bundle files of the runs the coordinator holds, by content hash,
/// for workers to fetch. Each file is counted by the runs that use it and
/// dropped with the last one's [`BlobLease`].
#[derive(Clone, Default)]
pub struct BlobStore {
    blobs: Arc<RwLock<HashMap<String, Held>>>,
}

/// A file and how many runs of each namespace use it.
struct Held {
    content: Arc<Vec<u8>>,
    runs: HashMap<Arc<str>, usize>,
}

/// One run's use of its bundle's files; dropping it releases them.
pub struct BlobLease {
    store: BlobStore,
    namespace: Arc<str>,
    hashes: Vec<String>,
}

impl BlobStore {
    /// Keeps every file of a bundle, for the runs of `namespace`, for as
    /// long as the returned lease lives.
    pub fn add_bundle(&self, bundle: &Bundle, namespace: &str) -> BlobLease {
        let namespace: Arc<str> = namespace.into();
        let mut blobs = self.blobs.write().unwrap_or_else(|e| e.into_inner());
        let mut hashes: Vec<String> = Vec::with_capacity(bundle.files.len());
        for file in bundle.files.values() {
            if hashes.contains(&file.sha256) {
                continue;
            }
            hashes.push(file.sha256.clone());
            *blobs
                .entry(file.sha256.clone())
                .or_insert_with(|| Held {
                    content: file.content.clone(),
                    runs: HashMap::new(),
                })
                .runs
                .entry(namespace.clone())
                .or_default() += 1;
        }
        record_bytes(&blobs);
        BlobLease {
            store: self.clone(),
            namespace,
            hashes,
        }
    }

    /// A file's content by hash, for a caller that serves the namespaces
    /// `serves` accepts: a file only runs of other namespaces use is not
    /// there for it (a worker of one team cannot fetch another's scripts
    /// by their hash).
    pub fn get(&self, sha256: &str, serves: impl Fn(&str) -> bool) -> Option<Arc<Vec<u8>>> {
        let blobs = self.blobs.read().unwrap_or_else(|e| e.into_inner());
        blobs
            .get(sha256)
            .filter(|held| held.runs.keys().any(|namespace| serves(namespace)))
            .map(|held| held.content.clone())
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
                if let Some(count) = held.runs.get_mut(&self.namespace) {
                    *count -= 1;
                    if *count == 0 {
                        held.runs.remove(&self.namespace);
                    }
                }
                if held.runs.is_empty() {
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

    fn sha256_hex_of(text: &str) -> String {
        super::super::sha256_hex(text.as_bytes())
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
        let first = store.add_bundle(&bundle("shared"), "team-a");
        let second = store.add_bundle(&bundle("shared"), "team-a");
        let other = store.add_bundle(&bundle("other"), "team-b");
        assert_eq!(store.held().0, 3, "graph, shared file, other file");
        // A file is there for the workers of the namespaces that use it.
        let shared = sha256_hex_of("shared");
        let only = |allowed: &'static str| move |namespace: &str| namespace == allowed;
        assert!(store.get(&shared, only("team-a")).is_some());
        assert!(
            store.get(&shared, only("team-b")).is_none(),
            "team B's worker fetched team A's file"
        );
        assert!(store.get(&sha256_hex_of("other"), only("team-b")).is_some());
        drop(first);
        assert_eq!(store.held().0, 3, "the second run still uses them");
        drop(second);
        assert_eq!(store.held().0, 2);
        drop(other);
        assert_eq!(store.held(), (0, 0));
    }
}
