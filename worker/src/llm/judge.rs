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

/// Judges `sentence` of `iteration` with the default provider.
pub(crate) async fn judge(
    providers: &Providers,
    sentence: &str,
    iteration: &Value,
    timeout: Duration,
) -> Result<Value, String> {
    let provider = providers.get(None)?;
    let model = model_for(None, provider).map_err(|f| f.message)?;
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
    let completion = chat::complete(provider, &body, Instant::now() + timeout)
        .await
        .map_err(|f| f.message)?;
    let text = completion.message["content"].as_str().unwrap_or_default();
    let answer = structured(text)
        .map_err(|why| format!("the model's judgement of until '{sentence}' is {why}: {text}"))?;
    let Some(satisfied) = answer["satisfied"].as_bool() else {
        return Err(format!(
            "the model's judgement of until '{sentence}' has no boolean `satisfied`: {answer}"
        ));
    };
    Ok(json!([
        satisfied,
        answer["reason"].as_str().unwrap_or_default()
    ]))
}
