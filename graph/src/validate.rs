//! Structural validation (SPEC section 6): rules that need the whole graph.
//!
//! Every rule reports into one list and names the nodes involved; nothing
//! stops at the first problem. Rules about single fields (unknown keys, bad
//! expressions, missing required fields) are checked while loading.

use super::finding::Finding;
use super::topology::{container_members, forward_order, forward_region, main_flow};
use super::{Condition, Endpoint, Graph, Guard, NodeIdx, NodeKind, Target};

/// Kinds a map's branch subgraph may hold (seed 003, plus Weft's `task`).
const BRANCH_KINDS: [&str; 5] = ["task", "script", "llm", "agent", "rag"];

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

fn kinds(graph: &Graph, findings: &mut Vec<Finding>) {
    for (idx, node) in graph.nodes.iter().enumerate() {
        let id = node.id.as_str();
        match &node.kind {
            NodeKind::Rag if !node.broken => findings.push(Finding::error(
                format!("node '{id}': kind 'rag' is reserved and not yet supported"),
                &[id],
            )),
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
/// fan-out: N concurrent prompts cannot be answered sensibly.
fn fan_out_targets(graph: &Graph, findings: &mut Vec<Finding>) {
    for (idx, node) in graph.nodes.iter().enumerate() {
        let unconditional: Vec<NodeIdx> = graph
            .out_edges(idx)
            .iter()
            .map(|&e| &graph.edges[e])
            .filter(|e| e.is_forward() && matches!(e.guard, Guard::Always))
            .filter_map(|e| e.to.node())
            .collect();
        if unconditional.len() < 2 {
            continue;
        }
        for target in unconditional {
            let target_node = graph.node(target);
            if matches!(
                target_node.kind,
                NodeKind::Approval { .. } | NodeKind::Input { .. }
            ) {
                findings.push(Finding::error(
                    format!(
                        "{} node '{}' is a fan-out target of '{}'; put approval and input nodes after the join",
                        target_node.kind.name(),
                        target_node.id,
                        node.id
                    ),
                    &[&target_node.id, &node.id],
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

/// Seed 003's branch subgraph rules, reported on the map node.
fn map_branch(graph: &Graph, map_idx: NodeIdx, findings: &mut Vec<Finding>) {
    let map_node = graph.node(map_idx);
    let NodeKind::Map(map) = &map_node.kind else {
        return;
    };
    let map_id = map_node.id.as_str();
    let members = container_members(graph, map_idx);
    if members.is_empty() {
        return;
    }
    let container = Container {
        id: map_id,
        kind: "map",
        outside: format!(
            "it would run standalone, with no `{}` binding",
            map.item_name
        ),
    };
    chain_rules(graph, &container, &members, findings);
    let declares_writer = members.iter().any(|&m| {
        let node = graph.node(m);
        matches!(node.kind, NodeKind::Script { .. } | NodeKind::Task { .. })
            || node.declared_writes().contains(&map.output_key)
    });
    if !declares_writer {
        findings.push(Finding::warning(
            format!(
                "map node '{map_id}': no node in the branch subgraph declares a write to output_key '{}' \
                 (a state_updates key or an output_schema property); the map fails at run time if the chain \
                 never writes it",
                map.output_key
            ),
            &[map_id],
        ));
    }
}

/// A loop's body is a chain like a map's branch (SPEC 4.2).
fn loop_body(graph: &Graph, loop_idx: NodeIdx, findings: &mut Vec<Finding>) {
    let node = graph.node(loop_idx);
    if let NodeKind::Loop(config) = &node.kind
        && config.max_iterations == 0
    {
        findings.push(Finding::error(
            format!("loop node '{}': max_iterations must be at least 1", node.id),
            &[&node.id],
        ));
    }
    if let NodeKind::Loop(config) = &node.kind
        && config.body.is_none()
    {
        findings.push(Finding::error(
            format!(
                "loop node '{}': `body` must name a node (the first step of the chain the loop repeats)",
                node.id
            ),
            &[&node.id],
        ));
        return;
    }
    let members = container_members(graph, loop_idx);
    if members.contains(&loop_idx) {
        findings.push(Finding::error(
            format!(
                "loop node '{}': its body reaches the loop node itself",
                node.id
            ),
            &[&node.id],
        ));
        return;
    }
    let container = Container {
        id: node.id.as_str(),
        kind: "loop",
        outside: "it would also run outside the loop".to_owned(),
    };
    chain_rules(graph, &container, &members, findings);
}

/// An `until` that is neither a condition nor `fn:` is a sentence for a
/// worker's model (SPEC 4.2). One that reads like a name (one word) is
/// more likely a condition name misspelt: a warning says so.
fn loop_until(graph: &Graph, id: &str, until: &crate::Until, findings: &mut Vec<Finding>) {
    let crate::Until::Sentence(sentence) = until else {
        return;
    };
    if sentence.split_whitespace().count() > 1 {
        return;
    }
    let names: Vec<&str> = graph.conditions.iter().map(|(n, _)| n.as_str()).collect();
    let hint = crate::did_you_mean(sentence, &names)
        .map(|close| format!(" (did you mean '{close}'?)"))
        .unwrap_or_default();
    findings.push(Finding::warning(
        format!(
            "loop node '{id}': until '{sentence}' names no `conditions:` entry and is not `fn:NAME`, \
             so a worker's model judges it as a sentence{hint}"
        ),
        &[id],
    ));
}

/// A node whose body is a chain: a map (its branch) or a loop (its body).
struct Container<'a> {
    id: &'a str,
    /// `map` or `loop`.
    kind: &'static str,
    /// Why a member must not be in the main flow too.
    outside: String,
}

/// The rules every chain body follows: member kinds, a chain's edges, and
/// no member shared with the main flow.
fn chain_rules(
    graph: &Graph,
    container: &Container<'_>,
    members: &[NodeIdx],
    findings: &mut Vec<Finding>,
) {
    for &member in members {
        branch_member_kind(graph, container, members, member, findings);
        branch_member_edges(graph, container, member, findings);
    }
    branch_shares_main_flow(graph, container, members, findings);
}

/// A branch member must be of a kind that runs per item; an end node
/// reached by a branch `fallback` gets seed 003's hint.
fn branch_member_kind(
    graph: &Graph,
    container: &Container<'_>,
    members: &[NodeIdx],
    member: NodeIdx,
    findings: &mut Vec<Finding>,
) {
    let (map_id, kind) = (container.id, container.kind);
    let node = graph.node(member);
    let id = node.id.as_str();
    if BRANCH_KINDS.contains(&node.kind.name()) {
        return;
    }
    let via_fallback: Vec<&str> = graph
        .in_edges(member)
        .iter()
        .map(|&e| &graph.edges[e])
        .filter(|e| matches!(e.guard, Guard::Fallback))
        .filter_map(|e| match e.from {
            Endpoint::Node(from) if members.contains(&from) => Some(graph.node(from).id.as_str()),
            _ => None,
        })
        .collect();
    if matches!(node.kind, NodeKind::End(_)) && !via_fallback.is_empty() {
        for source in via_fallback {
            findings.push(Finding::error(
                format!(
                    "{kind} node '{map_id}': branch node '{source}' has `fallback: {id}`, an end node; \
                     a branch's `fallback` must stay inside the branch subgraph (a chain ends by omission, \
                     never with an end node: point it at a branch-local recovery node or remove it)"
                ),
                &[map_id, source, id],
            ));
        }
    } else {
        findings.push(Finding::error(
            format!(
                "{kind} node '{map_id}': branch subgraph node '{id}' is kind '{}'; every node in a branch \
                 subgraph must be task, script, llm, agent or rag (approval, input, end and map nodes \
                 are not allowed in a {kind} branch)",
                node.kind.name()
            ),
            &[map_id, id],
        ));
    }
}

/// A branch is a chain: no fan-out, no loop edges, and no worker-hosted
/// routing (an item's chain is routed on the coordinator as it goes).
fn branch_member_edges(
    graph: &Graph,
    container: &Container<'_>,
    member: NodeIdx,
    findings: &mut Vec<Finding>,
) {
    let (map_id, kind) = (container.id, container.kind);
    let id = graph.node(member).id.as_str();
    let hosted_router = graph
        .node(member)
        .router
        .as_ref()
        .and_then(|r| match &r.expr {
            Condition::Hosted(name) => Some(name.as_str()),
            _ => None,
        });
    let hosted_conditions =
        graph
            .out_edges(member)
            .iter()
            .filter_map(|&e| match &graph.edges[e].guard {
                Guard::When(Condition::Hosted(name)) => Some(name.as_str()),
                _ => None,
            });
    for name in hosted_router.into_iter().chain(hosted_conditions) {
        findings.push(Finding::error(
            format!(
                "{kind} node '{map_id}': branch node '{id}' routes with fn:{name}; worker-hosted conditions and routers are not supported inside a {kind} branch: use a CEL condition, or return `_next` from a script"
            ),
            &[map_id, id],
        ));
    }
    let next_targets: Vec<&str> = graph
        .out_edges(member)
        .iter()
        .map(|&e| &graph.edges[e])
        .filter(|e| matches!(e.guard, Guard::Always) && e.is_forward())
        .map(|e| match e.to {
            Target::Node(to) => graph.node(to).id.as_str(),
            Target::End => "END",
        })
        .collect();
    if next_targets.len() > 1 {
        findings.push(Finding::error(
            format!(
                "{kind} node '{map_id}': branch node '{id}' fans out (next: [{}]); fan-out is not allowed \
                 inside a branch: restructure as one flattened map, or a second map after the join",
                next_targets.join(", ")
            ),
            &[map_id, id],
        ));
    }
    for &e in graph.out_edges(member) {
        let edge = &graph.edges[e];
        if edge.is_loop
            && let Target::Node(to) = edge.to
        {
            findings.push(Finding::error(
                format!(
                    "{kind} node '{map_id}': loop edge {id} → {} inside the branch subgraph; a chain loops \
                     only through a script's `_next`",
                    graph.node(to).id
                ),
                &[map_id, id],
            ));
        }
    }
}

/// A branch node must not also be part of the main flow.
fn branch_shares_main_flow(
    graph: &Graph,
    container: &Container<'_>,
    members: &[NodeIdx],
    findings: &mut Vec<Finding>,
) {
    let flow = main_flow(graph);
    let shared: Vec<&str> = members
        .iter()
        .filter(|&&m| flow[m])
        .map(|&m| graph.node(m).id.as_str())
        .collect();
    if shared.is_empty() {
        return;
    }
    let (map_id, kind) = (container.id, container.kind);
    let mut nodes = vec![map_id];
    nodes.extend(&shared);
    let what = if kind == "map" {
        "map's `branch`"
    } else {
        "loop's `body`"
    };
    findings.push(Finding::error(
        format!(
            "{kind} node '{map_id}': branch subgraph shares node{} {} with the main flow; a branch node must \
             be reached only through the {what} ({})",
            if shared.len() > 1 { "s" } else { "" },
            shared.join(", "),
            container.outside
        ),
        &nodes,
    ));
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
