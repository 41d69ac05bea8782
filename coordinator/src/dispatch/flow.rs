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
    let kind = task.definition.kind;
    // Read once per graph's node: the plan's definition keeps it.
    let config = task
        .definition
        .config()
        .map_or(&Value::Null, |config| &**config);
    let text = |key: &str| config.get(key).and_then(Value::as_str).map(str::to_owned);
    let calls_model = match kind {
        WorkerKind::Llm | WorkerKind::Agent => true,
        WorkerKind::Rag => !task.prompts_json.is_empty() || config.get("rerank").is_some(),
        WorkerKind::Task | WorkerKind::Script | WorkerKind::Function => false,
    };
    let subject = Subject {
        namespace: job.namespace.clone(),
        kind: kind.as_str().to_owned(),
        handler: (kind == WorkerKind::Task)
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
