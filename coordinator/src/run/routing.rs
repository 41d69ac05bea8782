//! Routing after a merge (SPEC section 3, "Routing"), in priority order:
//! `_next` in the node's output, then `routes`, then edges with `when`
//! (taken where truthy) and plain edges (always taken). A node that failed
//! with a `fallback` routes to its fallback alone.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::plan::RunPlan;
use crate::graph::{Condition, EdgeIdx, Guard, NodeIdx, Target, truthy};

/// A question for a worker-hosted function, asked while routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Query {
    /// The router of this node (`routes.router: fn:NAME`).
    Router(NodeIdx),
    /// The `when: fn:NAME` of this edge.
    Edge(EdgeIdx),
}

/// How a node's outgoing edges resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Routing is known.
    Resolved {
        /// Forward edges taken (all others are not taken).
        taken: Vec<EdgeIdx>,
        /// Loop heads whose back-edges were taken.
        loops: Vec<NodeIdx>,
        /// A `_next` target with no declared edge.
        jump: Option<NodeIdx>,
    },
    /// Worker-hosted functions must answer first.
    NeedsCalls(Vec<Query>),
}

/// Decides node `idx`'s routing against `state`.
pub fn decide(
    plan: &RunPlan,
    idx: NodeIdx,
    next: Option<&str>,
    fell_back: bool,
    state: &Map<String, Value>,
    scope: &Map<String, Value>,
    answers: &HashMap<Query, Value>,
) -> Result<Decision, String> {
    let graph = plan.graph();
    let out = graph.out_edges(idx);
    let mut taken = Vec::new();
    let mut loops = Vec::new();
    if fell_back {
        taken.extend(
            out.iter()
                .copied()
                .filter(|&e| matches!(graph.edges[e].guard, Guard::Fallback)),
        );
        return Ok(Decision::Resolved {
            taken,
            loops,
            jump: None,
        });
    }
    if let Some(id) = next {
        let target = graph
            .node_index(id)
            .ok_or_else(|| format!("`_next` names unknown node '{id}'"))?;
        for &e in out {
            let edge = &graph.edges[e];
            if edge.to == Target::Node(target) && !matches!(edge.guard, Guard::Fallback) {
                if edge.is_loop {
                    loops.push(target);
                } else {
                    taken.push(e);
                }
            }
        }
        let jump = (taken.is_empty() && loops.is_empty()).then_some(target);
        return Ok(Decision::Resolved { taken, loops, jump });
    }

    let mut missing = Vec::new();
    let mut keys: Option<Vec<String>> = None;
    if let Some(router) = &graph.node(idx).router {
        let value = match &router.expr {
            Condition::Hosted(_) => answers.get(&Query::Router(idx)).cloned(),
            Condition::Named(_, expr) | Condition::Inline(expr) => Some(
                expr.evaluate(state, scope)
                    .map_err(|error| format!("router {error}"))?,
            ),
        };
        match value {
            None => missing.push(Query::Router(idx)),
            Some(value) => {
                let returned = router_keys(&value)?;
                for key in &returned {
                    if !router.map.iter().any(|(k, _)| k == key) {
                        let known: Vec<&str> = router.map.iter().map(|(k, _)| k.as_str()).collect();
                        return Err(format!(
                            "router returned key '{key}', which `map` does not have (keys: {})",
                            known.join(", ")
                        ));
                    }
                }
                keys = Some(returned);
            }
        }
    }
    for &e in out {
        let edge = &graph.edges[e];
        let is_taken = match &edge.guard {
            Guard::Always => true,
            Guard::Fallback => false,
            Guard::Route(key) => keys.as_ref().is_some_and(|keys| keys.contains(key)),
            Guard::When(Condition::Hosted(_)) => match answers.get(&Query::Edge(e)) {
                Some(value) => truthy(value),
                None => {
                    missing.push(Query::Edge(e));
                    false
                }
            },
            Guard::When(Condition::Named(_, expr) | Condition::Inline(expr)) => expr
                .is_true(state, scope)
                .map_err(|error| format!("condition {error}"))?,
        };
        if !is_taken {
            continue;
        }
        if edge.is_loop {
            if let Target::Node(head) = edge.to {
                loops.push(head);
            }
        } else {
            taken.push(e);
        }
    }
    if !missing.is_empty() {
        return Ok(Decision::NeedsCalls(missing));
    }
    Ok(Decision::Resolved {
        taken,
        loops,
        jump: None,
    })
}

/// A router's result: one key, or a list of keys (a fan-out).
fn router_keys(value: &Value) -> Result<Vec<String>, String> {
    match value {
        Value::String(key) => Ok(vec![key.clone()]),
        Value::Bool(b) => Ok(vec![b.to_string()]),
        Value::Number(n) => Ok(vec![n.to_string()]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(key) => Ok(key.clone()),
                other => Err(format!(
                    "router returned a list holding {other}; keys are strings"
                )),
            })
            .collect(),
        other => Err(format!(
            "router returned {other}; expected a key or a list of keys"
        )),
    }
}
