//! A worker's knowledge bases, indexed once per content (SPEC 17).
//!
//! An index is named by `weft_retrieval::pack::index_key`: the sources'
//! paths and hashes, the chunking and the embedding model. The first step
//! that needs one builds it — the files read from the bundle cache,
//! chunked, ranked by a keyword index, embedded through the provider when
//! the knowledge base has embeddings — and keeps it packed on disk
//! (`knowledge/KEY.kb` in the work directory) and open in memory. Steps
//! that need it meanwhile wait for that build rather than start their
//! own; later ones find it open, or open it from disk (after a restart,
//! in a configured work directory). A build that fails leaves nothing
//! behind, and the next step tries again.
//!
//! Workers share indexes through the coordinator
//! (`crate::connection::IndexShelf`): a worker that lacks one asks the
//! coordinator first, and builds it only when told to — then gives it
//! back, so that across the cluster each content is built once and
//! fetched by the other workers. A coordinator that cannot share (or an
//! index too large for it to keep) leaves the worker to build alone.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use weft_retrieval::pack::index_key;
use weft_retrieval::vectors::VectorSearch;
use weft_retrieval::{Chunking, Knowledge};

use crate::blobs::BlobCache;
use crate::connection::{Builder, IndexShelf, ShareError, Shared};
use crate::llm::Providers;
use crate::llm::embeddings::embed;
use crate::task::{BlobRef, Failure, FailureKind};

/// Indexes kept open at once; the least recently used is closed first
/// (its packed copy stays on disk).
const KEPT_OPEN: usize = 16;

/// A knowledge base as a `rag` step's configuration gives it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Base {
    /// Its name in the graph.
    pub name: String,
    /// Its sources' globs, relative to the graph's directory.
    pub sources: Vec<String>,
    /// `{size, overlap}`.
    pub chunk: ChunkSize,
    /// `{model, provider}`, when it has embeddings.
    pub embeddings: Option<EmbeddingModel>,
    /// The table it is kept in, instead of `sources`.
    #[serde(default)]
    pub store: Option<super::pgvector::PgStore>,
}

/// A knowledge base's chunking.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct ChunkSize {
    pub size: usize,
    pub overlap: usize,
}

/// A knowledge base's embedding model.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EmbeddingModel {
    pub model: String,
    pub provider: Option<String>,
    /// How the index's vectors are searched, when the graph says.
    #[serde(default)]
    pub search: Option<VectorSearch>,
}

/// The knowledge bases this worker has opened.
pub struct Indexes {
    dir: PathBuf,
    open: std::sync::Mutex<Open>,
    /// Names each opened copy's directory apart.
    opened: AtomicU64,
}

#[derive(Default)]
struct Open {
    cells: HashMap<String, Arc<OnceCell<Arc<Knowledge>>>>,
    /// Keys, least recently used first.
    order: Vec<String>,
    /// The directories each key's copies were opened in, removed when the
    /// key is closed (steps still searching it keep their mapped files:
    /// removing a file does not take it from those that hold it open).
    dirs: HashMap<String, Vec<PathBuf>>,
}

/// What a step needs opened: a knowledge base over its sources in the
/// bundle (each path relative to the graph's directory, and the file), at
/// most `max_bytes` of them, for a step of `run_id` due by `deadline`.
pub(crate) struct Need<'a> {
    pub base: &'a Base,
    pub files: &'a [(String, BlobRef)],
    pub max_bytes: u64,
    pub run_id: &'a str,
    pub deadline: Instant,
}

/// Gives the coordinator the index this worker was asked to build; a
/// refusal (too large to keep, say) leaves it on this worker alone.
async fn share(builder: Box<Builder>, blob: &[u8], note: &Value, knowledge: &str) {
    if blob.len() as u64 > builder.max_bytes() {
        let why = format!(
            "the index packs to {} bytes, more than the {} the coordinator keeps (max_index_bytes)",
            blob.len(),
            builder.max_bytes()
        );
        tracing::warn!(%knowledge, "{why}; it stays on this worker");
        builder.failed(&why).await;
        return;
    }
    if let Err(error) = builder.give(blob, note).await {
        tracing::warn!(%knowledge, %error, "the coordinator did not keep the index; it stays on this worker");
    }
}

/// A knowledge base ready to search, and the `index_built` note when this
/// step built it.
pub(crate) struct Opened {
    pub knowledge: Arc<Knowledge>,
    pub built: Option<Value>,
}

impl Indexes {
    /// Indexes kept under `dir` (the work directory's `knowledge/`).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            open: std::sync::Mutex::default(),
            opened: AtomicU64::new(0),
        }
    }

    /// `base` over `files` (its sources in the bundle: the path relative
    /// to the graph's directory, and the file), open: from this worker's
    /// disk, else from the coordinator (`shelf`), else built here — and
    /// then given to the coordinator for the other workers, when it asked
    /// this worker to build it.
    pub(crate) async fn open(
        &self,
        need: Need<'_>,
        blobs: &BlobCache,
        providers: &Providers,
        shelf: &IndexShelf,
    ) -> Result<Opened, Failure> {
        let Need {
            base,
            files,
            run_id,
            deadline,
            ..
        } = need;
        let chunking = Chunking::new(base.chunk.size, base.chunk.overlap).map_err(|e| {
            Failure::new(
                FailureKind::InvalidTask,
                format!("knowledge '{}': {e}", base.name),
            )
        })?;
        let hashed: Vec<(&str, &str)> = files
            .iter()
            .map(|(path, file)| (path.as_str(), file.sha256.as_str()))
            .collect();
        let model = base.embeddings.as_ref().map(|e| e.model.as_str());
        let search = base.embeddings.as_ref().and_then(|e| e.search);
        let key = index_key(&hashed, &chunking, model, search);
        let cell = self.cell(&key);
        let mut built = None;
        let knowledge = cell
            .get_or_try_init(|| async {
                if let Some(knowledge) = self.unpack(&key).await? {
                    return Ok(Arc::new(knowledge));
                }
                let builder = match shelf.want(run_id, &key, &base.name, deadline).await {
                    Ok(Shared::Found(blob)) => {
                        self.store_packed(&key, &blob).await?;
                        if let Some(knowledge) = self.unpack(&key).await? {
                            return Ok(Arc::new(knowledge));
                        }
                        None
                    }
                    Ok(Shared::Build(builder)) => Some(builder),
                    Err(ShareError::Waited(builder)) => {
                        return Err(Failure::new(
                            FailureKind::Timeout,
                            format!(
                                "knowledge '{}': worker '{builder}' was still building its index when the step's time ran out",
                                base.name
                            ),
                        ));
                    }
                    Err(error) => {
                        tracing::warn!(knowledge = %base.name, %error, "the coordinator does not share this index; building it here");
                        None
                    }
                };
                let built_here = self.build(&need, (&key, chunking), blobs, providers).await;
                let (knowledge, blob, note) = match built_here {
                    Ok(done) => done,
                    Err(failure) => {
                        if let Some(builder) = builder {
                            builder.failed(&failure.message).await;
                        }
                        return Err(failure);
                    }
                };
                if let Some(builder) = builder {
                    share(builder, &blob, &note, &base.name).await;
                }
                built = Some(note);
                Ok::<_, Failure>(Arc::new(knowledge))
            })
            .await?
            .clone();
        Ok(Opened { knowledge, built })
    }

    /// The cell that holds `key`'s index once it is open.
    fn cell(&self, key: &str) -> Arc<OnceCell<Arc<Knowledge>>> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(cell) = open.cells.get(key).cloned() {
            open.order.retain(|k| k != key);
            open.order.push(key.to_owned());
            return cell;
        }
        if open.order.len() >= KEPT_OPEN {
            let oldest = open.order.remove(0);
            open.cells.remove(&oldest);
            for dir in open.dirs.remove(&oldest).unwrap_or_default() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        open.order.push(key.to_owned());
        open.cells.entry(key.to_owned()).or_default().clone()
    }

    /// `key`'s index from its packed copy on disk, when there is one.
    async fn unpack(&self, key: &str) -> Result<Option<Knowledge>, Failure> {
        let packed = self.dir.join(format!("{key}.kb"));
        let blob = match tokio::fs::read(&packed).await {
            Ok(blob) => blob,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Failure::io("cannot read a knowledge index", e)),
        };
        let dir = self.fresh_dir(key).await?;
        let unpacked = tokio::task::spawn_blocking(move || Knowledge::unpack(&blob, &dir)).await;
        match unpacked {
            Ok(Ok(knowledge)) => Ok(Some(knowledge)),
            // A copy that does not unpack is built again.
            Ok(Err(error)) => {
                tracing::warn!(%key, %error, "a packed knowledge index does not open; building it again");
                let _ = tokio::fs::remove_file(&packed).await;
                Ok(None)
            }
            Err(join) => Err(Failure::new(FailureKind::WorkerError, join.to_string())),
        }
    }

    /// Builds the index `key` of what `need` names, cut by `chunking`:
    /// reads (at most `max_bytes`), chunks, indexes, embeds, packs; returns
    /// it open, packed, and its `index_built` note.
    async fn build(
        &self,
        need: &Need<'_>,
        (key, chunking): (&str, Chunking),
        blobs: &BlobCache,
        providers: &Providers,
    ) -> Result<(Knowledge, Vec<u8>, Value), Failure> {
        let Need {
            base,
            files,
            max_bytes,
            deadline,
            ..
        } = *need;
        let started = Instant::now();
        let mut contents = Vec::with_capacity(files.len());
        let mut bytes = 0u64;
        for (path, file) in files {
            let content = blobs.content(file).await?;
            bytes += content.len() as u64;
            if bytes > max_bytes {
                return Err(Failure::new(
                    FailureKind::InvalidTask,
                    format!(
                        "knowledge '{}': its sources hold more than {max_bytes} bytes (max_knowledge_bytes), '{path}' among them",
                        base.name
                    ),
                ));
            }
            contents.push((path.clone(), content));
        }
        let dir = self.fresh_dir(key).await?;
        let name = base.name.clone();
        let index_dir = dir.clone();
        let knowledge = tokio::task::spawn_blocking(move || {
            let mut documents = Vec::new();
            for (path, content) in &contents {
                documents.extend(weft_retrieval::document::read(path, content).map_err(|e| {
                    Failure::new(FailureKind::InvalidTask, format!("knowledge '{name}': {e}"))
                })?);
            }
            Knowledge::build(&documents, &chunking, Some(&index_dir)).map_err(|e| {
                Failure::new(
                    FailureKind::WorkerError,
                    format!("knowledge '{name}': cannot build its index: {e}"),
                )
            })
        })
        .await
        .map_err(|join| Failure::new(FailureKind::WorkerError, join.to_string()))??;
        let chunks = knowledge.chunks().len();
        let mut embedding_calls = 0;
        let knowledge = match &base.embeddings {
            None => knowledge,
            Some(embeddings) => {
                let provider = providers
                    .get(embeddings.provider.as_deref())
                    .map_err(|e| Failure::new(FailureKind::UnsupportedKind, e.to_string()))?;
                let texts: Vec<String> =
                    knowledge.chunks().iter().map(|c| c.text.clone()).collect();
                let vectors = embed(provider, &embeddings.model, &texts, deadline)
                    .await
                    .map_err(|f| f.prefixed(&format!("knowledge '{}': embeddings: ", base.name)))?;
                embedding_calls = vectors.requests;
                let (name, search) = (base.name.clone(), embeddings.search);
                // An approximate index is built here, on every core.
                tokio::task::spawn_blocking(move || {
                    knowledge
                        .with_vectors(vectors.vectors, search)
                        .map_err(|e| {
                            Failure::new(
                                FailureKind::ModelError,
                                format!("knowledge '{name}': embeddings: {e}"),
                            )
                        })
                })
                .await
                .map_err(|join| Failure::new(FailureKind::WorkerError, join.to_string()))??
            }
        };
        // Packing copies every chunk, embedding and index file.
        let (knowledge, blob) = tokio::task::spawn_blocking(move || {
            let blob = knowledge
                .pack(&dir)
                .map_err(|e| Failure::new(FailureKind::WorkerError, e.to_string()))?;
            Ok::<_, Failure>((knowledge, blob))
        })
        .await
        .map_err(|join| Failure::new(FailureKind::WorkerError, join.to_string()))??;
        self.store_packed(key, &blob).await?;
        let note = json!({
            "type": "index_built",
            "knowledge": base.name,
            "key": key,
            "files": files.len(),
            "bytes": bytes,
            "chunks": chunks,
            "index_bytes": blob.len(),
            "model": base.embeddings.as_ref().map(|e| e.model.as_str()),
            "vector_search": knowledge.vector_search().map(VectorSearch::as_str),
            "embedding_calls": embedding_calls,
            "latency_ms": started.elapsed().as_millis() as u64,
        });
        Ok((knowledge, blob, note))
    }

    /// Keeps a packed index as `KEY.kb`, written whole or not at all.
    async fn store_packed(&self, key: &str, blob: &[u8]) -> Result<(), Failure> {
        let partial = self.dir.join(format!("{key}.kb.partial"));
        crate::blobs::write_private(&partial, blob)
            .await
            .map_err(|e| Failure::io("cannot write a knowledge index", e))?;
        tokio::fs::rename(&partial, self.dir.join(format!("{key}.kb")))
            .await
            .map_err(|e| Failure::io("cannot write a knowledge index", e))
    }

    /// A new, empty directory to open a copy of `key`'s index in.
    async fn fresh_dir(&self, key: &str) -> Result<PathBuf, Failure> {
        let number = self.opened.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .dir
            .join("open")
            .join(format!("{key}-{}-{number}", std::process::id()));
        let _ = tokio::fs::remove_dir_all(&dir).await;
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| Failure::io("cannot make a knowledge index directory", e))?;
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .dirs
            .entry(key.to_owned())
            .or_default()
            .push(dir.clone());
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The graph crate restates the retrieval core's chunking rules, so
    /// that validation refuses what a build would.
    #[test]
    fn validation_and_the_core_agree_on_chunking() {
        for size in [0, 8, 15, 16, 17, 100, 800, 100_000] {
            for overlap in [0, 7, 8, 49, 50, 120, 399, 400, 50_000] {
                assert_eq!(
                    weft_graph::knowledge::check_chunking(size, overlap).is_ok(),
                    Chunking::new(size, overlap).is_ok(),
                    "size {size}, overlap {overlap}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_closed_index_leaves_no_copy_behind() {
        let root = std::env::temp_dir().join(format!("weft-indexes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let indexes = Indexes::new(root.clone());
        let mut dirs = Vec::new();
        for n in 0..=KEPT_OPEN {
            let key = format!("k{n}");
            indexes.cell(&key);
            dirs.push(indexes.fresh_dir(&key).await.unwrap());
        }
        assert!(!dirs[0].exists(), "the least recently used is closed");
        assert!(dirs[1..].iter().all(|dir| dir.exists()));
        // Using an index keeps it: k1 is used again, so k2 goes next.
        indexes.cell("k1");
        indexes.cell("another");
        assert!(dirs[1].exists() && !dirs[2].exists());
        std::fs::remove_dir_all(root).unwrap();
    }
}
