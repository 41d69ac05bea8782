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

use super::document::{did_you_mean, node_lines};
use super::expr::{CelExpr, Template};
use super::finding::Finding;
use super::model::*;
use super::raw_node::{RawDuration, RawNode, RawRetry, read_node};

const TOP_LEVEL_KEYS: [&str; 8] = [
    "version",
    "name",
    "description",
    "settings",
    "state",
    "conditions",
    "nodes",
    "edges",
];

const START: &str = "START";
const END: &str = "END";

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    from: String,
    to: String,
    when: Option<String>,
    #[serde(rename = "loop")]
    is_loop: Option<bool>,
}

/// Builds a graph from a parsed document; problems go to `findings`.
pub fn build(
    document: &Value,
    text: &str,
    format: super::Format,
    fallback_name: &str,
    findings: &mut Vec<Finding>,
) -> Graph {
    let empty = Map::new();
    let top = match document {
        Value::Object(map) => map,
        Value::Null => {
            findings.push(Finding::error("the graph file is empty", &[]));
            &empty
        }
        other => {
            findings.push(Finding::error(
                format!(
                    "the graph file must hold a map at the top level, found {}",
                    json_type_name(other)
                ),
                &[],
            ));
            &empty
        }
    };
    for key in top.keys() {
        if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
            let hint = did_you_mean(key, &TOP_LEVEL_KEYS)
                .map(|k| format!(" (did you mean '{k}'?)"))
                .unwrap_or_default();
            findings.push(Finding::error(
                format!("unknown top-level key '{key}'{hint}"),
                &[],
            ));
        }
    }
    if let Some(version) = top.get("version")
        && version != &Value::from(1)
    {
        findings.push(Finding::error(
            format!("unsupported graph version {version} (this Weft reads version 1)"),
            &[],
        ));
    }
    let name = match top.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => fallback_name.to_owned(),
    };
    let description = top
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let settings = read_settings(top.get("settings"), findings);
    let fields = read_fields(top.get("state"), findings);
    let conditions = read_conditions(top.get("conditions"), findings);

    let lines = node_lines(text, format);
    let entries = node_entries(top.get("nodes"), findings);
    let mut builder = Builder {
        index: HashMap::new(),
        conditions: &conditions,
        findings,
        edges: Vec::new(),
    };
    for (i, (id, _)) in entries.iter().enumerate() {
        builder.index.entry(id.clone()).or_insert(i);
    }
    let mut nodes = Vec::with_capacity(entries.len());
    for (idx, (id, value)) in entries.iter().enumerate() {
        let line = lines.get(id).copied();
        let before = builder.findings.len();
        let node = builder.node(idx, id, value, line);
        for finding in &mut builder.findings[before..] {
            finding.line = finding.line.or(line);
        }
        nodes.push(node);
    }
    if let Some(edges) = top.get("edges") {
        builder.edge_list(edges);
    }
    let edges = builder.edges;
    Graph::assemble(
        name,
        description,
        settings,
        fields,
        conditions,
        nodes,
        edges,
    )
}

fn read_settings(value: Option<&Value>, findings: &mut Vec<Finding>) -> Settings {
    let mut settings = Settings::default();
    let Some(value) = value else { return settings };
    let raw: RawSettings = match serde_path_to_error::deserialize(value) {
        Ok(raw) => raw,
        Err(error) => {
            findings.push(Finding::error(
                format!("settings: {}: {}", error.path(), error.inner()),
                &[],
            ));
            return settings;
        }
    };
    let positive = |name: &str, v: Option<u32>, findings: &mut Vec<Finding>| match v {
        Some(0) => {
            findings.push(Finding::error(
                format!("settings.{name} must be at least 1"),
                &[],
            ));
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
            Err(error) => findings.push(Finding::error(format!("settings.{name}: {error}"), &[])),
        }
    }
    settings.strict_state = raw.strict_state.unwrap_or(false);
    if let Some(durability) = raw.durability {
        settings.durability = match durability.as_str() {
            "sync" => Durability::Sync,
            "async" => Durability::Async,
            "exit" => Durability::Exit,
            other => {
                findings.push(Finding::error(
                    format!("settings.durability: '{other}' is not one of sync, async, exit"),
                    &[],
                ));
                Durability::Sync
            }
        };
    }
    settings
}

fn read_fields(value: Option<&Value>, findings: &mut Vec<Finding>) -> Vec<FieldDecl> {
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
        let raw: RawField = match serde_path_to_error::deserialize(decl) {
            Ok(raw) => raw,
            Err(error) => {
                findings.push(Finding::error(
                    format!("state field '{name}': {}", error.inner()),
                    &[],
                ));
                continue;
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
        let reducer = raw.reducer.as_deref().and_then(|text| {
            let reducer = Reducer::parse(text);
            if reducer.is_none() {
                findings.push(Finding::error(
                    format!("state field '{name}': unknown reducer '{text}' (reducers: concat, merge, add, union, min, max, fn:NAME)"),
                    &[],
                ));
            }
            reducer
        });
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
        fields.push(FieldDecl {
            name: name.clone(),
            ty,
            default,
            reducer,
        });
    }
    fields
}

fn read_conditions(value: Option<&Value>, findings: &mut Vec<Finding>) -> Vec<(String, CelExpr)> {
    let Some(value) = value else {
        return Vec::new();
    };
    let Some(map) = value.as_object() else {
        findings.push(Finding::error(
            "conditions: expected a map of name: CEL expression",
            &[],
        ));
        return Vec::new();
    };
    let mut conditions = Vec::new();
    for (name, source) in map {
        let Some(source) = source.as_str() else {
            findings.push(Finding::error(
                format!("condition '{name}': expected a CEL expression string"),
                &[],
            ));
            continue;
        };
        match CelExpr::compile(source) {
            Ok(expr) => conditions.push((name.clone(), expr)),
            Err(error) => {
                findings.push(Finding::error(format!("condition '{name}': {error}"), &[]))
            }
        }
    }
    conditions
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

struct Builder<'a> {
    index: HashMap<String, NodeIdx>,
    conditions: &'a [(String, CelExpr)],
    findings: &'a mut Vec<Finding>,
    edges: Vec<Edge>,
}

impl Builder<'_> {
    fn error(&mut self, message: String, nodes: &[&str]) {
        self.findings.push(Finding::error(message, nodes));
    }

    fn resolve_target(&mut self, from: &str, what: &str, id: &str) -> Option<Target> {
        if id == END {
            return Some(Target::End);
        }
        match self.index.get(id) {
            Some(&idx) => Some(Target::Node(idx)),
            None => {
                let known: Vec<&str> = self.index.keys().map(String::as_str).collect();
                let hint = did_you_mean(id, &known)
                    .map(|k| format!(" (did you mean '{k}'?)"))
                    .unwrap_or_default();
                self.error(
                    format!("node '{from}': {what} names unknown node '{id}'{hint}"),
                    &[from],
                );
                None
            }
        }
    }

    fn condition(&mut self, owner: &str, text: &str) -> Option<Condition> {
        let text = text.trim();
        if let Some(name) = text.strip_prefix("fn:") {
            return Some(Condition::Hosted(name.trim().to_owned()));
        }
        if let Some((_, expr)) = self.conditions.iter().find(|(name, _)| name == text) {
            return Some(Condition::Named(text.to_owned(), expr.clone()));
        }
        let is_bare_name = text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !matches!(text, "true" | "false" | "null");
        if is_bare_name {
            let known: Vec<&str> = self.conditions.iter().map(|(n, _)| n.as_str()).collect();
            let hint = did_you_mean(text, &known)
                .map(|k| format!(" (did you mean '{k}'?)"))
                .unwrap_or_default();
            self.error(
                format!("{owner}: `when` names unknown condition '{text}'{hint}"),
                &[],
            );
            return None;
        }
        match CelExpr::compile(text) {
            Ok(expr) => Some(Condition::Inline(expr)),
            Err(error) => {
                self.error(format!("{owner}: {error}"), &[]);
                None
            }
        }
    }

    fn template(&mut self, id: &str, field: &str, source: &str) -> Option<Template> {
        match Template::parse(source) {
            Ok(template) => Some(template),
            Err(error) => {
                self.error(format!("node '{id}': {field}: {error}"), &[id]);
                None
            }
        }
    }

    fn push_edge(&mut self, from: Endpoint, to: Target, guard: Guard, origin: EdgeOrigin) {
        self.edges.push(Edge {
            from,
            to,
            guard,
            is_loop: false,
            origin,
        });
    }

    fn node(&mut self, idx: NodeIdx, id: &str, value: &Value, line: Option<u32>) -> Node {
        let broken = |kind| Node {
            id: id.to_owned(),
            kind,
            description: None,
            end: false,
            retry: RetryPolicy::default(),
            timeout: None,
            state_updates: Vec::new(),
            output_schema: None,
            teammates: false,
            router: None,
            broken: true,
            line,
        };
        let Some(raw) = read_node(id, value, self.findings) else {
            return broken(NodeKind::Rag);
        };
        let kind = self.kind(id, &raw);
        let kind_is_broken = kind.is_none();
        let mut node = broken(kind.unwrap_or(NodeKind::Rag));
        node.broken = kind_is_broken;
        node.end = raw.end.unwrap_or(false);
        node.description = raw.description.clone();
        node.teammates = raw.teammates.unwrap_or(false);
        node.output_schema = raw.output_schema.clone();
        node.retry = self.retry(id, &raw);
        node.timeout = raw.timeout.as_ref().and_then(|t| match t.to_duration() {
            Ok(d) => Some(d),
            Err(error) => {
                self.error(format!("node '{id}': timeout: {error}"), &[id]);
                None
            }
        });
        for (field, value) in raw.state_updates.iter().flatten() {
            let update = match value {
                Value::String(source) => {
                    match self.template(id, &format!("state_updates.{field}"), source) {
                        Some(template) => UpdateValue::Template(template),
                        None => continue,
                    }
                }
                literal => UpdateValue::Literal(literal.clone()),
            };
            node.state_updates.push((field.clone(), update));
        }
        self.node_edges(idx, id, &raw, &mut node);
        node
    }

    fn retry(&mut self, id: &str, raw: &RawNode) -> RetryPolicy {
        let mut policy = RetryPolicy::default();
        match &raw.retry {
            None => {}
            Some(RawRetry::Attempts(n)) => policy.max_attempts = *n,
            Some(RawRetry::Policy(p)) => {
                if let Some(n) = p.max_attempts {
                    policy.max_attempts = n;
                }
                if let Some(b) = p.backoff {
                    policy.backoff = b;
                }
                for (name, raw_duration, slot) in [
                    ("initial_interval", &p.initial_interval, 0),
                    ("max_interval", &p.max_interval, 1),
                ] {
                    let Some(raw_duration) = raw_duration else {
                        continue;
                    };
                    match raw_duration.to_duration() {
                        Ok(d) if slot == 0 => policy.initial_interval = d,
                        Ok(d) => policy.max_interval = d,
                        Err(error) => {
                            self.error(format!("node '{id}': retry.{name}: {error}"), &[id])
                        }
                    }
                }
            }
        }
        if let Some(n) = raw.max_attempts {
            policy.max_attempts = n;
        }
        if policy.max_attempts == 0 {
            self.error(
                format!("node '{id}': max_attempts must be at least 1"),
                &[id],
            );
            policy.max_attempts = 1;
        }
        if !(policy.backoff.is_finite() && policy.backoff >= 1.0) {
            self.error(
                format!("node '{id}': retry.backoff must be a number >= 1"),
                &[id],
            );
            policy.backoff = 2.0;
        }
        policy
    }

    fn node_edges(&mut self, idx: NodeIdx, id: &str, raw: &RawNode, node: &mut Node) {
        let here = Endpoint::Node(idx);
        if raw.start == Some(true) {
            self.push_edge(
                Endpoint::Start,
                Target::Node(idx),
                Guard::Always,
                EdgeOrigin::StartFlag,
            );
        }
        for next in raw.next.clone().map(|n| n.into_vec()).unwrap_or_default() {
            if let Some(target) = self.resolve_target(id, "next", &next) {
                self.push_edge(here, target, Guard::Always, EdgeOrigin::Next);
            }
        }
        for dep in raw
            .depends_on
            .clone()
            .map(|n| n.into_vec())
            .unwrap_or_default()
        {
            if dep == START {
                self.push_edge(
                    Endpoint::Start,
                    Target::Node(idx),
                    Guard::Always,
                    EdgeOrigin::DependsOn,
                );
                continue;
            }
            match self.index.get(&dep) {
                Some(&from) => self.push_edge(
                    Endpoint::Node(from),
                    Target::Node(idx),
                    Guard::Always,
                    EdgeOrigin::DependsOn,
                ),
                None => self.error(
                    format!("node '{id}': depends_on names unknown node '{dep}'"),
                    &[id],
                ),
            }
        }
        if let Some(fallback) = &raw.fallback
            && let Some(target) = self.resolve_target(id, "fallback", fallback)
        {
            self.push_edge(here, target, Guard::Fallback, EdgeOrigin::Fallback);
        }
        if let Some(routes) = &raw.routes {
            let expr = self.condition(&format!("node '{id}': routes.router"), &routes.router);
            let mut map = Vec::new();
            for (key, target) in &routes.map {
                let Some(target_id) = target.as_str().filter(|t| !t.trim().is_empty()) else {
                    self.error(
                        format!("node '{id}': router key '{key}' has no target"),
                        &[id],
                    );
                    continue;
                };
                if let Some(target) =
                    self.resolve_target(id, &format!("router key '{key}'"), target_id)
                {
                    map.push((key.clone(), target));
                    self.push_edge(here, target, Guard::Route(key.clone()), EdgeOrigin::Routes);
                }
            }
            if let Some(expr) = expr {
                node.router = Some(Router { expr, map });
            }
        }
    }

    fn edge_list(&mut self, value: &Value) {
        let Some(list) = value.as_array() else {
            self.error(
                "edges: expected a list of {from, to, when?, loop?}".into(),
                &[],
            );
            return;
        };
        for (position, entry) in list.iter().enumerate() {
            let raw: RawEdge = match serde_path_to_error::deserialize(entry) {
                Ok(raw) => raw,
                Err(error) => {
                    self.error(format!("edges[{position}]: {}", error.inner()), &[]);
                    continue;
                }
            };
            let owner = format!("edge {} → {}", raw.from, raw.to);
            let from = if raw.from == START {
                Endpoint::Start
            } else if let Some(&idx) = self.index.get(&raw.from) {
                Endpoint::Node(idx)
            } else {
                self.error(
                    format!("{owner}: edge from unknown node '{}'", raw.from),
                    &[&raw.from],
                );
                continue;
            };
            let to = if raw.to == END {
                Target::End
            } else if let Some(&idx) = self.index.get(&raw.to) {
                Target::Node(idx)
            } else {
                self.error(
                    format!("{owner}: edge to unknown node '{}'", raw.to),
                    &[&raw.to],
                );
                continue;
            };
            if raw.to == START || raw.from == END {
                self.error(
                    format!("{owner}: START can only be a source and END only a target"),
                    &[],
                );
                continue;
            }
            let guard = match &raw.when {
                None => Guard::Always,
                Some(text) => match self.condition(&owner, text) {
                    Some(condition) => Guard::When(condition),
                    None => continue,
                },
            };
            let is_loop = raw.is_loop.unwrap_or(false);
            if is_loop && from == Endpoint::Start {
                self.error(
                    format!("{owner}: an edge from START cannot be a loop edge"),
                    &[],
                );
                continue;
            }
            self.edges.push(Edge {
                from,
                to,
                guard,
                is_loop,
                origin: EdgeOrigin::EdgeList(position),
            });
        }
    }

    fn kind(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let kind = raw.kind.as_deref()?;
        let required = |this: &mut Self, field: &str, value: &Option<String>| -> Option<String> {
            match value {
                Some(v) if !v.trim().is_empty() => Some(v.clone()),
                _ => {
                    this.error(
                        format!("node '{id}': kind '{kind}' requires field '{field}'"),
                        &[id],
                    );
                    None
                }
            }
        };
        let opt_template = |this: &mut Self, field: &str, value: &Option<String>| {
            value
                .as_ref()
                .and_then(|source| this.template(id, field, source))
        };
        Some(match kind {
            "task" => NodeKind::Task {
                handler: required(self, "handler", &raw.handler)?,
            },
            "script" => self.script(id, raw)?,
            "llm" => {
                let prompt = required(self, "prompt", &raw.prompt)?;
                NodeKind::Llm(Box::new(LlmConfig {
                    model: raw.model.clone(),
                    system: opt_template(self, "system", &raw.system),
                    prompt: self.template(id, "prompt", &prompt)?,
                    temperature: raw.temperature,
                    max_tokens: raw.max_tokens,
                    provider: raw.provider.clone(),
                }))
            }
            "agent" => {
                let prompt = required(self, "prompt", &raw.prompt)?;
                NodeKind::Agent(Box::new(AgentConfig {
                    instructions: opt_template(self, "instructions", &raw.instructions),
                    prompt: self.template(id, "prompt", &prompt)?,
                    tools: raw.tools.clone().unwrap_or_default(),
                    max_turns: raw.max_turns,
                    provider: raw.provider.clone(),
                    model: raw.model.clone(),
                }))
            }
            "approval" => NodeKind::Approval {
                prompt: opt_template(self, "prompt", &raw.prompt),
                output_key: raw.output_key.clone().unwrap_or_else(|| "approved".into()),
            },
            "input" => NodeKind::Input {
                prompt: opt_template(self, "prompt", &raw.prompt),
                output_key: required(self, "output_key", &raw.output_key)?,
                schema: raw.schema.clone(),
            },
            "map" => self.map(id, raw)?,
            "loop" => {
                let body = required(self, "body", &raw.body)?;
                let until = required(self, "until", &raw.until)?;
                let body = self.resolve_target(id, "body", &body)?.node();
                let until = if let Some(name) = until.strip_prefix("fn:") {
                    Until::Hosted(name.trim().to_owned())
                } else if let Some((name, expr)) = self.conditions.iter().find(|(n, _)| *n == until)
                {
                    Until::Condition(name.clone(), expr.clone())
                } else {
                    Until::Sentence(until)
                };
                NodeKind::Loop(Box::new(LoopConfig {
                    body,
                    until,
                    max_iterations: raw.max_iterations.unwrap_or(10),
                    output_key: raw.output_key.clone().unwrap_or_else(|| "output".into()),
                }))
            }
            "subgraph" => NodeKind::Subgraph(Box::new(SubgraphConfig {
                graph: required(self, "graph", &raw.graph)?,
                input_map: string_pairs(self, id, "input_map", raw.input_map.as_ref()),
                output_map: string_pairs(self, id, "output_map", raw.output_map.as_ref()),
            })),
            "end" => {
                let failed = match raw.status.as_deref() {
                    None | Some("completed") => false,
                    Some("failed") => true,
                    Some(other) => {
                        self.error(
                            format!(
                                "node '{id}': status '{other}' is not one of completed, failed"
                            ),
                            &[id],
                        );
                        false
                    }
                };
                NodeKind::End(EndConfig {
                    failed,
                    message: raw.message.clone(),
                })
            }
            _ => NodeKind::Rag,
        })
    }

    fn script(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let argv = match (&raw.run, &raw.script) {
            (Some(_), Some(_)) => {
                self.error(
                    format!("node '{id}': give either `run` or `script`, not both"),
                    &[id],
                );
                return None;
            }
            (Some(run), None) if !run.is_empty() => {
                if raw.args.is_some() {
                    self.error(
                        format!("node '{id}': `args` goes with `script`; put arguments in `run`"),
                        &[id],
                    );
                }
                run.clone()
            }
            (None, Some(script)) => {
                let mut argv = vec![script.clone()];
                argv.extend(raw.args.clone().unwrap_or_default());
                argv
            }
            _ => {
                self.error(
                    format!("node '{id}': kind 'script' requires `run: [argv…]` or `script: path`"),
                    &[id],
                );
                return None;
            }
        };
        let env = raw
            .env
            .iter()
            .flatten()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect();
        Some(NodeKind::Script { argv, env })
    }

    fn map(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let mut missing = Vec::new();
        for (field, value) in [
            ("over", &raw.over),
            ("as", &raw.item_name),
            ("branch", &raw.branch),
            ("collect_into", &raw.collect_into),
        ] {
            if value.as_deref().is_none_or(|v| v.trim().is_empty()) {
                missing.push(field);
            }
        }
        if !missing.is_empty() {
            self.error(
                format!(
                    "map node '{id}': missing required field{} {}",
                    if missing.len() > 1 { "s" } else { "" },
                    missing.join(", ")
                ),
                &[id],
            );
            return None;
        }
        let over_text = raw.over.clone()?;
        let over = if over_text.contains("{{") {
            ListSource::Template(self.template(id, "over", &over_text)?)
        } else {
            match CelExpr::compile(&over_text) {
                Ok(expr) => ListSource::Cel(expr),
                Err(error) => {
                    self.error(format!("map node '{id}': over: {error}"), &[id]);
                    return None;
                }
            }
        };
        let max_concurrency = match &raw.max_concurrency {
            None => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if v >= 1 && v <= u64::from(u32::MAX) => {
                    Some(ConcurrencyLimit::Fixed(v as u32))
                }
                _ => {
                    self.error(
                        format!(
                            "map node '{id}': max_concurrency must be an integer >= 1, got {n}"
                        ),
                        &[id],
                    );
                    None
                }
            },
            Some(Value::String(text)) if text.contains("{{") => Some(ConcurrencyLimit::Template(
                self.template(id, "max_concurrency", text)?,
            )),
            Some(Value::String(text)) => {
                self.error(
                    format!("map node '{id}': max_concurrency \"{text}\" is a quoted string without a template; write an integer or a \"{{{{key}}}}\" template"),
                    &[id],
                );
                None
            }
            Some(other) => {
                self.error(
                    format!(
                        "map node '{id}': max_concurrency must be an integer or a template, got {}",
                        json_type_name(other)
                    ),
                    &[id],
                );
                None
            }
        };
        let branch_id = raw.branch.clone()?;
        let branch = match self.resolve_target(id, "branch", &branch_id) {
            Some(Target::Node(idx)) => Some(idx),
            Some(Target::End) => {
                self.error(format!("map node '{id}': branch cannot be END"), &[id]);
                None
            }
            None => None,
        };
        Some(NodeKind::Map(Box::new(MapConfig {
            over,
            item_name: raw.item_name.clone()?,
            branch,
            output_key: raw.output_key.clone().unwrap_or_else(|| "output".into()),
            collect_into: raw.collect_into.clone()?,
            max_concurrency,
        })))
    }
}

fn string_pairs(
    builder: &mut Builder<'_>,
    id: &str,
    field: &str,
    map: Option<&Map<String, Value>>,
) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for (key, value) in map.into_iter().flatten() {
        match value.as_str() {
            Some(v) => pairs.push((key.clone(), v.to_owned())),
            None => builder.error(
                format!("node '{id}': {field}.{key} must be a field name"),
                &[id],
            ),
        }
    }
    pairs
}
