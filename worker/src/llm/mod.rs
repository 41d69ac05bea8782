//! The `llm` and `agent` kinds (SPEC 4) against OpenAI-compatible
//! endpoints. The coordinator renders a step's prompts; the worker picks
//! the provider, asks the model, and returns what the step writes and its
//! transient `output` (the completion), with a `model_called` note per
//! request for the run's events.
//!
//! An `llm` step with an `output_schema` asks for JSON of that shape
//! (`response_format`); the reply's top-level properties are its writes,
//! which the coordinator checks against the schema like any node's, so a
//! reply that breaks it is a failed attempt that the node's retry policy
//! and fallback handle.

mod agent;
pub(crate) mod chat;
pub mod embeddings;
mod gate;
mod judge;
mod provider;
mod stream;

use std::time::Instant;

use serde::Deserialize;
use serde_json::{Map, Value, json};

pub(crate) use gate::{CallGate, Permits};
pub use provider::{NoProvider, Provider, ProviderConfig, ProviderError, Providers};

use crate::task::{Completed, Failure, FailureKind, Task};

/// What the coordinator sends for an `llm` step (`binding.rs`), and the
/// completion's part of a `rag` step's.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LlmTask {
    model: Option<String>,
    provider: Option<String>,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    output_schema: Option<Value>,
}

/// The rendered prompts of an `llm` or `agent` step.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Prompts {
    pub system: Option<String>,
    pub prompt: String,
}

impl Prompts {
    pub(crate) fn of(task: &Task) -> Result<Self, Failure> {
        Self::deserialize(&task.prompts).map_err(|error| {
            Failure::new(
                FailureKind::InvalidTask,
                format!("the step's prompts: {error}"),
            )
        })
    }
}

pub(crate) use agent::Agent;
pub use judge::JudgeError;
pub(crate) use judge::judge;

fn invalid(what: &str, error: impl std::fmt::Display) -> Failure {
    Failure::new(FailureKind::InvalidTask, format!("{what}: {error}"))
}

/// The model a step uses: its own, or its provider's.
pub(crate) fn model_for(named: Option<String>, provider: &Provider) -> Result<String, Failure> {
    named.or_else(|| provider.model.clone()).ok_or_else(|| {
        Failure::new(
            FailureKind::InvalidTask,
            format!(
                "no model: set `model:` on the node, or `model` in provider '{}' (WEFT_MODEL for \
                 the environment's)",
                provider.name
            ),
        )
    })
}

/// Runs one `llm` step: one chat completion.
pub(crate) async fn run_llm(
    providers: &Providers,
    task: &Task,
    gate: &CallGate,
) -> Result<Completed, Failure> {
    let config =
        LlmTask::deserialize(&*task.config).map_err(|e| invalid("llm configuration", e))?;
    let prompts = Prompts::of(task)?;
    let deadline = Instant::now() + task.timeout;
    complete(providers, &config, &prompts, deadline, gate).await
}

/// One chat completion of `prompts` as `config` says: the text as the
/// step's `output`, or, with an `output_schema`, the structured reply as
/// its writes and its output.
pub(crate) async fn complete(
    providers: &Providers,
    config: &LlmTask,
    prompts: &Prompts,
    deadline: Instant,
    gate: &CallGate,
) -> Result<Completed, Failure> {
    let provider = providers
        .get(config.provider.as_deref())
        .map_err(|error| Failure::new(FailureKind::UnsupportedKind, error.to_string()))?;
    let mut messages = Vec::new();
    if let Some(system) = &prompts.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": prompts.prompt}));
    let mut body = Map::new();
    body.insert(
        "model".into(),
        model_for(config.model.clone(), provider)?.into(),
    );
    body.insert("messages".into(), Value::Array(messages));
    if let Some(temperature) = config.temperature {
        body.insert("temperature".into(), temperature.into());
    }
    if let Some(max_tokens) = config.max_tokens {
        body.insert("max_tokens".into(), max_tokens.into());
    }
    if let Some(schema) = &config.output_schema {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}),
        );
    }
    let completion = chat::complete(provider, Value::Object(body), deadline, gate).await?;
    let text = completion.message["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let notes = vec![completion.note()];
    if config.output_schema.is_none() {
        return Ok(Completed {
            writes: Value::Object(Map::new()),
            output: Some(Value::String(text)),
            notes,
        });
    }
    let structured = match structured(&text) {
        Ok(structured) => structured,
        Err(why) => {
            let failure = Failure::new(
                FailureKind::InvalidOutput,
                provider.redactor.redact(&format!(
                    "the model's structured output is {why}: {}",
                    text.chars().take(300).collect::<String>()
                )),
            );
            return Err(failure.with_notes(notes));
        }
    };
    Ok(Completed {
        writes: structured.clone(),
        output: Some(structured),
        notes,
    })
}

/// The JSON object of a structured reply; a fenced block (```json … ```)
/// is read for its content, as some local models wrap it.
pub(crate) fn structured(text: &str) -> Result<Value, &'static str> {
    let trimmed = text.trim();
    let inner = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    match serde_json::from_str(inner.trim()) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("JSON but not an object"),
        Err(_) => Err("not JSON"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_replies_are_objects_fenced_or_not() {
        assert_eq!(structured(r#"{"a": 1}"#), Ok(json!({"a": 1})));
        assert_eq!(structured("```json\n{\"a\": 1}\n```"), Ok(json!({"a": 1})));
        assert_eq!(structured("[1]"), Err("JSON but not an object"));
        assert_eq!(structured("sure! here it is"), Err("not JSON"));
    }
}
