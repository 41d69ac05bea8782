//! Routing after a merge (SPEC section 3, "Routing"), in priority order:
//! `_next` in the node's output, then `routes`, then edges with `when`
//! (taken where truthy) and plain edges (always taken). A node that failed
//! with a `fallback` routes to its fallback alone.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::events::{FailureKind, expr_failure};
pub use super::plan::Query;
use super::plan::RunPlan;
use crate::graph::Meter;
use crate::graph::{Condition, END, EdgeIdx, ExprError, Guard, NodeIdx, NodeKind, Target, truthy};

impl RouteError {
    /// How the node failed: a routing error, or a condition or router too
    /// costly to evaluate on this state.
    pub fn failure_kind(&self) -> FailureKind {
        match self {
            Self::Router(error) | Self::Condition(error) => {
                expr_failure(error, FailureKind::RoutingError)
            }
            _ => FailureKind::RoutingError,
        }
    }
}

/// Why a node's routing failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouteError {
    /// `_next` names no node.
    #[error("`_next` names unknown node '{0}'")]
    UnknownNext(String),
    /// `_next` from the main flow names a node of a map branch.
    #[error("`_next` names node '{0}', which belongs to a map branch")]
    NextIntoBranch(String),
    /// The router expression failed.
    #[error("router {0}")]
    Router(ExprError),
    /// An edge condition failed.
    #[error("condition {0}")]
    Condition(ExprError),
    /// The router returned a key `map` does not have.
    #[error("router returned key '{key}', which `map` does not have (keys: {})", known.join(", "))]
    UnknownKey {
        /// The key.
        key: String,
        /// The keys `map` has.
        known: Vec<String>,
    },
    /// The router fanned out to an `approval` or `input` node, which must
    /// come after a join, never beside other branches.
    #[error(
        "{kind} node '{target}' is a fan-out target of '{node}' (its router returned {keys}); put approval and input nodes after the join"
    )]
    HumanFanOut {
        /// `approval` or `input`.
        kind: &'static str,
        /// The human node.
        target: String,
        /// The routed node.
        node: String,
        /// The keys the router returned.
        keys: String,
    },
    /// The router returned a list holding something other than strings.
    #[error("router returned a list holding {0}; keys are strings")]
    NotAKey(Value),
    /// The router returned something that is neither a key nor a list.
    #[error("router returned {0}; expected a key or a list of keys")]
    NotKeys(Value),
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

/// What a node's routing reads: the state and scope its expressions see,
/// what workers answered for its hosted router and predicates, and the
/// run's meter its evaluations are charged to.
#[derive(Clone, Copy)]
pub struct Reading<'a> {
    /// The state (S0 with the wave's writes, or a map item's fork).
    pub state: &'a Map<String, Value>,
    /// The step's scope.
    pub scope: &'a Map<String, Value>,
    /// Hosted routers' and predicates' answers.
    pub answers: &'a HashMap<Query, Value>,
    /// The run's allowance for evaluations.
    pub meter: &'a Meter,
}

/// Decides node `idx`'s routing against `state`: a failed node takes its
/// fallback, a `_next` goes where it says, otherwise the router and the
/// edges' guards decide.
pub fn decide(
    plan: &RunPlan,
    idx: NodeIdx,
    next: Option<&str>,
    fell_back: bool,
    reading: &Reading,
) -> Result<Decision, RouteError> {
    let Reading {
        state,
        scope,
        answers,
        meter,
    } = *reading;
    if fell_back {
        return Ok(fallback_routes(plan, idx));
    }
    if let Some(id) = next {
        return next_routes(plan, idx, id);
    }
    let graph = plan.graph();
    let mut missing = Vec::new();
    // A router outranks plain and `when` edges (SPEC 3, priority 2 before
    // 3): its keys alone choose the node's targets.
    let (routed, keys) = match router_choice(plan, idx, reading)? {
        RouterChoice::NoRouter => (false, None),
        RouterChoice::Keys(keys) => (true, Some(keys)),
        RouterChoice::Missing(query) => {
            missing.push(query);
            (true, None)
        }
    };
    let (mut taken, mut loops) = (Vec::new(), Vec::new());
    for &e in graph.out_edges(idx) {
        let edge = &graph.edges[e];
        let is_taken = match &edge.guard {
            Guard::Always | Guard::When(_) if routed => false,
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
                .is_true(state, scope, meter)
                .map_err(RouteError::Condition)?,
        };
        match (is_taken, edge.is_loop, edge.to) {
            (false, _, _) => {}
            (true, true, Target::Node(head)) => loops.push(head),
            (true, true, _) => {}
            (true, false, _) => taken.push(e),
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

/// A failed node with a fallback takes its fallback edge alone.
fn fallback_routes(plan: &RunPlan, idx: NodeIdx) -> Decision {
    let graph = plan.graph();
    let taken = graph
        .out_edges(idx)
        .iter()
        .copied()
        .filter(|&e| matches!(graph.edges[e].guard, Guard::Fallback))
        .collect();
    Decision::Resolved {
        taken,
        loops: Vec::new(),
        jump: None,
    }
}

/// `_next: id` takes the declared edges to `id`, or jumps there; `_next:
/// END` ends the path (no edge is taken).
fn next_routes(plan: &RunPlan, idx: NodeIdx, id: &str) -> Result<Decision, RouteError> {
    if id == END {
        return Ok(Decision::Resolved {
            taken: Vec::new(),
            loops: Vec::new(),
            jump: None,
        });
    }
    let graph = plan.graph();
    let target = graph
        .node_index(id)
        .ok_or_else(|| RouteError::UnknownNext(id.to_owned()))?;
    let (mut taken, mut loops) = (Vec::new(), Vec::new());
    for &e in graph.out_edges(idx) {
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
    Ok(Decision::Resolved { taken, loops, jump })
}

/// What a node's router chose.
enum RouterChoice {
    /// The node has no router.
    NoRouter,
    /// The keys it returned, each checked against `map`.
    Keys(Vec<String>),
    /// A worker-hosted router must answer first.
    Missing(Query),
}

fn router_choice(
    plan: &RunPlan,
    idx: NodeIdx,
    reading: &Reading,
) -> Result<RouterChoice, RouteError> {
    let Some(router) = &plan.graph().node(idx).router else {
        return Ok(RouterChoice::NoRouter);
    };
    let value = match &router.expr {
        Condition::Hosted(_) => match reading.answers.get(&Query::Router(idx)) {
            Some(value) => value.clone(),
            None => return Ok(RouterChoice::Missing(Query::Router(idx))),
        },
        Condition::Named(_, expr) | Condition::Inline(expr) => expr
            .evaluate(reading.state, reading.scope, reading.meter)
            .map_err(RouteError::Router)?,
    };
    let keys = router_keys(&value)?;
    if let Some(key) = keys
        .iter()
        .find(|key| !router.map.iter().any(|(k, _)| k == *key))
    {
        return Err(RouteError::UnknownKey {
            key: key.clone(),
            known: router.map.iter().map(|(k, _)| k.clone()).collect(),
        });
    }
    if keys.len() > 1 {
        check_human_fan_out(plan, idx, &router.map, &keys)?;
    }
    Ok(RouterChoice::Keys(keys))
}

/// A router's fan-out may not include `approval` or `input` nodes, as a
/// static fan-out may not (validation rejects that one).
fn check_human_fan_out(
    plan: &RunPlan,
    idx: NodeIdx,
    map: &[(String, Target)],
    keys: &[String],
) -> Result<(), RouteError> {
    let graph = plan.graph();
    for key in keys {
        let Some((_, Target::Node(target))) = map.iter().find(|(k, _)| k == key) else {
            continue;
        };
        let target = graph.node(*target);
        if matches!(
            target.kind,
            NodeKind::Approval { .. } | NodeKind::Input { .. }
        ) {
            return Err(RouteError::HumanFanOut {
                kind: target.kind.name(),
                target: target.id.clone(),
                node: graph.node(idx).id.clone(),
                keys: format!("[{}]", keys.join(", ")),
            });
        }
    }
    Ok(())
}

/// A router's result: one key, or a list of keys (a fan-out).
fn router_keys(value: &Value) -> Result<Vec<String>, RouteError> {
    match value {
        Value::String(key) => Ok(vec![key.clone()]),
        Value::Bool(b) => Ok(vec![b.to_string()]),
        Value::Number(n) => Ok(vec![n.to_string()]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(key) => Ok(key.clone()),
                other => Err(RouteError::NotAKey(other.clone())),
            })
            .collect(),
        other => Err(RouteError::NotKeys(other.clone())),
    }
}
