//! What a run needs to know about its graph's shape, computed once per graph
//! and shared by every run of it: the main flow in forward order, each map's
//! branch subgraph, and each node's fallback.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use weft_proto::NodeId;
use weft_proto::worker_protocol::NodeDefinition;

use super::RunLimits;
use super::merge::HostedReduction;
use crate::binding::{BindContext, NodeBinding, bind_with};
use crate::graph::topology::{container_members, forward_order, main_flow};
use crate::graph::{
    Code, Condition, EdgeIdx, Graph, Guard, NodeIdx, NodeKind, Reducer, Target, UpdateValue,
};

/// A question for a worker-hosted function, asked while routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Query {
    /// The router of this node (`routes.router: fn:NAME`).
    Router(NodeIdx),
    /// The `when: fn:NAME` of this edge.
    Edge(EdgeIdx),
}

/// A validated graph prepared for running.
#[derive(Debug)]
pub struct RunPlan {
    graph: Arc<Graph>,
    /// Each node's id as the events and tasks carry it, made once: a
    /// step's events and its task clone it rather than copy the text.
    ids: Vec<NodeId>,
    flow: Vec<bool>,
    order: Vec<NodeIdx>,
    /// Each node's place in `order` (`u32::MAX`: not in the main flow).
    position: Vec<u32>,
    branches: HashMap<NodeIdx, Vec<bool>>,
    fallback: Vec<Option<Target>>,
    reads_state: Vec<bool>,
    bindings: Vec<Option<NodeBinding>>,
    /// Each worker node's definition as its tasks carry it, made once: a
    /// worker keeps it for its session, so it crosses once per worker.
    definitions: Vec<Option<Arc<NodeDefinition>>>,
    limits: RunLimits,
    /// Per node, the state fields its routing reads (`None`: all).
    routing_reads: Vec<Option<BTreeSet<String>>>,
    /// Per node, the state fields its `state_updates` read (`None`: all).
    update_reads: Vec<Option<BTreeSet<String>>>,
    /// The state fields the coordinator itself reads (`None`: all): any
    /// other may be held as its text ([`crate::held`]).
    coordinator_reads: Option<BTreeSet<String>>,
}

impl RunPlan {
    /// Prepares a graph that passed validation (its forward edges form a
    /// DAG), to run under `limits`.
    pub fn new(graph: Arc<Graph>, limits: RunLimits) -> Arc<Self> {
        let flow = main_flow(&graph);
        let order: Vec<NodeIdx> = forward_order(&graph)
            .unwrap_or_else(|_| (0..graph.nodes.len()).collect())
            .into_iter()
            .filter(|&idx| flow[idx])
            .collect();
        let mut position = vec![u32::MAX; graph.nodes.len()];
        for (at, &idx) in order.iter().enumerate() {
            position[idx] = at as u32;
        }
        let mut branches = HashMap::new();
        for (idx, node) in graph.nodes.iter().enumerate() {
            if matches!(node.kind, NodeKind::Map(_) | NodeKind::Loop(_)) {
                let mut members = vec![false; graph.nodes.len()];
                for member in container_members(&graph, idx) {
                    members[member] = true;
                }
                branches.insert(idx, members);
            }
        }
        let fallback = (0..graph.nodes.len())
            .map(|idx| {
                graph
                    .out_edges(idx)
                    .iter()
                    .map(|&e| &graph.edges[e])
                    .find(|e| matches!(e.guard, Guard::Fallback))
                    .map(|e| e.to)
            })
            .collect();
        let reads_state = (0..graph.nodes.len())
            .map(|idx| {
                graph.node(idx).router.is_some()
                    || graph
                        .out_edges(idx)
                        .iter()
                        .any(|&e| matches!(graph.edges[e].guard, Guard::When(_)))
            })
            .collect();
        let context = BindContext {
            tools: &graph.tools,
            dir: &graph.dir,
            knowledge: &graph.knowledge,
            max_knowledge_bytes: limits.max_knowledge_bytes,
        };
        let bindings: Vec<Option<NodeBinding>> = graph
            .nodes
            .iter()
            .map(|node| {
                let schema = node.output_schema.as_ref().map(|s| s.source());
                bind_with(&node.kind, schema, &context)
            })
            .collect();
        let routing_reads = (0..graph.nodes.len())
            .map(|idx| routing_reads(&graph, idx))
            .collect();
        let update_reads = graph
            .nodes
            .iter()
            .map(|node| {
                union_of(node.state_updates.iter().map(|(_, update)| match update {
                    UpdateValue::Template(template) => template.state_reads(),
                    UpdateValue::Literal(_) => Some(BTreeSet::new()),
                }))
            })
            .collect();
        let ids: Vec<NodeId> = graph
            .nodes
            .iter()
            .map(|node| NodeId::from(node.id.as_str()))
            .collect();
        let definitions = bindings
            .iter()
            .zip(&ids)
            .map(|(binding, id)| {
                let binding = binding.as_ref()?;
                let definition =
                    NodeDefinition::new(id.clone(), binding.kind, binding.config.clone());
                Some(Arc::new(definition))
            })
            .collect();
        let coordinator_reads = crate::graph::coordinator_reads(&graph);
        Arc::new(Self {
            coordinator_reads,
            bindings,
            definitions,
            ids,
            graph,
            flow,
            order,
            position,
            branches,
            fallback,
            reads_state,
            limits,
            routing_reads,
            update_reads,
        })
    }

    /// The state fields a node's routing reads (`None`: all of them), so
    /// a map item's view holds those alone.
    pub fn routing_reads(&self, idx: NodeIdx) -> Option<&BTreeSet<String>> {
        self.routing_reads[idx].as_ref()
    }

    /// Whether the coordinator never reads state field `name` while it
    /// runs the graph (no condition, router, template, reducer or subgraph
    /// looks at it), so that it may hold the field as its text.
    pub fn never_reads(&self, name: &str) -> bool {
        self.coordinator_reads
            .as_ref()
            .is_some_and(|reads| !reads.contains(name))
    }

    /// Whether the coordinator may read every state field of the graph
    /// (a template reads `state` whole, a subgraph node, …): then it holds
    /// none as text.
    pub fn reads_every_field(&self) -> bool {
        self.coordinator_reads.is_none()
    }

    /// The state fields a node's `state_updates` read (`None`: all).
    pub fn update_reads(&self, idx: NodeIdx) -> Option<&BTreeSet<String>> {
        self.update_reads[idx].as_ref()
    }

    /// Node `idx`'s id.
    pub fn node_id(&self, idx: NodeIdx) -> &NodeId {
        &self.ids[idx]
    }

    /// What a run of this plan may use.
    pub fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The graph, shared (a run's view carries it for its diagram).
    pub fn shared_graph(&self) -> Arc<Graph> {
        self.graph.clone()
    }

    /// How each node runs on a worker, by index; `None` for nodes the
    /// coordinator runs.
    pub fn bindings(&self) -> &[Option<NodeBinding>] {
        &self.bindings
    }

    /// How a node runs on a worker; `None` for nodes the coordinator runs.
    pub fn binding(&self, node: NodeIdx) -> Option<&NodeBinding> {
        self.bindings.get(node)?.as_ref()
    }

    /// What a worker runs for a node, as its tasks carry it; `None` for
    /// nodes the coordinator runs.
    pub fn definition(&self, node: NodeIdx) -> Option<&Arc<NodeDefinition>> {
        self.definitions.get(node)?.as_ref()
    }

    /// Main-flow nodes in forward (topological) order.
    pub fn main_order(&self) -> &[NodeIdx] {
        &self.order
    }

    /// A main-flow node's place in [`Self::main_order`].
    pub fn order_position(&self, idx: NodeIdx) -> Option<usize> {
        let at = *self.position.get(idx)?;
        (at != u32::MAX).then_some(at as usize)
    }

    /// Reports whether a node belongs to the main flow (not a map branch).
    pub fn in_main_flow(&self, idx: NodeIdx) -> bool {
        self.flow[idx]
    }

    /// Membership of a map's branch subgraph (or a loop's body).
    pub fn branch_members(&self, map: NodeIdx) -> &[bool] {
        self.branches.get(&map).map_or(&[], Vec::as_slice)
    }

    /// The node's `fallback:` target (`END` ends that path as a success).
    pub fn fallback_of(&self, idx: NodeIdx) -> Option<Target> {
        self.fallback[idx]
    }

    /// Reports whether routing out of a node evaluates conditions or a router
    /// (and so needs the merged state).
    pub fn routes_on_state(&self, idx: NodeIdx) -> bool {
        self.reads_state[idx]
    }

    /// The node whose routing asked a query.
    pub fn query_owner(&self, query: Query) -> NodeIdx {
        match query {
            Query::Router(idx) => idx,
            Query::Edge(e) => match self.graph.edges[e].from {
                crate::graph::Endpoint::Node(idx) => idx,
                crate::graph::Endpoint::Start => 0,
            },
        }
    }

    /// The worker-hosted reducer a reduction calls: the field's, as the
    /// graph declares it.
    pub fn hosted_reducer(&self, reduction: &HostedReduction) -> Code {
        match self
            .graph
            .field(&reduction.field)
            .and_then(|decl| decl.reducer.as_ref())
        {
            Some(Reducer::Hosted(code)) => code.clone(),
            // Not reached: a hosted reduction comes from a hosted reducer.
            _ => Code::Rust(reduction.reducer.clone()),
        }
    }

    /// The worker-hosted function a query calls.
    pub fn query_function(&self, query: Query) -> Code {
        let condition = match query {
            Query::Router(idx) => self.graph.node(idx).router.as_ref().map(|r| &r.expr),
            Query::Edge(e) => match &self.graph.edges[e].guard {
                Guard::When(condition) => Some(condition),
                _ => None,
            },
        };
        match condition {
            Some(Condition::Hosted(code)) => code.clone(),
            // Not reached: a query is made of a hosted condition.
            _ => Code::Rust(String::new()),
        }
    }
}

/// The state fields the router and conditions out of `idx` read.
fn routing_reads(graph: &Graph, idx: NodeIdx) -> Option<BTreeSet<String>> {
    let router = graph
        .node(idx)
        .router
        .as_ref()
        .map(|r| r.expr.state_reads());
    let edges = graph
        .out_edges(idx)
        .iter()
        .filter_map(|&e| match &graph.edges[e].guard {
            Guard::When(condition) => Some(condition.state_reads()),
            _ => None,
        });
    union_of(router.into_iter().chain(edges))
}

/// The union of field sets, `None` (all fields) if any is.
fn union_of(sets: impl Iterator<Item = Option<BTreeSet<String>>>) -> Option<BTreeSet<String>> {
    let mut all = BTreeSet::new();
    for set in sets {
        all.extend(set?);
    }
    Some(all)
}
