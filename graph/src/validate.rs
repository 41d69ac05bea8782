//! Structural validation (SPEC section 6): rules that need the whole graph.
//!
//! Every rule reports into one list and names the nodes involved; nothing
//! stops at the first problem. Rules about single fields (unknown keys, bad
//! expressions, missing required fields) are checked while loading.

use super::document::did_you_mean;
use super::finding::Finding;
use super::topology::{container_members, forward_order, forward_region, main_flow};
use super::{Endpoint, Graph, Guard, NodeIdx, NodeKind, Target};

#[path = "validate_chains.rs"]
mod chains;

use chains::{loop_body, loop_until, map_branch};

/// Runs every structural rule and returns the findings.
pub fn validate(graph: &Graph) -> Vec<Finding> {
    let mut findings = Vec::new();
    start_and_reachability(graph, &mut findings);
    cycles(graph, &mut findings);
    loop_edges(graph, &mut findings);
    kinds(graph, &mut findings);
    teammates(graph, &mut findings);
    super::tools::check_agent_tools(graph, &mut findings);
    fan_out_targets(graph, &mut findings);
    routed_edges(graph, &mut findings);
    for idx in 0..graph.nodes.len() {
        if graph.node(idx).broken {
            continue;
        }
        match &graph.node(idx).kind {
            NodeKind::Map(_) => map_branch(graph, idx, &mut findings),
            NodeKind::Loop(_) => loop_body(graph, idx, &mut findings),
            _ => {}
        }
    }
    strict_state(graph, &mut findings);
    function_parameters(graph, &mut findings);
    for finding in &mut findings {
        if finding.line.is_none()
            && let Some(first) = finding.nodes.first()
            && let Some(idx) = graph.node_index(first)
        {
            finding.line = graph.node(idx).line;
        }
    }
    findings
}

fn start_and_reachability(graph: &Graph, findings: &mut Vec<Finding>) {
    if graph.nodes.is_empty() {
        findings.push(Finding::error("the graph has no nodes", &[]));
        return;
    }
    if graph.start_nodes().is_empty() {
        findings.push(Finding::error(
            "no start node: mark a node `start: true` or add an edge from START",
            &[],
        ));
        return;
    }
    let mut reached = main_flow(graph);
    // A reached container reaches its members, containers inside
    // containers included; each container is expanded once.
    let mut pending: Vec<NodeIdx> = (0..graph.nodes.len()).filter(|&i| reached[i]).collect();
    while let Some(idx) = pending.pop() {
        for member in container_members(graph, idx) {
            if !std::mem::replace(&mut reached[member], true) {
                pending.push(member);
            }
        }
    }
    for (idx, node) in graph.nodes.iter().enumerate() {
        // A node that could not be read has already been reported; its
        // edges are unknown, so calling it unreachable would only be noise.
        if !reached[idx] && !node.broken {
            findings.push(Finding::error(
                format!(
                    "node '{}' is unreachable from the start (no start flag and no incoming edge from a reachable node)",
                    node.id
                ),
                &[&node.id],
            ));
        }
    }
}

fn cycles(graph: &Graph, findings: &mut Vec<Finding>) {
    let Err(cycles) = forward_order(graph) else {
        return;
    };
    // Each cycle is one finding; past a few, the rest are counted.
    const SHOWN: usize = 10;
    if cycles.len() > SHOWN {
        findings.push(Finding::error(
            format!(
                "{} more cycles through forward edges beyond the {SHOWN} listed",
                cycles.len() - SHOWN
            ),
            &[],
        ));
    }
    for cycle in cycles.into_iter().take(SHOWN) {
        let names: Vec<&str> = cycle.iter().map(|&i| graph.node(i).id.as_str()).collect();
        let back_from = names[names.len() - 2];
        let back_to = names[names.len() - 1];
        // Inside a map branch, loop edges are not allowed: the advice that
        // works there is a script's `_next`.
        let branch_of = (0..graph.nodes.len()).find(|&m| {
            matches!(graph.node(m).kind, NodeKind::Map(_))
                && cycle
                    .iter()
                    .all(|i| container_members(graph, m).contains(i))
        });
        if let Some(map) = branch_of {
            findings.push(Finding::error(
                format!(
                    "cycle through forward edges inside map '{}''s branch: {}; a branch chain repeats only through a script's `_next` (e.g. {back_from} returns `_next: {back_to}`), so remove the edge {back_from} → {back_to}",
                    graph.node(map).id,
                    names.join(" → ")
                ),
                &names[..names.len() - 1],
            ));
            continue;
        }
        findings.push(Finding::error(
            format!(
                "cycle through forward edges: {}; mark the back-edge `loop: true` (e.g. {back_from} → {back_to})",
                names.join(" → ")
            ),
            &names[..names.len() - 1],
        ));
    }
}

fn loop_edges(graph: &Graph, findings: &mut Vec<Finding>) {
    for edge in graph.edges.iter().filter(|e| e.is_loop) {
        let (Endpoint::Node(from), Target::Node(to)) = (edge.from, edge.to) else {
            if let Endpoint::Node(from) = edge.from {
                let id = &graph.node(from).id;
                findings.push(Finding::error(
                    format!("edge {id} → END cannot be a loop edge"),
                    &[id],
                ));
            }
            continue;
        };
        if !forward_region(graph, to)[from] {
            let (a, b) = (&graph.node(from).id, &graph.node(to).id);
            findings.push(Finding::warning(
                format!("edge {a} → {b} is marked `loop: true` but '{b}' is not upstream of '{a}'; taking it re-runs '{b}' and what follows it"),
                &[a, b],
            ));
        }
    }
}

/// `teammates: true` makes a team of a map's items (SPEC 5); anywhere else
/// (the main flow, a loop's body, which is one item) the step gets no team,
/// which is worth a warning rather than silence.
fn teammates(graph: &Graph, findings: &mut Vec<Finding>) {
    let mut in_map = vec![false; graph.nodes.len()];
    for (idx, node) in graph.nodes.iter().enumerate() {
        if matches!(node.kind, NodeKind::Map(_)) {
            for member in container_members(graph, idx) {
                in_map[member] = true;
            }
        }
    }
    for (idx, node) in graph.nodes.iter().enumerate() {
        if node.teammates && !in_map[idx] {
            let id = node.id.as_str();
            findings.push(Finding::warning(
                format!(
                    "node '{id}': `teammates: true` gives a team only to the steps of a map's branch \
                     (one member per item); here the step runs without one"
                ),
                &[id],
            ));
        }
    }
}

/// A `function` node's parameter that names nothing the call supplies
/// receives nothing (seed 002's gotcha): warned about, with what it is
/// closest to. Signatures come from the Python file beside the graph; a
/// function from an installed package is not checked.
fn function_parameters(graph: &Graph, findings: &mut Vec<Finding>) {
    let mut supplied: Vec<&str> = graph.fields.iter().map(|f| f.name.as_str()).collect();
    for node in &graph.nodes {
        supplied.push(&node.id);
        match &node.kind {
            NodeKind::Approval { output_key, .. } | NodeKind::Input { output_key, .. } => {
                supplied.push(output_key)
            }
            NodeKind::Loop(config) => supplied.push(&config.output_key),
            NodeKind::Map(map) => supplied.push(&map.collect_into),
            NodeKind::Function(function) => supplied.push(&function.output_key),
            _ => {}
        }
    }
    let writes: Vec<String> = graph
        .nodes
        .iter()
        .flat_map(|n| n.declared_writes())
        .collect();
    supplied.extend(writes.iter().map(String::as_str));
    let mut scope: Vec<Vec<&str>> = vec![Vec::new(); graph.nodes.len()];
    for (idx, node) in graph.nodes.iter().enumerate() {
        let name = match &node.kind {
            NodeKind::Map(map) => map.item_name.as_str(),
            NodeKind::Loop(_) => "loop",
            _ => continue,
        };
        for member in container_members(graph, idx) {
            scope[member].push(name);
        }
    }
    for (idx, node) in graph.nodes.iter().enumerate() {
        let NodeKind::Function(function) = &node.kind else {
            continue;
        };
        let Some(params) = function.definition.as_ref().and_then(|d| d.params.as_ref()) else {
            continue;
        };
        let mut known = supplied.clone();
        known.extend(function.tool_args.keys().map(String::as_str));
        known.extend(scope[idx].iter().copied());
        for param in params.iter().filter(|p| !known.contains(&p.name.as_str())) {
            let hint = super::did_you_mean(&param.name, &known)
                .map(|k| format!(" (did you mean '{k}'?)"))
                .unwrap_or_default();
            let effect = if param.required {
                "the call fails without it"
            } else {
                "it always takes its default"
            };
            findings.push(Finding::warning(
                format!(
                    "function node '{}': parameter '{}' of {} names no state field, node, tool_args key or scope variable, so it receives nothing ({effect}){hint}",
                    node.id,
                    param.name,
                    function.callable.label()
                ),
                &[&node.id],
            ));
        }
    }
}

fn kinds(graph: &Graph, findings: &mut Vec<Finding>) {
    for (idx, node) in graph.nodes.iter().enumerate() {
        let id = node.id.as_str();
        match &node.kind {
            NodeKind::Rag(rag) => rag_rules(graph, node, rag, findings),
            NodeKind::Loop(config) => loop_until(graph, id, &config.until, findings),
            NodeKind::End(_) => {
                let onward = graph
                    .out_edges(idx)
                    .iter()
                    .any(|&e| !matches!(graph.edges[e].guard, Guard::Fallback));
                if onward {
                    findings.push(Finding::warning(
                        format!("end node '{id}' has outgoing edges; they are never followed"),
                        &[id],
                    ));
                }
            }
            _ => {}
        }
    }
}

/// Approval and input nodes may not be the immediate target of a static
/// fan-out, START's included (`start: true` on several nodes): N
/// concurrent prompts cannot be answered sensibly.
fn fan_out_targets(graph: &Graph, findings: &mut Vec<Finding>) {
    let unconditional = |from: Option<NodeIdx>| -> Vec<NodeIdx> {
        graph
            .edges
            .iter()
            .filter(|e| match from {
                Some(idx) => e.from == crate::Endpoint::Node(idx),
                None => e.from == crate::Endpoint::Start,
            })
            .filter(|e| e.is_forward() && matches!(e.guard, Guard::Always))
            .filter_map(|e| e.to.node())
            .collect()
    };
    let sources = std::iter::once(None).chain((0..graph.nodes.len()).map(Some));
    for from in sources {
        let targets = unconditional(from);
        if targets.len() < 2 {
            continue;
        }
        let source = from.map_or("START", |idx| graph.node(idx).id.as_str());
        for target in targets {
            let target_node = graph.node(target);
            if matches!(
                target_node.kind,
                NodeKind::Approval { .. } | NodeKind::Input { .. }
            ) {
                findings.push(Finding::error(
                    format!(
                        "{} node '{}' is a fan-out target of '{source}'; put approval and input nodes after the join",
                        target_node.kind.name(),
                        target_node.id,
                    ),
                    &[&target_node.id, source],
                ));
            }
        }
    }
}

/// A node with `routes` takes only the targets its router names (SPEC 3,
/// priority 2 before 3): its plain and `when` edges would never be taken.
fn routed_edges(graph: &Graph, findings: &mut Vec<Finding>) {
    for (idx, node) in graph.nodes.iter().enumerate() {
        if node.router.is_none() {
            continue;
        }
        let ignored: Vec<&str> = graph
            .out_edges(idx)
            .iter()
            .map(|&e| &graph.edges[e])
            .filter(|e| matches!(e.guard, Guard::Always | Guard::When(_)))
            .map(|e| match e.to {
                Target::Node(to) => graph.node(to).id.as_str(),
                Target::End => "END",
            })
            .collect();
        if !ignored.is_empty() {
            findings.push(Finding::warning(
                format!(
                    "node '{}' has `routes`, so its router alone chooses its targets; its other edges (to {}) are never taken: add their targets to `routes.map` or remove them",
                    node.id,
                    ignored.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ")
                ),
                &[node.id.as_str()],
            ));
        }
    }
}

/// With `strict_state: true`, every field a node declares it writes must be
/// a declared state field.
fn strict_state(graph: &Graph, findings: &mut Vec<Finding>) {
    if !graph.settings.strict_state {
        return;
    }
    let branch_nodes: Vec<NodeIdx> = (0..graph.nodes.len())
        .filter(|&i| matches!(graph.node(i).kind, NodeKind::Map(_)))
        .flat_map(|m| container_members(graph, m))
        .collect();
    for (idx, node) in graph.nodes.iter().enumerate() {
        let mut writes: Vec<String> = if branch_nodes.contains(&idx) {
            // Branch writes are fork-local scratch, discarded at collect.
            Vec::new()
        } else {
            node.declared_writes()
        };
        match &node.kind {
            NodeKind::Map(map) => writes.push(map.collect_into.clone()),
            NodeKind::Approval { output_key, .. } => {
                writes.push(output_key.clone());
                let comment = format!("{output_key}_comment");
                if graph.field(&comment).is_none() {
                    findings.push(Finding::warning(
                        format!(
                            "approval node '{}': a comment given with the answer is written to '{comment}', which `state:` does not declare (settings.strict_state is on); declare it as a string, or answers with a comment will be refused",
                            node.id
                        ),
                        &[&node.id],
                    ));
                }
            }
            NodeKind::Input { output_key, .. } => writes.push(output_key.clone()),
            _ => {}
        }
        for field in writes {
            if graph.field(&field).is_none() {
                findings.push(Finding::error(
                    format!(
                        "node '{}' writes field '{field}', which `state:` does not declare (settings.strict_state is on)",
                        node.id
                    ),
                    &[&node.id],
                ));
            }
        }
    }
}

/// A `rag` node's rules that need the graph (SPEC 17): its knowledge bases
/// exist and have the embeddings its mode needs; it has something to
/// retrieve with; what runs before retrieval does not read its passages;
/// a completion's fields come with a prompt; rerank and graph search are
/// not both asked for.
fn rag_rules(
    graph: &Graph,
    node: &crate::Node,
    rag: &crate::RagConfig,
    findings: &mut Vec<Finding>,
) {
    let id = node.id.as_str();
    let mut error =
        |message: String| findings.push(Finding::error(format!("node '{id}': {message}"), &[id]));
    let known: Vec<&str> = graph
        .knowledge
        .iter()
        .map(|base| base.name.as_str())
        .collect();
    let mut all_known = true;
    for name in &rag.knowledge {
        if graph.knowledge_base(name).is_none() {
            all_known = false;
            let hint = match did_you_mean(name, &known) {
                Some(near) => format!(" (did you mean '{near}'?)"),
                None if known.is_empty() => {
                    " (the graph declares none under `knowledge:`)".to_owned()
                }
                None => format!(" (knowledge bases: {})", known.join(", ")),
            };
            error(format!("no knowledge base '{name}'{hint}"));
        }
    }
    let mode = graph.rag_mode(rag);
    if all_known && mode.uses_vectors() {
        for name in &rag.knowledge {
            if graph
                .knowledge_base(name)
                .is_some_and(|base| base.embeddings.is_none())
            {
                error(format!(
                    "mode '{}' ranks by embeddings, and knowledge base '{name}' has no `embeddings:` (add {{model: …}} to it, or use mode: keyword)",
                    mode.as_str()
                ));
            }
        }
    }
    let bound = |template: &crate::Template| {
        crate::RAG_BINDINGS
            .iter()
            .find(|name| template.reads_name(name))
            .copied()
    };
    match (&rag.query, &rag.prompt) {
        (None, None) => error(
            "kind 'rag' needs a `query` (what to retrieve) or a `prompt` (which is then the query)"
                .into(),
        ),
        (Some(query), _) => {
            if let Some(name) = bound(query) {
                error(format!(
                    "query reads '{name}', which holds the passages the query retrieves"
                ));
            }
        }
        (None, Some(prompt)) => {
            if let Some(name) = bound(prompt) {
                error(format!(
                    "without a `query` the prompt is what is retrieved, and it reads '{name}', the passages it would retrieve; give the node a `query`"
                ));
            }
        }
    }
    if rag.prompt.is_none() {
        let completion = [
            ("system", rag.system.is_some()),
            ("model", rag.model.is_some()),
            ("temperature", rag.temperature.is_some()),
            ("max_tokens", rag.max_tokens.is_some()),
            ("output_schema", node.output_schema.is_some()),
        ];
        for (field, given) in completion {
            if given {
                error(format!(
                    "'{field}' shapes the completion, and the node has no `prompt` (without one it only retrieves, and `output` is its sources)"
                ));
            }
        }
    }
    if rag.rerank.is_some() && rag.hops.is_some_and(|hops| hops > 0) {
        error("with `rerank` graph search is not applied; remove `graph:` or `rerank:`".into());
    }
}
