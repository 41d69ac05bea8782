//! State names that an expression or a template reads, or a `state_updates`
//! entry writes, and that nothing in the graph declares (SPEC 6): the most
//! common typo (`state.m` for `state.n`, `{{ autor }}`) would otherwise pass
//! validation and fail, or quietly read nothing, at run time. Declared are
//! the `state:` entries, what nodes write by name (output keys, map
//! `collect_into`, `state_updates`, `output_schema` properties, a subgraph's
//! `output_map`) and the step's scope (a map's `as`, `loop`, `output`).
//!
//! A graph that declares no state is left alone: its fields are whatever its
//! steps return. Otherwise a finding is a warning, since a script or handler
//! may still write the name, and an error under `strict_state`, where
//! nothing undeclared can be written.

use std::collections::BTreeSet;

use super::document::did_you_mean;
use super::finding::Finding;
use super::lines::{Lines, Step};
use crate::{
    ConcurrencyLimit, Condition, EdgeOrigin, Endpoint, Graph, Guard, ListSource, NodeKind,
    UpdateValue,
};

/// Names every template and expression may use besides the state's.
const SCOPE: [&str; 8] = [
    "state",
    "scope",
    "output",
    "loop",
    "range",
    "namespace",
    "true",
    "false",
];

/// Reports the undeclared names of `graph`; `lines` says where they are.
pub(crate) fn undeclared_names(graph: &Graph, lines: &Lines, findings: &mut Vec<Finding>) {
    if graph.fields.is_empty() {
        return;
    }
    // Declared other than by `state_updates` (fields, output keys, scope
    // names), and declared at all.
    let mut elsewhere = declared_outputs(graph);
    elsewhere.extend(graph.fields.iter().map(|f| f.name.clone()));
    let mut known = elsewhere.clone();
    for node in &graph.nodes {
        known.extend(node.declared_writes());
    }
    let strict = graph.settings.strict_state;
    let check = |what: String,
                 names: &mut dyn Iterator<Item = String>,
                 nodes: &[&str],
                 line: Option<u32>,
                 findings: &mut Vec<Finding>| {
        let mut seen = BTreeSet::new();
        for name in names {
            if known.contains(&name) || SCOPE.contains(&name.as_str()) || !seen.insert(name.clone())
            {
                continue;
            }
            let candidates: Vec<&str> = known.iter().map(String::as_str).collect();
            let hint = did_you_mean(&name, &candidates)
                .map(|near| format!("; did you mean '{near}'?"))
                .unwrap_or_default();
            let message = format!(
                "{what} '{name}', which no `state:` entry, node output or scope declares{hint}"
            );
            let finding = if strict {
                Finding::error(format!("{message} (settings.strict_state is on)"), nodes)
            } else {
                Finding::warning(message, nodes)
            };
            findings.push(finding.at_line(line));
        }
    };
    for (name, expr) in &graph.conditions {
        let line = lines.line(&[Step::Key("conditions"), Step::Key(name)]);
        let reads = expr.state_reads().cloned().unwrap_or_default();
        check(
            format!("condition '{name}' reads"),
            &mut reads.into_iter(),
            &[],
            line,
            findings,
        );
    }
    for edge in &graph.edges {
        let Guard::When(Condition::Inline(expr)) = &edge.guard else {
            continue;
        };
        let line = match edge.origin {
            EdgeOrigin::EdgeList(position) => {
                lines.line(&[Step::Key("edges"), Step::Index(position)])
            }
            _ => None,
        };
        let from = match edge.from {
            Endpoint::Node(idx) => graph.node(idx).id.clone(),
            Endpoint::Start => "START".to_owned(),
        };
        let owner = format!("edge {from} → {}: `when` reads", graph.target_name(edge.to));
        let reads = expr.state_reads().cloned().unwrap_or_default();
        check(owner, &mut reads.into_iter(), &[], line, findings);
    }
    for node in &graph.nodes {
        let id = node.id.as_str();
        let reads = |field: &str, names: Option<BTreeSet<String>>, findings: &mut Vec<Finding>| {
            let names = names.unwrap_or_default();
            check(
                format!("node '{id}': {field} reads"),
                &mut names.into_iter(),
                &[id],
                node.line,
                findings,
            );
        };
        if let Some(router) = &node.router
            && let Condition::Inline(expr) | Condition::Named(_, expr) = &router.expr
        {
            reads("routes.router", expr.state_reads().cloned(), findings);
        }
        // A write to a new name is how a graph without `strict_state` adds
        // a field; one a letter away from a declared field is a typo.
        if !strict {
            let fields: Vec<&str> = graph.fields.iter().map(|f| f.name.as_str()).collect();
            for (field, _) in &node.state_updates {
                if elsewhere.contains(field) {
                    continue;
                }
                if let (None, Some(near)) = (graph.field(field), did_you_mean(field, &fields)) {
                    findings.push(
                        Finding::warning(format!("node '{id}': state_updates writes '{field}', which `state:` does not declare; did you mean '{near}'?"), &[id])
                            .at_line(node.line),
                    );
                }
            }
        }
        if let Some(concurrency) = &node.concurrency {
            reads("concurrency.key", concurrency.key.state_reads(), findings);
        }
        for (field, value) in &node.state_updates {
            if let UpdateValue::Template(template) = value {
                let names = template.state_reads();
                let names = if matches!(node.kind, NodeKind::Rag(_)) {
                    without_rag_bindings(names)
                } else {
                    names
                };
                reads(&format!("state_updates.{field}"), names, findings);
            }
        }
        match &node.kind {
            NodeKind::Approval {
                prompt: Some(prompt),
                ..
            }
            | NodeKind::Input {
                prompt: Some(prompt),
                ..
            } => {
                reads("prompt", prompt.state_reads(), findings);
            }
            NodeKind::Llm(llm) => {
                reads("prompt", llm.prompt.state_reads(), findings);
                if let Some(system) = &llm.system {
                    reads("system", system.state_reads(), findings);
                }
            }
            NodeKind::Rag(rag) => {
                let templates = [
                    ("query", rag.query.as_ref()),
                    ("prompt", rag.prompt.as_ref()),
                    ("system", rag.system.as_ref()),
                ];
                for (field, template) in templates {
                    if let Some(template) = template {
                        reads(
                            field,
                            without_rag_bindings(template.state_reads()),
                            findings,
                        );
                    }
                }
            }
            NodeKind::Agent(agent) => {
                reads("prompt", agent.prompt.state_reads(), findings);
                if let Some(instructions) = &agent.instructions {
                    reads("instructions", instructions.state_reads(), findings);
                }
            }
            NodeKind::Map(map) => {
                match &map.over {
                    ListSource::Template(template) => {
                        reads("over", template.state_reads(), findings)
                    }
                    ListSource::Cel(expr) => reads("over", expr.state_reads().cloned(), findings),
                }
                if let Some(ConcurrencyLimit::Template(template)) = &map.max_concurrency {
                    reads("max_concurrency", template.state_reads(), findings);
                }
            }
            NodeKind::Subgraph(config) => {
                let names = config
                    .input_map
                    .iter()
                    .map(|(parent, _)| parent.clone())
                    .collect();
                reads("input_map", Some(names), findings);
            }
            _ => {}
        }
    }
}

/// A `rag` node's template's reads less its passages' bindings.
fn without_rag_bindings(names: Option<BTreeSet<String>>) -> Option<BTreeSet<String>> {
    names.map(|mut names| {
        for binding in crate::RAG_BINDINGS {
            names.remove(binding);
        }
        names
    })
}

/// The names nodes write by their kind's fields, and the scope names.
fn declared_outputs(graph: &Graph) -> BTreeSet<String> {
    let mut known = BTreeSet::new();
    for node in &graph.nodes {
        match &node.kind {
            NodeKind::Approval { output_key, .. } => {
                known.insert(format!("{output_key}_comment"));
                known.insert(output_key.clone());
            }
            NodeKind::Input { output_key, .. } => {
                known.insert(output_key.clone());
            }
            NodeKind::Map(map) => {
                known.insert(map.item_name.clone());
                known.insert(map.output_key.clone());
                known.insert(map.collect_into.clone());
            }
            NodeKind::Loop(config) => {
                known.insert(config.output_key.clone());
            }
            NodeKind::Function(config) => {
                known.insert(config.output_key.clone());
            }
            NodeKind::Subgraph(config) => {
                known.extend(config.output_map.iter().map(|(_, parent)| parent.clone()));
            }
            _ => {}
        }
    }
    known
}
