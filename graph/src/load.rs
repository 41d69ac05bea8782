//! Turning a parsed document into a [`Graph`]: settings, declared state,
//! conditions, nodes, and every form of edge normalised into one model.
//!
//! Loading never stops at the first problem: each one becomes a [`Finding`]
//! and loading goes on, so `weft validate` can list them all. A node that
//! cannot be read still exists (marked `broken`), so edges to it are not also
//! reported as pointing at an unknown node.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::builder::Builder;
use super::cel::CelExpr;
use super::document::{did_you_mean, node_lines};
use super::finding::{Finding, at_line};
use super::lines::Lines;
use super::lines::Step::Key;
use super::python::SourceFiles;
use super::python_names::{PythonNames, Resolved};
use super::raw_node::RawDuration;
use super::*;

/// The keys a graph file may have at its top level.
pub const TOP_LEVEL_KEYS: [&str; 13] = [
    "version",
    "name",
    "description",
    "settings",
    "state",
    "initial_state",
    "conditions",
    "functions",
    "tools",
    "agents",
    "knowledge",
    "nodes",
    "edges",
];

use super::builder::{END, START};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    max_steps: Option<u32>,
    max_concurrency: Option<u32>,
    max_node_concurrency: Option<u32>,
    max_loop_iterations: Option<u32>,
    timeout: Option<RawDuration>,
    node_timeout: Option<RawDuration>,
    strict_state: Option<bool>,
    durability: Option<String>,
    priority: Option<String>,
    budget: Option<Value>,
    cache: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    #[serde(rename = "type")]
    ty: Option<String>,
    default: Option<Value>,
    reducer: Option<String>,
    description: Option<String>,
}

/// Builds a graph from a parsed document; problems go to `findings`.
/// `files` reads the Python files the graph names beside it.
pub fn build(
    document: &Value,
    text: &str,
    format: super::Format,
    fallback_name: &str,
    files: SourceFiles<'_>,
    findings: &mut Vec<Finding>,
) -> Graph {
    let empty = Map::new();
    let lines = Lines::read(text, format);
    let top = top_level(document, &lines, findings).unwrap_or(&empty);
    let name = match top.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => fallback_name.to_owned(),
    };
    let description = top
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let settings = read_settings(top.get("settings"), &lines, findings);
    let before = findings.len();
    let mut python = python_names(top.get("functions"), files, findings);
    at_line(findings, before, lines.line(&[Key("functions")]));
    let mut fields = read_fields(top.get("state"), &mut python, &lines, findings);
    seed_fields(top.get("initial_state"), &mut fields, &lines, findings);
    let (conditions, broken_conditions) = read_conditions(top.get("conditions"), &lines, findings);
    let tools = super::tools::read_tools(top.get("tools"), &lines, findings);
    let mut agents = super::agents::NamedAgents::read(top.get("agents"), &lines, findings);
    let knowledge = super::knowledge::read_knowledge(top.get("knowledge"), &lines, findings);

    let node_lines = node_lines(text, format);
    let before = findings.len();
    let mut entries = node_entries(top.get("nodes"), findings);
    agents.apply(&mut entries, files, findings);
    for finding in &mut findings[before..] {
        let first = finding.nodes.first().and_then(|id| node_lines.get(id));
        finding.line = finding.line.or(first.copied());
    }
    let mut builder = Builder {
        index: HashMap::new(),
        conditions: &conditions,
        broken_conditions: &broken_conditions,
        findings,
        edges: Vec::new(),
        python,
    };
    for (i, (id, _)) in entries.iter().enumerate() {
        builder.index.entry(id.clone()).or_insert(i);
    }
    let mut nodes = Vec::with_capacity(entries.len());
    for (idx, (id, value)) in entries.iter().enumerate() {
        let line = node_lines.get(id).copied();
        let before = builder.findings.len();
        let node = builder.node(idx, id, value, line);
        at_line(builder.findings, before, line);
        nodes.push(node);
    }
    if let Some(edges) = top.get("edges") {
        builder.edge_list(edges, &lines);
    }
    let edges = builder.edges;
    let python = builder.python;
    let mut graph = Graph::assemble(
        name,
        description,
        settings,
        fields,
        conditions,
        nodes,
        edges,
    );
    graph.tools = tools;
    graph.functions = python.sidecar().map(str::to_owned);
    graph.python_files = python.bundled;
    graph.agent_files = agents.files;
    graph.knowledge = knowledge;
    super::state_names::undeclared_names(&graph, &lines, findings);
    graph
}

/// `functions:`: the sidecar, read through `files`.
fn python_names<'a>(
    value: Option<&Value>,
    files: SourceFiles<'a>,
    findings: &mut Vec<Finding>,
) -> PythonNames<'a> {
    let sidecar = match value {
        None | Some(Value::Null) => None,
        Some(Value::String(path)) => Some(path.as_str()),
        Some(other) => {
            findings.push(Finding::error(
                format!(
                    "functions: expected the path of a .py file beside the graph, found {}",
                    json_type_name(other)
                ),
                &[],
            ));
            None
        }
    };
    let (names, problem) = PythonNames::new(files, sidecar);
    if let Some(problem) = problem {
        findings.push(Finding::error(problem, &[]));
    }
    names
}

/// The document's top-level map, its keys and version checked; `None` for
/// a document that is not a map (reported).
fn top_level<'d>(
    document: &'d Value,
    lines: &Lines,
    findings: &mut Vec<Finding>,
) -> Option<&'d Map<String, Value>> {
    let top = match document {
        Value::Object(map) => map,
        Value::Null => {
            findings.push(Finding::error("the graph file is empty", &[]));
            return None;
        }
        other => {
            findings.push(Finding::error(
                format!(
                    "the graph file must hold a map at the top level, found {}",
                    json_type_name(other)
                ),
                &[],
            ));
            return None;
        }
    };
    for key in top.keys() {
        if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
            let hint = did_you_mean(key, &TOP_LEVEL_KEYS)
                .map(|k| format!(" (did you mean '{k}'?)"))
                .unwrap_or_default();
            findings.push(
                Finding::error(format!("unknown top-level key '{key}'{hint}"), &[])
                    .at_line(lines.line(&[Key(key)])),
            );
        }
    }
    if let Some(version) = top.get("version")
        && version != &Value::from(1)
    {
        findings.push(
            Finding::error(
                format!("unsupported graph version {version} (this Weft reads version 1)"),
                &[],
            )
            .at_line(lines.line(&[Key("version")])),
        );
    }
    Some(top)
}

fn read_settings(value: Option<&Value>, lines: &Lines, findings: &mut Vec<Finding>) -> Settings {
    let mut settings = Settings::default();
    let Some(value) = value else { return settings };
    // A finding about a setting points at its key (or at `settings:`).
    let line = |name: &str| {
        lines
            .line(&[Key("settings"), Key(name)])
            .or(lines.line(&[Key("settings")]))
    };
    let raw: RawSettings = match serde_path_to_error::deserialize(value) {
        Ok(raw) => raw,
        Err(error) => {
            let key = error.path().to_string();
            findings.push(
                Finding::error(format!("settings: {key}: {}", error.inner()), &[])
                    .at_line(line(&key)),
            );
            return settings;
        }
    };
    let positive = |name: &str, v: Option<u32>, findings: &mut Vec<Finding>| match v {
        Some(0) => {
            findings.push(
                Finding::error(format!("settings.{name} must be at least 1"), &[])
                    .at_line(line(name)),
            );
            None
        }
        other => other,
    };
    if let Some(v) = positive("max_steps", raw.max_steps, findings) {
        settings.max_steps = v;
    }
    if let Some(v) = positive("max_concurrency", raw.max_concurrency, findings) {
        settings.max_concurrency = v;
    }
    if let Some(v) = raw.max_node_concurrency {
        settings.max_node_concurrency = v;
    }
    if let Some(v) = positive("max_loop_iterations", raw.max_loop_iterations, findings) {
        settings.max_loop_iterations = v;
    }
    for (name, raw_duration, slot) in [
        ("timeout", &raw.timeout, 0),
        ("node_timeout", &raw.node_timeout, 1),
    ] {
        let Some(raw_duration) = raw_duration else {
            continue;
        };
        match raw_duration.to_duration() {
            Ok(duration) if slot == 0 => settings.timeout = Some(duration),
            Ok(duration) => settings.node_timeout = duration,
            Err(error) => findings
                .push(Finding::error(format!("settings.{name}: {error}"), &[]).at_line(line(name))),
        }
    }
    settings.strict_state = raw.strict_state.unwrap_or(false);
    settings.cache = raw.cache.unwrap_or(true);
    if let Some(durability) = raw.durability {
        settings.durability = match durability.as_str() {
            "sync" => Durability::Sync,
            "async" => Durability::Async,
            "exit" => Durability::Exit,
            other => {
                findings.push(
                    Finding::error(
                        format!("settings.durability: '{other}' is not one of sync, async, exit"),
                        &[],
                    )
                    .at_line(line("durability")),
                );
                Durability::Sync
            }
        };
    }
    if let Some(budget) = &raw.budget {
        match run_budget(budget) {
            Ok(budget) => settings.budget = Some(budget),
            Err(why) => findings.push(
                Finding::error(format!("settings.budget: {why}"), &[]).at_line(line("budget")),
            ),
        }
    }
    if let Some(priority) = raw.priority {
        match Priority::parse(&priority) {
            Some(priority) => settings.priority = priority,
            None => findings.push(
                Finding::error(
                    format!("settings.priority: '{priority}' is not one of high, normal, low"),
                    &[],
                )
                .at_line(line("priority")),
            ),
        }
    }
    settings
}

fn read_fields(
    value: Option<&Value>,
    python: &mut PythonNames<'_>,
    lines: &Lines,
    findings: &mut Vec<Finding>,
) -> Vec<FieldDecl> {
    let Some(value) = value else {
        return Vec::new();
    };
    let Some(map) = value.as_object() else {
        findings.push(Finding::error(
            "state: expected a map of field declarations",
            &[],
        ));
        return Vec::new();
    };
    let mut fields = Vec::new();
    for (name, decl) in map {
        let before = findings.len();
        let field = read_field(name, decl, python, findings);
        at_line(findings, before, lines.line(&[Key("state"), Key(name)]));
        fields.extend(field);
    }
    fields
}

/// `initial_state:`: values the fields start with, laid over the declared
/// defaults (the run's input still wins). A field it names that `state:`
/// does not declare is declared here, of any type, starting with the
/// value.
fn seed_fields(
    value: Option<&Value>,
    fields: &mut Vec<FieldDecl>,
    lines: &Lines,
    findings: &mut Vec<Finding>,
) {
    let Some(value) = value else { return };
    let Some(map) = value.as_object() else {
        findings.push(
            Finding::error(
                format!(
                    "initial_state: expected a map of field names to values, found {}",
                    json_type_name(value)
                ),
                &[],
            )
            .at_line(lines.line(&[Key("initial_state")])),
        );
        return;
    };
    for (name, value) in map {
        match fields.iter_mut().find(|field| field.name == *name) {
            Some(field) if !field.ty.admits(value) => findings.push(
                Finding::error(
                    format!(
                        "initial_state: '{name}' is {}, but state field '{name}' is declared {}",
                        json_type_name(value),
                        field.ty.name()
                    ),
                    &[],
                )
                .at_line(lines.line(&[Key("initial_state"), Key(name)])),
            ),
            Some(field) => field.default = value.clone(),
            None => fields.push(FieldDecl {
                name: name.clone(),
                ty: FieldType::Any,
                default: value.clone(),
                reducer: None,
            }),
        }
    }
}

/// One `state:` entry.
fn read_field(
    name: &str,
    decl: &Value,
    python: &mut PythonNames<'_>,
    findings: &mut Vec<Finding>,
) -> Option<FieldDecl> {
    {
        let raw: RawField = match serde_path_to_error::deserialize(decl) {
            Ok(raw) => raw,
            Err(error) => {
                findings.push(Finding::error(
                    format!("state field '{name}': {}", error.inner()),
                    &[],
                ));
                return None;
            }
        };
        let _ = raw.description;
        let ty = match raw.ty.as_deref() {
            None => FieldType::Any,
            Some(text) => FieldType::parse(text).unwrap_or_else(|| {
                findings.push(Finding::error(
                    format!("state field '{name}': unknown type '{text}' (types: any, string, number, integer, boolean, array, object)"),
                    &[],
                ));
                FieldType::Any
            }),
        };
        let reducer = raw
            .reducer
            .as_deref()
            .and_then(|text| reducer(name, text, python, findings));
        if let Some(reducer) = &reducer
            && !reducer.fits(ty)
        {
            findings.push(Finding::error(
                format!(
                    "state field '{name}': reducer '{}' cannot combine values of type {}",
                    reducer.name(),
                    ty.name()
                ),
                &[],
            ));
        }
        let default = raw.default.unwrap_or(Value::Null);
        if !ty.admits(&default) {
            findings.push(Finding::error(
                format!(
                    "state field '{name}': default is {}, declared {}",
                    json_type_name(&default),
                    ty.name()
                ),
                &[],
            ));
        }
        Some(FieldDecl {
            name: name.to_owned(),
            ty,
            default,
            reducer,
        })
    }
}

/// A field's `reducer:`: a built-in, `fn:NAME`, or a Python name.
fn reducer(
    field: &str,
    text: &str,
    python: &mut PythonNames<'_>,
    findings: &mut Vec<Finding>,
) -> Option<Reducer> {
    if let Some(reducer) = Reducer::builtin(text) {
        return Some(reducer);
    }
    match python.resolve(text) {
        Ok(Resolved::Code(code)) => Some(Reducer::Hosted(code)),
        Ok(Resolved::NotCode) => {
            const BUILTIN: [&str; 6] = ["concat", "merge", "add", "union", "min", "max"];
            let hint = python.hint(text, &BUILTIN);
            let sidecar = python
                .sidecar()
                .map(|path| format!(", a function of {path}"))
                .unwrap_or_default();
            findings.push(Finding::error(
                format!("state field '{field}': unknown reducer '{text}'{hint} (reducers: concat, merge, add, union, min, max, fn:NAME, module:function{sidecar})"),
                &[],
            ));
            None
        }
        Err(error) => {
            findings.push(Finding::error(
                format!("state field '{field}': reducer {error}"),
                &[],
            ));
            None
        }
    }
}

/// `conditions:`: the entries that compile, and the names of those that
/// do not (reported here once, so that what names them is not reported
/// again as naming an unknown condition).
fn read_conditions(
    value: Option<&Value>,
    lines: &Lines,
    findings: &mut Vec<Finding>,
) -> (Vec<(String, CelExpr)>, Vec<String>) {
    let (mut conditions, mut broken) = (Vec::new(), Vec::new());
    let Some(value) = value else {
        return (conditions, broken);
    };
    let Some(map) = value.as_object() else {
        findings.push(
            Finding::error("conditions: expected a map of name: CEL expression", &[])
                .at_line(lines.line(&[Key("conditions")])),
        );
        return (conditions, broken);
    };
    for (name, source) in map {
        let line = lines.line(&[Key("conditions"), Key(name)]);
        let compiled = match source.as_str() {
            Some(source) => CelExpr::compile(source).map_err(|e| e.to_string()),
            None => Err("expected a CEL expression string".to_owned()),
        };
        match compiled {
            Ok(expr) => conditions.push((name.clone(), expr)),
            Err(error) => {
                findings.push(
                    Finding::error(format!("condition '{name}': {error}"), &[]).at_line(line),
                );
                broken.push(name.clone());
            }
        }
    }
    (conditions, broken)
}

/// `(id, value)` for every node, from the map form or the list form.
fn node_entries(value: Option<&Value>, findings: &mut Vec<Finding>) -> Vec<(String, Value)> {
    let mut entries: Vec<(String, Value)> = Vec::new();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (id, node) in map {
                if let Some(inner) = node.get("id").and_then(Value::as_str)
                    && inner != id
                {
                    findings.push(Finding::error(
                        format!("node '{id}': its `id` field says '{inner}'"),
                        &[id],
                    ));
                }
                entries.push((id.clone(), node.clone()));
            }
        }
        Some(Value::Array(list)) => {
            for (position, node) in list.iter().enumerate() {
                match node.get("id").and_then(Value::as_str) {
                    Some(id) => entries.push((id.to_owned(), node.clone())),
                    None => findings.push(Finding::error(
                        format!("nodes[{position}]: missing field 'id' (in the list form every node needs one)"),
                        &[],
                    )),
                }
            }
        }
        Some(other) => findings.push(Finding::error(
            format!(
                "nodes: expected a map of node id to node, found {}",
                json_type_name(other)
            ),
            &[],
        )),
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (id, _) in &entries {
        *seen.entry(id).or_default() += 1;
    }
    let mut reported = Vec::new();
    for (id, _) in &entries {
        if seen[id.as_str()] > 1 && !reported.contains(id) {
            findings.push(Finding::error(format!("duplicate node id '{id}'"), &[id]));
            reported.push(id.clone());
        }
        if id == START || id == END {
            findings.push(Finding::error(format!("node id '{id}' is reserved"), &[id]));
        }
        if id.is_empty() {
            findings.push(Finding::error("a node has an empty id", &[]));
        }
    }
    entries.retain(|(id, _)| id != START && id != END);
    entries
}

/// `settings.budget: {tokens: 500000, cost: 5.00}`: a whole number of
/// tokens of at least 1, a cost above 0, at least one of them.
fn run_budget(value: &Value) -> Result<RunBudget, String> {
    let Some(fields) = value.as_object() else {
        return Err(format!(
            "must be a mapping such as {{tokens: 500000, cost: 5.00}}, got {value}"
        ));
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "tokens" | "cost"))
    {
        return Err(format!(
            "'{other}' is not a budget (it takes tokens and cost)"
        ));
    }
    let tokens = match fields.get("tokens") {
        None => None,
        Some(n) => match n.as_u64() {
            Some(n) if n >= 1 => Some(n),
            _ => {
                return Err(format!(
                    "tokens must be a whole number of at least 1, got {n}"
                ));
            }
        },
    };
    let cost = match fields.get("cost") {
        None => None,
        Some(n) => match n.as_f64() {
            Some(c) if c.is_finite() && c > 0.0 => Some(c),
            _ => return Err(format!("cost must be a number above 0, got {n}")),
        },
    };
    if tokens.is_none() && cost.is_none() {
        return Err("give tokens, cost or both".into());
    }
    Ok(RunBudget { tokens, cost })
}
