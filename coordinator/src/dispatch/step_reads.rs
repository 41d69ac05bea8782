//! Which state fields a step reads on its worker, so that its task carries
//! those and no other.
//!
//! The coordinator renders what it can — an `llm` or `agent` step's
//! prompts, a `rag` step's query — and a worker reads the state only where
//! a step's own code or templates do:
//!
//! - a Rust handler: the fields its state type names, as the worker said
//!   in its hello (`handler_reads`); a handler it did not name, all;
//! - an `llm` step: none;
//! - an `agent` step: none, unless one of its tools is a script, which is
//!   given the state file (its registered, remote and teammate tools see
//!   their arguments and the task's context, never the state);
//! - a `rag` step: the fields its `prompt` and `system` templates read (the
//!   worker renders them over those fields only), none without a prompt;
//! - anything else (a script, a Python function): all.
//!
//! Naming a field a step does not read costs bytes, never correctness;
//! leaving out one it reads would fail the step, so anything unsure (a
//! template that reads `state` whole, one that does not parse) reads all.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::Value;

use super::{TaskAssignment, WorkerKind};
use crate::graph::Template;

/// The fields a step reads on its worker.
#[derive(Debug)]
pub enum Reads<'a> {
    /// Every field.
    All,
    /// No field.
    Nothing,
    /// A handler's, as its worker said.
    Handler(&'a HashSet<String>),
    /// A `rag` step's templates'.
    Templates(BTreeSet<String>),
}

impl Reads<'_> {
    /// Whether the step reads `field`.
    pub fn contains(&self, field: &str) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::Handler(fields) => fields.contains(field),
            Self::Templates(fields) => fields.contains(field),
        }
    }
}

/// The fields each handler of one worker reads, by handler (a handler not
/// here reads all).
#[derive(Debug, Default)]
pub struct HandlerReads(HashMap<String, HashSet<String>>);

impl HandlerReads {
    /// What a worker's hello said.
    pub fn new(said: &BTreeMap<String, Vec<String>>) -> Self {
        Self(
            said.iter()
                .map(|(handler, fields)| (handler.clone(), fields.iter().cloned().collect()))
                .collect(),
        )
    }

    /// The fields `task`'s step reads on this worker.
    pub fn of<'a>(&'a self, task: &TaskAssignment) -> Reads<'a> {
        let Ok(config) = task.definition.config() else {
            return Reads::All;
        };
        let text = |key: &str| config.get(key).and_then(Value::as_str);
        match task.definition.kind {
            WorkerKind::Task => text("handler")
                .and_then(|handler| self.0.get(handler))
                .map_or(Reads::All, Reads::Handler),
            WorkerKind::Llm => Reads::Nothing,
            WorkerKind::Agent => {
                let tools = config.get("tools").and_then(Value::as_array);
                if tools.is_some_and(|tools| tools.iter().any(|tool| tool.get("run").is_some())) {
                    Reads::All
                } else {
                    Reads::Nothing
                }
            }
            WorkerKind::Rag => match text("prompt") {
                None => Reads::Nothing,
                Some(prompt) => {
                    let mut fields = BTreeSet::new();
                    for source in [Some(prompt), text("system")].into_iter().flatten() {
                        match Template::parse(source).ok().and_then(|t| t.state_reads()) {
                            Some(reads) => fields.extend(reads),
                            None => return Reads::All,
                        }
                    }
                    Reads::Templates(fields)
                }
            },
            WorkerKind::Script | WorkerKind::Function => Reads::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::dispatch::NodeDefinition;
    use crate::dispatch::state_sync::tests::task;

    fn of(kind: WorkerKind, config: &str) -> TaskAssignment {
        let mut task = task(Vec::new());
        task.definition = Arc::new(NodeDefinition::new("n".into(), kind, Arc::from(config)));
        task
    }

    fn reads(reads: &Reads<'_>, fields: &[&str]) -> Vec<bool> {
        fields.iter().map(|f| reads.contains(f)).collect()
    }

    #[test]
    fn each_kind_reads_what_its_worker_looks_at() {
        let said = [("inc".to_owned(), vec!["counter".to_owned()])].into();
        let handlers = HandlerReads::new(&said);
        let fields = ["counter", "topic", "blob"];
        let cases = [
            (
                WorkerKind::Task,
                r#"{"handler":"inc"}"#,
                [true, false, false],
            ),
            (
                WorkerKind::Task,
                r#"{"handler":"other"}"#,
                [true, true, true],
            ),
            (
                WorkerKind::Llm,
                r#"{"handler":"inc"}"#,
                [false, false, false],
            ),
            (
                WorkerKind::Agent,
                r#"{"tools":[{"name":"t","handler":"h"}]}"#,
                [false; 3],
            ),
            (WorkerKind::Agent, "{}", [false; 3]),
            // A script tool gets the state file.
            (
                WorkerKind::Agent,
                r#"{"tools":[{"name":"t","handler":"h"},{"name":"s","run":["x"]}]}"#,
                [true; 3],
            ),
            (WorkerKind::Script, r#"{"handler":"inc"}"#, [true; 3]),
            (WorkerKind::Function, "{}", [true; 3]),
            (WorkerKind::Rag, r#"{"top_k":3}"#, [false; 3]),
            (
                WorkerKind::Rag,
                r#"{"prompt":"About {{ topic }}: {{ context }}","system":"{{ state.counter }}"}"#,
                [true, true, false],
            ),
            // `state` whole, or a template that does not parse: all.
            (WorkerKind::Rag, r#"{"prompt":"{{ state }}"}"#, [true; 3]),
            (WorkerKind::Rag, r#"{"prompt":"{{ unclosed"}"#, [true; 3]),
        ];
        for (kind, config, expected) in cases {
            let task = of(kind, config);
            assert_eq!(
                reads(&handlers.of(&task), &fields),
                expected,
                "{kind} {config}"
            );
        }
    }
}
