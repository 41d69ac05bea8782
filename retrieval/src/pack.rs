//! A built knowledge base as one blob, and back: what a worker that built
//! an index hands the coordinator to keep, and what the workers that serve
//! `rag` steps fetch and unpack into their on-disk cache.
//!
//! The blob is `WEFTKB1\n`, a JSON header line (the chunks, the documents'
//! chunks, the links, the embeddings' count and length, the index files'
//! names and sizes), the embeddings as little-endian `f32`s, then the
//! keyword index's files one after another. A knowledge base whose
//! embeddings are searched approximately starts `WEFTKB2\n` instead (so
//! that a reader that knows only the first kind refuses it), its header
//! gives the size of its HNSW graph, and the graph (bincode, embeddings
//! included) takes the embeddings' place. Unpacking checks every size
//! against what is there, so a torn or foreign blob is refused, named.
//!
//! [`index_key`] names an index by what it is built from: the files'
//! paths and contents (their SHA-256), the chunking, the embedding model
//! and how its vectors are searched when the knowledge base says. Two runs
//! over the same files share one index.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::chunk::{Chunk, Chunking};
use crate::keyword::KeywordIndex;
use crate::knowledge::{Knowledge, KnowledgeError};
use crate::links::LinkGraph;
use crate::vectors::{VectorSearch, Vectors};

const MAGIC: &[u8] = b"WEFTKB1\n";
/// A blob whose embeddings are searched through an HNSW graph.
const MAGIC_APPROXIMATE: &[u8] = b"WEFTKB2\n";

/// Why a blob could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// Reading or writing the index's directory failed.
    #[error("knowledge index files: {0}")]
    Io(#[from] std::io::Error),
    /// The blob is not a packed knowledge base, or is cut short.
    #[error("not a packed knowledge index: {0}")]
    Malformed(String),
    /// The unpacked index could not be opened.
    #[error(transparent)]
    Knowledge(#[from] KnowledgeError),
}

#[derive(Serialize, Deserialize)]
struct Header {
    chunks: Vec<Chunk>,
    document_of: Vec<usize>,
    chunks_of: Vec<Vec<usize>>,
    links: LinkGraph,
    /// (count, length) of the embeddings, if any.
    vectors: Option<(usize, usize)>,
    /// The bytes of their HNSW graph, when they are searched through one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    graph: Option<u64>,
    /// The keyword index's files: (name, bytes).
    files: Vec<(String, u64)>,
}

/// The name of the index of `files` (their paths in the bundle and the
/// SHA-256 of their contents) cut by `chunking`, embedded by `model`
/// (`None`: no embeddings) and searched as `search` says (`None`: as
/// their size decides): hex SHA-256.
pub fn index_key(
    files: &[(&str, &str)],
    chunking: &Chunking,
    model: Option<&str>,
    search: Option<VectorSearch>,
) -> String {
    let mut sorted = files.to_vec();
    sorted.sort();
    let mut hash = Sha256::new();
    hash.update(MAGIC);
    for (path, sha256) in sorted {
        hash.update(format!("{}\0{path}\0{sha256}\0", path.len()));
    }
    hash.update(format!(
        "chunk {} {}\0",
        chunking.size(),
        chunking.overlap()
    ));
    hash.update(format!("embeddings {}\0", model.unwrap_or("")));
    // Named only when a knowledge base says, so that indexes keyed
    // before the choice existed keep their names.
    if let Some(search) = search {
        hash.update(format!("search {}\0", search.as_str()));
    }
    hex::encode(hash.finalize())
}

impl Knowledge {
    /// This knowledge base as one blob; `dir` is where its keyword index
    /// was built.
    pub fn pack(&self, dir: &Path) -> Result<Vec<u8>, PackError> {
        let mut names: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            // tantivy's lock files hold nothing an index needs.
            .filter(|name| !name.ends_with(".lock"))
            .collect();
        names.sort();
        let mut files = Vec::with_capacity(names.len());
        for name in &names {
            files.push((name.clone(), std::fs::metadata(dir.join(name))?.len()));
        }
        let parts = self.parts();
        let mut encoded = Vec::new();
        if let Some(vectors) = parts.vectors {
            vectors
                .encode(&mut encoded)
                .map_err(|e| PackError::Malformed(e.to_string()))?;
        }
        let approximate = parts
            .vectors
            .is_some_and(|v| v.search() == VectorSearch::Approximate);
        let header = Header {
            chunks: parts.chunks.to_vec(),
            document_of: parts.document_of.to_vec(),
            chunks_of: parts.chunks_of.to_vec(),
            links: parts.links.clone(),
            vectors: parts.vectors.map(|v| (v.len(), v.dimensions())),
            graph: approximate.then_some(encoded.len() as u64),
            files,
        };
        let mut blob = if approximate {
            MAGIC_APPROXIMATE
        } else {
            MAGIC
        }
        .to_vec();
        serde_json::to_writer(&mut blob, &header)
            .map_err(|e| PackError::Malformed(e.to_string()))?;
        blob.push(b'\n');
        blob.append(&mut encoded);
        for name in &names {
            blob.extend_from_slice(&std::fs::read(dir.join(name))?);
        }
        Ok(blob)
    }

    /// The knowledge base packed in `blob`, its index files written to
    /// `dir` (which must be empty) and opened from there.
    pub fn unpack(blob: &[u8], dir: &Path) -> Result<Self, PackError> {
        let malformed = |why: &str| PackError::Malformed(why.to_owned());
        let (header, vectors, mut rest) = read_head(blob)?;
        let mut take = |bytes: usize, what: &str| -> Result<&[u8], PackError> {
            if rest.len() < bytes {
                return Err(PackError::Malformed(format!("cut short in {what}")));
            }
            let (taken, left) = rest.split_at(bytes);
            rest = left;
            Ok(taken)
        };
        for (name, size) in &header.files {
            // A file of the index's own directory (tantivy's `.managed.json`
            // among them), never a path out of it.
            if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
                return Err(PackError::Malformed(format!("a file named '{name}'")));
            }
            let size = usize::try_from(*size).map_err(|_| malformed("a file too large"))?;
            std::fs::write(dir.join(name), take(size, name)?)?;
        }
        if !rest.is_empty() {
            return Err(malformed("bytes after the last file"));
        }
        let keyword = KeywordIndex::open(dir).map_err(KnowledgeError::from)?;
        let knowledge = Self::from_parts(
            header.chunks,
            header.document_of,
            header.chunks_of,
            header.links,
            keyword,
        );
        Ok(match vectors {
            Some(vectors) => knowledge.with_indexed_vectors(vectors)?,
            None => knowledge,
        })
    }
}

/// A packed index's header, its embeddings, and the bytes after them
/// (the keyword index's files).
fn read_head(blob: &[u8]) -> Result<(Header, Option<Vectors>, &[u8]), PackError> {
    let malformed = |why: &str| PackError::Malformed(why.to_owned());
    let (rest, approximate) = match blob.strip_prefix(MAGIC) {
        Some(rest) => (rest, false),
        None => (
            blob.strip_prefix(MAGIC_APPROXIMATE)
                .ok_or_else(|| malformed("no header"))?,
            true,
        ),
    };
    let end = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| malformed("no header"))?;
    let header: Header = serde_json::from_slice(&rest[..end])
        .map_err(|e| PackError::Malformed(format!("header: {e}")))?;
    let rest = &rest[end + 1..];
    let Some((count, length)) = header.vectors else {
        return Ok((header, None, rest));
    };
    let bytes = match (approximate, header.graph) {
        (false, None) => count.checked_mul(length).and_then(|n| n.checked_mul(4)),
        (true, Some(bytes)) => usize::try_from(bytes).ok(),
        _ => return Err(malformed("the header's graph does not match its kind")),
    }
    .ok_or_else(|| malformed("embeddings too large"))?;
    if rest.len() < bytes {
        return Err(malformed("cut short in the embeddings"));
    }
    let (raw, rest) = rest.split_at(bytes);
    let vectors = if approximate {
        Vectors::decode_approximate(raw, count, length)
            .map_err(|e| PackError::Malformed(e.to_string()))?
    } else {
        Vectors::decode_exact(raw, count, length)
    };
    Ok((header, Some(vectors), rest))
}

/// A packed index as rows of a table: what `weft index push` loads.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows {
    /// Every chunk, in order.
    pub chunks: Vec<Chunk>,
    /// For each chunk, the sources of the documents its own is linked
    /// with (either way).
    pub links: Vec<Vec<String>>,
    /// Each chunk's embedding, when the index has them.
    pub vectors: Option<Vec<Vec<f32>>>,
}

/// The chunks, links and embeddings packed in `blob`, read without
/// opening its keyword index.
pub fn rows(blob: &[u8]) -> Result<Rows, PackError> {
    let (header, vectors, _) = read_head(blob)?;
    let source_of = |document: usize| -> Option<String> {
        let first = *header.chunks_of.get(document)?.first()?;
        Some(header.chunks.get(first)?.source.clone())
    };
    let links = header
        .document_of
        .iter()
        .map(|&document| {
            header
                .links
                .neighbours(document)
                .iter()
                .filter_map(|&other| source_of(other))
                .collect()
        })
        .collect();
    if let Some(vectors) = &vectors
        && vectors.len() != header.chunks.len()
    {
        return Err(PackError::Malformed(format!(
            "{} embeddings for {} chunks",
            vectors.len(),
            header.chunks.len()
        )));
    }
    Ok(Rows {
        chunks: header.chunks,
        links,
        vectors: vectors.map(Vectors::into_order),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::read;
    use crate::knowledge::{Mode, Request};

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-pack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_packed_knowledge_base_answers_the_same_once_unpacked() {
        packed_and_unpacked(VectorSearch::Exact, MAGIC);
    }

    #[test]
    fn a_packed_approximate_index_answers_the_same_once_unpacked() {
        packed_and_unpacked(VectorSearch::Approximate, MAGIC_APPROXIMATE);
    }

    fn packed_and_unpacked(search: VectorSearch, magic: &[u8]) {
        let dir = |name: &str| dir(&format!("{name}-{}", search.as_str()));
        let mut documents = read(
            "a.md",
            b"# Tea\n\nGreen tea is steeped at 80 degrees. See [coffee](b.md).\n",
        )
        .unwrap();
        documents.extend(read("b.md", b"# Coffee\n\nEspresso needs fine grounds.\n").unwrap());
        let built_in = dir("built");
        let knowledge = Knowledge::build(&documents, &Chunking::default(), Some(&built_in))
            .unwrap()
            .with_vectors(vec![vec![1.0, 0.0], vec![0.0, 1.0]], Some(search))
            .unwrap();
        let blob = knowledge.pack(&built_in).unwrap();
        assert!(blob.starts_with(magic));
        let unpacked_in = dir("unpacked");
        let unpacked = Knowledge::unpack(&blob, &unpacked_in).unwrap();
        assert_eq!(unpacked.chunks(), knowledge.chunks());
        assert_eq!(unpacked.vector_search(), Some(search));
        let vector = [0.1, 1.0];
        for mode in [Mode::Keyword, Mode::Vector, Mode::Hybrid] {
            let request = Request {
                query: "green tea temperature",
                query_vector: Some(&vector),
                mode,
                top_k: 2,
                hops: 1,
            };
            assert_eq!(
                unpacked.retrieve(&request).unwrap(),
                knowledge.retrieve(&request).unwrap(),
                "{mode:?}"
            );
        }
        // As rows of a table: each chunk, its document's links both ways,
        // its embedding.
        let table = rows(&blob).unwrap();
        assert_eq!(table.chunks, knowledge.chunks());
        assert_eq!(
            table.links,
            vec![vec!["b.md".to_owned()], vec!["a.md".to_owned()]]
        );
        assert_eq!(table.vectors, Some(vec![vec![1.0, 0.0], vec![0.0, 1.0]]));
        // A blob cut anywhere is refused, named.
        for cut in [3, blob.len() / 2, blob.len() - 1] {
            let error = Knowledge::unpack(&blob[..cut], &dir("cut"))
                .err()
                .expect("refused");
            assert!(
                error
                    .to_string()
                    .starts_with("not a packed knowledge index"),
                "{error}"
            );
        }
        // A file named out of the directory is refused before anything is
        // written.
        let header = r#"{"chunks":[],"document_of":[],"chunks_of":[],"links":{"neighbours":[]},"vectors":null,"files":[["../x",0]]}"#;
        let foreign = [MAGIC, header.as_bytes(), b"\n"].concat();
        let error = Knowledge::unpack(&foreign, &dir("cut"))
            .err()
            .expect("refused");
        assert_eq!(
            error.to_string(),
            "not a packed knowledge index: a file named '../x'"
        );
        for d in [built_in, unpacked_in, dir("cut")] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn an_index_is_named_by_its_files_chunking_and_model() {
        let chunking = Chunking::default();
        let key = index_key(&[("a.md", "11"), ("b.md", "22")], &chunking, None, None);
        assert_eq!(key.len(), 64);
        assert_eq!(
            key,
            index_key(&[("b.md", "22"), ("a.md", "11")], &chunking, None, None),
            "order"
        );
        assert_ne!(
            key,
            index_key(&[("a.md", "11"), ("b.md", "23")], &chunking, None, None),
            "content"
        );
        assert_ne!(
            key,
            index_key(&[("a.md", "11"), ("c.md", "22")], &chunking, None, None),
            "path"
        );
        let other = Chunking::new(400, 40).unwrap();
        assert_ne!(
            key,
            index_key(&[("a.md", "11"), ("b.md", "22")], &other, None, None),
            "chunking"
        );
        assert_ne!(
            key,
            index_key(
                &[("a.md", "11"), ("b.md", "22")],
                &chunking,
                Some("m"),
                None
            ),
            "model"
        );
        assert_ne!(
            index_key(&[("a.md", "11")], &chunking, Some("m"), None),
            index_key(
                &[("a.md", "11")],
                &chunking,
                Some("m"),
                Some(VectorSearch::Exact)
            ),
            "how its vectors are searched, when said"
        );
    }
}
