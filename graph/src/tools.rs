//! The graph's `tools:` section: the functions `agent` nodes may call,
//! each with the `description` and `parameters` (a JSON Schema for its
//! arguments) the model reads, and what runs it: a bundled script
//! (`run: [argv…]`, the arguments as JSON on stdin, the result on stdout)
//! or a tool a worker registered (`handler: NAME`).
//!
//! ```yaml
//! tools:
//!   search:
//!     description: Search the notes for a phrase.
//!     parameters: { type: object, properties: { query: { type: string } }, required: [query] }
//!     run: [python3, tools/search.py]
//! ```

use serde::Deserialize;
use serde_json::Value;

use super::finding::Finding;
use super::lines::{Lines, Step::Key};
use super::schema::Schema;

/// Tool names the teammate tools take (SPEC 5).
pub const TEAMMATE_TOOLS: [&str; 2] = ["send_message", "read_messages"];

/// One declared tool.
#[derive(Debug, Clone)]
pub struct ToolDecl {
    /// Its name, as the model calls it.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments (an object).
    pub parameters: Value,
    /// What runs it.
    pub run: ToolRun,
}

/// What runs a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRun {
    /// A bundled script: arguments on stdin, result on stdout.
    Script(Vec<String>),
    /// A tool a worker registered under this name.
    Handler(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    description: Option<String>,
    parameters: Option<Value>,
    run: Option<Vec<String>>,
    handler: Option<String>,
}

/// Whether `name` is a function name models accept (`[A-Za-z0-9_-]`, 1 to
/// 64 characters).
pub fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Reads the `tools:` section; problems go to `findings`.
pub(crate) fn read_tools(
    value: Option<&Value>,
    lines: &Lines,
    findings: &mut Vec<Finding>,
) -> Vec<ToolDecl> {
    let Some(value) = value else {
        return Vec::new();
    };
    let Some(map) = value.as_object() else {
        findings.push(
            Finding::error(
                "tools: expected a map of name: {description, parameters, run | handler}",
                &[],
            )
            .at_line(lines.line(&[Key("tools")])),
        );
        return Vec::new();
    };
    let mut tools = Vec::new();
    for (name, raw) in map {
        let before = findings.len();
        tools.extend(read_tool(name, raw, findings));
        let line = lines.line(&[Key("tools"), Key(name)]);
        crate::finding::at_line(findings, before, line);
    }
    tools
}

fn read_tool(name: &str, raw: &Value, findings: &mut Vec<Finding>) -> Option<ToolDecl> {
    let mut error = |message: String| findings.push(Finding::error(message, &[]));
    if !is_tool_name(name) {
        error(format!(
            "tool '{name}': a tool name is 1 to 64 letters, digits, '_' or '-' (models call it by name)"
        ));
        return None;
    }
    if TEAMMATE_TOOLS.contains(&name) {
        error(format!(
            "tool '{name}': the name belongs to the teammate tools an agent with `teammates: true` gets"
        ));
        return None;
    }
    let raw: RawTool = match serde_json::from_value(raw.clone()) {
        Ok(raw) => raw,
        Err(e) => {
            error(format!("tool '{name}': {e}"));
            return None;
        }
    };
    let Some(description) = raw.description.filter(|d| !d.trim().is_empty()) else {
        error(format!(
            "tool '{name}': `description` is required (the model reads it to choose the tool)"
        ));
        return None;
    };
    let parameters = raw
        .parameters
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        error(format!(
            "tool '{name}': `parameters` must be a JSON Schema of `type: object` (the arguments)"
        ));
        return None;
    }
    if let Err(e) = Schema::compile(&parameters) {
        error(format!("tool '{name}': parameters: {e}"));
        return None;
    }
    let run = match (raw.run, raw.handler) {
        (Some(argv), None) if !argv.is_empty() => ToolRun::Script(argv),
        (None, Some(handler)) if !handler.is_empty() => ToolRun::Handler(handler),
        _ => {
            error(format!(
                "tool '{name}': give exactly one of `run: [argv…]` (a bundled script) or `handler: NAME` (a tool a worker registered)"
            ));
            return None;
        }
    };
    Some(ToolDecl {
        name: name.to_owned(),
        description,
        parameters,
        run,
    })
}

/// Checks what `agent` nodes name in `tools:`: names a model can call, not
/// the teammate tools (which `teammates: true` gives), each once. A name
/// the graph does not declare is a tool a worker registered.
pub(crate) fn check_agent_tools(graph: &crate::Graph, findings: &mut Vec<Finding>) {
    for node in &graph.nodes {
        let crate::NodeKind::Agent(agent) = &node.kind else {
            continue;
        };
        let id = node.id.as_str();
        let mut seen: Vec<&str> = Vec::new();
        for name in &agent.tools {
            let problem = if TEAMMATE_TOOLS.contains(&name.as_str()) {
                Some(format!(
                    "agent node '{id}': tool '{name}' is a teammate tool; `teammates: true` gives it, inside a map"
                ))
            } else if !is_tool_name(name) {
                Some(format!(
                    "agent node '{id}': tool '{name}' is not a name a model can call (1 to 64 letters, digits, '_' or '-')"
                ))
            } else if seen.contains(&name.as_str()) {
                Some(format!("agent node '{id}': tool '{name}' is listed twice"))
            } else {
                None
            };
            if let Some(message) = problem {
                findings.push(Finding::error(message, &[id]));
            }
            seen.push(name);
        }
    }
}
