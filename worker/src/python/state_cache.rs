//! What one Python process holds of its runs' state. A `function` node is
//! called with state fields as keyword arguments; a field's value is sent
//! to a process once per version and kept there (per run, for the last
//! [`MAX_RUNS`] runs it served), so a function taking `**kwargs` inside a
//! map is not sent the whole state on every call.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::field::FieldValue;

/// Runs whose fields a process keeps.
const MAX_RUNS: usize = 8;

/// A state field for a call: its name, version and value (read before
/// the call is made: a field whose text is not JSON fails the step there).
pub type VersionedField = (String, u64, Arc<FieldValue>);

/// The field versions a process holds.
#[derive(Debug, Default)]
pub(super) struct Held {
    versions: HashMap<(String, String), u64>,
    runs: VecDeque<String>,
}

impl Held {
    /// Adds `run`'s `fields` to `request`: under `fresh` the values the
    /// process lacks (it keeps them), under `held` the names of those it
    /// has, and under `forget` the runs it may drop. The process must get
    /// the request: a host whose request failed is never used again.
    pub(super) fn add_to(
        &mut self,
        request: &mut Map<String, Value>,
        run: &str,
        fields: &[VersionedField],
    ) {
        let mut forget = Vec::new();
        if !self.runs.iter().any(|r| r == run) {
            self.runs.push_back(run.to_owned());
            if self.runs.len() > MAX_RUNS
                && let Some(old) = self.runs.pop_front()
            {
                self.versions.retain(|(r, _), _| *r != old);
                forget.push(Value::from(old));
            }
        }
        let mut fresh = Map::new();
        let mut held = Vec::new();
        for (name, version, value) in fields {
            let key = (run.to_owned(), name.clone());
            if self.versions.get(&key) == Some(version) {
                held.push(Value::from(name.as_str()));
            } else {
                // Read before the call (see VersionedField).
                let value = value.value().map_or(Value::Null, Value::clone);
                fresh.insert(name.clone(), value);
                self.versions.insert(key, *version);
            }
        }
        request.insert("run".into(), run.into());
        request.insert("fresh".into(), Value::Object(fresh));
        request.insert("held".into(), Value::Array(held));
        if !forget.is_empty() {
            request.insert("forget".into(), Value::Array(forget));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(name: &str, version: u64, value: Value) -> VersionedField {
        (
            name.into(),
            version,
            Arc::new(FieldValue::from_value(value)),
        )
    }

    #[test]
    fn a_version_is_sent_once_and_old_runs_are_forgotten() {
        let mut held = Held::default();
        let mut request = Map::new();
        held.add_to(
            &mut request,
            "r1",
            &[field("items", 1, json!([1, 2])), field("n", 1, json!(0))],
        );
        assert_eq!(request["fresh"], json!({"items": [1, 2], "n": 0}));
        assert_eq!(request["held"], json!([]));
        let mut request = Map::new();
        held.add_to(
            &mut request,
            "r1",
            &[field("items", 1, json!([1, 2])), field("n", 2, json!(1))],
        );
        assert_eq!(request["fresh"], json!({"n": 1}));
        assert_eq!(request["held"], json!(["items"]));
        for run in 2..=MAX_RUNS + 1 {
            let mut request = Map::new();
            held.add_to(&mut request, &format!("r{run}"), &[]);
            if run == MAX_RUNS + 1 {
                assert_eq!(request["forget"], json!(["r1"]));
            } else {
                assert!(request.get("forget").is_none());
            }
        }
        let mut request = Map::new();
        held.add_to(&mut request, "r1", &[field("items", 1, json!([1, 2]))]);
        assert_eq!(
            request["fresh"],
            json!({"items": [1, 2]}),
            "sent again once forgotten"
        );
    }
}
