//! What the rate limits see of a task (SPEC 18): its kind, handler and
//! namespace, and, for a step that calls a model, the provider and model
//! it names and the tokens its first call is expected to use
//! ([`expected_tokens`]). Read off the assignment once, when the task
//! is queued, and only when some limit is configured.

use serde_json::Value;
use weft_proto::worker_protocol::expected_tokens;

use super::jobs::FlowNeeds;
use super::limits::{Subject, Target};
use super::{TaskJob, WorkerKind};

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
        let max_tokens = config.get("max_tokens").and_then(Value::as_u64);
        expected_tokens(task.prompts_json.len(), max_tokens)
    } else {
        0
    };
    Some(FlowNeeds { subject, tokens })
}
