//! Knowledge bases (SPEC 17): the files a `rag` node retrieves from.
//!
//! ```yaml
//! knowledge:
//!   handbook:
//!     sources: ["docs/**/*.md", "faq.jsonl"]
//!     chunk: {size: 800, overlap: 120}
//!     embeddings: {model: text-embedding-3-small, provider: default}
//! ```
//!
//! `sources` are globs over the files beside the graph (`*` stays within
//! a directory, `**` crosses any number of them); the bundlers send the
//! files they match, and the coordinator and the worker match the bundle's
//! files with the same [`KnowledgeDecl::matches`], so all three agree on
//! what a knowledge base holds. A glob that matches nothing is an error
//! wherever the files can be listed ([`missing_knowledge_sources`]).
//!
//! A knowledge base may instead be kept elsewhere: `store: {kind:
//! pgvector, url, table}` names a PostgreSQL table (with the pgvector
//! extension) that the workers query; it has no `sources` or `chunk`.
//!
//! Chunking's bounds are the retrieval core's (`weft-retrieval`'s
//! `Chunking::new`), restated here so the graph crate stays free of the
//! index library; a test in the worker (which uses both) keeps the two
//! equal up to [`MAX_CHUNK_SIZE`].

use serde::Deserialize;
use serde_json::Value;

use super::document::did_you_mean;
use super::finding::Finding;
use super::lines::{Lines, Step::Key};
use super::{Graph, json_type_name};

/// The default chunk size, in characters.
pub const DEFAULT_CHUNK_SIZE: usize = 800;
/// The default overlap between chunks, in characters.
pub const DEFAULT_CHUNK_OVERLAP: usize = 120;
/// The smallest chunk size taken.
pub const MIN_CHUNK_SIZE: usize = 16;
/// The largest chunk size taken: a passage is read by a model whole.
pub const MAX_CHUNK_SIZE: usize = 100_000;

/// One knowledge base.
#[derive(Debug, Clone)]
pub struct KnowledgeDecl {
    /// Its name, as `rag` nodes give it.
    pub name: String,
    /// Globs over the files beside the graph, as written.
    pub sources: Vec<String>,
    matcher: SourceMatcher,
    /// The largest chunk, in characters.
    pub chunk_size: usize,
    /// The characters a chunk shares with the one before.
    pub chunk_overlap: usize,
    /// Embeddings, when it has them.
    pub embeddings: Option<Embeddings>,
    /// Where its chunks are kept, when not in files beside the graph
    /// (then `sources` is empty).
    pub store: Option<Store>,
    /// Where it is declared.
    pub line: Option<u32>,
}

/// A knowledge base's `store:`: an index kept elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// The PostgreSQL connection URL, as written: `${NAME}` is read from
    /// the worker's secrets.
    pub url: String,
    /// The table (`name` or `schema.name`): columns `text`, `embedding`,
    /// `source`, `heading`, `links`.
    pub table: String,
}

/// A knowledge base's `embeddings:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Embeddings {
    /// The embedding model.
    pub model: String,
    /// The worker's provider that serves it (`None`: its default).
    pub provider: Option<String>,
    /// How the index's vectors are searched (`None`: exactly up to a
    /// size, approximately above it).
    pub search: Option<VectorSearch>,
}

/// How a knowledge base's vectors are searched: `embeddings: {search}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorSearch {
    /// Every chunk's embedding compared with the query's.
    Exact,
    /// Through an approximate (HNSW) index built with the knowledge base's.
    Approximate,
}

impl VectorSearch {
    /// Its name, as a graph writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Approximate => "approximate",
        }
    }
}

impl KnowledgeDecl {
    /// Whether the file at `path` (relative to the graph's directory) is
    /// one of its sources: a glob matches it, and no part of it is hidden.
    pub fn matches(&self, path: &str) -> bool {
        self.matcher.matches(path)
    }

    /// The globs of its `sources` that match none of `files` (paths
    /// relative to the graph's directory).
    pub fn unmatched<'a>(&'a self, files: &[&str]) -> Vec<&'a str> {
        self.sources
            .iter()
            .zip(&self.matcher.0)
            .filter(|(_, glob)| !files.iter().any(|file| source_matches(glob, file)))
            .map(|(source, _)| source.as_str())
            .collect()
    }
}

/// A knowledge base's source globs, compiled: what a worker matches the
/// bundle's files with, as [`KnowledgeDecl::matches`] does.
#[derive(Debug, Clone)]
pub struct SourceMatcher(Vec<globset::GlobMatcher>);

impl SourceMatcher {
    /// The globs `sources` (as a graph writes them), or why one is
    /// refused.
    pub fn new(sources: &[String]) -> Result<Self, String> {
        sources
            .iter()
            .map(|source| {
                let mut source = source.clone();
                source_glob(&mut source).map_err(|why| format!("source '{source}': {why}"))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether the file at `path` (relative to the graph's directory) is
    /// a source: a glob matches it, and no part of it is hidden.
    pub fn matches(&self, path: &str) -> bool {
        self.0.iter().any(|glob| source_matches(glob, path))
    }
}

/// Whether one source glob takes the file at `path`: it matches, and no
/// part of the path is hidden.
fn source_matches(glob: &globset::GlobMatcher, path: &str) -> bool {
    !is_hidden(path) && glob.is_match(path)
}

/// `knowledge.NAME` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKnowledge {
    sources: Option<Value>,
    chunk: Option<RawChunk>,
    embeddings: Option<RawEmbeddings>,
    store: Option<RawStore>,
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    kind: Option<String>,
    url: Option<String>,
    table: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChunk {
    size: Option<usize>,
    overlap: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmbeddings {
    model: Option<String>,
    provider: Option<String>,
    search: Option<String>,
}

/// The fields a knowledge base takes.
const FIELDS: [&str; 5] = ["sources", "chunk", "embeddings", "store", "description"];

/// Reads `knowledge:`; problems go to `findings`.
pub(crate) fn read_knowledge(
    value: Option<&Value>,
    lines: &Lines,
    findings: &mut Vec<Finding>,
) -> Vec<KnowledgeDecl> {
    let Some(value) = value else {
        return Vec::new();
    };
    let Some(map) = value.as_object() else {
        findings.push(
            Finding::error(
                format!(
                    "knowledge: expected a map of knowledge base names to {{sources, chunk, embeddings}}, found {}",
                    json_type_name(value)
                ),
                &[],
            )
            .at_line(lines.line(&[Key("knowledge")])),
        );
        return Vec::new();
    };
    let mut bases = Vec::new();
    for (name, raw) in map {
        let line = lines.line(&[Key("knowledge"), Key(name)]);
        let before = findings.len();
        bases.extend(read_one(name, raw, line, findings));
        crate::finding::at_line(findings, before, line);
    }
    bases
}

fn read_one(
    name: &str,
    raw: &Value,
    line: Option<u32>,
    findings: &mut Vec<Finding>,
) -> Option<KnowledgeDecl> {
    let mut error = |message: String| {
        findings.push(Finding::error(
            format!("knowledge '{name}': {message}"),
            &[],
        ));
    };
    if !is_name(name) {
        error("a knowledge base's name is letters, digits, '_' or '-'".into());
        return None;
    }
    if let Some(fields) = raw.as_object() {
        for key in fields.keys() {
            if !FIELDS.contains(&key.as_str()) {
                let hint = did_you_mean(key, &FIELDS)
                    .map(|k| format!(" (did you mean '{k}'?)"))
                    .unwrap_or_default();
                error(format!(
                    "unknown field '{key}'{hint}; a knowledge base takes {}",
                    FIELDS.join(", ")
                ));
                return None;
            }
        }
    }
    let raw: RawKnowledge = match serde_path_to_error::deserialize(raw) {
        Ok(raw) => raw,
        Err(e) => {
            error(format!("field '{}': {}", e.path(), e.inner()));
            return None;
        }
    };
    let _ = raw.description;
    let embeddings = match raw.embeddings {
        None => None,
        Some(RawEmbeddings { model: None, .. }) => {
            error("embeddings: `model` is required (the embedding model, e.g. text-embedding-3-small)".into());
            return None;
        }
        Some(RawEmbeddings {
            model: Some(model),
            provider,
            search,
        }) => {
            let search = match search.as_deref() {
                None => None,
                Some("exact") => Some(VectorSearch::Exact),
                Some("approximate") => Some(VectorSearch::Approximate),
                Some(other) => {
                    error(format!(
                        "embeddings: search '{other}' is not one of exact, approximate \
                         (leave it out to search exactly up to 80,000 chunks of 1,536 dimensions)"
                    ));
                    return None;
                }
            };
            Some(Embeddings {
                model,
                provider,
                search,
            })
        }
    };
    if let Some(store) = raw.store {
        if embeddings.as_ref().is_some_and(|e| e.search.is_some()) {
            error(
                "embeddings: `search` chooses how Weft's own index is searched; a `store` table is \
                 searched by its own indexes (add an hnsw index on its embedding column)"
                    .into(),
            );
            return None;
        }
        if raw.sources.is_some() || raw.chunk.is_some() {
            error(
                "a knowledge base with `store` keeps its chunks in that table: leave out `sources` and `chunk` \
                 (`weft index push` loads a knowledge base's files into it)"
                    .into(),
            );
            return None;
        }
        let store = match read_store(store) {
            Ok(store) => store,
            Err(why) => {
                error(format!("store: {why}"));
                return None;
            }
        };
        return Some(KnowledgeDecl {
            name: name.to_owned(),
            sources: Vec::new(),
            matcher: SourceMatcher(Vec::new()),
            chunk_size: DEFAULT_CHUNK_SIZE,
            chunk_overlap: DEFAULT_CHUNK_OVERLAP,
            embeddings,
            store: Some(store),
            line,
        });
    }
    let mut sources = match raw.sources {
        Some(Value::String(one)) => vec![one],
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut sources = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(source) = item else {
                    error(format!(
                        "sources: each source is a glob over the files beside the graph, found {}",
                        json_type_name(&item)
                    ));
                    return None;
                };
                sources.push(source);
            }
            sources
        }
        None | Some(Value::Array(_)) => {
            error(
                "`sources` is required: globs over the files beside the graph, e.g. [\"docs/**/*.md\"]"
                    .into(),
            );
            return None;
        }
        Some(other) => {
            error(format!(
                "sources: expected a list of globs, found {}",
                json_type_name(&other)
            ));
            return None;
        }
    };
    let mut globs = Vec::with_capacity(sources.len());
    for source in &mut sources {
        match source_glob(source) {
            Ok(glob) => globs.push(glob),
            Err(why) => {
                error(format!("source '{source}': {why}"));
                return None;
            }
        }
    }
    let matcher = SourceMatcher(globs);
    let chunk = raw.chunk.unwrap_or(RawChunk {
        size: None,
        overlap: None,
    });
    let chunk_size = chunk.size.unwrap_or(DEFAULT_CHUNK_SIZE);
    let chunk_overlap = chunk
        .overlap
        .unwrap_or(DEFAULT_CHUNK_OVERLAP.min(chunk_size.saturating_sub(1) / 2));
    if let Err(why) = check_chunking(chunk_size, chunk_overlap) {
        error(why);
        return None;
    }
    Some(KnowledgeDecl {
        name: name.to_owned(),
        sources,
        matcher,
        chunk_size,
        chunk_overlap,
        embeddings,
        store: None,
        line,
    })
}

/// `store: {kind: pgvector, url, table}` checked.
fn read_store(raw: RawStore) -> Result<Store, String> {
    match raw.kind.as_deref() {
        Some("pgvector") => {}
        Some(other) => {
            return Err(format!(
                "kind '{other}' is not a store this version queries; the one kind is pgvector"
            ));
        }
        None => return Err("`kind` is required (pgvector)".into()),
    }
    let url = match raw.url {
        Some(url) if !url.trim().is_empty() => url,
        _ => {
            return Err(
                "`url` is required: the PostgreSQL connection URL, e.g. \"${TICKETS_DSN}\" (read from the worker's secrets)"
                    .into(),
            );
        }
    };
    let table = raw
        .table
        .ok_or("`table` is required: the table holding the chunks")?;
    if !is_table_name(&table) {
        return Err(format!(
            "table '{table}' is not a table name (letters, digits and '_', not starting with a digit; `schema.table` for another schema)"
        ));
    }
    Ok(Store { url, table })
}

/// `name` or `schema.name`, each an unquoted SQL identifier.
fn is_table_name(table: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && !p.starts_with(|c: char| c.is_ascii_digit())
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    match table.split_once('.') {
        Some((schema, name)) => part(schema) && part(name),
        None => part(table),
    }
}

/// Whether a part of `path` is hidden (starts with `.`): such files are
/// never sources (a `.git` directory, an editor's swap file).
fn is_hidden(path: &str) -> bool {
    path.split('/').any(|part| part.starts_with('.'))
}

/// The most files [`files_under`] lists.
pub const MAX_LISTED_FILES: usize = 100_000;

/// The files under `dir` (recursively, symbolic links to directories not
/// followed, hidden ones left out), by their paths relative to it, at most
/// [`MAX_LISTED_FILES`]: what a knowledge base's sources are matched
/// against before a bundle exists.
pub fn files_under(dir: &std::path::Path) -> Vec<String> {
    // A graph named without a directory (`weft run graph.yaml`) lies in
    // the current one.
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    let mut files = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, relative)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let joined = if relative.is_empty() {
                name
            } else {
                format!("{relative}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push((entry.path(), joined));
            } else if kind.is_file() || (kind.is_symlink() && entry.path().is_file()) {
                files.push(joined);
                if files.len() >= MAX_LISTED_FILES {
                    return files;
                }
            }
        }
    }
    files.sort();
    files
}

/// The files under `dir` that a knowledge base of `graph` reads, by their
/// paths relative to `dir`, in order.
pub fn knowledge_source_files(graph: &Graph, dir: &std::path::Path) -> Vec<String> {
    if graph.knowledge.is_empty() {
        return Vec::new();
    }
    files_under(dir)
        .into_iter()
        .filter(|path| graph.knowledge.iter().any(|base| base.matches(path)))
        .collect()
}

/// Whether `name` can name a knowledge base.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Why a chunking is refused, if it is: the retrieval core's rules.
pub fn check_chunking(size: usize, overlap: usize) -> Result<(), String> {
    if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&size) {
        return Err(format!(
            "chunk.size {size} must be between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE} characters"
        ));
    }
    if overlap * 2 >= size {
        return Err(format!(
            "chunk.overlap {overlap} must be less than half of chunk.size {size}"
        ));
    }
    Ok(())
}

/// A source glob, relative to the graph's directory and inside it (a
/// leading `./` is dropped); `*` and `?` stay within a directory.
fn source_glob(source: &mut String) -> Result<globset::GlobMatcher, String> {
    if let Some(rest) = source.strip_prefix("./") {
        *source = rest.to_owned();
    }
    if source.is_empty() {
        return Err("an empty glob matches nothing".into());
    }
    if source.starts_with('/') || source.starts_with('~') {
        return Err(
            "a source is relative to the graph's directory (the bundle carries no other files)"
                .into(),
        );
    }
    if source.split('/').any(|part| part == "..") {
        return Err("a source may not climb out of the graph's directory ('..')".into());
    }
    globset::GlobBuilder::new(source)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|e| format!("not a glob: {}", e.kind()))
}

/// An error for each source glob of `graph`'s knowledge bases that
/// matches none of `files` (paths relative to the graph's directory).
pub fn missing_knowledge_sources(graph: &Graph, files: &[&str]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for base in &graph.knowledge {
        for source in base.unmatched(files) {
            findings.push(
                Finding::error(
                    format!(
                        "knowledge '{}': source '{source}' matches no file beside the graph",
                        base.name
                    ),
                    &[],
                )
                .at_line(base.line),
            );
        }
    }
    findings
}

/// The bytes of the files of each knowledge base of `graph` over `max`:
/// an error naming the base, its size and the limit. `files` are the
/// bundle's files relative to the graph's directory, with their sizes.
pub fn oversized_knowledge(graph: &Graph, files: &[(&str, u64)], max: u64) -> Vec<Finding> {
    graph
        .knowledge
        .iter()
        .filter_map(|base| {
            let bytes: u64 = files
                .iter()
                .filter(|(path, _)| base.matches(path))
                .map(|(_, size)| size)
                .sum();
            (bytes > max).then(|| {
                Finding::error(
                    format!(
                        "knowledge '{}': its sources hold {bytes} bytes, over the limit of {max} (max_knowledge_bytes)",
                        base.name
                    ),
                    &[],
                )
                .at_line(base.line)
            })
        })
        .collect()
}

/// `max_knowledge_bytes`'s default: 256 MiB.
pub const DEFAULT_MAX_KNOWLEDGE_BYTES: u64 = 256 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: Value) -> (Vec<KnowledgeDecl>, Vec<String>) {
        let mut findings = Vec::new();
        let lines = Lines::read("", super::super::Format::Yaml);
        let bases = read_knowledge(Some(&value), &lines, &mut findings);
        (bases, findings.into_iter().map(|f| f.message).collect())
    }

    #[test]
    fn globs_stay_within_directories_and_inside_the_graphs() {
        let (bases, errors) =
            read(json!({"kb": {"sources": ["docs/*.md", "./faq.jsonl", "notes/**/*.txt"]}}));
        assert!(errors.is_empty(), "{errors:?}");
        let kb = &bases[0];
        assert!(kb.matches("docs/a.md"));
        assert!(!kb.matches("docs/deep/a.md"), "* stays within a directory");
        assert!(kb.matches("faq.jsonl"));
        assert!(kb.matches("notes/a.txt") && kb.matches("notes/x/y/a.txt"));
        assert_eq!(
            kb.unmatched(&["docs/a.md"]),
            ["faq.jsonl", "notes/**/*.txt"]
        );
        for (bad, why) in [
            ("../secrets/*.md", "climb out"),
            ("/etc/*", "relative to the graph's directory"),
            ("docs/[a.md", "not a glob"),
        ] {
            let (_, errors) = read(json!({"kb": {"sources": [bad]}}));
            assert!(errors[0].contains(why), "{bad}: {errors:?}");
        }
    }

    #[test]
    fn a_knowledge_base_says_what_is_wrong_with_it() {
        let cases = [
            (json!({"kb": {}}), "`sources` is required"),
            (json!({"kb": {"sources": []}}), "`sources` is required"),
            (
                json!({"kb": {"sources": "*.md", "chunks": {}}}),
                "unknown field 'chunks' (did you mean 'chunk'?)",
            ),
            (
                json!({"kb": {"sources": "*.md", "chunk": {"size": 8}}}),
                "chunk.size 8 must be between 16",
            ),
            (
                json!({"kb": {"sources": "*.md", "chunk": {"size": 100, "overlap": 50}}}),
                "chunk.overlap 50 must be less than half",
            ),
            (
                json!({"kb": {"sources": "*.md", "embeddings": {"provider": "p"}}}),
                "embeddings: `model` is required",
            ),
            (
                json!({"kb": {"store": {"kind": "pgvector", "table": "t"}}}),
                "store: `url` is required",
            ),
            (
                json!({"kb": {"store": {"kind": "milvus", "url": "u", "table": "t"}}}),
                "store: kind 'milvus' is not a store",
            ),
            (
                json!({"kb": {"store": {"kind": "pgvector", "url": "u", "table": "t; drop"}}}),
                "table 't; drop' is not a table name",
            ),
            (
                json!({"kb": {"sources": "*.md", "store": {"kind": "pgvector", "url": "u", "table": "t"}}}),
                "leave out `sources` and `chunk`",
            ),
            (json!({"a b": {"sources": "*.md"}}), "letters, digits"),
            (
                json!({"kb": {"sources": "*.md", "embeddings": {"model": "m", "search": "hnsw"}}}),
                "embeddings: search 'hnsw' is not one of exact, approximate",
            ),
            (
                json!({"kb": {"sources": "*.md", "embeddings": {"model": "m", "serach": "exact"}}}),
                "unknown field `serach`, expected one of `model`, `provider`, `search`",
            ),
            (
                json!({"kb": {"store": {"kind": "pgvector", "url": "u", "table": "t"},
                       "embeddings": {"model": "m", "search": "exact"}}}),
                "a `store` table is searched by its own indexes",
            ),
        ];
        for (value, expected) in cases {
            let (_, errors) = read(value.clone());
            assert!(
                errors.len() == 1 && errors[0].contains(expected),
                "{value}: {errors:?}"
            );
        }
        let (bases, errors) = read(json!({"kb": {"sources": "*.md", "chunk": {"size": 200}}}));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!((bases[0].chunk_size, bases[0].chunk_overlap), (200, 99));
        let (bases, errors) = read(
            json!({"kb": {"sources": "*.md", "embeddings": {"model": "m", "search": "approximate"}}}),
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            bases[0].embeddings.as_ref().and_then(|e| e.search),
            Some(VectorSearch::Approximate)
        );
        let (bases, errors) = read(
            json!({"kb": {"store": {"kind": "pgvector", "url": "${DSN}", "table": "rag.chunks"}}}),
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            bases[0].store,
            Some(Store {
                url: "${DSN}".into(),
                table: "rag.chunks".into()
            })
        );
        assert!(bases[0].sources.is_empty());
    }
}
