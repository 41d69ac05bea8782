//! The worker's end of state sync: the latest version of each state field
//! of each run, as the coordinator sent them.
//!
//! The coordinator keeps an exact mirror of this cache (its `FieldMirror`)
//! and leaves out of a task the values this cache already holds, so a task
//! is assembled here from the message and the cache. A field the cache
//! should hold but does not fails the task at once (`state_cache_miss`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use weft_proto::v1 as pb;

use crate::task::{BlobFile, Failure, FailureKind, Task};

/// Field values per run, each with its version.
#[derive(Debug, Default)]
pub struct StateCache {
    runs: HashMap<String, HashMap<String, (u64, Arc<Value>)>>,
}

impl StateCache {
    /// The run has ended: drop its fields.
    pub fn forget(&mut self, run_id: &str) {
        self.runs.remove(run_id);
    }

    /// Builds a task from its message, taking the values it leaves out from
    /// the cache and caching the values it carries.
    pub fn task(&mut self, assignment: pb::TaskAssignment) -> Result<Task, Failure> {
        let fields = self.runs.entry(assignment.run_id.clone()).or_default();
        let mut state = Vec::with_capacity(assignment.state.len());
        let mut versions = Vec::with_capacity(assignment.state.len());
        let mut problem = None;
        for field in assignment.state {
            if !field.json.is_empty() {
                match serde_json::from_str::<Value>(&field.json) {
                    Ok(value) => {
                        let value = Arc::new(value);
                        state.push((field.name.clone(), value.clone()));
                        versions.push(field.version);
                        fields.insert(field.name, (field.version, value));
                    }
                    Err(error) => {
                        problem = Some(format!("field '{}' is not JSON: {error}", field.name))
                    }
                }
                continue;
            }
            match fields.get(&field.name) {
                Some((version, value)) if *version == field.version => {
                    state.push((field.name, value.clone()));
                    versions.push(*version);
                }
                _ => {
                    problem = Some(format!(
                        "field '{}' version {} is not in this worker's cache",
                        field.name, field.version
                    ))
                }
            }
        }
        if let Some(message) = problem {
            return Err(Failure::new(FailureKind::StateCacheMiss, message));
        }
        Ok(Task {
            run_id: assignment.run_id,
            key: assignment.task_key,
            node: assignment.node,
            attempt: assignment.attempt,
            kind: assignment.kind,
            config_json: assignment.config_json,
            state,
            state_versions: versions,
            scope_json: assignment.scope_json,
            item: assignment.item.map(|item| item.index),
            timeout: Duration::from_millis(assignment.timeout_ms.max(1)),
            team: assignment.team.map(crate::TeamSeat::from_wire),
            prompts_json: assignment.prompts_json,
            traceparent: assignment.traceparent,
            bundle: assignment
                .bundle
                .into_iter()
                .map(|b| BlobFile {
                    path: b.path,
                    sha256: b.sha256,
                    mode: b.mode,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(fields: &[(&str, u64, &str)]) -> pb::TaskAssignment {
        pb::TaskAssignment {
            run_id: "r".into(),
            task_key: 1,
            state: fields
                .iter()
                .map(|(name, version, json)| pb::StateField {
                    name: (*name).into(),
                    version: *version,
                    json: (*json).into(),
                })
                .collect(),
            ..pb::TaskAssignment::default()
        }
    }

    #[test]
    fn values_left_out_come_from_the_cache() {
        let mut cache = StateCache::default();
        cache
            .task(assignment(&[("blob", 1, "\"big\""), ("n", 1, "1")]))
            .unwrap();
        let task = cache
            .task(assignment(&[("blob", 1, ""), ("n", 2, "2")]))
            .unwrap();
        assert_eq!(task.state_json(), r#"{"blob":"big","n":2}"#);
    }

    #[test]
    fn a_missing_version_fails_the_task() {
        let mut cache = StateCache::default();
        cache.task(assignment(&[("n", 1, "1")])).unwrap();
        let error = cache.task(assignment(&[("n", 2, "")])).unwrap_err();
        assert_eq!(error.kind, FailureKind::StateCacheMiss);
        cache.forget("r");
        assert!(cache.task(assignment(&[("n", 1, "")])).is_err());
    }
}
