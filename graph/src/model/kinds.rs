//! Node kinds and the fields each takes (SPEC section 4).

use super::NodeIdx;
use crate::approvers::Approver;
use crate::cel::CelExpr;
use crate::expr::Template;
use crate::python::{Code, PyDef, PyFunction};
use crate::schema::Schema;

/// A script node's `sandbox:` (SPEC 11): what its process may use, each
/// limit at most the worker's (a node may tighten them, never loosen).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sandbox {
    /// Bytes of memory.
    pub memory: Option<u64>,
    /// CPU time, in whole seconds.
    pub cpu: Option<u64>,
    /// Processes and threads at once.
    pub processes: Option<u32>,
    /// Open files.
    pub open_files: Option<u32>,
    /// Whether it reaches the network.
    pub network: Option<bool>,
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
        /// Its `sandbox:`: limits below the worker's.
        sandbox: Option<Sandbox>,
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
        /// Who may answer (empty: anyone whose role may resume runs).
        approvers: Vec<Approver>,
    },
    /// A pause for a value.
    Input {
        /// Question shown to the human.
        prompt: Option<Template>,
        /// Field that receives the answer.
        output_key: String,
        /// JSON Schema the answer must satisfy.
        schema: Option<Schema>,
        /// Who may answer (empty: anyone whose role may resume runs).
        approvers: Vec<Approver>,
    },
    /// Dynamic fan-out over a list.
    Map(Box<MapConfig>),
    /// A body chain repeated until a predicate holds.
    Loop(Box<LoopConfig>),
    /// Another graph run as a child.
    Subgraph(Box<SubgraphConfig>),
    /// Ends the run.
    End(EndConfig),
    /// A Python function called on a worker's Python host (SPEC 4.3).
    Function(Box<FunctionConfig>),
    /// Retrieval over knowledge bases, then an optional completion
    /// (SPEC 17).
    Rag(Box<RagConfig>),
    /// A node that could not be read (its errors are reported): it exists
    /// so that edges to it are not also reported, and never runs.
    Broken,
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
            Self::Function(_) => "function",
            Self::Rag(_) => "rag",
            Self::Broken => "broken",
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

/// How a `rag` node ranks chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RagMode {
    /// BM25 over their words.
    Keyword,
    /// The cosine of their embeddings and the query's.
    Vector,
    /// Both, fused by reciprocal rank fusion.
    Hybrid,
}

impl RagMode {
    /// Every mode, by name.
    pub const ALL: [(&'static str, Self); 3] = [
        ("keyword", Self::Keyword),
        ("vector", Self::Vector),
        ("hybrid", Self::Hybrid),
    ];

    /// The mode's name, as in a graph file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keyword => "keyword",
            Self::Vector => "vector",
            Self::Hybrid => "hybrid",
        }
    }

    /// Whether it ranks by embeddings.
    pub fn uses_vectors(self) -> bool {
        !matches!(self, Self::Keyword)
    }
}

/// A `rag` node's `rerank:`: the model that scores the fused candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerank {
    /// Model name (default: the provider's).
    pub model: Option<String>,
    /// Provider name in the worker's configuration.
    pub provider: Option<String>,
}

/// `rag` node fields (SPEC 17).
#[derive(Debug, Clone)]
pub struct RagConfig {
    /// The knowledge bases it retrieves from, by name.
    pub knowledge: Vec<String>,
    /// What it retrieves (default: the rendered prompt).
    pub query: Option<Template>,
    /// How many passages (before graph search adds linked ones).
    pub top_k: u32,
    /// How chunks are ranked, as written (default: [`RagConfig::mode_with`]).
    pub mode: Option<RagMode>,
    /// Graph search's depth, as written (default: [`RagConfig::hops`]).
    pub hops: Option<u32>,
    /// A model that reorders the candidates (graph search is then off).
    pub rerank: Option<Rerank>,
    /// The completion's prompt; without one the node only retrieves.
    pub prompt: Option<Template>,
    /// The completion's system prompt.
    pub system: Option<Template>,
    /// Model name (default: the provider's).
    pub model: Option<String>,
    /// Provider name in the worker's configuration.
    pub provider: Option<String>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Completion length cap.
    pub max_tokens: Option<u32>,
}

/// The names a `rag` node's templates see besides the state and scope:
/// the retrieved passages, as text and as a list.
pub const RAG_BINDINGS: [&str; 2] = ["context", "sources"];

/// `top_k`'s default.
pub const DEFAULT_TOP_K: u32 = 5;
/// The most passages a `rag` node asks for.
pub const MAX_TOP_K: u32 = 100;
/// Graph search's deepest.
pub const MAX_HOPS: u32 = 3;

impl RagConfig {
    /// Its mode: as written, else `hybrid` when every knowledge base it
    /// reads has embeddings, else `keyword`.
    pub fn mode_with(&self, all_embedded: bool) -> RagMode {
        self.mode.unwrap_or(if all_embedded {
            RagMode::Hybrid
        } else {
            RagMode::Keyword
        })
    }

    /// Graph search's depth: as written, else 1 for `keyword` and
    /// `hybrid`, 0 for `vector` and with `rerank`.
    pub fn hops(&self, mode: RagMode) -> u32 {
        self.hops
            .unwrap_or(if self.rerank.is_some() || mode == RagMode::Vector {
                0
            } else {
                1
            })
    }
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
    /// The stop predicate: a condition name, code, or a sentence for an LLM.
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
    /// A predicate run by a worker: `fn:NAME`, or a Python function.
    Hosted(Code),
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

/// `function` node fields (SPEC 4.3).
#[derive(Debug, Clone)]
pub struct FunctionConfig {
    /// The function called.
    pub callable: PyFunction,
    /// What its file shows of it (parameters), when the file is beside
    /// the graph.
    pub definition: Option<PyDef>,
    /// Keyword arguments given by the graph; `${NAME}` secrets are
    /// substituted on the worker.
    pub tool_args: serde_json::Map<String, serde_json::Value>,
    /// Field a value that is not an object is written to (default: the
    /// node id).
    pub output_key: String,
    /// Its `sandbox:`: limits below the worker's for the Python processes
    /// that serve it (no `cpu`: a process serves many calls, each bounded
    /// by the node's `timeout`).
    pub sandbox: Option<Sandbox>,
}
