//! The `rag` kind (SPEC 17): retrieval over a graph's knowledge bases,
//! then, with a prompt, one chat completion exactly like an `llm` step's.
//!
//! The coordinator sends the step's rendered query and its configuration
//! (`weft_machine::binding`): the knowledge bases it reads (their source
//! globs, chunking and embeddings), the mode, `top_k`, graph search's
//! depth and `rerank`, and the completion's templates. The worker:
//!
//! 1. finds each knowledge base's sources among the bundle's files (the
//!    globs matched as the graph crate matches them, relative to the
//!    graph's directory) and opens its index ([`indexes`]), fetched from
//!    the coordinator or built once per content — or, for one kept in a
//!    PostgreSQL table, queries the table instead (`pgvector`);
//! 2. embeds the query when the mode ranks by vectors, retrieves from each
//!    knowledge base (`weft_retrieval`), fuses several by RRF, and with
//!    `rerank` has a model order the `4 × top_k` candidates instead (graph
//!    search is then not applied);
//! 3. binds `context` (the passages as numbered text) and `sources` (a
//!    list of `{n, source, heading, chunk, score, text}`), renders the
//!    `system` and `prompt` templates strictly over the state and scope
//!    the step sees, and makes the completion.
//!
//! It returns `{"output", "context", "sources"}` as the step's transient
//! output — `output` being the completion, or the sources without a
//! prompt — which the run machine unpacks for `state_updates`; notes say
//! what was retrieved (`retrieved`) and built (`index_built`).

pub mod indexes;
mod pgvector;

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use weft_graph::knowledge::SourceMatcher;
use weft_graph::{Meter, Strictness, Template, TemplateContext};
use weft_retrieval::{
    Chunk, Cited, Mode, Passage, Request, context_of, fuse_retrievals, sources_of,
};

use crate::blobs::BlobCache;
use crate::llm::{LlmTask, Prompts, Providers};
use crate::task::{BlobRef, Completed, Failure, FailureKind, Task};
pub use indexes::Indexes;
use indexes::{Base, Need, Opened};

/// What the coordinator sends for a `rag` step.
#[derive(Debug, Deserialize)]
struct RagTask {
    knowledge: Vec<Base>,
    #[serde(default)]
    dir: String,
    max_knowledge_bytes: u64,
    top_k: usize,
    mode: String,
    hops: usize,
    rerank: Option<RerankModel>,
    prompt: Option<String>,
    system: Option<String>,
    #[serde(flatten)]
    completion: LlmTask,
}

/// `rerank: {model, provider}`.
#[derive(Debug, Deserialize)]
struct RerankModel {
    model: Option<String>,
    provider: Option<String>,
}

/// What a `rag` step runs with.
pub(crate) struct RagKit<'a> {
    pub providers: &'a Providers,
    pub blobs: &'a BlobCache,
    pub indexes: &'a Indexes,
    /// Where indexes are shared with the other workers.
    pub shelf: &'a crate::connection::IndexShelf,
    /// For `${NAME}` in a store's URL.
    pub secrets: &'a crate::secrets::Secrets,
    /// Paces the step's model calls (SPEC 18).
    pub gate: &'a crate::llm::CallGate,
}

/// Runs one `rag` step.
pub(crate) async fn run_rag(kit: RagKit<'_>, task: &Task) -> Result<Completed, Failure> {
    let deadline = Instant::now() + task.timeout;
    let config = RagTask::deserialize(&*task.config)
        .map_err(|e| Failure::new(FailureKind::InvalidTask, format!("rag configuration: {e}")))?;
    let mode = match config.mode.as_str() {
        "keyword" => Mode::Keyword,
        "vector" => Mode::Vector,
        "hybrid" => Mode::Hybrid,
        other => {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("rag configuration: unknown mode '{other}'"),
            ));
        }
    };
    let query = task.prompts["query"]
        .as_str()
        .ok_or_else(|| Failure::new(FailureKind::InvalidTask, "the step's prompts: no `query`"))?;
    let mut notes = Vec::new();
    let mut opened = Vec::with_capacity(config.knowledge.len());
    for base in &config.knowledge {
        if base.store.is_some() {
            opened.push(None);
            continue;
        }
        let files = sources_of_base(base, &config.dir, &task.bundle)?;
        let need = Need {
            base,
            files: &files,
            max_bytes: config.max_knowledge_bytes,
            run_id: &task.run_id,
            deadline,
        };
        let Opened { knowledge, built } = kit
            .indexes
            .open(need, kit.blobs, kit.providers, kit.shelf)
            .await?;
        notes.extend(built);
        opened.push(Some(knowledge));
    }
    let names: Vec<&str> = config.knowledge.iter().map(|b| b.name.as_str()).collect();
    let span = tracing::info_span!(
        "retrieve",
        knowledge = names.join(",").as_str(),
        mode = config.mode.as_str(),
        top_k = config.top_k,
        hits = tracing::field::Empty,
    );
    let started = Instant::now();
    let found = search(&kit, &config, mode, query, &opened, deadline)
        .instrument(span.clone())
        .await?;
    let (cited, rerank_note) = rank(kit.providers, kit.gate, &config, query, &found, deadline)
        .instrument(span.clone())
        .await?;
    span.record("hits", cited.len());
    notes.extend(rerank_note);
    let context = context_of(&cited);
    let sources = sources_of(&cited);
    notes.push(retrieved_note(&config, &cited, started));
    let completion = match &config.prompt {
        None => Completed {
            writes: Value::Object(Map::new()),
            output: Some(sources.clone()),
            notes: Vec::new(),
        },
        Some(prompt) => {
            let prompts = Prompts {
                system: config
                    .system
                    .as_deref()
                    .map(|system| render(system, "system", task, &context, &sources))
                    .transpose()?,
                prompt: render(prompt, "prompt", task, &context, &sources)?,
            };
            crate::llm::complete(
                kit.providers,
                &config.completion,
                &prompts,
                deadline,
                kit.gate,
            )
            .await?
        }
    };
    notes.extend(completion.notes);
    Ok(Completed {
        writes: completion.writes,
        output: Some(json!({
            "output": completion.output.unwrap_or(Value::Null),
            "context": context,
            "sources": sources,
        })),
        notes,
    })
}

/// One knowledge base's retrieval: the chunks it found, and its passages
/// over them (`chunk` naming one of them), best first.
type Found = (Vec<Chunk>, Vec<Passage>);

/// What each knowledge base of `config` finds for `query`: an opened
/// index (`opened`) searched on the blocking pool, a store queried.
async fn search(
    kit: &RagKit<'_>,
    config: &RagTask,
    mode: Mode,
    query: &str,
    opened: &[Option<std::sync::Arc<weft_retrieval::Knowledge>>],
    deadline: Instant,
) -> Result<Vec<Found>, Failure> {
    let query_vectors = if matches!(mode, Mode::Keyword) {
        vec![None; config.knowledge.len()]
    } else {
        embed_query(kit.providers, &config.knowledge, query, deadline).await?
    };
    let (depth, hops) = depth_and_hops(config);
    let mut found = Vec::with_capacity(opened.len());
    for ((base, knowledge), vector) in config.knowledge.iter().zip(opened).zip(query_vectors) {
        let (Some(knowledge), None) = (knowledge, &base.store) else {
            let store = base.store.as_ref().ok_or_else(|| {
                Failure::new(
                    FailureKind::WorkerError,
                    "a knowledge base neither opened nor stored",
                )
            })?;
            let asked = pgvector::Search {
                knowledge: &base.name,
                query,
                query_vector: vector.as_deref(),
                mode,
                top_k: depth,
                hops,
                deadline,
            };
            found.push(pgvector::search(store, kit.secrets, asked).await?);
            continue;
        };
        // On the blocking pool: an exact scan of a large corpus takes
        // milliseconds to a tenth of a second (docs/retrieval.md), too long
        // for one of the runtime's threads.
        let (searched, owned_query) = (knowledge.clone(), query.to_owned());
        let passages = tokio::task::spawn_blocking(move || {
            searched.retrieve(&Request {
                query: &owned_query,
                query_vector: vector.as_deref(),
                mode,
                top_k: depth,
                hops,
            })
        })
        .await
        .map_err(|join| Failure::new(FailureKind::WorkerError, join.to_string()))?
        .map_err(|e| {
            // Vectors of another length than the index's: the endpoint's
            // embeddings changed under it.
            let kind = match e {
                weft_retrieval::KnowledgeError::Vector(_) => FailureKind::ModelError,
                _ => FailureKind::WorkerError,
            };
            Failure::new(kind, format!("knowledge '{}': {e}", base.name))
        })?;
        found.push(own_chunks(knowledge, passages));
    }
    Ok(found)
}

/// How many passages each retrieval gives (more for a rerank to order),
/// and how deep graph search goes (not at all under a rerank).
fn depth_and_hops(config: &RagTask) -> (usize, usize) {
    match config.rerank {
        Some(_) => (config.top_k * 4, 0),
        None => (config.top_k, config.hops),
    }
}

/// `passages` of `knowledge` over copies of their chunks.
fn own_chunks(knowledge: &weft_retrieval::Knowledge, passages: Vec<Passage>) -> Found {
    let mut chunks = Vec::with_capacity(passages.len());
    let mut place = std::collections::HashMap::new();
    let mut local = |chunk: usize, chunks: &mut Vec<Chunk>| {
        *place.entry(chunk).or_insert_with(|| {
            chunks.push(knowledge.chunks()[chunk].clone());
            chunks.len() - 1
        })
    };
    let passages = passages
        .into_iter()
        .map(|passage| Passage {
            chunk: local(passage.chunk, &mut chunks),
            via: passage.via.map(|hit| local(hit, &mut chunks)),
            ..passage
        })
        .collect();
    (chunks, passages)
}

/// The passages `found` for `query`, fused across knowledge bases,
/// numbered from 1, and the rerank model's note when it ordered them.
async fn rank<'a>(
    providers: &Providers,
    gate: &crate::llm::CallGate,
    config: &RagTask,
    query: &str,
    found: &'a [Found],
    deadline: Instant,
) -> Result<(Vec<Cited<'a>>, Option<Value>), Failure> {
    let retrievals: Vec<Vec<Cited<'a>>> = found
        .iter()
        .map(|(chunks, passages)| {
            passages
                .iter()
                .map(|passage| Cited {
                    chunk: &chunks[passage.chunk],
                    passage: passage.clone(),
                })
                .collect()
        })
        .collect();
    let (depth, _) = depth_and_hops(config);
    let mut cited = fuse_retrievals(retrievals, depth);
    let mut rerank_note = None;
    if let Some(rerank) = &config.rerank {
        let (order, note) = rerank_order(providers, gate, rerank, query, &cited, deadline).await?;
        rerank_note = Some(note);
        cited = order.into_iter().map(|i| cited[i].clone()).collect();
        cited.truncate(config.top_k);
    }
    for (index, one) in cited.iter_mut().enumerate() {
        one.passage.n = index + 1;
    }
    Ok((cited, rerank_note))
}

/// `base`'s sources among the bundle's files: each file under the graph's
/// directory that its globs match, by its path relative to that directory,
/// in path order.
fn sources_of_base(
    base: &Base,
    dir: &str,
    bundle: &[BlobRef],
) -> Result<Vec<(String, BlobRef)>, Failure> {
    let matcher = SourceMatcher::new(&base.sources).map_err(|why| {
        Failure::new(
            FailureKind::InvalidTask,
            format!("knowledge '{}': {why}", base.name),
        )
    })?;
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{}/", dir.trim_end_matches('/'))
    };
    let mut files: Vec<(String, BlobRef)> = bundle
        .iter()
        .filter_map(|file| {
            let relative = file.path.strip_prefix(&prefix)?;
            matcher
                .matches(relative)
                .then(|| (relative.to_owned(), file.clone()))
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    if files.is_empty() {
        return Err(Failure::new(
            FailureKind::InvalidTask,
            format!(
                "knowledge '{}': its sources ({}) match no file of the run's bundle",
                base.name,
                base.sources.join(", ")
            ),
        ));
    }
    Ok(files)
}

/// The query's embedding for each knowledge base (`None` for one without
/// embeddings), one request per model and provider.
async fn embed_query(
    providers: &Providers,
    bases: &[Base],
    query: &str,
    deadline: Instant,
) -> Result<Vec<Option<Vec<f32>>>, Failure> {
    let mut by_model: BTreeMap<(Option<String>, String), Vec<f32>> = BTreeMap::new();
    let mut vectors = Vec::with_capacity(bases.len());
    for base in bases {
        let Some(embeddings) = &base.embeddings else {
            vectors.push(None);
            continue;
        };
        let key = (embeddings.provider.clone(), embeddings.model.clone());
        if !by_model.contains_key(&key) {
            let provider = providers
                .get(embeddings.provider.as_deref())
                .map_err(|e| Failure::new(FailureKind::UnsupportedKind, e.to_string()))?;
            let reply = crate::llm::embeddings::embed(
                provider,
                &embeddings.model,
                &[query.to_owned()],
                deadline,
            )
            .await
            .map_err(|f| f.prefixed("the query's embedding: "))?;
            let vector = reply.vectors.into_iter().next().unwrap_or_default();
            by_model.insert(key.clone(), vector);
        }
        vectors.push(by_model.get(&key).cloned());
    }
    Ok(vectors)
}

/// The order a model puts `candidates` in for `query` (indexes into
/// them, best first; any it leaves out follow in their fused order), and
/// its `model_called` note.
async fn rerank_order(
    providers: &Providers,
    gate: &crate::llm::CallGate,
    rerank: &RerankModel,
    query: &str,
    candidates: &[Cited<'_>],
    deadline: Instant,
) -> Result<(Vec<usize>, Value), Failure> {
    let provider = providers
        .get(rerank.provider.as_deref())
        .map_err(|e| Failure::new(FailureKind::UnsupportedKind, e.to_string()))?;
    let model = crate::llm::model_for(rerank.model.clone(), provider)?;
    let mut numbered = Vec::with_capacity(candidates.len());
    for (index, one) in candidates.iter().enumerate() {
        let chunk = one.chunk;
        numbered.push(format!("[{}] {}", index + 1, chunk.text));
    }
    let prompt = format!(
        "Query: {query}\n\nPassages:\n{}\n\nOrder the passages by how well they answer the query, \
         best first. Reply with JSON: {{\"order\": [passage numbers]}}.",
        numbered.join("\n\n")
    );
    let body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "You rank passages for a search engine."},
            {"role": "user", "content": prompt},
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "ranking", "schema": {
            "type": "object",
            "properties": {"order": {"type": "array", "items": {"type": "integer"}}},
            "required": ["order"],
        }}},
    });
    let completion = crate::llm::chat::complete(provider, body, deadline, gate).await?;
    let text = completion.message["content"].as_str().unwrap_or_default();
    let order = crate::llm::structured(text)
        .ok()
        .and_then(|reply| reply.get("order").and_then(Value::as_array).cloned())
        .ok_or_else(|| {
            Failure::new(
                FailureKind::ModelError,
                provider.redactor.redact(&format!(
                    "rerank: the model's ranking is not {{\"order\": [numbers]}}: {}",
                    text.chars().take(300).collect::<String>()
                )),
            )
        })?;
    let mut chosen: Vec<usize> = Vec::with_capacity(candidates.len());
    for number in order.iter().filter_map(Value::as_u64) {
        let index = number as usize;
        if (1..=candidates.len()).contains(&index) && !chosen.contains(&(index - 1)) {
            chosen.push(index - 1);
        }
    }
    for index in 0..candidates.len() {
        if !chosen.contains(&index) {
            chosen.push(index);
        }
    }
    Ok((chosen, completion.note()))
}

/// A `rag` step's template rendered strictly over the state fields it
/// reads, the step's scope, `context` and `sources`; a failure names the
/// template.
fn render(
    source: &str,
    which: &str,
    task: &Task,
    context: &str,
    sources: &Value,
) -> Result<String, Failure> {
    let failed =
        |error: String| Failure::new(FailureKind::TemplateError, format!("{which}: {error}"));
    let template = Template::parse(source).map_err(|e| failed(e.to_string()))?;
    let reads = template.state_reads();
    let mut state = Map::new();
    for (name, value) in &task.state {
        if reads.as_ref().is_some_and(|reads| !reads.contains(&**name)) {
            continue;
        }
        let value = value
            .value()
            .map_err(|e| failed(format!("state field '{name}' is not JSON: {e}")))?;
        state.insert(name.to_string(), value.clone());
    }
    let mut scope = task.scope.clone().into_map();
    scope.insert("context".into(), Value::String(context.to_owned()));
    scope.insert("sources".into(), sources.clone());
    let bound = TemplateContext {
        state: Some(&state),
        scope: Some(&scope),
        output: None,
    };
    template
        .render(&bound, Strictness::Strict, &Meter::unmetered())
        .map_err(|e| failed(e.to_string()))
}

/// The `retrieved` note: the knowledge bases, the mode, each passage's
/// source and score, and how long retrieval took.
fn retrieved_note(config: &RagTask, cited: &[Cited<'_>], started: Instant) -> Value {
    let hits: Vec<Value> = cited
        .iter()
        .map(|one| {
            let chunk = one.chunk;
            json!({"source": chunk.source, "heading": chunk.heading, "score": one.passage.score})
        })
        .collect();
    json!({
        "type": "retrieved",
        "knowledge": config.knowledge.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        "mode": config.mode,
        "hits": hits,
        "latency_ms": started.elapsed().as_millis() as u64,
    })
}
