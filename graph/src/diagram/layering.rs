//! Where things go before anything is drawn: each node's wave (row), the
//! edges between drawn nodes, long edges split into pass-through segments,
//! and rows ordered to limit crossings.

use std::collections::HashMap;

use super::{BackEdge, Item, Pair, Segment, condition_label};
use crate::model::NodeIdx;
use crate::topology::{forward_order, main_flow};
use crate::{Endpoint, Graph, Guard, Target};

/// Each main-flow node's wave: the longest path to it from a start.
pub(super) fn layers(graph: &Graph) -> HashMap<NodeIdx, usize> {
    let flow = main_flow(graph);
    let order = forward_order(graph).unwrap_or_else(|_| (0..graph.nodes.len()).collect());
    let mut layer: HashMap<NodeIdx, usize> = HashMap::new();
    for &idx in order.iter().filter(|&&i| flow[i]) {
        let depth = graph
            .in_edges(idx)
            .iter()
            .map(|&e| &graph.edges[e])
            .filter(|e| e.is_forward())
            .filter_map(|e| match e.from {
                Endpoint::Node(from) => layer.get(&from).map(|l| l + 1),
                Endpoint::Start => Some(0),
            })
            .max()
            .unwrap_or(0);
        layer.insert(idx, depth);
    }
    layer
}

/// Forward edges between drawn nodes (merged per pair) and loop edges.
pub(super) fn edge_pairs(
    graph: &Graph,
    layer: &HashMap<NodeIdx, usize>,
) -> (Vec<Pair>, Vec<BackEdge>) {
    let mut pairs: Vec<Pair> = Vec::new();
    let mut back_edges = Vec::new();
    for edge in &graph.edges {
        let (Endpoint::Node(from), Target::Node(to)) = (edge.from, edge.to) else {
            continue;
        };
        if !layer.contains_key(&from) || !layer.contains_key(&to) {
            continue;
        }
        if edge.is_loop {
            let label = match &edge.guard {
                Guard::When(condition) => Some(condition_label(condition)),
                _ => None,
            };
            back_edges.push((from, to, label));
            continue;
        }
        if layer[&to] <= layer[&from] {
            continue;
        }
        match pairs.iter_mut().find(|(f, t, _)| *f == from && *t == to) {
            Some(pair) => pair.2 &= edge.is_conditional(),
            None => pairs.push((from, to, edge.is_conditional())),
        }
    }
    (pairs, back_edges)
}

/// Splits edges that skip waves into segments through pass-through items
/// added to the rows in between; returns the segments between each pair of
/// consecutive rows.
pub(super) fn split_long_edges(
    pairs: Vec<Pair>,
    layer: &HashMap<NodeIdx, usize>,
    rows: &mut [Vec<Item>],
) -> Vec<Vec<Segment>> {
    let mut segments: Vec<Vec<Segment>> = vec![Vec::new(); rows.len().saturating_sub(1)];
    let mut passes = 0;
    for (from, to, conditional) in pairs {
        let (lf, lt) = (layer[&from], layer[&to]);
        let mut previous = Item::Node(from);
        for (k, row) in rows.iter_mut().enumerate().take(lt).skip(lf + 1) {
            let pass = Item::Pass(passes);
            passes += 1;
            row.push(pass);
            segments[k - 1].push(Segment {
                from: previous,
                to: pass,
                conditional,
            });
            previous = pass;
        }
        segments[lt - 1].push(Segment {
            from: previous,
            to: Item::Node(to),
            conditional,
        });
    }
    segments
}

/// Orders rows below the first by the mean position of their sources,
/// keeping declaration order on ties: fewer crossings, stable output.
pub(super) fn order_rows(graph: &Graph, rows: &mut [Vec<Item>], segments: &[Vec<Segment>]) {
    for l in 1..rows.len() {
        let position: HashMap<Item, usize> = rows[l - 1]
            .iter()
            .enumerate()
            .map(|(i, &it)| (it, i))
            .collect();
        let key = |item: &Item| -> (usize, usize) {
            let sources: Vec<usize> = segments[l - 1]
                .iter()
                .filter(|s| s.to == *item)
                .filter_map(|s| position.get(&s.from).copied())
                .collect();
            let mean = if sources.is_empty() {
                usize::MAX / 2
            } else {
                sources.iter().sum::<usize>() * 2 / sources.len()
            };
            let tie = match item {
                Item::Node(idx) => *idx,
                Item::Pass(p) => graph.nodes.len() + p,
            };
            (mean, tie)
        };
        rows[l].sort_by_key(key);
    }
}
