//! The one place that says what a worker needs for each node kind: which
//! [`WorkerKind`] runs it, what a worker must host to take it, and the
//! configuration the worker receives. A binding is computed once per node
//! when a run is planned; adding a kind touches the graph model, this file
//! and the worker.

use std::sync::Arc;

use serde_json::{Map, Value};
use weft_proto::types::WorkerKind;

use super::Requirement;
use crate::graph::NodeKind;

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
    let mut config = Map::new();
    let (kind, requirement) = match kind {
        NodeKind::Task { handler } => {
            config.insert("handler".into(), Value::from(handler.clone()));
            (WorkerKind::Task, Requirement::Handler(handler.clone()))
        }
        NodeKind::Script { argv, env } => {
            config.insert("argv".into(), Value::from(argv.clone()));
            let env: Map<String, Value> = env
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                .collect();
            config.insert("env".into(), Value::Object(env));
            (WorkerKind::Script, Requirement::Kind(WorkerKind::Script))
        }
        NodeKind::Llm(llm) => {
            config.insert("prompt".into(), Value::from(llm.prompt.source()));
            if let Some(model) = &llm.model {
                config.insert("model".into(), Value::from(model.clone()));
            }
            (WorkerKind::Llm, Requirement::Kind(WorkerKind::Llm))
        }
        NodeKind::Agent(agent) => {
            config.insert("prompt".into(), Value::from(agent.prompt.source()));
            config.insert("tools".into(), Value::from(agent.tools.clone()));
            (WorkerKind::Agent, Requirement::Kind(WorkerKind::Agent))
        }
        NodeKind::Approval { .. }
        | NodeKind::Input { .. }
        | NodeKind::Map(_)
        | NodeKind::Loop(_)
        | NodeKind::Subgraph(_)
        | NodeKind::End(_)
        | NodeKind::Rag => return None,
    };
    Some(NodeBinding {
        kind,
        requirement,
        config: Arc::from(Value::Object(config).to_string()),
    })
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
        })
        .expect("scripts run on workers");
        assert_eq!(script.requirement, Requirement::Kind(WorkerKind::Script));
        assert_eq!(
            &*script.config,
            r#"{"argv":["python3","gate.py"],"env":{"MODE":"${MODE}"}}"#
        );
        assert_eq!(bind(&NodeKind::Rag), None);
    }
}
