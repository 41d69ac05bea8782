//! The knowledge indexes a coordinator keeps for its workers (SPEC 17), as
//! `weft index list` and [`crate::Client::indexes`] show them.

use weft_proto::v1 as pb;

/// A knowledge base's index, kept by the coordinator for the workers of a
/// namespace: built once per content, fetched by the workers that serve
/// `rag` steps over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnowledgeIndex {
    /// The namespace whose runs use it.
    pub namespace: String,
    /// Its key: a hash of its files, chunking and embedding model.
    pub key: String,
    /// The knowledge base's name in the graph that built it.
    pub knowledge: String,
    /// Its source files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Its chunks.
    pub chunks: u64,
    /// The packed index's bytes.
    pub index_bytes: u64,
    /// The embedding model; `None` without embeddings.
    pub model: Option<String>,
    /// Embedding requests its build made.
    pub embedding_calls: u64,
    /// How its vectors are searched (`exact`, `approximate`); `None`
    /// without embeddings.
    pub vector_search: Option<String>,
    /// How long its build took, in milliseconds.
    pub build_ms: u64,
    /// The worker that built it.
    pub built_by: String,
    /// The run whose step built it.
    pub run_id: String,
    /// When it was built (Unix milliseconds).
    pub built_at_ms: u64,
    /// When a worker last fetched it (Unix milliseconds).
    pub used_at_ms: u64,
}

impl From<pb::IndexInfo> for KnowledgeIndex {
    fn from(info: pb::IndexInfo) -> Self {
        Self {
            namespace: info.namespace,
            key: info.key,
            knowledge: info.knowledge,
            files: info.files,
            bytes: info.bytes,
            chunks: info.chunks,
            index_bytes: info.index_bytes,
            model: (!info.model.is_empty()).then_some(info.model),
            embedding_calls: info.embedding_calls,
            vector_search: (!info.vector_search.is_empty()).then_some(info.vector_search),
            build_ms: info.build_ms,
            built_by: info.built_by,
            run_id: info.run_id,
            built_at_ms: info.built_at_ms,
            used_at_ms: info.used_at_ms,
        }
    }
}
