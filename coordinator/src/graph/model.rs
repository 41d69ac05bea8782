//! The typed, normalised graph: what the rest of Weft works with.
//!
//! Every way a graph file can say "B runs after A" (`edges:`, `next:`,
//! `depends_on:`, `routes:`, `fallback:`, `start:`, `START`/`END`) becomes one
//! [`Edge`] here, so validation, the diagram and the run state machine see one
//! edge model. Node ids are interned as [`NodeIdx`] positions in declaration
//! order, which is also the order reducers see branch values in.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::expr::{CelExpr, Template};

/// Position of a node in declaration order.
pub type NodeIdx = usize;
/// Position of an edge in [`Graph::edges`].
pub type EdgeIdx = usize;

/// A loaded graph.
#[derive(Debug, Clone)]
pub struct Graph {
    /// `name:` from the file (or the file stem).
    pub name: String,
    /// `description:` from the file.
    pub description: Option<String>,
    /// Run settings.
    pub settings: Settings,
    /// Declared state fields, in declaration order.
    pub fields: Vec<FieldDecl>,
    /// Named conditions, in declaration order.
    pub conditions: Vec<(String, CelExpr)>,
    /// Nodes, in declaration order.
    pub nodes: Vec<Node>,
    /// Every edge, normalised.
    pub edges: Vec<Edge>,
    index: HashMap<String, NodeIdx>,
    out_edges: Vec<Vec<EdgeIdx>>,
    in_edges: Vec<Vec<EdgeIdx>>,
}

impl Graph {
    /// Assembles a graph and its adjacency lists.
    pub(crate) fn assemble(
        name: String,
        description: Option<String>,
        settings: Settings,
        fields: Vec<FieldDecl>,
        conditions: Vec<(String, CelExpr)>,
        nodes: Vec<Node>,
        edges: Vec<Edge>,
    ) -> Self {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (node.id.clone(), i))
            .collect();
        let mut out_edges = vec![Vec::new(); nodes.len()];
        let mut in_edges = vec![Vec::new(); nodes.len()];
        for (e, edge) in edges.iter().enumerate() {
            if let Endpoint::Node(from) = edge.from {
                out_edges[from].push(e);
            }
            if let Target::Node(to) = edge.to {
                in_edges[to].push(e);
            }
        }
        Self {
            name,
            description,
            settings,
            fields,
            conditions,
            nodes,
            edges,
            index,
            out_edges,
            in_edges,
        }
    }

    /// Looks a node up by id.
    pub fn node_index(&self, id: &str) -> Option<NodeIdx> {
        self.index.get(id).copied()
    }

    /// Returns the node at `idx`.
    pub fn node(&self, idx: NodeIdx) -> &Node {
        &self.nodes[idx]
    }

    /// Edges leaving `idx`, in declaration order.
    pub fn out_edges(&self, idx: NodeIdx) -> &[EdgeIdx] {
        &self.out_edges[idx]
    }

    /// Edges entering `idx`, in declaration order.
    pub fn in_edges(&self, idx: NodeIdx) -> &[EdgeIdx] {
        &self.in_edges[idx]
    }

    /// Looks up a declared field.
    pub fn field(&self, name: &str) -> Option<&FieldDecl> {
        self.fields.iter().find(|field| field.name == name)
    }

    /// Looks up a named condition.
    pub fn condition(&self, name: &str) -> Option<&CelExpr> {
        self.conditions
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, expr)| expr)
    }

    /// Start nodes: those with an edge from `START`, in declaration order.
    pub fn start_nodes(&self) -> Vec<NodeIdx> {
        let mut starts: Vec<NodeIdx> = self
            .edges
            .iter()
            .filter(|edge| edge.from == Endpoint::Start)
            .filter_map(|edge| edge.to.node())
            .collect();
        starts.sort_unstable();
        starts.dedup();
        starts
    }

    /// Reports whether a node is drawn and treated as terminal.
    pub fn is_end(&self, idx: NodeIdx) -> bool {
        let node = &self.nodes[idx];
        node.end
            || matches!(node.kind, NodeKind::End(_))
            || self.out_edges[idx]
                .iter()
                .any(|&e| self.edges[e].to == Target::End)
    }

    /// Reports whether a node is a start node.
    pub fn is_start(&self, idx: NodeIdx) -> bool {
        self.in_edges[idx]
            .iter()
            .any(|&e| self.edges[e].from == Endpoint::Start)
    }
}

/// Run settings (`settings:`), with the SPEC defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Waves a run may start; exceeding raises `StepLimitExceeded`.
    pub max_steps: u32,
    /// Default cap on a map node's items in flight.
    pub max_concurrency: u32,
    /// Cap on one run's tasks in flight; 0 = no cap.
    pub max_node_concurrency: u32,
    /// Per-item visit bound for a node inside a map chain.
    pub max_loop_iterations: u32,
    /// Whole-run deadline.
    pub timeout: Option<Duration>,
    /// Default per-attempt task timeout.
    pub node_timeout: Duration,
    /// Reject writes to undeclared fields.
    pub strict_state: bool,
    /// When checkpoints are written.
    pub durability: Durability,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_steps: 50,
            max_concurrency: 8,
            max_node_concurrency: 0,
            max_loop_iterations: 10,
            timeout: None,
            node_timeout: Duration::from_secs(60),
            strict_state: false,
            durability: Durability::Sync,
        }
    }
}

/// When checkpoints are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Before the next wave starts.
    Sync,
    /// While the next wave runs.
    Async,
    /// Only at the end or on a pause.
    Exit,
}

/// A declared state field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDecl {
    /// Field name.
    pub name: String,
    /// Declared JSON type.
    pub ty: FieldType,
    /// Initial value.
    pub default: Value,
    /// How concurrent writes combine.
    pub reducer: Option<Reducer>,
}

/// The JSON type of a declared field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Any JSON value.
    Any,
    /// A string.
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON array.
    Array,
    /// A JSON object.
    Object,
}

impl FieldType {
    /// Parses a `type:` value.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "any" => Self::Any,
            "string" => Self::String,
            "number" => Self::Number,
            "integer" => Self::Integer,
            "boolean" | "bool" => Self::Boolean,
            "array" | "list" => Self::Array,
            "object" | "map" => Self::Object,
            _ => return None,
        })
    }

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::String => "string",
            Self::Number => "number",
            Self::Integer => "integer",
            Self::Boolean => "boolean",
            Self::Array => "array",
            Self::Object => "object",
        }
    }

    /// Reports whether `value` fits this type. `null` fits every type, so a
    /// field can be cleared.
    pub fn admits(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) | (Self::Any, _) => true,
            (Self::String, Value::String(_)) => true,
            (Self::Number, Value::Number(_)) => true,
            (Self::Integer, Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            (Self::Boolean, Value::Bool(_)) => true,
            (Self::Array, Value::Array(_)) => true,
            (Self::Object, Value::Object(_)) => true,
            _ => false,
        }
    }
}

/// Names the JSON type of a value, for messages.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// How two or more concurrent writes to one field combine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reducer {
    /// Arrays: S0 followed by each branch's additions.
    Concat,
    /// Objects: shallow merge of each branch's changed keys.
    Merge,
    /// Numbers: S0 plus each branch's delta.
    Add,
    /// Arrays as sets, first-seen order.
    Union,
    /// The smallest number.
    Min,
    /// The largest number.
    Max,
    /// A reducer hosted by a worker (`fn:NAME`).
    Hosted(String),
}

impl Reducer {
    /// Parses a `reducer:` value.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "concat" => Self::Concat,
            "merge" => Self::Merge,
            "add" => Self::Add,
            "union" => Self::Union,
            "min" => Self::Min,
            "max" => Self::Max,
            other => {
                let name = other.strip_prefix("fn:")?.trim();
                if name.is_empty() {
                    return None;
                }
                Self::Hosted(name.to_owned())
            }
        })
    }

    /// The field types this reducer can combine.
    pub fn fits(&self, ty: FieldType) -> bool {
        match self {
            Self::Concat | Self::Union => matches!(ty, FieldType::Array | FieldType::Any),
            Self::Merge => matches!(ty, FieldType::Object | FieldType::Any),
            Self::Add | Self::Min | Self::Max => {
                matches!(ty, FieldType::Number | FieldType::Integer | FieldType::Any)
            }
            Self::Hosted(_) => true,
        }
    }

    /// The name as written in a graph file.
    pub fn name(&self) -> String {
        match self {
            Self::Concat => "concat".into(),
            Self::Merge => "merge".into(),
            Self::Add => "add".into(),
            Self::Union => "union".into(),
            Self::Min => "min".into(),
            Self::Max => "max".into(),
            Self::Hosted(name) => format!("fn:{name}"),
        }
    }
}

/// A node of the graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node id.
    pub id: String,
    /// What runs.
    pub kind: NodeKind,
    /// `description:` from the file.
    pub description: Option<String>,
    /// `end: true` (documentation and diagram).
    pub end: bool,
    /// Task retry policy.
    pub retry: RetryPolicy,
    /// Per-attempt timeout, overriding `settings.node_timeout`.
    pub timeout: Option<Duration>,
    /// Assignments rendered after the node ran.
    pub state_updates: Vec<(String, UpdateValue)>,
    /// JSON Schema the node's structured output must satisfy.
    pub output_schema: Option<Value>,
    /// Whether the step takes part in teammate messaging.
    pub teammates: bool,
    /// The router, when the node has `routes:`.
    pub router: Option<Router>,
    /// Set for a node that failed to parse: it exists (so edges to it are not
    /// "unknown") but it cannot run.
    pub broken: bool,
    /// Line of the node in the graph file, where known.
    pub line: Option<u32>,
}

impl Node {
    /// Reports whether the node runs on a worker as one task.
    pub fn is_worker_task(&self) -> bool {
        matches!(
            self.kind,
            NodeKind::Task { .. }
                | NodeKind::Script { .. }
                | NodeKind::Llm { .. }
                | NodeKind::Agent { .. }
        )
    }

    /// Fields the node declares it writes (`state_updates` keys and
    /// `output_schema` properties).
    pub fn declared_writes(&self) -> Vec<String> {
        let mut writes: Vec<String> = self.state_updates.iter().map(|(k, _)| k.clone()).collect();
        if let Some(properties) = self
            .output_schema
            .as_ref()
            .and_then(|schema| schema.get("properties"))
            .and_then(Value::as_object)
        {
            writes.extend(properties.keys().cloned());
        }
        writes
    }
}

/// One `state_updates` entry: a template, or a literal JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateValue {
    /// A string, rendered leniently after the node ran.
    Template(Template),
    /// Any other JSON value, written as is.
    Literal(Value),
}

/// Task retry policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub initial_interval: Duration,
    /// Factor applied to the delay after each attempt.
    pub backoff: f64,
    /// Upper bound on the delay.
    pub max_interval: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            initial_interval: Duration::from_millis(500),
            backoff: 2.0,
            max_interval: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Delay before attempt `next_attempt` (2 for the first retry).
    pub fn delay_before(&self, next_attempt: u32) -> Duration {
        let exponent = next_attempt.saturating_sub(2).min(64) as i32;
        let seconds = self.initial_interval.as_secs_f64() * self.backoff.powi(exponent);
        let capped = seconds.min(self.max_interval.as_secs_f64()).max(0.0);
        Duration::from_secs_f64(capped)
    }
}

/// A condition on an edge or a router expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// A `conditions:` entry, by name.
    Named(String, CelExpr),
    /// An inline CEL expression.
    Inline(CelExpr),
    /// A predicate hosted by a worker (`fn:NAME`).
    Hosted(String),
}

impl Condition {
    /// The label used in diagrams and messages.
    pub fn label(&self) -> String {
        match self {
            Self::Named(name, _) => name.clone(),
            Self::Inline(expr) => expr.source().to_owned(),
            Self::Hosted(name) => format!("fn:{name}"),
        }
    }
}

/// A node's router (`routes:`).
#[derive(Debug, Clone)]
pub struct Router {
    /// The expression (or hosted function) that returns a key or keys.
    pub expr: Condition,
    /// Keys and their targets, in declaration order.
    pub map: Vec<(String, Target)>,
}

/// The source of an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `START`: the edge makes its target a start node.
    Start,
    /// A node.
    Node(NodeIdx),
}

/// The target of an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A node.
    Node(NodeIdx),
    /// `END`: a sink; taking it runs nothing.
    End,
}

impl Target {
    /// The target node, unless `END`.
    pub fn node(self) -> Option<NodeIdx> {
        match self {
            Self::Node(idx) => Some(idx),
            Self::End => None,
        }
    }
}

/// When an edge is taken.
#[derive(Debug, Clone, PartialEq)]
pub enum Guard {
    /// Always, once the source is done.
    Always,
    /// When the condition holds against the merged state.
    When(Condition),
    /// When the source's router returns this key.
    Route(String),
    /// Only when the source failed after its attempts.
    Fallback,
}

/// Where an edge was declared, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeOrigin {
    /// `edges:` entry at this position.
    EdgeList(usize),
    /// A node's `next:`.
    Next,
    /// A node's `depends_on:`.
    DependsOn,
    /// A node's `routes:`.
    Routes,
    /// A node's `fallback:`.
    Fallback,
    /// A node's `start: true`.
    StartFlag,
}

/// One normalised edge: "`to` runs after `from`".
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    /// Source.
    pub from: Endpoint,
    /// Target.
    pub to: Target,
    /// When it is taken.
    pub guard: Guard,
    /// A declared loop back-edge (`loop: true`).
    pub is_loop: bool,
    /// Where it was declared.
    pub origin: EdgeOrigin,
}

impl Edge {
    /// Reports whether the edge is a forward edge (takes part in readiness).
    pub fn is_forward(&self) -> bool {
        !self.is_loop
    }

    /// Reports whether the edge is taken only under a condition.
    pub fn is_conditional(&self) -> bool {
        !matches!(self.guard, Guard::Always)
    }
}

/// What a node runs, with the fields its kind takes.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// A handler registered by a worker.
    Task {
        /// Handler name.
        handler: String,
    },
    /// An executable run by a worker.
    Script {
        /// argv; the first element is the program.
        argv: Vec<String>,
        /// Extra environment (secrets substituted on the worker).
        env: Vec<(String, String)>,
    },
    /// One chat completion.
    Llm(Box<LlmConfig>),
    /// A tool-calling loop.
    Agent(Box<AgentConfig>),
    /// A pause for approve/reject.
    Approval {
        /// Question shown to the human.
        prompt: Option<Template>,
        /// Field that receives `true`/`false`.
        output_key: String,
    },
    /// A pause for a value.
    Input {
        /// Question shown to the human.
        prompt: Option<Template>,
        /// Field that receives the answer.
        output_key: String,
        /// JSON Schema the answer must satisfy.
        schema: Option<Value>,
    },
    /// Dynamic fan-out over a list.
    Map(Box<MapConfig>),
    /// A body chain repeated until a predicate holds.
    Loop(Box<LoopConfig>),
    /// Another graph run as a child.
    Subgraph(Box<SubgraphConfig>),
    /// Ends the run.
    End(EndConfig),
    /// Reserved; rejected by validation.
    Rag,
}

impl NodeKind {
    /// The kind's name as written in a graph file.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Task { .. } => "task",
            Self::Script { .. } => "script",
            Self::Llm(_) => "llm",
            Self::Agent(_) => "agent",
            Self::Approval { .. } => "approval",
            Self::Input { .. } => "input",
            Self::Map(_) => "map",
            Self::Loop(_) => "loop",
            Self::Subgraph(_) => "subgraph",
            Self::End(_) => "end",
            Self::Rag => "rag",
        }
    }
}

/// `llm` node fields.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// Model name (default: the provider's).
    pub model: Option<String>,
    /// System prompt.
    pub system: Option<Template>,
    /// User prompt.
    pub prompt: Template,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Completion length cap.
    pub max_tokens: Option<u32>,
    /// Provider name in the worker's configuration.
    pub provider: Option<String>,
}

/// `agent` node fields.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// System instructions.
    pub instructions: Option<Template>,
    /// User prompt.
    pub prompt: Template,
    /// Tool handlers.
    pub tools: Vec<String>,
    /// Turn cap.
    pub max_turns: Option<u32>,
    /// Provider name.
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
}

/// `map` node fields.
#[derive(Debug, Clone)]
pub struct MapConfig {
    /// Template or CEL expression resolving to a JSON array.
    pub over: ListSource,
    /// The item's name in each item's scope.
    pub item_name: String,
    /// Entry node of the per-item chain.
    pub branch: Option<NodeIdx>,
    /// Field each chain must write.
    pub output_key: String,
    /// Field receiving the results in input order.
    pub collect_into: String,
    /// Items in flight at most.
    pub max_concurrency: Option<ConcurrencyLimit>,
}

/// Where a map's list comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ListSource {
    /// A Jinja-style template (`"{{ subjects }}"`).
    Template(Template),
    /// A CEL expression (`state.subjects`).
    Cel(CelExpr),
}

/// A map's `max_concurrency`.
#[derive(Debug, Clone, PartialEq)]
pub enum ConcurrencyLimit {
    /// A literal positive integer.
    Fixed(u32),
    /// A template that must resolve to a positive integer at run time.
    Template(Template),
}

/// `loop` node fields.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Entry node of the body chain.
    pub body: Option<NodeIdx>,
    /// The stop predicate: a condition name, `fn:NAME`, or a sentence for an LLM.
    pub until: Until,
    /// Iteration cap.
    pub max_iterations: u32,
    /// Field the body writes each iteration.
    pub output_key: String,
}

/// How a `loop` node decides to stop.
#[derive(Debug, Clone)]
pub enum Until {
    /// A named condition.
    Condition(String, CelExpr),
    /// A worker-hosted predicate.
    Hosted(String),
    /// A sentence judged by an LLM.
    Sentence(String),
}

/// `subgraph` node fields.
#[derive(Debug, Clone)]
pub struct SubgraphConfig {
    /// Path of the child graph, relative to this file.
    pub graph: String,
    /// `{parent_field: child_field}`.
    pub input_map: Vec<(String, String)>,
    /// `{child_field: parent_field}`.
    pub output_map: Vec<(String, String)>,
}

/// `end` node fields.
#[derive(Debug, Clone, PartialEq)]
pub struct EndConfig {
    /// `completed` (default) or `failed`.
    pub failed: bool,
    /// Message, for a failed end.
    pub message: Option<String>,
}
