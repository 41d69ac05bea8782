//! What the rate limits see of a task (SPEC 18): its kind, handler and
//! namespace, and, for a step that calls a model, the provider and model
//! it names and the tokens its first call is expected to use — the
//! prompt's length over 4 plus `max_tokens` (or [`DEFAULT_COMPLETION`]
//! when the node sets none). Read off the assignment once, when the task
//! is queued, and only when some limit is configured.

use serde_json::Value;

use super::jobs::FlowNeeds;
use super::limits::{Subject, Target};
use super::{TaskJob, WorkerKind};

/// The completion tokens a call is expected to use when its node sets no
/// `max_tokens`; the provider's count corrects it after the call.
pub const DEFAULT_COMPLETION: u64 = 512;

/// The task as limits count it.
pub fn needs(job: &TaskJob) -> Option<FlowNeeds> {
    let task = &job.task;
    let config: Value = serde_json::from_str(&task.config_json).unwrap_or(Value::Null);
    let text = |key: &str| config.get(key).and_then(Value::as_str).map(str::to_owned);
    let calls_model = match task.kind {
        WorkerKind::Llm | WorkerKind::Agent => true,
        WorkerKind::Rag => !task.prompts_json.is_empty() || config.get("rerank").is_some(),
        WorkerKind::Task | WorkerKind::Script | WorkerKind::Function => false,
    };
    let subject = Subject {
        namespace: job.namespace.clone(),
        kind: task.kind.as_str().to_owned(),
        handler: (task.kind == WorkerKind::Task)
            .then(|| text("handler"))
            .flatten(),
        model_call: calls_model.then(|| Target {
            provider: text("provider"),
            model: text("model"),
        }),
    };
    let tokens = if calls_model {
        let completion = config
            .get("max_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_COMPLETION);
        task.prompts_json.len() as u64 / 4 + completion
    } else {
        0
    };
    Some(FlowNeeds { subject, tokens })
}
