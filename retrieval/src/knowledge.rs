//! A knowledge base ready to answer: its documents' chunks, their BM25
//! index, their embeddings when it has some, and the links between its
//! documents — and a retrieval over them, as a `rag` node asks for it.
//!
//! A retrieval ranks chunks by BM25 (`keyword`), by the cosine of their
//! embeddings and the query's (`vector`), or both fused by RRF (`hybrid`),
//! each ranking `2 × top_k` deep; the best `top_k` are the hits. Graph
//! search (`hops` > 0) then follows each hit with the chunks of the
//! documents linked to its own ([`crate::graph`]), adding at most `top_k`
//! passages in all, so a retrieval gives at most `2 × top_k`. The passages
//! are numbered from 1 in their final order, for `context` and `sources`.

use std::path::Path;

use serde_json::{Value, json};

use crate::chunk::{Chunk, Chunking, chunk};
use crate::document::Document;
use crate::fuse::reciprocal_rank_fusion;
use crate::graph::{Corpus, expand};
use crate::keyword::{KeywordError, KeywordIndex};
use crate::links::LinkGraph;
use crate::vectors::{VectorError, VectorSearch, Vectors};

/// How chunks are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// BM25 over their words.
    Keyword,
    /// The cosine of their embeddings and the query's.
    Vector,
    /// Both, fused by RRF.
    Hybrid,
}

/// How much deeper than `top_k` each ranking looks before fusion. Deeper
/// lets passages that are middling in both rankings outrank one that only
/// a single ranking puts first: on W9's labelled corpus recall@5 was 1.0
/// at 1 and 2 times `top_k`, 0.975 at 4 (`docs/benchmarks.md`).
pub const CANDIDATES_PER_HIT: usize = 2;

/// Why a knowledge base could not be built or searched.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    /// The keyword index failed.
    #[error(transparent)]
    Keyword(#[from] KeywordError),
    /// Vectors of the wrong length.
    #[error(transparent)]
    Vector(#[from] VectorError),
    /// Not one embedding per chunk.
    #[error("{got} embeddings for {chunks} chunks")]
    EmbeddingCount {
        /// The embeddings given.
        got: usize,
        /// The chunks.
        chunks: usize,
    },
    /// A ranking by vectors in a knowledge base without them.
    #[error("mode '{0}' needs embeddings, and this knowledge base has none")]
    NoEmbeddings(&'static str),
    /// A ranking by vectors without the query's.
    #[error("mode '{0}' needs the query's embedding")]
    NoQueryEmbedding(&'static str),
}

/// A knowledge base's chunks and what ranks them.
pub struct Knowledge {
    chunks: Vec<Chunk>,
    document_of: Vec<usize>,
    chunks_of: Vec<Vec<usize>>,
    links: LinkGraph,
    keyword: KeywordIndex,
    vectors: Option<Vectors>,
}

/// What a knowledge base is made of, borrowed.
pub(crate) struct Parts<'a> {
    pub chunks: &'a [Chunk],
    pub document_of: &'a [usize],
    pub chunks_of: &'a [Vec<usize>],
    pub links: &'a LinkGraph,
    pub vectors: Option<&'a Vectors>,
}

/// One retrieval.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The query's text.
    pub query: &'a str,
    /// The query's embedding (for `vector` and `hybrid`).
    pub query_vector: Option<&'a [f32]>,
    /// How chunks are ranked.
    pub mode: Mode,
    /// How many hits.
    pub top_k: usize,
    /// How many links deep graph search goes (0: none).
    pub hops: usize,
}

/// A chunk a retrieval gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// Its number, from 1, in the retrieval's order.
    pub n: usize,
    /// The chunk's place in the knowledge base.
    pub chunk: usize,
    /// Its score: BM25, cosine or RRF for a hit; for a chunk graph search
    /// brought in, the leading hit's halved per hop.
    pub score: f64,
    /// The hit whose links brought it in, if one did.
    pub via: Option<usize>,
}

impl Knowledge {
    /// `documents` chunked as `chunking` says, their links read, their
    /// chunks indexed (in `dir`, which must be empty, or in memory).
    pub fn build(
        documents: &[Document],
        chunking: &Chunking,
        dir: Option<&Path>,
    ) -> Result<Self, KnowledgeError> {
        let mut chunks = Vec::new();
        let mut document_of = Vec::new();
        let mut chunks_of = Vec::with_capacity(documents.len());
        for (number, document) in documents.iter().enumerate() {
            let own = chunk(document, chunking);
            chunks_of.push((chunks.len()..chunks.len() + own.len()).collect());
            document_of.extend(std::iter::repeat_n(number, own.len()));
            chunks.extend(own);
        }
        let keyword = KeywordIndex::build(&chunks, dir)?;
        Ok(Self {
            links: LinkGraph::of(documents),
            chunks,
            document_of,
            chunks_of,
            keyword,
            vectors: None,
        })
    }

    /// The same, with one embedding per chunk, in the chunks' order,
    /// searched as `search` says or as their size decides
    /// ([`VectorSearch::for_size`]). An approximate index is built here:
    /// call it off any async runtime.
    pub fn with_vectors(
        self,
        vectors: Vec<Vec<f32>>,
        search: Option<VectorSearch>,
    ) -> Result<Self, KnowledgeError> {
        let vectors = Vectors::new(vectors, search)?;
        self.with_indexed_vectors(vectors)
    }

    /// The same, with embeddings already indexed.
    pub(crate) fn with_indexed_vectors(mut self, vectors: Vectors) -> Result<Self, KnowledgeError> {
        if vectors.len() != self.chunks.len() {
            return Err(KnowledgeError::EmbeddingCount {
                got: vectors.len(),
                chunks: self.chunks.len(),
            });
        }
        self.vectors = Some(vectors);
        Ok(self)
    }

    /// How its embeddings are searched, when it has some.
    pub fn vector_search(&self) -> Option<VectorSearch> {
        self.vectors.as_ref().map(Vectors::search)
    }

    /// Its chunks, in order.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// What it is made of, for packing.
    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts {
            chunks: &self.chunks,
            document_of: &self.document_of,
            chunks_of: &self.chunks_of,
            links: &self.links,
            vectors: self.vectors.as_ref(),
        }
    }

    /// A knowledge base put back together from what it was made of.
    pub(crate) fn from_parts(
        chunks: Vec<Chunk>,
        document_of: Vec<usize>,
        chunks_of: Vec<Vec<usize>>,
        links: LinkGraph,
        keyword: KeywordIndex,
    ) -> Self {
        Self {
            chunks,
            document_of,
            chunks_of,
            links,
            keyword,
            vectors: None,
        }
    }

    /// The passages `request` retrieves, best first.
    pub fn retrieve(&self, request: &Request<'_>) -> Result<Vec<Passage>, KnowledgeError> {
        if request.top_k == 0 {
            return Ok(Vec::new());
        }
        let depth = request.top_k * CANDIDATES_PER_HIT;
        let by_words = || -> Result<Vec<(usize, f64)>, KnowledgeError> {
            Ok(self
                .keyword
                .search(request.query, depth)?
                .into_iter()
                .map(|(chunk, score)| (chunk, f64::from(score)))
                .collect())
        };
        let by_vectors = |mode: &'static str| -> Result<Vec<(usize, f64)>, KnowledgeError> {
            let Some(vectors) = &self.vectors else {
                return Err(KnowledgeError::NoEmbeddings(mode));
            };
            let Some(query) = request.query_vector else {
                return Err(KnowledgeError::NoQueryEmbedding(mode));
            };
            Ok(vectors
                .nearest(query, depth)?
                .into_iter()
                .map(|(chunk, score)| (chunk, f64::from(score)))
                .collect())
        };
        let mut hits = match request.mode {
            Mode::Keyword => by_words()?,
            Mode::Vector => by_vectors("vector")?,
            Mode::Hybrid => {
                let rankings = [by_words()?, by_vectors("hybrid")?]
                    .map(|ranking| ranking.into_iter().map(|(chunk, _)| chunk).collect());
                reciprocal_rank_fusion(&rankings)
            }
        };
        hits.truncate(request.top_k);
        let corpus = Corpus {
            document_of: &self.document_of,
            chunks_of: &self.chunks_of,
            links: &self.links,
        };
        let mut added = 0;
        let placed = expand(&hits, &corpus, request.hops)
            .into_iter()
            .filter(|placed| {
                if placed.via.is_none() {
                    return true;
                }
                added += 1;
                added <= request.top_k
            });
        Ok(placed
            .enumerate()
            .map(|(index, placed)| Passage {
                n: index + 1,
                chunk: placed.chunk,
                score: placed.score,
                via: placed.via,
            })
            .collect())
    }

    /// `passages` as numbered text for a prompt: `[n] source § heading`
    /// (without `§` for a chunk under no heading), then the chunk's text.
    pub fn context(&self, passages: &[Passage]) -> String {
        context_of(&self.cite(passages))
    }

    /// `passages` as a list of `{n, source, heading, chunk, score, text}`,
    /// `chunk` being the chunk's place in its document.
    pub fn sources(&self, passages: &[Passage]) -> Value {
        sources_of(&self.cite(passages))
    }

    /// `passages`, each with its chunk.
    pub fn cite<'a>(&'a self, passages: &[Passage]) -> Vec<Cited<'a>> {
        passages
            .iter()
            .map(|passage| Cited {
                chunk: &self.chunks[passage.chunk],
                passage: passage.clone(),
            })
            .collect()
    }
}

/// A passage with its chunk: a retrieval over several knowledge bases (or
/// tables) mixes them. Its `passage.chunk` names the chunk among its own
/// retrieval's.
#[derive(Clone)]
pub struct Cited<'a> {
    /// The chunk.
    pub chunk: &'a Chunk,
    /// The passage.
    pub passage: Passage,
}

/// The passages of several retrievals (one per knowledge base) fused by
/// RRF over their ranks, the best `top_k` kept and numbered from 1; one
/// retrieval is kept as it is.
pub fn fuse_retrievals<'a>(retrievals: Vec<Vec<Cited<'a>>>, top_k: usize) -> Vec<Cited<'a>> {
    if retrievals.len() == 1 {
        // One retrieval is already ranked, graph search's passages in place.
        return retrievals.into_iter().next().unwrap_or_default();
    }
    let rankings: Vec<Vec<(usize, usize)>> = retrievals
        .iter()
        .enumerate()
        .map(|(base, cited)| cited.iter().map(|c| (base, c.passage.chunk)).collect())
        .collect();
    reciprocal_rank_fusion(&rankings)
        .into_iter()
        .take(top_k)
        .enumerate()
        .filter_map(|(index, ((base, chunk), score))| {
            let cited = retrievals[base].iter().find(|c| c.passage.chunk == chunk)?;
            Some(Cited {
                chunk: cited.chunk,
                passage: Passage {
                    n: index + 1,
                    chunk,
                    score,
                    via: cited.passage.via,
                },
            })
        })
        .collect()
}

/// `cited` as numbered text for a prompt: `[n] source § heading` (without
/// `§` for a chunk under no heading), then the chunk's text.
pub fn context_of(cited: &[Cited<'_>]) -> String {
    let mut text = String::new();
    for one in cited {
        let chunk = one.chunk;
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&format!("[{}] {}", one.passage.n, chunk.source));
        if !chunk.heading.is_empty() {
            text.push_str(&format!(" § {}", chunk.heading));
        }
        text.push('\n');
        text.push_str(&chunk.text);
    }
    text
}

/// `cited` as a list of `{n, source, heading, chunk, score, text}`,
/// `chunk` being the chunk's place in its document.
pub fn sources_of(cited: &[Cited<'_>]) -> Value {
    Value::Array(
        cited
            .iter()
            .map(|one| {
                let chunk = one.chunk;
                json!({
                    "n": one.passage.n,
                    "source": chunk.source,
                    "heading": chunk.heading,
                    "chunk": chunk.index,
                    "score": one.passage.score,
                    "text": chunk.text,
                })
            })
            .collect(),
    )
}
