//! The rules of chains (SPEC 4.2, 5; seed 003's branch subgraph rules):
//! what a map's branch or a loop's body may hold, how its nodes may route,
//! that it stays apart from the main flow, and what a loop's `until` names.

use super::super::finding::Finding;
use super::super::topology::{container_members, main_flow};
use super::super::{Condition, Endpoint, Graph, Guard, NodeIdx, NodeKind, Target};

/// Kinds a map's branch subgraph may hold (seed 003, plus Weft's `task`).
const BRANCH_KINDS: [&str; 6] = ["task", "script", "llm", "agent", "function", "rag"];

/// Seed 003's branch subgraph rules, reported on the map node.
pub(super) fn map_branch(graph: &Graph, map_idx: NodeIdx, findings: &mut Vec<Finding>) {
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
    // A loop, map or subgraph in the branch (refused above) hides what its
    // own nodes write: no guess about the writes is added to the refusal.
    let hides_writes = members.iter().any(|&m| {
        matches!(
            graph.node(m).kind,
            NodeKind::Loop(_) | NodeKind::Map(_) | NodeKind::Subgraph(_)
        )
    });
    let declares_writer = hides_writes
        || members.iter().any(|&m| {
            let node = graph.node(m);
            matches!(
                node.kind,
                NodeKind::Script { .. } | NodeKind::Task { .. } | NodeKind::Function(_)
            ) || node.declared_writes().contains(&map.output_key)
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
pub(super) fn loop_body(graph: &Graph, loop_idx: NodeIdx, findings: &mut Vec<Finding>) {
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
pub(super) fn loop_until(
    graph: &Graph,
    id: &str,
    until: &crate::Until,
    findings: &mut Vec<Finding>,
) {
    let crate::Until::Sentence(sentence) = until else {
        return;
    };
    // With a sidecar, a bare name it lacks is already an error.
    if sentence.split_whitespace().count() > 1 || graph.functions.is_some() {
        return;
    }
    let names: Vec<&str> = graph.conditions.iter().map(|(n, _)| n.as_str()).collect();
    let hint = crate::did_you_mean(sentence, &names)
        .map(|close| format!(" (did you mean '{close}'?)"))
        .unwrap_or_default();
    findings.push(Finding::warning(
        format!(
            "loop node '{id}': until '{sentence}' names no `conditions:` entry and is not `fn:NAME` \
             or module:function, so a worker's model judges it as a sentence{hint}"
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
                 subgraph must be task, script, llm, agent, function or rag (approval, input, end, map, loop \
                 and subgraph nodes are not allowed in a {kind} branch)",
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
            Condition::Hosted(code) => Some(code.label()),
            _ => None,
        });
    let hosted_conditions =
        graph
            .out_edges(member)
            .iter()
            .filter_map(|&e| match &graph.edges[e].guard {
                Guard::When(Condition::Hosted(code)) => Some(code.label()),
                _ => None,
            });
    for name in hosted_router.into_iter().chain(hosted_conditions) {
        findings.push(Finding::error(
            format!(
                "{kind} node '{map_id}': branch node '{id}' routes with {name}; worker-hosted conditions and routers are not supported inside a {kind} branch: use a CEL condition, or return `_next` from a script"
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
