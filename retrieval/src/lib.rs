//! Weft's retrieval core (SPEC 17), pure and synchronous: what a `rag`
//! node's retrieval does with a knowledge base's files, apart from the
//! worker that will run it and the index library that will rank words.
//!
//! - [`document`]: a knowledge base's files read as documents — a Markdown
//!   or text file is one, a JSON Lines file one per line (`text`, with
//!   `source` and `links`); a malformed line names its file and line.
//! - [`chunk`]: documents cut into passages on headings first, then on
//!   paragraphs, packed up to a size in characters, consecutive passages of
//!   one section sharing an overlap.
//! - [`keyword`]: chunks ranked by BM25 over their words' stems, through
//!   tantivy, in memory or in a directory.
//! - [`knowledge`]: a knowledge base built from its documents, and a
//!   retrieval over it (`keyword`, `vector` or `hybrid`, then graph
//!   search), with the passages as `context` and `sources`.
//! - [`pack`]: a built knowledge base as one blob and back, and the key
//!   that names an index by its files, chunking and embedding model.
//! - [`links`]: the documents a Markdown text links to (`[text](path)`,
//!   `[[wiki]]`), resolved among a knowledge base's documents, both ways.
//! - [`fuse`]: rankings fused by reciprocal rank fusion.
//! - [`vectors`]: cosine search over embeddings, exact or through an HNSW
//!   graph for large corpora.
//! - [`graph`]: graph search — the best hits joined by the passages of the
//!   documents they link to and that link to them, some hops deep, each
//!   ranked below the hit that led to it.
//!
//! Nothing here calls a model, talks to a network or keeps time (a keyword
//! index may live in a directory it is given): the worker hands it texts
//! and vectors and takes passages back, so every rule is tested here on
//! its own.

pub mod chunk;
pub mod document;
pub mod fuse;
pub mod graph;
pub mod keyword;
pub mod knowledge;
pub mod links;
pub mod pack;
pub mod vectors;

pub use chunk::{Chunk, Chunking, ChunkingError};
pub use document::{Document, DocumentError};
pub use knowledge::{
    Cited, Knowledge, KnowledgeError, Mode, Passage, Request, context_of, fuse_retrievals,
    sources_of,
};
