//! The prompts of `llm` and `agent` steps, rendered strictly (SPEC 2) on
//! the state and scope the step sees, when the step is created: the
//! worker receives text, never templates, and a template that does not
//! render fails the step here, naming the template and the name it lacks.

use serde_json::{Map, Value};

use super::events::{FailureKind, TaskState, expr_failure};
use super::task_spec::KeyedConcurrency;
use crate::graph::Meter;
use crate::graph::{ExprError, Node, NodeKind, Strictness, Template, TemplateContext};

/// A prompt template that does not render: which, and why.
#[derive(Debug, thiserror::Error)]
#[error("{template}: {error}")]
pub(super) struct PromptError {
    /// `system`, `instructions`, `prompt`, `concurrency.key` or `cache.key`.
    template: &'static str,
    #[source]
    error: ExprError,
}

impl PromptError {
    /// How the step failed: a template error, or one too costly to render.
    pub(super) fn failure_kind(&self) -> FailureKind {
        expr_failure(&self.error, FailureKind::TemplateError)
    }
}

/// `{"system": …, "prompt": …}` for an `llm` or `agent` node (`system` is
/// its `system` or `instructions`, when it has one); `{"query": …}` for a
/// `rag` node; `None` for other kinds.
pub(super) fn render_prompts(
    node: &Node,
    state: &TaskState,
    scope: &Map<String, Value>,
    meter: &Meter,
) -> Result<Option<Map<String, Value>>, PromptError> {
    let (system, prompt) = match &node.kind {
        NodeKind::Llm(llm) => (llm.system.as_ref(), &llm.prompt),
        NodeKind::Agent(agent) => (agent.instructions.as_ref(), &agent.prompt),
        // A `rag` step's query; its prompts read the passages, so its
        // worker renders them once it has retrieved them.
        NodeKind::Rag(rag) => match rag.query.as_ref().or(rag.prompt.as_ref()) {
            Some(query) => (None, query),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let view = state.view();
    let context = TemplateContext {
        state: Some(&view),
        scope: Some(scope),
        output: None,
    };
    let render = |name: &'static str, template: &Template| {
        template
            .render(&context, Strictness::Strict, meter)
            .map_err(|error| PromptError {
                template: name,
                error,
            })
    };
    let mut prompts = Map::new();
    if let Some(system) = system {
        let name = if matches!(node.kind, NodeKind::Agent(_)) {
            "instructions"
        } else {
            "system"
        };
        prompts.insert("system".into(), Value::String(render(name, system)?));
    }
    if let NodeKind::Rag(rag) = &node.kind {
        let name = if rag.query.is_some() {
            "query"
        } else {
            "prompt"
        };
        prompts.insert("query".into(), Value::String(render(name, prompt)?));
        return Ok(Some(prompts));
    }
    prompts.insert("prompt".into(), Value::String(render("prompt", prompt)?));
    Ok(Some(prompts))
}

/// The step's `concurrency:` with its key rendered, strictly, on the state
/// and scope the step sees.
pub(super) fn render_concurrency(
    node: &Node,
    state: &TaskState,
    scope: &Map<String, Value>,
    meter: &Meter,
) -> Result<Option<KeyedConcurrency>, PromptError> {
    let Some(concurrency) = &node.concurrency else {
        return Ok(None);
    };
    let key = render_key("concurrency.key", &concurrency.key, state, scope, meter)?;
    Ok(Some(KeyedConcurrency {
        key,
        max: concurrency.max,
    }))
}

/// The entry key of the step's `cache:` (SPEC 20), its key rendered
/// strictly on the state and scope the step sees; `None` when the node has
/// no cache or its graph turns caching off (`settings.cache: false`).
pub(super) fn render_cache_key(
    graph: &crate::graph::Graph,
    node: &Node,
    state: &TaskState,
    scope: &Map<String, Value>,
    meter: &Meter,
) -> Result<Option<String>, PromptError> {
    let Some(cache) = node.cache.as_ref().filter(|_| graph.settings.cache) else {
        return Ok(None);
    };
    let rendered = render_key("cache.key", &cache.key, state, scope, meter)?;
    Ok(Some(cache.entry_key(&graph.name, &node.id, &rendered)))
}

/// A key template (`name`: `concurrency.key`, `cache.key`) rendered
/// strictly on the state and scope the step sees.
fn render_key(
    name: &'static str,
    template: &Template,
    state: &TaskState,
    scope: &Map<String, Value>,
    meter: &Meter,
) -> Result<String, PromptError> {
    let view = state.view();
    let context = TemplateContext {
        state: Some(&view),
        scope: Some(scope),
        output: None,
    };
    template
        .render(&context, Strictness::Strict, meter)
        .map_err(|error| PromptError {
            template: name,
            error,
        })
}
