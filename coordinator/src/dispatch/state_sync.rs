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
//! A task carries only the fields its step reads on the worker
//! ([`super::step_reads`]): a field the step cannot see is neither sent
//! nor, so, held.

use std::collections::BTreeMap;
use std::sync::Arc;
use weft_proto::RunId;

use foldhash::{HashMap, HashMapExt};

use super::TaskAssignment;
use super::step_reads::{HandlerReads, Reads};

/// The field versions one worker holds, per run, and the fields each of its
/// handlers reads.
#[derive(Debug, Default)]
pub struct FieldMirror {
    /// By run (an id the coordinator makes: the fast hasher), then by
    /// field name (what a graph names: std's SipHash).
    runs: HashMap<RunId, std::collections::HashMap<Arc<str>, u64>>,
    handlers: HandlerReads,
}

/// Field versions a message carries values for: what sending it teaches
/// the worker.
pub type Sent = Vec<(Arc<str>, u64)>;

impl FieldMirror {
    /// The mirror of a worker whose handlers read the fields `said` says
    /// (by handler; one not there reads every field).
    pub fn new(said: &BTreeMap<String, Vec<String>>) -> Self {
        Self {
            runs: HashMap::new(),
            handlers: HandlerReads::new(said),
        }
    }

    /// The task as this worker needs it (fields it holds go without their
    /// value, fields its step does not read go), and what it carries.
    /// Call [`FieldMirror::sent`] once the message is on its way.
    pub fn prepare(&self, task: &TaskAssignment) -> (TaskAssignment, Sent) {
        let known = self.runs.get(&task.run_id);
        // Only the fields the step reads are copied (for a step that reads
        // none, no list is made).
        let state = match self.handlers.of(task) {
            Reads::All => task.state.clone(),
            Reads::Nothing => Vec::new(),
            reads => (task.state.iter())
                .filter(|field| reads.contains(&field.name))
                .cloned()
                .collect(),
        };
        let mut wire = task.with_state(state);
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
pub(crate) mod tests {
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
        // An `llm` step reads no field: its task carries none.
        let mut llm = of("inc", vec![field("blob", 2), field("counter", 2)]);
        llm.definition = Arc::new(crate::dispatch::NodeDefinition::new(
            "n".into(),
            WorkerKind::Llm,
            Arc::from("{}"),
        ));
        assert!(mirror.prepare(&llm).0.state.is_empty());
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
