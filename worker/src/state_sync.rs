//! The worker's end of state sync: the latest version of each state field
//! of each run, as the coordinator sent them.
//!
//! The coordinator keeps an exact mirror of this cache (its `FieldMirror`)
//! and leaves out of a task the values this cache already holds, so a task
//! is assembled here from the message and the cache. A field the cache
//! should hold but does not fails the task at once (`state_cache_miss`).
//! Values are kept as the text they came in ([`FieldValue`]), read only
//! by a step that needs them.

use foldhash::HashMap;
use std::sync::Arc;
use weft_proto::RunId;
use weft_proto::TaskKey;

use weft_proto::worker_protocol::{StateField, TaskAssignment};

use crate::field::FieldValue;
use crate::task::{Failure, FailureKind, Task};

/// A task as it arrives: the task itself (or why it cannot run), with the
/// state fields the message carried or left out.
#[derive(Debug)]
pub struct Assignment {
    /// The run.
    pub run_id: RunId,
    /// The attempt's key within the run.
    pub key: TaskKey,
    /// The task, its state still empty; or why it cannot run (the cache
    /// still takes the fields its message carried).
    pub task: Result<Task, Failure>,
    /// The state the task sees, field by field, in order.
    pub fields: Vec<SentField>,
}

/// One state field of an [`Assignment`].
#[derive(Debug)]
pub struct SentField {
    /// The field.
    pub name: Arc<str>,
    /// Its version within the run.
    pub version: u64,
    /// Its value, when the message carried it.
    pub value: Sent,
}

/// What a message said of a field's value.
#[derive(Debug)]
pub enum Sent {
    /// The value, which the worker now holds at this version.
    Value(FieldValue),
    /// Left out: the worker holds this version already.
    Held,
}

impl Assignment {
    /// The attempt the coordinator sent, its task and its fields read.
    pub fn read(mut sent: TaskAssignment) -> Self {
        let fields = sent_fields(std::mem::take(&mut sent.state));
        Self {
            run_id: sent.run_id.clone(),
            key: sent.key,
            task: Task::read(sent),
            fields,
        }
    }

    /// An attempt this worker cannot run (`why`), whose fields it still
    /// caches.
    pub fn unrunnable(run_id: RunId, key: TaskKey, state: Vec<StateField>, why: Failure) -> Self {
        Self {
            run_id,
            key,
            task: Err(why),
            fields: sent_fields(state),
        }
    }
}

/// The fields a message carried (or left out), their values read.
fn sent_fields(state: Vec<StateField>) -> Vec<SentField> {
    state
        .into_iter()
        .map(|field| SentField {
            value: field
                .json
                .map_or(Sent::Held, |json| Sent::Value(FieldValue::from_json(json))),
            name: field.name,
            version: field.version,
        })
        .collect()
}

/// Field values per run, each with its version.
#[derive(Debug, Default)]
pub struct StateCache {
    runs: HashMap<RunId, RunFields>,
}

/// One run's fields: each one's version and value, by name.
/// A run's fields by name: what a graph names, hashed with std's SipHash
/// (the runs themselves, by ids the coordinator makes, with the fast one).
type RunFields = std::collections::HashMap<Arc<str>, (u64, Arc<FieldValue>)>;

impl StateCache {
    /// The run has ended: drop its fields.
    pub fn forget(&mut self, run_id: &str) {
        self.runs.remove(run_id);
    }

    /// The task of `assignment`, with the values it leaves out taken from
    /// the cache; the values it carries are cached, whether or not the
    /// task can run.
    pub fn task(&mut self, assignment: Assignment) -> Result<Task, Failure> {
        let fields = self.runs.entry(assignment.run_id).or_default();
        let mut state = Vec::with_capacity(assignment.fields.len());
        let mut versions = Vec::with_capacity(assignment.fields.len());
        let mut problem = None;
        for field in assignment.fields {
            match field.value {
                Sent::Value(value) => {
                    let value = Arc::new(value);
                    state.push((field.name.clone(), value.clone()));
                    versions.push(field.version);
                    fields.insert(field.name, (field.version, value));
                }
                Sent::Held => match fields.get(&field.name) {
                    Some((version, value)) if *version == field.version => {
                        state.push((field.name, value.clone()));
                        versions.push(*version);
                    }
                    _ => {
                        problem = Some(format!(
                            "field '{}' version {} is not in this worker's cache",
                            field.name, field.version
                        ));
                    }
                },
            }
        }
        if let Some(message) = problem {
            return Err(Failure::new(FailureKind::StateCacheMiss, message));
        }
        let mut task = assignment.task?;
        task.state = state;
        task.state_versions = versions;
        Ok(task)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use weft_proto::types::WorkerKind;

    use super::*;

    fn assignment(fields: &[(&str, u64, Option<Value>)]) -> Assignment {
        Assignment {
            run_id: "r".into(),
            key: TaskKey(1),
            task: Ok(Task::example(WorkerKind::Task, json!({}))),
            fields: fields
                .iter()
                .map(|(name, version, value)| SentField {
                    name: (*name).into(),
                    version: *version,
                    value: value
                        .clone()
                        .map_or(Sent::Held, |v| Sent::Value(FieldValue::from_value(v))),
                })
                .collect(),
        }
    }

    #[test]
    fn values_left_out_come_from_the_cache() {
        let mut cache = StateCache::default();
        cache
            .task(assignment(&[
                ("blob", 1, Some(json!("big"))),
                ("n", 1, Some(json!(1))),
            ]))
            .unwrap();
        let task = cache
            .task(assignment(&[("blob", 1, None), ("n", 2, Some(json!(2)))]))
            .unwrap();
        assert_eq!(task.state_json(), r#"{"blob":"big","n":2}"#);
        assert_eq!(task.state_versions, [1, 2]);
    }

    #[test]
    fn a_missing_version_fails_the_task() {
        let mut cache = StateCache::default();
        cache.task(assignment(&[("n", 1, Some(json!(1)))])).unwrap();
        let error = cache.task(assignment(&[("n", 2, None)])).unwrap_err();
        assert_eq!(error.kind, FailureKind::StateCacheMiss);
        cache.forget("r");
        assert!(cache.task(assignment(&[("n", 1, None)])).is_err());
    }

    #[test]
    fn a_task_that_cannot_run_still_teaches_the_cache() {
        let mut cache = StateCache::default();
        let mut unrunnable = assignment(&[("n", 1, Some(json!(1)))]);
        unrunnable.task = Err(Failure::new(FailureKind::UnsupportedKind, "no such kind"));
        let error = cache.task(unrunnable).unwrap_err();
        assert_eq!(error.kind, FailureKind::UnsupportedKind);
        // The coordinator's mirror counts the value as held: so does the cache.
        let task = cache.task(assignment(&[("n", 1, None)])).unwrap();
        assert_eq!(task.state_json(), r#"{"n":1}"#);
    }
}
