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
}
