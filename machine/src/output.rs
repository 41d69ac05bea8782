//! What a node's result becomes before the merge: `state_updates` rendered
//! over the node's view of the state, declared types checked, strict state
//! enforced, human answers turned into writes, and the run's first state
//! built from defaults and input.

use serde_json::{Map, Value};

use super::events::{FailureKind, HumanAnswer, NodeOutput, expr_failure};
use crate::graph::Meter;
use crate::graph::{
    ExprError, Graph, Node, NodeKind, SchemaError, Strictness, TemplateContext, UpdateValue,
    json_type_name,
};

/// Why what a node wrote (or a run's input) does not fit the graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The node's writes do not match its `output_schema`.
    #[error("output {0} (output_schema)")]
    Schema(SchemaError),
    /// A `state_updates` template failed.
    #[error("state_updates.{field}: {error}")]
    Update {
        /// The field it writes.
        field: String,
        /// Why it failed.
        error: ExprError,
    },
    /// A value of the wrong type for its declared field.
    #[error("wrote field '{field}' as {got}, but it is declared {declared}")]
    WrongType {
        /// The field.
        field: String,
        /// What was written.
        got: &'static str,
        /// What is declared.
        declared: &'static str,
    },
    /// An undeclared field under `strict_state`.
    #[error("wrote field '{field}', which `state:` does not declare (settings.strict_state is on)")]
    Undeclared {
        /// The field.
        field: String,
    },
}

/// Why an answer to a waiting node was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// An approval answer that is neither approve nor reject.
    #[error("an approval takes `approve` or `reject`, got {0}")]
    NotAnApproval(Value),
    /// An input answer that does not fit the node's schema.
    #[error("the answer {0}")]
    Schema(SchemaError),
    /// The node is not a human node.
    #[error("a {0} node takes no answer")]
    TakesNoAnswer(&'static str),
}

impl WriteError {
    /// How a step whose writes fail this way failed: a template too
    /// costly to render is final, anything else is invalid output.
    pub fn failure_kind(&self) -> FailureKind {
        match self {
            Self::Update { error, .. } => expr_failure(error, FailureKind::InvalidOutput),
            _ => FailureKind::InvalidOutput,
        }
    }
}

/// The node's writes with `state_updates` applied, checked against the
/// declared state. `view` is the state the node saw (S0 or its fork);
/// `strict` is false for map forks, whose writes are scratch.
pub fn finish_output(
    graph: &Graph,
    node: &Node,
    view: impl FnOnce() -> Map<String, Value>,
    scope: &Map<String, Value>,
    output: NodeOutput,
    strict: bool,
    meter: &Meter,
) -> Result<(Map<String, Value>, Option<String>), WriteError> {
    let NodeOutput {
        mut writes,
        next,
        output,
        ..
    } = output;
    if let Some(schema) = &node.output_schema {
        // The structured output is what the node wrote; its top-level
        // properties are the fields.
        schema
            .check(&Value::Object(writes.clone()))
            .map_err(WriteError::Schema)?;
    }
    if !node.state_updates.is_empty() {
        let mut seen = view();
        for (field, value) in &writes {
            seen.insert(field.clone(), value.clone());
        }
        let (output, passages) = rag_bindings(node, output);
        let transient = output.unwrap_or_else(|| Value::Object(writes.clone()));
        let scope_with_passages;
        let scope = match passages {
            Some(passages) => {
                scope_with_passages = scope.clone().into_iter().chain(passages).collect();
                &scope_with_passages
            }
            None => scope,
        };
        let context = TemplateContext {
            state: Some(&seen),
            scope: Some(scope),
            output: Some(&transient),
        };
        for (field, update) in &node.state_updates {
            let value = match update {
                UpdateValue::Literal(value) => value.clone(),
                UpdateValue::Template(template) => template
                    .evaluate(&context, Strictness::Lenient, meter)
                    .map_err(|error| WriteError::Update {
                        field: field.clone(),
                        error,
                    })?,
            };
            writes.insert(field.clone(), value);
        }
    }
    check_writes(graph, &writes, strict && graph.settings.strict_state)?;
    Ok((writes, next))
}

/// A `rag` step's transient output and its passages' bindings: its worker
/// returns `{"output", "context", "sources"}` (`weft_worker`'s `rag`
/// module), and its `state_updates` see `context` and `sources` beside
/// `output`. Other kinds' output is theirs alone.
fn rag_bindings(node: &Node, output: Option<Value>) -> (Option<Value>, Option<Map<String, Value>>) {
    match (&node.kind, output) {
        (NodeKind::Rag(_), Some(Value::Object(mut parts))) => {
            let output = parts.remove("output");
            let passages = crate::graph::RAG_BINDINGS
                .iter()
                .map(|&name| {
                    let value = parts.remove(name).unwrap_or(Value::Null);
                    (name.to_owned(), value)
                })
                .collect();
            (output, Some(passages))
        }
        (_, output) => (output, None),
    }
}

/// Checks written values against declared types, and (when `strict`) that
/// every written field is declared.
pub fn check_writes(
    graph: &Graph,
    writes: &Map<String, Value>,
    strict: bool,
) -> Result<(), WriteError> {
    for (field, value) in writes {
        match graph.field(field) {
            Some(decl) if !decl.ty.admits(value) => {
                return Err(WriteError::WrongType {
                    field: field.clone(),
                    got: json_type_name(value),
                    declared: decl.ty.name(),
                });
            }
            None if strict => {
                return Err(WriteError::Undeclared {
                    field: field.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The run's first state: declared defaults, then the caller's input.
pub fn initial_state(
    graph: &Graph,
    input: Map<String, Value>,
) -> Result<Map<String, Value>, WriteError> {
    let mut state: Map<String, Value> = graph
        .fields
        .iter()
        .map(|decl| (decl.name.clone(), decl.default.clone()))
        .collect();
    check_writes(graph, &input, graph.settings.strict_state)?;
    state.extend(input);
    Ok(state)
}

/// The writes an answer to an `approval` or `input` node makes.
pub fn answer_writes(node: &Node, answer: &HumanAnswer) -> Result<Map<String, Value>, AnswerError> {
    let mut writes = Map::new();
    match &node.kind {
        NodeKind::Approval { output_key, .. } => {
            let approved = match &answer.value {
                Value::Bool(b) => *b,
                Value::String(s)
                    if matches!(
                        s.to_ascii_lowercase().as_str(),
                        "approve" | "approved" | "yes" | "y"
                    ) =>
                {
                    true
                }
                Value::String(s)
                    if matches!(
                        s.to_ascii_lowercase().as_str(),
                        "reject" | "rejected" | "no" | "n"
                    ) =>
                {
                    false
                }
                other => return Err(AnswerError::NotAnApproval(other.clone())),
            };
            writes.insert(output_key.clone(), Value::Bool(approved));
            if let Some(comment) = &answer.comment {
                writes.insert(
                    format!("{output_key}_comment"),
                    Value::String(comment.clone()),
                );
            }
        }
        NodeKind::Input {
            output_key, schema, ..
        } => {
            if let Some(schema) = schema {
                schema.check(&answer.value).map_err(AnswerError::Schema)?;
            }
            writes.insert(output_key.clone(), answer.value.clone());
        }
        other => return Err(AnswerError::TakesNoAnswer(other.name())),
    }
    Ok(writes)
}
