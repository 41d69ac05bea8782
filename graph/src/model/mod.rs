//! The typed, normalised graph: what the rest of Weft works with.
//!
//! Every way a graph file can say "B runs after A" (`edges:`, `next:`,
//! `depends_on:`, `routes:`, `fallback:`, `start:`, `START`/`END`) becomes one
//! [`Edge`] here, so validation, the diagram and the run state machine see one
//! edge model. Node ids are interned as [`NodeIdx`] positions in declaration
//! order, which is also the order reducers see branch values in.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;

pub mod kinds;

use kinds::NodeKind;

use super::cel::CelExpr;
use super::declarations::{FieldDecl, RetryPolicy, Settings};
use super::expr::Template;
use super::python::Code;
use super::schema::Schema;
use super::tools::ToolDecl;

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
    /// The tools `agent` nodes may call (`tools:`).
    pub tools: Vec<ToolDecl>,
    /// `functions:`: the Python sidecar, relative to the graph's directory.
    pub functions: Option<String>,
    /// The Python files the graph's names live in (the sidecar, bundled
    /// import-path modules, `nodes/<id>.py`), relative to its directory.
    pub python_files: Vec<String>,
    /// The named agents' files it read (`agents/NAME.md`), relative to its
    /// directory.
    pub agent_files: Vec<String>,
    /// Its knowledge bases (`knowledge:`), in declaration order.
    pub knowledge: Vec<super::knowledge::KnowledgeDecl>,
    /// The directory of the graph file within its bundle (`""` at the
    /// root): Python names are relative to it.
    pub dir: String,
    index: HashMap<String, NodeIdx>,
    field_index: HashMap<String, usize>,
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
        let mut field_index = HashMap::with_capacity(fields.len());
        for (i, field) in fields.iter().enumerate() {
            field_index.entry(field.name.clone()).or_insert(i);
        }
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
            tools: Vec::new(),
            functions: None,
            python_files: Vec::new(),
            agent_files: Vec::new(),
            knowledge: Vec::new(),
            dir: String::new(),
            index,
            field_index,
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
        self.field_index.get(name).map(|&i| &self.fields[i])
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

    /// A target as written in a graph: a node id, or `END`.
    pub fn target_name(&self, target: Target) -> String {
        match target {
            Target::Node(idx) => self.node(idx).id.clone(),
            Target::End => crate::END.to_owned(),
        }
    }

    /// Every Rust worker's function (`fn:NAME`) the graph uses, once each,
    /// with what uses it first (a reducer, a router, an edge condition);
    /// loops' `until` apart.
    pub fn hosted_functions(&self) -> Vec<(String, String)> {
        self.code_uses_with(false, false)
            .into_iter()
            .filter_map(|(code, used_by)| match code {
                Code::Rust(name) => Some((name, used_by)),
                Code::Python(_) => None,
            })
            .collect()
    }

    /// Every Python function the graph names, once each, with what uses
    /// it first; `function` nodes' callables included.
    pub fn python_functions(&self) -> Vec<(crate::PyFunction, String)> {
        python_only(self.code_uses_with(true, true))
    }

    /// The Python functions the coordinator calls on a worker (reducers,
    /// conditions, routers, `until`s): `function` nodes' callables apart,
    /// which run as tasks.
    pub fn python_calls(&self) -> Vec<(crate::PyFunction, String)> {
        python_only(self.code_uses_with(true, false))
    }

    /// Every piece of code the graph names, once each, with what uses it
    /// first; loops' `until` too when `untils`, `function` nodes'
    /// callables when `callables`.
    fn code_uses_with(&self, untils: bool, callables: bool) -> Vec<(Code, String)> {
        let mut found: Vec<(Code, String)> = Vec::new();
        let mut add = |code: &Code, used_by: String| {
            if !found.iter().any(|(c, _)| c == code) {
                found.push((code.clone(), used_by));
            }
        };
        for field in &self.fields {
            if let Some(crate::Reducer::Hosted(code)) = &field.reducer {
                add(code, format!("reducer of field '{}'", field.name));
            }
        }
        for (idx, node) in self.nodes.iter().enumerate() {
            match &node.kind {
                NodeKind::Function(config) if callables => {
                    add(
                        &Code::Python(config.callable.clone()),
                        format!("function node '{}'", node.id),
                    );
                }
                NodeKind::Loop(config) if untils => {
                    if let crate::Until::Hosted(code) = &config.until {
                        add(code, format!("until of loop node '{}'", node.id));
                    }
                }
                _ => {}
            }
            if let Some(router) = &node.router
                && let Condition::Hosted(code) = &router.expr
            {
                add(code, format!("router of node '{}'", node.id));
            }
            for &e in self.out_edges(idx) {
                if let Guard::When(Condition::Hosted(code)) = &self.edges[e].guard {
                    add(code, format!("condition on an edge from '{}'", node.id));
                }
            }
        }
        found
    }

    /// Looks up a knowledge base.
    pub fn knowledge_base(&self, name: &str) -> Option<&super::knowledge::KnowledgeDecl> {
        self.knowledge.iter().find(|base| base.name == name)
    }

    /// A `rag` node's mode: as written, else by whether every knowledge
    /// base it reads has embeddings.
    pub fn rag_mode(&self, rag: &kinds::RagConfig) -> kinds::RagMode {
        let all_embedded = rag.knowledge.iter().all(|name| {
            self.knowledge_base(name)
                .is_some_and(|base| base.embeddings.is_some())
        });
        rag.mode_with(all_embedded)
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

/// The Python functions among `uses`.
fn python_only(uses: Vec<(Code, String)>) -> Vec<(crate::PyFunction, String)> {
    uses.into_iter()
        .filter_map(|(code, used_by)| match code {
            Code::Python(function) => Some((function, used_by)),
            Code::Rust(_) => None,
        })
        .collect()
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
    pub output_schema: Option<Schema>,
    /// `concurrency:`: how many of its steps with the same key run at once
    /// across the namespace's runs.
    pub concurrency: Option<ConcurrencyKey>,
    /// `cache: {key, ttl}`: a step whose key was stored within `ttl` in
    /// its namespace takes the stored writes instead of running.
    pub cache: Option<NodeCache>,
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
                | NodeKind::Rag(_)
                | NodeKind::Function(_)
        )
    }

    /// Fields the node declares it writes (`state_updates` keys and
    /// `output_schema` properties).
    pub fn declared_writes(&self) -> Vec<String> {
        let mut writes: Vec<String> = self.state_updates.iter().map(|(k, _)| k.clone()).collect();
        if let Some(properties) = self
            .output_schema
            .as_ref()
            .and_then(|schema| schema.source().get("properties"))
            .and_then(Value::as_object)
        {
            writes.extend(properties.keys().cloned());
        }
        writes
    }
}

/// A node's `concurrency: {key, max}` (SPEC 18): at most `max` steps whose
/// `key` renders the same run at once across every run of a namespace.
#[derive(Debug, Clone)]
pub struct ConcurrencyKey {
    /// Rendered on the state (and a map item's scope) when the step is
    /// created.
    pub key: Template,
    /// At least 1.
    pub max: u32,
}

/// A node's `cache: {key, ttl}` (SPEC 20): a step whose entry key (the
/// graph's name, the node's id, a hash of its definition and the rendered
/// key) was stored within `ttl` in the same namespace does not run; the
/// stored writes are merged instead.
#[derive(Debug, Clone)]
pub struct NodeCache {
    /// Rendered, strictly, on the state (and a map item's scope) when the
    /// step is created.
    pub key: Template,
    /// How long a stored entry answers.
    pub ttl: Duration,
    /// SHA-256 (hex) of what the node does as written: every field but its
    /// wiring (`next`, `routes`, …), its description and the cache's
    /// `ttl`, keys in sorted order. A changed definition misses the cache.
    pub definition: String,
}

impl NodeCache {
    /// The entry key of a step of node `node` of graph `graph` whose key
    /// rendered as `rendered`: SHA-256 (hex) of the four, each
    /// length-prefixed so that no two combinations write the same bytes.
    pub fn entry_key(&self, graph: &str, node: &str, rendered: &str) -> String {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        for part in [graph, node, &self.definition, rendered] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        hex::encode(hash.finalize())
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

/// A condition on an edge or a router expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// A `conditions:` entry, by name.
    Named(String, CelExpr),
    /// An inline CEL expression.
    Inline(CelExpr),
    /// A predicate run by a worker: a Rust worker's `fn:NAME`, or Python.
    Hosted(Code),
}

impl Condition {
    /// The state fields it reads, or `None` when it may read all of them
    /// (a CEL expression that uses `state` whole, a worker's predicate,
    /// which is given the state).
    pub fn state_reads(&self) -> Option<BTreeSet<String>> {
        match self {
            Self::Named(_, expr) | Self::Inline(expr) => expr.state_reads().cloned(),
            Self::Hosted(_) => None,
        }
    }

    /// The label used in diagrams and messages.
    pub fn label(&self) -> String {
        match self {
            Self::Named(name, _) => name.clone(),
            Self::Inline(expr) => expr.source().to_owned(),
            Self::Hosted(code) => code.label(),
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
