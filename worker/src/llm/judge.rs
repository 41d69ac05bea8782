//! A loop's `until` sentence judged by the worker's model (SPEC 4.2): the
//! model is shown the sentence and the `LoopIteration` object and answers
//! `{"satisfied": bool, "reason": string}`; the call answers
//! `[satisfied, reason]`, and the reason becomes the next iteration's
//! `loop.feedback`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Providers, chat, model_for, structured};

const SYSTEM: &str = "You decide whether a loop in a workflow is done. You are given a \
condition and the loop's latest iteration as JSON (`output` is what the iteration produced, \
`history` the earlier ones). Answer only with JSON: {\"satisfied\": true or false, \"reason\": \
\"one sentence: why, or what the next iteration should change\"}.";

/// Why the model could not judge an `until` sentence.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// No provider, or no model, to ask.
    #[error("{0}")]
    NoModel(String),
    /// The model could not be asked.
    #[error("{0}")]
    Failed(String),
    /// The model's answer is not the JSON asked for.
    #[error("the model's judgement of until '{sentence}' is {why}: {text}")]
    Unreadable {
        /// The sentence.
        sentence: String,
        /// What is wrong with the answer.
        why: String,
        /// The answer.
        text: String,
    },
    /// The answer has no verdict.
    #[error("the model's judgement of until '{sentence}' has no boolean `satisfied`: {answer}")]
    NoVerdict {
        /// The sentence.
        sentence: String,
        /// The answer.
        answer: Value,
    },
}

/// Judges `sentence` of `iteration` with the default provider.
pub(crate) async fn judge(
    providers: &Providers,
    sentence: &str,
    iteration: &Value,
    timeout: Duration,
) -> Result<Value, JudgeError> {
    let provider = providers
        .get(None)
        .map_err(|error| JudgeError::NoModel(error.to_string()))?;
    let model = model_for(None, provider).map_err(|f| JudgeError::NoModel(f.message))?;
    let body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": format!(
                "Condition: {sentence}\n\nThe loop's latest iteration:\n{}",
                serde_json::to_string_pretty(iteration).unwrap_or_default()
            )},
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "judgement", "schema": {
            "type": "object",
            "properties": {"satisfied": {"type": "boolean"}, "reason": {"type": "string"}},
            "required": ["satisfied"],
        }}},
    });
    // A loop's `until` judgement is not paced by the coordinator's limits.
    let gate = super::CallGate::open();
    let completion = chat::complete(provider, body, Instant::now() + timeout, &gate)
        .await
        .map_err(|f| JudgeError::Failed(f.message))?;
    let text = completion.message["content"].as_str().unwrap_or_default();
    let answer = structured(text).map_err(|why| JudgeError::Unreadable {
        sentence: sentence.to_owned(),
        why: why.to_string(),
        text: text.to_owned(),
    })?;
    let Some(satisfied) = answer["satisfied"].as_bool() else {
        return Err(JudgeError::NoVerdict {
            sentence: sentence.to_owned(),
            answer,
        });
    };
    Ok(json!([
        satisfied,
        answer["reason"].as_str().unwrap_or_default()
    ]))
}
