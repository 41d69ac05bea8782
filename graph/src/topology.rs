//! Shape queries over a graph: which nodes form the main flow, which form
//! each map's branch subgraph, forward-edge cycles, topological order, and
//! what lies downstream of a node. Validation, the diagram and the run state
//! machine all ask these questions, so they are answered once, here.

use std::collections::VecDeque;

use super::{Endpoint, Graph, NodeIdx, NodeKind, Target};

/// Nodes reachable from the start nodes through edges, without entering a
/// container's body (a map's `branch`, a loop's `body`).
pub fn main_flow(graph: &Graph) -> Vec<bool> {
    reachable(graph, &graph.start_nodes())
}

/// The branch subgraph of a map (or the body of a loop): the entry node plus
/// everything reachable from it through edges, in declaration order.
pub fn container_members(graph: &Graph, container: NodeIdx) -> Vec<NodeIdx> {
    let entry = match &graph.node(container).kind {
        NodeKind::Map(map) => map.branch,
        NodeKind::Loop(body) => body.body,
        _ => None,
    };
    let Some(entry) = entry else {
        return Vec::new();
    };
    let seen = reachable(graph, &[entry]);
    (0..graph.nodes.len()).filter(|&i| seen[i]).collect()
}

/// Nodes reachable from `roots` through every edge (forward and loop).
pub fn reachable(graph: &Graph, roots: &[NodeIdx]) -> Vec<bool> {
    let mut seen = vec![false; graph.nodes.len()];
    let mut queue: VecDeque<NodeIdx> = roots.iter().copied().collect();
    while let Some(idx) = queue.pop_front() {
        if std::mem::replace(&mut seen[idx], true) {
            continue;
        }
        for &e in graph.out_edges(idx) {
            if let Target::Node(to) = graph.edges[e].to
                && !seen[to]
            {
                queue.push_back(to);
            }
        }
    }
    seen
}

/// Nodes downstream of `head` through forward edges, `head` included.
pub fn forward_region(graph: &Graph, head: NodeIdx) -> Vec<bool> {
    let mut seen = vec![false; graph.nodes.len()];
    let mut stack = vec![head];
    while let Some(idx) = stack.pop() {
        if std::mem::replace(&mut seen[idx], true) {
            continue;
        }
        for &e in graph.out_edges(idx) {
            let edge = &graph.edges[e];
            if edge.is_forward()
                && let Target::Node(to) = edge.to
            {
                stack.push(to);
            }
        }
    }
    seen
}

/// A topological order of all nodes over forward edges, or the cycles found
/// (each as the node path, first node repeated at the end).
pub fn forward_order(graph: &Graph) -> Result<Vec<NodeIdx>, Vec<Vec<NodeIdx>>> {
    let n = graph.nodes.len();
    let mut indegree = vec![0usize; n];
    for edge in graph.edges.iter().filter(|e| e.is_forward()) {
        if let (Endpoint::Node(_), Target::Node(to)) = (edge.from, edge.to) {
            indegree[to] += 1;
        }
    }
    // Kahn's algorithm, always taking the lowest index: a stable order.
    let mut ready: std::collections::BTreeSet<NodeIdx> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(idx) = ready.pop_first() {
        order.push(idx);
        for &e in graph.out_edges(idx) {
            let edge = &graph.edges[e];
            if edge.is_forward()
                && let Target::Node(to) = edge.to
            {
                indegree[to] -= 1;
                if indegree[to] == 0 {
                    ready.insert(to);
                }
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    Err(find_cycles(graph, &indegree))
}

/// Finds cycles among the nodes Kahn's algorithm could not order. Every such
/// node has a predecessor that is also left, so walking predecessors always
/// closes a cycle. Once a cycle is found, it and everything downstream of it
/// is set aside, so each independent tangle is reported once.
///
/// Linear in the graph: each walk ends in a cycle whose downstream holds
/// every node the walk visited, and each node is set aside once.
fn find_cycles(graph: &Graph, indegree: &[usize]) -> Vec<Vec<NodeIdx>> {
    let n = graph.nodes.len();
    let mut left: Vec<bool> = indegree.iter().map(|&d| d > 0).collect();
    let mut position = vec![usize::MAX; n];
    let mut cycles = Vec::new();
    let mut next_start = 0;
    while let Some(start) = (next_start..n).find(|&i| left[i]) {
        next_start = start;
        let mut path = vec![start];
        position[start] = 0;
        let cycle = loop {
            let current = *path.last().expect("path is never empty");
            let previous = graph.in_edges(current).iter().find_map(|&e| {
                let edge = &graph.edges[e];
                match edge.from {
                    Endpoint::Node(from) if edge.is_forward() && left[from] => Some(from),
                    _ => None,
                }
            });
            let Some(previous) = previous else { break None };
            if position[previous] != usize::MAX {
                let mut cycle: Vec<NodeIdx> = path[position[previous]..].to_vec();
                cycle.reverse();
                // Start the cycle at its earliest-declared node: a stable name.
                let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                cycle.rotate_left(first);
                cycle.push(*cycle.first().expect("a cycle has a node"));
                break Some(cycle);
            }
            position[previous] = path.len();
            path.push(previous);
        };
        for &idx in &path {
            position[idx] = usize::MAX;
        }
        let Some(cycle) = cycle else {
            left[start] = false;
            continue;
        };
        set_aside_downstream(graph, cycle[0], &mut left);
        cycles.push(cycle);
    }
    cycles
}

/// Clears `left` for `head` and every node still left downstream of it.
fn set_aside_downstream(graph: &Graph, head: NodeIdx, left: &mut [bool]) {
    let mut stack = vec![head];
    while let Some(idx) = stack.pop() {
        if !std::mem::replace(&mut left[idx], false) {
            continue;
        }
        for &e in graph.out_edges(idx) {
            let edge = &graph.edges[e];
            if edge.is_forward()
                && let Target::Node(to) = edge.to
                && left[to]
            {
                stack.push(to);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_graph;

    fn graph(yaml: &str) -> Graph {
        parse_graph(yaml, crate::Format::Yaml, "t").0
    }

    #[test]
    fn topological_order_respects_edges() {
        let g = graph(
            "nodes:\n  c: {kind: end, depends_on: [b]}\n  b: {kind: end, depends_on: [a]}\n  a: {kind: end, start: true}\n",
        );
        let order = forward_order(&g).unwrap();
        let pos = |id: &str| order.iter().position(|&i| g.node(i).id == id).unwrap();
        assert!(pos("a") < pos("b") && pos("b") < pos("c"));
    }

    #[test]
    fn cycle_is_found_and_named() {
        let g = graph(
            "nodes:\n  a: {kind: end, start: true, next: b}\n  b: {kind: end, next: c}\n  c: {kind: end, next: b}\n",
        );
        let cycles = forward_order(&g).unwrap_err();
        assert_eq!(cycles.len(), 1);
        let names: Vec<&str> = cycles[0].iter().map(|&i| g.node(i).id.as_str()).collect();
        assert_eq!(names, ["b", "c", "b"]);
    }

    #[test]
    fn loop_edges_do_not_make_cycles() {
        let g = graph(
            "nodes:\n  a: {kind: end, start: true, next: b}\n  b: {kind: end}\nedges:\n  - {from: b, to: a, loop: true}\n",
        );
        assert!(forward_order(&g).is_ok());
        let region = forward_region(&g, 0);
        assert_eq!(region, vec![true, true]);
    }
}
