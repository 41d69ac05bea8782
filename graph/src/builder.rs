//! Building nodes and edges from what the file says: each node's kind and
//! fields, and every way of writing an edge (`edges:`, `next:`,
//! `depends_on:`, `routes:`, `fallback:`, `start:`) normalised into one
//! [`Edge`] list. Problems are pushed as findings and building goes on.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::cel::CelExpr;
use super::document::did_you_mean;
use super::expr::Template;
use super::finding::Finding;
use super::python_names;
use super::raw_node::{RawNode, RawRetry, read_node};
use super::*;

/// The id that names the start of a graph in edges.
pub const START: &str = "START";
/// The id that names the end of a graph in edges.
pub const END: &str = "END";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    from: String,
    to: String,
    when: Option<String>,
    #[serde(rename = "loop")]
    is_loop: Option<bool>,
}

pub(super) struct Builder<'a, 'f> {
    pub(super) index: HashMap<String, NodeIdx>,
    pub(super) conditions: &'a [(String, CelExpr)],
    /// `conditions:` entries that did not compile (reported already).
    pub(super) broken_conditions: &'a [String],
    pub(super) findings: &'a mut Vec<Finding>,
    pub(super) edges: Vec<Edge>,
    pub(super) python: super::python_names::PythonNames<'f>,
}

impl Builder<'_, '_> {
    pub(super) fn error(&mut self, message: String, nodes: &[&str]) {
        self.findings.push(Finding::error(message, nodes));
    }

    pub(super) fn resolve_target(&mut self, from: &str, what: &str, id: &str) -> Option<Target> {
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

    /// A condition or router: a `conditions:` entry, code (`fn:NAME`, a
    /// sidecar function, `module:function`), or inline CEL.
    pub(super) fn condition(&mut self, owner: &str, text: &str) -> Option<Condition> {
        let text = text.trim();
        if let Some((_, expr)) = self.conditions.iter().find(|(name, _)| name == text) {
            return Some(Condition::Named(text.to_owned(), expr.clone()));
        }
        if self.broken_conditions.iter().any(|name| name == text) {
            return None;
        }
        match self.python.resolve(text) {
            Ok(python_names::Resolved::Code(code)) => return Some(Condition::Hosted(code)),
            Ok(python_names::Resolved::NotCode) => {}
            Err(error) => {
                self.error(format!("{owner}: {error}"), &[]);
                return None;
            }
        }
        let is_bare_name = text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !matches!(text, "true" | "false" | "null");
        if is_bare_name {
            let known: Vec<&str> = self.conditions.iter().map(|(n, _)| n.as_str()).collect();
            let hint = self.python.hint(text, &known);
            let what = match self.python.sidecar() {
                Some(path) => {
                    format!("no `conditions:` entry or function of {path} is named '{text}'")
                }
                None => format!("unknown condition '{text}'"),
            };
            self.error(format!("{owner}: `when` names {what}{hint}"), &[]);
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

    pub(super) fn template(&mut self, id: &str, field: &str, source: &str) -> Option<Template> {
        match Template::parse(source) {
            Ok(template) => Some(template),
            Err(error) => {
                self.error(format!("node '{id}': {field}: {error}"), &[id]);
                None
            }
        }
    }

    pub(super) fn schema(&mut self, id: &str, field: &str, source: &Value) -> Option<Schema> {
        match Schema::compile(source) {
            Ok(schema) => Some(schema),
            Err(error) => {
                self.error(format!("node '{id}': {field} is {error}"), &[id]);
                None
            }
        }
    }

    pub(super) fn push_edge(
        &mut self,
        from: Endpoint,
        to: Target,
        guard: Guard,
        origin: EdgeOrigin,
    ) {
        self.edges.push(Edge {
            from,
            to,
            guard,
            is_loop: false,
            origin,
        });
    }

    pub(super) fn node(
        &mut self,
        idx: NodeIdx,
        id: &str,
        value: &Value,
        line: Option<u32>,
    ) -> Node {
        let broken = |kind| Node {
            id: id.to_owned(),
            kind,
            description: None,
            end: false,
            retry: RetryPolicy::default(),
            timeout: None,
            state_updates: Vec::new(),
            output_schema: None,
            concurrency: None,
            cache: None,
            teammates: false,
            router: None,
            broken: true,
            line,
        };
        let Some(raw) = read_node(id, value, self.findings) else {
            // Its `start: true` still counts, so a typo elsewhere in the
            // node is not also reported as "no start node".
            if value.get("start") == Some(&Value::Bool(true)) {
                self.push_edge(
                    Endpoint::Start,
                    Target::Node(idx),
                    Guard::Always,
                    EdgeOrigin::StartFlag,
                );
            }
            return broken(NodeKind::Broken);
        };
        let kind = self.kind(id, &raw);
        let kind_is_broken = kind.is_none();
        let mut node = broken(kind.unwrap_or(NodeKind::Broken));
        node.broken = kind_is_broken;
        node.end = raw.end.unwrap_or(false);
        node.description = raw.description.clone();
        node.teammates = raw.teammates.unwrap_or(false);
        node.output_schema = raw
            .output_schema
            .as_ref()
            .and_then(|source| self.schema(id, "output_schema", source));
        node.retry = self.retry(id, &raw);
        node.concurrency = raw
            .concurrency
            .as_ref()
            .and_then(|value| self.concurrency(id, value));
        node.cache = raw
            .cache
            .as_ref()
            .and_then(|cache| self.cache(id, cache, value, node.teammates));
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

    /// `concurrency: {key: TEMPLATE, max: N}`: a key that parses as a
    /// template and a whole `max` of at least 1, nothing else.
    fn concurrency(&mut self, id: &str, value: &Value) -> Option<ConcurrencyKey> {
        let usage = "write `concurrency: {key: \"{{ customer }}\", max: 2}`";
        let Some(fields) = value.as_object() else {
            self.error(
                format!("node '{id}': concurrency must be a mapping with `key` and `max`; {usage}"),
                &[id],
            );
            return None;
        };
        if let Some(other) = fields.keys().find(|k| !matches!(k.as_str(), "key" | "max")) {
            self.error(
                format!("node '{id}': concurrency.{other} is not a field of concurrency (it takes `key` and `max`)"),
                &[id],
            );
            return None;
        }
        let key = match fields.get("key") {
            Some(Value::String(text)) if !text.trim().is_empty() => {
                self.template(id, "concurrency.key", text)?
            }
            Some(other) => {
                self.error(
                    format!("node '{id}': concurrency.key must be a non-empty string (a template such as \"{{{{ customer }}}}\"), got {other}"),
                    &[id],
                );
                return None;
            }
            None => {
                self.error(
                    format!("node '{id}': concurrency has no `key`; {usage}"),
                    &[id],
                );
                return None;
            }
        };
        let max = match fields.get("max") {
            Some(Value::Number(n)) => match n.as_u64() {
                Some(max) if max >= 1 && max <= u64::from(u32::MAX) => max as u32,
                _ => {
                    self.error(
                        format!(
                            "node '{id}': concurrency.max must be a whole number >= 1, got {n}"
                        ),
                        &[id],
                    );
                    return None;
                }
            },
            Some(other) => {
                self.error(
                    format!(
                        "node '{id}': concurrency.max must be a whole number >= 1, got {other}"
                    ),
                    &[id],
                );
                return None;
            }
            None => {
                self.error(
                    format!("node '{id}': concurrency has no `max`; {usage}"),
                    &[id],
                );
                return None;
            }
        };
        Some(ConcurrencyKey { key, max })
    }

    /// `cache: {key: TEMPLATE, ttl: DURATION}`: a key that parses as a
    /// template and a positive `ttl`, nothing else, on a step that does not
    /// talk to teammates (a cached step would not send its messages).
    /// `node` is the node as written, whose definition the entry key hashes.
    fn cache(
        &mut self,
        id: &str,
        value: &Value,
        node: &Value,
        teammates: bool,
    ) -> Option<NodeCache> {
        let usage = "write `cache: {key: \"{{ question }}\", ttl: 1h}`";
        let Some(fields) = value.as_object() else {
            self.error(
                format!("node '{id}': cache must be a mapping with `key` and `ttl`; {usage}"),
                &[id],
            );
            return None;
        };
        if let Some(other) = fields.keys().find(|k| !matches!(k.as_str(), "key" | "ttl")) {
            self.error(
                format!(
                    "node '{id}': cache.{other} is not a field of cache (it takes `key` and `ttl`)"
                ),
                &[id],
            );
            return None;
        }
        if teammates {
            self.error(
                format!("node '{id}': cache: a step with `teammates: true` cannot be cached (a stored answer would not send or read its teammates' messages)"),
                &[id],
            );
            return None;
        }
        let key = match fields.get("key") {
            Some(Value::String(text)) if !text.trim().is_empty() => {
                self.template(id, "cache.key", text)?
            }
            Some(other) => {
                self.error(
                    format!("node '{id}': cache.key must be a non-empty string (a template such as \"{{{{ question }}}}\"), got {other}"),
                    &[id],
                );
                return None;
            }
            None => {
                self.error(format!("node '{id}': cache has no `key`; {usage}"), &[id]);
                return None;
            }
        };
        let ttl = match fields.get("ttl") {
            Some(ttl @ (Value::String(_) | Value::Number(_))) => {
                match serde_json::from_value::<super::raw_node::RawDuration>(ttl.clone())
                    .map_err(|error| error.to_string())
                    .and_then(|raw| raw.to_duration().map_err(|error| error.to_string()))
                {
                    Ok(ttl) if !ttl.is_zero() => ttl,
                    Ok(_) => {
                        self.error(
                            format!(
                                "node '{id}': cache.ttl must be longer than 0 (such as 10m or 1h)"
                            ),
                            &[id],
                        );
                        return None;
                    }
                    Err(error) => {
                        self.error(format!("node '{id}': cache.ttl: {error}"), &[id]);
                        return None;
                    }
                }
            }
            Some(other) => {
                self.error(
                    format!(
                        "node '{id}': cache.ttl must be a duration such as 10m or 1h, got {other}"
                    ),
                    &[id],
                );
                return None;
            }
            None => {
                self.error(format!("node '{id}': cache has no `ttl`; {usage}"), &[id]);
                return None;
            }
        };
        Some(NodeCache {
            key,
            ttl,
            definition: definition_hash(node),
        })
    }

    pub(super) fn retry(&mut self, id: &str, raw: &RawNode) -> RetryPolicy {
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

    pub(super) fn node_edges(&mut self, idx: NodeIdx, id: &str, raw: &RawNode, node: &mut Node) {
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

    pub(super) fn edge_list(&mut self, value: &Value, lines: &crate::lines::Lines) {
        use crate::lines::Step::{Index, Key};
        let Some(list) = value.as_array() else {
            let line = lines.line(&[Key("edges")]);
            self.findings.push(
                Finding::error("edges: expected a list of {from, to, when?, loop?}", &[])
                    .at_line(line),
            );
            return;
        };
        for (position, entry) in list.iter().enumerate() {
            let before = self.findings.len();
            self.edge_entry(position, entry);
            let line = lines.line(&[Key("edges"), Index(position)]);
            super::finding::at_line(self.findings, before, line);
        }
    }

    /// Entry `position` of `edges:`.
    fn edge_entry(&mut self, position: usize, entry: &Value) {
        {
            let raw: RawEdge = match serde_path_to_error::deserialize(entry) {
                Ok(raw) => raw,
                Err(error) => {
                    self.error(format!("edges[{position}]: {}", error.inner()), &[]);
                    return;
                }
            };
            let owner = format!("edge {} → {}", raw.from, raw.to);
            let Some((from, to)) = self.edge_ends(&owner, &raw) else {
                return;
            };
            let guard = match &raw.when {
                None => Guard::Always,
                Some(text) => match self.condition(&owner, text) {
                    Some(condition) => Guard::When(condition),
                    // Reported already, and the graph will not run; the
                    // edge still counts for reachability, so its target is
                    // not also reported unreachable.
                    None => Guard::Always,
                },
            };
            if from == Endpoint::Start
                && let Guard::When(Condition::Hosted(code)) = &guard
            {
                self.error(
                    format!(
                        "{owner}: a START edge's `when` is checked on the input before anything runs; write it in CEL, not as code ({})",
                        code.label()
                    ),
                    &[],
                );
                return;
            }
            let is_loop = raw.is_loop.unwrap_or(false);
            if is_loop && from == Endpoint::Start {
                self.error(
                    format!("{owner}: an edge from START cannot be a loop edge"),
                    &[],
                );
                return;
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

    /// An edge's source and target; `None` when either is wrong
    /// (reported).
    fn edge_ends(&mut self, owner: &str, raw: &RawEdge) -> Option<(Endpoint, Target)> {
        if raw.to == START || raw.from == END {
            self.error(
                format!("{owner}: START can only be a source and END only a target"),
                &[],
            );
            return None;
        }
        let from = if raw.from == START {
            Endpoint::Start
        } else if let Some(&idx) = self.index.get(&raw.from) {
            Endpoint::Node(idx)
        } else {
            let hint = self.node_hint(&raw.from);
            self.error(
                format!("{owner}: edge from unknown node '{}'{hint}", raw.from),
                &[&raw.from],
            );
            return None;
        };
        let to = if raw.to == END {
            Target::End
        } else if let Some(&idx) = self.index.get(&raw.to) {
            Target::Node(idx)
        } else {
            let hint = self.node_hint(&raw.to);
            self.error(
                format!("{owner}: edge to unknown node '{}'{hint}", raw.to),
                &[&raw.to],
            );
            return None;
        };
        Some((from, to))
    }

    /// ` (did you mean 'X'?)` for a node id close to `id`, else nothing.
    fn node_hint(&self, id: &str) -> String {
        let known: Vec<&str> = self.index.keys().map(String::as_str).collect();
        did_you_mean(id, &known)
            .map(|k| format!(" (did you mean '{k}'?)"))
            .unwrap_or_default()
    }

    pub(super) fn kind(&mut self, id: &str, raw: &RawNode) -> Option<NodeKind> {
        let kind = raw.kind.as_deref()?;
        Some(match kind {
            "task" => NodeKind::Task {
                handler: self.required(id, kind, "handler", &raw.handler)?,
            },
            "script" => self.script(id, raw)?,
            "llm" => self.llm(id, raw)?,
            "rag" => self.rag(id, raw)?,
            "agent" => self.agent(id, raw)?,
            "approval" => NodeKind::Approval {
                prompt: self.optional_template(id, "prompt", &raw.prompt),
                output_key: raw.output_key.clone().unwrap_or_else(|| "approved".into()),
                approvers: self.approvers(id, raw.approvers.as_deref()),
            },
            "input" => NodeKind::Input {
                prompt: self.optional_template(id, "prompt", &raw.prompt),
                output_key: self.required(id, kind, "output_key", &raw.output_key)?,
                schema: raw
                    .schema
                    .as_ref()
                    .and_then(|source| self.schema(id, "schema", source)),
                approvers: self.approvers(id, raw.approvers.as_deref()),
            },
            "map" => self.map(id, raw)?,
            "loop" => self.loop_kind(id, raw)?,
            "subgraph" => NodeKind::Subgraph(Box::new(SubgraphConfig {
                graph: self.subgraph_file(id, raw.graph.as_ref())?,
                input_map: string_pairs(self, id, "input_map", raw.input_map.as_ref()),
                output_map: string_pairs(self, id, "output_map", raw.output_map.as_ref()),
            })),
            "end" => self.end(id, raw),
            "function" | "python" => self.function(id, raw)?,
            _ => NodeKind::Broken,
        })
    }

    /// A field the kind requires, non-blank; reported when missing.
    pub(super) fn required(
        &mut self,
        id: &str,
        kind: &str,
        field: &str,
        value: &Option<String>,
    ) -> Option<String> {
        match value {
            Some(v) if !v.trim().is_empty() => Some(v.clone()),
            _ => {
                self.error(
                    format!("node '{id}': kind '{kind}' requires field '{field}'"),
                    &[id],
                );
                None
            }
        }
    }

    /// An optional template field, compiled when given.
    pub(super) fn optional_template(
        &mut self,
        id: &str,
        field: &str,
        value: &Option<String>,
    ) -> Option<Template> {
        value
            .as_ref()
            .and_then(|source| self.template(id, field, source))
    }
}

fn string_pairs(
    builder: &mut Builder<'_, '_>,
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

/// SHA-256 (hex) of what a node does, as written: its `kind` and own
/// fields, not the fields every kind takes (its id, wiring and
/// description) nor its cache's `ttl`, with every mapping's keys sorted, so
/// that reordering or rewiring a node keeps its cache and changing anything
/// it runs with does not.
fn definition_hash(node: &Value) -> String {
    use sha2::{Digest, Sha256};
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(fields) => {
                let mut fields: Map<String, Value> =
                    fields.iter().map(|(k, v)| (k.clone(), sorted(v))).collect();
                fields.sort_keys();
                Value::Object(fields)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let mut what = sorted(node);
    if let Value::Object(fields) = &mut what {
        // Removed in place: what stays keeps its sorted order.
        for common in super::raw_node::COMMON_FIELDS {
            if common != "kind" {
                fields.shift_remove(common);
            }
        }
        if let Some(Value::Object(cache)) = fields.get_mut("cache") {
            cache.shift_remove("ttl");
        }
    }
    hex::encode(Sha256::digest(what.to_string().as_bytes()))
}
