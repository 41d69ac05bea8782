//! Embeddings from an OpenAI-compatible endpoint (`POST
//! {base_url}/embeddings`), for knowledge bases' chunks and `rag` queries.
//!
//! Texts go in batches of at most [`BATCH`], one request each, holding one
//! of the provider's permits, tried again on a 429, a 5xx or a failed
//! connection like a chat completion (`Retry-After`, else a doubling
//! backoff) while the deadline allows. A reply must hold one vector of
//! numbers per text (matched by its `index`), all of one length, the same
//! in every batch; anything else fails naming what is wrong, and the
//! start of the reply, secrets masked.

use std::time::Instant;

use serde_json::{Value, json};

use super::chat::{post, quote};
use super::provider::Provider;
use crate::task::{Failure, FailureKind};

/// The most texts in one request.
pub const BATCH: usize = 64;

/// The embeddings of some texts, and what they cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// One vector per text, in the texts' order.
    pub vectors: Vec<Vec<f32>>,
    /// The model that answered (as the last reply names it).
    pub model: String,
    /// Requests made, retries included.
    pub requests: u32,
    /// Tokens the provider counted (`usage.prompt_tokens`), summed.
    pub tokens: u64,
}

/// `texts` embedded by `provider`'s `model` before `deadline`.
pub async fn embed(
    provider: &Provider,
    model: &str,
    texts: &[String],
    deadline: Instant,
) -> Result<Embeddings, Failure> {
    let mut embeddings = Embeddings {
        vectors: Vec::with_capacity(texts.len()),
        model: model.to_owned(),
        requests: 0,
        tokens: 0,
    };
    for batch in texts.chunks(BATCH) {
        let _permit = provider.permits.acquire().await;
        let started = Instant::now();
        let body = json!({"model": model, "input": batch});
        // Embedding requests are not paced by the coordinator's limits.
        let open = super::gate::CallGate::open();
        let (text, tries, _) =
            post(provider, "embeddings", &body, deadline, started, &open).await?;
        embeddings.requests += tries;
        let length = embeddings.vectors.first().map(Vec::len);
        let reply = read_reply(provider, &text, batch.len(), length)?;
        embeddings.vectors.extend(reply.vectors);
        embeddings.tokens += reply.tokens;
        if !reply.model.is_empty() {
            embeddings.model = reply.model;
        }
    }
    Ok(embeddings)
}

/// One batch's reply.
struct Reply {
    vectors: Vec<Vec<f32>>,
    model: String,
    tokens: u64,
}

/// The vectors of a reply to a batch of `count` texts, each `length` long
/// when earlier batches set it.
fn read_reply(
    provider: &Provider,
    text: &str,
    count: usize,
    length: Option<usize>,
) -> Result<Reply, Failure> {
    let malformed = |why: String| {
        Failure::new(
            FailureKind::ModelError,
            provider.redactor.redact(&format!(
                "provider '{}' sent a reply that is not embeddings ({why}): {}",
                provider.name,
                quote(text)
            )),
        )
    };
    let reply: Value = serde_json::from_str(text).map_err(|_| malformed("not JSON".into()))?;
    let data = reply["data"]
        .as_array()
        .ok_or_else(|| malformed("no data list".into()))?;
    if data.len() != count {
        return Err(malformed(format!(
            "{} vectors for {count} texts",
            data.len()
        )));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; count];
    // Every vector as long as the first one (of this batch or before).
    let mut length = length;
    for (position, item) in data.iter().enumerate() {
        let index = match &item["index"] {
            Value::Null => position,
            index => index
                .as_u64()
                .map(|i| i as usize)
                .filter(|&i| i < count)
                .ok_or_else(|| malformed(format!("data[{position}].index {index}")))?,
        };
        let numbers = item["embedding"]
            .as_array()
            .ok_or_else(|| malformed(format!("data[{position}] has no embedding list")))?;
        let vector: Vec<f32> = numbers
            .iter()
            .map(|n| n.as_f64().map(|x| x as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| malformed(format!("data[{position}].embedding holds a non-number")))?;
        let wanted = *length.get_or_insert(vector.len());
        if vector.is_empty() || vector.len() != wanted {
            return Err(malformed(format!(
                "data[{position}].embedding has {} dimensions, not {wanted}",
                vector.len()
            )));
        }
        if vectors[index].replace(vector).is_some() {
            return Err(malformed(format!("index {index} given twice")));
        }
    }
    // `count` distinct indexes below `count`: every text has its vector.
    Ok(Reply {
        vectors: vectors.into_iter().flatten().collect(),
        model: reply["model"].as_str().unwrap_or_default().to_owned(),
        tokens: reply
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}
