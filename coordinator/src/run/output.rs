//! What a node's result becomes before the merge: `state_updates` rendered
//! over the node's view of the state, declared types checked, strict state
//! enforced, human answers turned into writes, and the run's first state
//! built from defaults and input.

use serde_json::{Map, Value};

use super::events::{HumanAnswer, NodeOutput};
use crate::graph::{
    Graph, Node, NodeKind, Strictness, TemplateContext, UpdateValue, json_type_name,
};

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
) -> Result<(Map<String, Value>, Option<String>), String> {
    let NodeOutput {
        mut writes,
        next,
        output,
    } = output;
    if let Some(schema) = &node.output_schema {
        // The structured output is what the node wrote; its top-level
        // properties are the fields.
        schema
            .check(&Value::Object(writes.clone()))
            .map_err(|error| format!("output {error} (output_schema)"))?;
    }
    if !node.state_updates.is_empty() {
        let mut seen = view();
        for (field, value) in &writes {
            seen.insert(field.clone(), value.clone());
        }
        let transient = output.unwrap_or_else(|| Value::Object(writes.clone()));
        let context = TemplateContext {
            state: Some(&seen),
            scope: Some(scope),
            output: Some(&transient),
        };
        for (field, update) in &node.state_updates {
            let value = match update {
                UpdateValue::Literal(value) => value.clone(),
                UpdateValue::Template(template) => template
                    .evaluate(&context, Strictness::Lenient)
                    .map_err(|error| format!("state_updates.{field}: {error}"))?,
            };
            writes.insert(field.clone(), value);
        }
    }
    check_writes(graph, &writes, strict && graph.settings.strict_state)?;
    Ok((writes, next))
}

/// Checks written values against declared types, and (when `strict`) that
/// every written field is declared.
pub fn check_writes(
    graph: &Graph,
    writes: &Map<String, Value>,
    strict: bool,
) -> Result<(), String> {
    for (field, value) in writes {
        match graph.field(field) {
            Some(decl) if !decl.ty.admits(value) => {
                return Err(format!(
                    "wrote field '{field}' as {}, but it is declared {}",
                    json_type_name(value),
                    decl.ty.name()
                ));
            }
            None if strict => {
                return Err(format!(
                    "wrote field '{field}', which `state:` does not declare (settings.strict_state is on)"
                ));
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
) -> Result<Map<String, Value>, String> {
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
pub fn answer_writes(node: &Node, answer: &HumanAnswer) -> Result<Map<String, Value>, String> {
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
                other => {
                    return Err(format!(
                        "an approval takes `approve` or `reject`, got {other}"
                    ));
                }
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
                schema
                    .check(&answer.value)
                    .map_err(|error| format!("the answer {error}"))?;
            }
            writes.insert(output_key.clone(), answer.value.clone());
        }
        other => return Err(format!("a {} node takes no answer", other.name())),
    }
    Ok(writes)
}
