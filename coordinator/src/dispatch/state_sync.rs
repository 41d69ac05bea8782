//! The coordinator's end of state sync: which state field versions each
//! worker holds.
//!
//! A worker caches the latest version of each state field of each run it
//! works for (its end is `weft_worker`'s `state_sync` module). The stream to
//! a worker delivers in order, so a mirror of that cache kept here is exact:
//! a task carries the value of a field only when the mirror says the worker
//! lacks that version, and per-task traffic follows what changed, not the
//! size of the state.
//!
//! A task of a handler whose state type names the fields it reads (the
//! worker says which in its hello) carries only those, and an `llm` task
//! or an agent's without script tools (whose prompts are rendered here)
//! none: a field the step cannot see is neither sent nor, so, held.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use weft_proto::RunId;

use serde_json::Value;

use super::{TaskAssignment, WorkerKind};

/// The field versions one worker holds, per run, and the fields each of its
/// handlers reads.
#[derive(Debug, Default)]
pub struct FieldMirror {
    runs: HashMap<RunId, HashMap<Arc<str>, u64>>,
    reads: HashMap<String, HashSet<String>>,
}

/// Field versions a message carries values for: what sending it teaches
/// the worker.
pub type Sent = Vec<(Arc<str>, u64)>;

/// Whether the task's step reads no state field on its worker: an `llm`
/// step reads its prompts, rendered here; an agent too, unless one of its
/// tools is a script (which gets the state file). Its registered, remote
/// and teammate tools see their arguments and the task's context, never
/// the state.
fn reads_no_field(task: &TaskAssignment) -> bool {
    match task.definition.kind {
        WorkerKind::Llm => true,
        WorkerKind::Agent => task.definition.config().is_ok_and(|config| {
            config
                .get("tools")
                .and_then(Value::as_array)
                .is_none_or(|tools| tools.iter().all(|tool| tool.get("run").is_none()))
        }),
        _ => false,
    }
}

impl FieldMirror {
    /// The mirror of a worker whose handlers read the fields `reads` says
    /// (by handler; one not there reads every field).
    pub fn new(reads: &BTreeMap<String, Vec<String>>) -> Self {
        Self {
            runs: HashMap::new(),
            reads: reads
                .iter()
                .map(|(handler, fields)| (handler.clone(), fields.iter().cloned().collect()))
                .collect(),
        }
    }

    /// The task as this worker needs it (fields it holds go without their
    /// value, fields its handler does not read go), and what it carries.
    /// Call [`FieldMirror::sent`] once the message is on its way.
    pub fn prepare(&self, task: &TaskAssignment) -> (TaskAssignment, Sent) {
        let known = self.runs.get(&task.run_id);
        let mut wire = task.clone();
        if reads_no_field(task) {
            wire.state.clear();
        } else if let Some(reads) = self.handler_reads(task) {
            wire.state.retain(|field| reads.contains(&*field.name));
        }
        let mut sent = Vec::new();
        for field in &mut wire.state {
            if known.and_then(|k| k.get(&field.name)) == Some(&field.version) {
                field.json = None;
            } else {
                sent.push((field.name.clone(), field.version));
            }
        }
        (wire, sent)
    }

    /// The fields the task's handler reads on this worker, when its state
    /// type names them.
    fn handler_reads(&self, task: &TaskAssignment) -> Option<&HashSet<String>> {
        if self.reads.is_empty() || task.definition.kind != WorkerKind::Task {
            return None;
        }
        let config = task.definition.config().ok()?;
        let handler = config.get("handler").and_then(Value::as_str)?;
        self.reads.get(handler)
    }

    /// The prepared task reached the worker's stream: it will cache the
    /// values it carried.
    pub fn sent(&mut self, run_id: &RunId, sent: Sent) {
        let known = self.runs.entry(run_id.clone()).or_default();
        for (name, version) in sent {
            known.insert(name, version);
        }
    }

    /// Drops what the worker holds of a run; true if it held anything (and
    /// so should be told to forget it too).
    pub fn forget(&mut self, run_id: &str) -> bool {
        self.runs.remove(run_id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dispatch::{StateField, WorkerKind};

    fn field(name: &str, version: u64) -> StateField {
        StateField {
            name: Arc::from(name),
            version,
            json: Some(Arc::from(format!("\"{name}{version}\""))),
        }
    }

    pub(crate) fn task(fields: Vec<StateField>) -> TaskAssignment {
        TaskAssignment {
            run_id: RunId::from("r"),
            key: weft_proto::TaskKey(1),
            attempt: 1,
            definition: Arc::new(crate::dispatch::NodeDefinition::new(
                "n".into(),
                WorkerKind::Task,
                Arc::from("{}"),
            )),
            node_ref: crate::dispatch::KeptRef::Carried,
            bundle_ref: crate::dispatch::KeptRef::Carried,
            state: fields,
            scope_json: "{}".into(),
            item: None,
            timeout: Duration::from_secs(1),
            bundle: Arc::new(Vec::new()),
            team: None,
            prompts_json: String::new(),
            traceparent: String::new(),
            remote_tools: Vec::new(),
            flow: None,
        }
    }

    #[test]
    fn a_worker_gets_each_field_version_once() {
        let mut mirror = FieldMirror::default();
        let first = task(vec![field("blob", 1), field("counter", 2)]);
        let (wire, sent) = mirror.prepare(&first);
        assert!(wire.state.iter().all(|f| f.json.is_some()));
        mirror.sent(&first.run_id, sent);
        // Next wave: the counter changed, the blob did not.
        let second = task(vec![field("blob", 1), field("counter", 3)]);
        let (wire, sent) = mirror.prepare(&second);
        assert_eq!(wire.state[0].json, None, "the blob is not sent again");
        assert_eq!(wire.state[1].json.as_deref(), Some("\"counter3\""));
        assert_eq!(sent, vec![(Arc::from("counter"), 3)]);
    }

    #[test]
    fn a_handler_that_names_its_fields_gets_only_those() {
        let reads = [("inc".to_owned(), vec!["counter".to_owned()])].into();
        let mut mirror = FieldMirror::new(&reads);
        let of = |handler: &str, fields| {
            let mut task = task(fields);
            task.definition = Arc::new(crate::dispatch::NodeDefinition::new(
                "n".into(),
                WorkerKind::Task,
                Arc::from(format!(r#"{{"handler":"{handler}"}}"#)),
            ));
            task
        };
        let first = of("inc", vec![field("blob", 1), field("counter", 1)]);
        let (wire, sent) = mirror.prepare(&first);
        let names: Vec<&str> = wire.state.iter().map(|f| &*f.name).collect();
        assert_eq!(names, ["counter"], "the blob is left out, not even named");
        assert_eq!(sent, vec![(Arc::from("counter"), 1)]);
        mirror.sent(&first.run_id, sent);
        // A handler that reads everything, on the same worker, then gets the
        // blob: the worker never held it.
        let second = of("all", vec![field("blob", 1), field("counter", 1)]);
        let (wire, sent) = mirror.prepare(&second);
        assert_eq!(wire.state[0].json.as_deref(), Some("\"blob1\""));
        assert_eq!(wire.state[1].json, None, "the counter is held");
        assert_eq!(sent, vec![(Arc::from("blob"), 1)]);
        // Another kind with a `handler` key is not a handler; an `llm` step
        // reads no field.
        let mut other = of("inc", vec![field("blob", 2), field("counter", 2)]);
        let scripted = r#"{"tools":[{"name":"t","handler":"h"},{"name":"s","run":["x"]}]}"#;
        let registered = r#"{"tools":[{"name":"t","handler":"h"}]}"#;
        for (kind, config, carried) in [
            (WorkerKind::Script, r#"{"handler":"inc"}"#, 2),
            (WorkerKind::Llm, "{}", 0),
            (WorkerKind::Agent, registered, 0),
            (WorkerKind::Agent, "{}", 0),
            // A script tool gets the state file.
            (WorkerKind::Agent, scripted, 2),
        ] {
            other.definition = Arc::new(crate::dispatch::NodeDefinition::new(
                "n".into(),
                kind,
                Arc::from(config),
            ));
            assert_eq!(
                mirror.prepare(&other).0.state.len(),
                carried,
                "{kind} {config}"
            );
        }
    }

    #[test]
    fn a_task_not_sent_teaches_nothing() {
        let mut mirror = FieldMirror::default();
        let first = task(vec![field("blob", 1)]);
        let _unsent = mirror.prepare(&first);
        let (wire, _) = mirror.prepare(&first);
        assert!(wire.state[0].json.is_some());
        assert!(!mirror.forget("r"));
    }
}
