//! The one place that says what a worker needs for each node kind: which
//! [`WorkerKind`] runs it, what a worker must host to take it, and the
//! configuration the worker receives. A binding is computed once per node
//! when a run is planned; adding a kind touches the graph model, this file
//! and the worker.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use weft_proto::types::WorkerKind;

use crate::graph::{KnowledgeDecl, NodeKind, RagConfig, ToolDecl, ToolRun};

/// What a task needs from a worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requirement {
    /// A built-in kind (`script`, `llm`, `agent`).
    Kind(WorkerKind),
    /// A registered handler (`kind: task`), its name shared by every task
    /// of the node.
    Handler(std::sync::Arc<str>),
    /// A registered function (`fn:NAME`), called without taking a slot.
    Function(String),
    /// Python, for a call of a Python function (without taking a slot).
    Python,
    /// The `agent` kind, with these registered tools: hosted by the worker
    /// itself or by others (whose tools it calls through the coordinator).
    Agent(Vec<String>),
    /// A registered agent tool, called for an agent step on another worker
    /// (without taking a slot).
    Tool(String),
}

impl Requirement {
    /// The registered tools a worker that runs it calls, wherever they are.
    pub fn tools(&self) -> &[String] {
        match self {
            Self::Agent(tools) => tools,
            _ => &[],
        }
    }

    /// Whether a job with this requirement takes one of the worker's slots
    /// (tasks do; function calls are short and do not).
    pub fn takes_slot(&self) -> bool {
        !matches!(self, Self::Function(_) | Self::Python | Self::Tool(_))
    }
}

impl std::fmt::Display for Requirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kind(kind) => write!(f, "kind '{kind}'"),
            Self::Handler(name) => write!(f, "handler '{name}'"),
            Self::Function(name) => write!(f, "function '{name}'"),
            Self::Python => f.write_str("Python (a worker with kind 'function')"),
            Self::Agent(tools) if tools.is_empty() => write!(f, "kind 'agent'"),
            Self::Agent(tools) => write!(f, "kind 'agent' with tools {}", tools.join(", ")),
            Self::Tool(name) => write!(f, "tool '{name}'"),
        }
    }
}

/// How a node is run on a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBinding {
    /// The kind the worker runs.
    pub kind: WorkerKind,
    /// What a worker must host.
    pub requirement: Requirement,
    /// The node's fields the worker needs, as JSON.
    pub config: Arc<str>,
}

/// The binding of a node that runs on a worker; `None` for kinds the
/// coordinator runs itself (approval, input, map, end, …).
pub fn bind(kind: &NodeKind) -> Option<NodeBinding> {
    bind_with(kind, None, &BindContext::default())
}

/// What of the graph and the run's limits a node's binding may need.
#[derive(Debug, Clone, Copy)]
pub struct BindContext<'a> {
    /// The tools the graph declares (an `agent` node's are sent with it).
    pub tools: &'a [ToolDecl],
    /// The directory of the graph's file in its bundle (a `function`
    /// node's Python modules and a `rag` node's sources are relative to
    /// it).
    pub dir: &'a str,
    /// The graph's knowledge bases (those a `rag` node reads are sent with
    /// it).
    pub knowledge: &'a [KnowledgeDecl],
    /// The most bytes one knowledge base's files may hold.
    pub max_knowledge_bytes: u64,
}

impl Default for BindContext<'_> {
    fn default() -> Self {
        Self {
            tools: &[],
            dir: "",
            knowledge: &[],
            max_knowledge_bytes: crate::graph::knowledge::DEFAULT_MAX_KNOWLEDGE_BYTES,
        }
    }
}

/// As [`bind`], for a node whose structured output must match `schema`
/// (an `llm` node asks its model for JSON of that shape), in the graph and
/// under the limits `context` gives.
pub fn bind_with(
    kind: &NodeKind,
    schema: Option<&Value>,
    context: &BindContext<'_>,
) -> Option<NodeBinding> {
    let BindContext { tools, dir, .. } = *context;
    let mut config = Map::new();
    let (kind, requirement) = match kind {
        NodeKind::Task { handler } => {
            config.insert("handler".into(), Value::from(handler.clone()));
            (
                WorkerKind::Task,
                Requirement::Handler(handler.as_str().into()),
            )
        }
        NodeKind::Script { argv, env, sandbox } => {
            config.insert("argv".into(), Value::from(argv.clone()));
            insert_some(&mut config, "sandbox", sandbox.as_ref().map(sandbox_json));
            let env: Map<String, Value> = env
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                .collect();
            config.insert("env".into(), Value::Object(env));
            (WorkerKind::Script, Requirement::Kind(WorkerKind::Script))
        }
        NodeKind::Llm(llm) => {
            // The prompts are rendered per task (`Assignment::prompts`).
            insert_some(&mut config, "model", llm.model.clone().map(Value::from));
            insert_some(
                &mut config,
                "provider",
                llm.provider.clone().map(Value::from),
            );
            insert_some(&mut config, "temperature", llm.temperature.map(Value::from));
            insert_some(&mut config, "max_tokens", llm.max_tokens.map(Value::from));
            insert_some(&mut config, "output_schema", schema.cloned());
            (WorkerKind::Llm, Requirement::Kind(WorkerKind::Llm))
        }
        NodeKind::Agent(agent) => {
            let (specs, registered) = agent_tools(&agent.tools, tools);
            config.insert("tools".into(), Value::Array(specs));
            insert_some(&mut config, "model", agent.model.clone().map(Value::from));
            insert_some(
                &mut config,
                "provider",
                agent.provider.clone().map(Value::from),
            );
            insert_some(&mut config, "max_turns", agent.max_turns.map(Value::from));
            insert_some(&mut config, "output_schema", schema.cloned());
            (WorkerKind::Agent, Requirement::Agent(registered))
        }
        NodeKind::Function(function) => {
            // `tool_args` keep their `${NAME}`s: the worker substitutes them.
            config.insert("module".into(), function.callable.module.clone().into());
            config.insert("function".into(), function.callable.function.clone().into());
            config.insert("dir".into(), dir.into());
            config.insert(
                "tool_args".into(),
                Value::Object(function.tool_args.clone()),
            );
            config.insert("output_key".into(), function.output_key.clone().into());
            insert_some(
                &mut config,
                "sandbox",
                function.sandbox.as_ref().map(sandbox_json),
            );
            (
                WorkerKind::Function,
                Requirement::Kind(WorkerKind::Function),
            )
        }
        NodeKind::Rag(rag) => {
            let calls_model = rag_config(&mut config, rag, schema, context);
            // Every worker retrieves; one that calls a model must have a
            // provider, as an `llm` step's.
            let requirement = if calls_model {
                Requirement::Kind(WorkerKind::Llm)
            } else {
                Requirement::Kind(WorkerKind::Rag)
            };
            (WorkerKind::Rag, requirement)
        }
        NodeKind::Approval { .. }
        | NodeKind::Input { .. }
        | NodeKind::Map(_)
        | NodeKind::Loop(_)
        | NodeKind::Subgraph(_)
        | NodeKind::End(_)
        | NodeKind::Broken => return None,
    };
    Some(NodeBinding {
        kind,
        requirement,
        config: Arc::from(Value::Object(config).to_string()),
    })
}

/// An agent's tools as its worker needs them: each declared tool's
/// description, parameters and what runs it; a name the graph does not
/// declare is a tool some worker registered (`{"name", "handler"}`, its
/// description and schema the worker's). Also the registered tools the
/// worker must host.
fn agent_tools(names: &[String], declared: &[ToolDecl]) -> (Vec<Value>, Vec<String>) {
    let mut registered = Vec::new();
    let specs = names
        .iter()
        .map(
            |name| match declared.iter().find(|tool| &tool.name == name) {
                Some(tool) => {
                    let mut spec = json!({
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    });
                    match &tool.run {
                        ToolRun::Script(argv) => spec["run"] = json!(argv),
                        ToolRun::Handler(handler) => {
                            spec["handler"] = json!(handler);
                            registered.push(handler.clone());
                        }
                    }
                    spec
                }
                None => {
                    registered.push(name.clone());
                    json!({"name": name, "handler": name})
                }
            },
        )
        .collect();
    registered.sort();
    registered.dedup();
    (specs, registered)
}

/// A `rag` node's fields as its worker reads them (`weft_worker`'s `rag`
/// module): the knowledge bases it reads (their sources' globs, chunking
/// and embeddings), the graph's directory in the bundle, the retrieval's
/// mode, depth and rerank, and the completion's templates (rendered on
/// the worker once the passages are known) and settings, and the most
/// bytes a knowledge base's files may hold. Its `query` is
/// rendered here, with the prompts (`prompts::render_prompts`). Returns
/// whether the step calls a model (or may: an index with embeddings).
fn rag_config(
    config: &mut Map<String, Value>,
    rag: &RagConfig,
    schema: Option<&Value>,
    context: &BindContext<'_>,
) -> bool {
    let bases: Vec<&KnowledgeDecl> = rag
        .knowledge
        .iter()
        .filter_map(|name| context.knowledge.iter().find(|base| &base.name == name))
        .collect();
    let all_embedded = bases.iter().all(|base| base.embeddings.is_some());
    // Building a knowledge base's index embeds its chunks, whatever the
    // mode: only a worker with a provider can.
    let any_embedded = bases.iter().any(|base| base.embeddings.is_some());
    let mode = rag.mode_with(all_embedded);
    let bases: Vec<Value> = bases
        .into_iter()
        .map(|base| {
            json!({
                "name": base.name,
                "sources": base.sources,
                "chunk": {"size": base.chunk_size, "overlap": base.chunk_overlap},
                "embeddings": base.embeddings.as_ref().map(|e| json!({
                    "model": e.model,
                    "provider": e.provider,
                    "search": e.search.map(|search| search.as_str()),
                })),
                "store": base.store.as_ref().map(|store| json!({
                    "kind": "pgvector",
                    "url": store.url,
                    "table": store.table,
                })),
            })
        })
        .collect();
    config.insert("knowledge".into(), Value::Array(bases));
    config.insert("dir".into(), context.dir.into());
    config.insert(
        "max_knowledge_bytes".into(),
        context.max_knowledge_bytes.into(),
    );
    config.insert("top_k".into(), rag.top_k.into());
    config.insert("mode".into(), mode.as_str().into());
    config.insert("hops".into(), rag.hops(mode).into());
    insert_some(
        config,
        "rerank",
        rag.rerank
            .as_ref()
            .map(|r| json!({"model": r.model, "provider": r.provider})),
    );
    insert_some(
        config,
        "prompt",
        rag.prompt.as_ref().map(|t| t.source().into()),
    );
    insert_some(
        config,
        "system",
        rag.system.as_ref().map(|t| t.source().into()),
    );
    insert_some(config, "model", rag.model.clone().map(Value::from));
    insert_some(config, "provider", rag.provider.clone().map(Value::from));
    insert_some(config, "temperature", rag.temperature.map(Value::from));
    insert_some(config, "max_tokens", rag.max_tokens.map(Value::from));
    insert_some(config, "output_schema", schema.cloned());
    rag.prompt.is_some() || rag.rerank.is_some() || mode.uses_vectors() || any_embedded
}

/// A node's `sandbox:` as the worker reads it: the limits it sets.
fn sandbox_json(sandbox: &crate::graph::Sandbox) -> Value {
    let mut limits = Map::new();
    insert_some(&mut limits, "memory", sandbox.memory.map(Value::from));
    insert_some(&mut limits, "cpu", sandbox.cpu.map(Value::from));
    insert_some(&mut limits, "processes", sandbox.processes.map(Value::from));
    insert_some(
        &mut limits,
        "open_files",
        sandbox.open_files.map(Value::from),
    );
    insert_some(&mut limits, "network", sandbox.network.map(Value::from));
    Value::Object(limits)
}

fn insert_some(config: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        config.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_need_their_handler_and_scripts_the_script_kind() {
        let task = bind(&NodeKind::Task {
            handler: "draft".into(),
        })
        .expect("tasks run on workers");
        assert_eq!(task.kind, WorkerKind::Task);
        assert_eq!(task.requirement, Requirement::Handler("draft".into()));
        assert_eq!(&*task.config, r#"{"handler":"draft"}"#);
        let script = bind(&NodeKind::Script {
            argv: vec!["python3".into(), "gate.py".into()],
            env: vec![("MODE".into(), "${MODE}".into())],
            sandbox: None,
        })
        .expect("scripts run on workers");
        assert_eq!(script.requirement, Requirement::Kind(WorkerKind::Script));
        assert_eq!(
            &*script.config,
            r#"{"argv":["python3","gate.py"],"env":{"MODE":"${MODE}"}}"#
        );
        assert_eq!(bind(&NodeKind::Broken), None);
    }
}
