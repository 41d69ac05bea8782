//! Both ends of state sync driven together: the coordinator's
//! [`FieldMirror`] decides what a task carries, the message goes through the
//! worker protocol's real conversion both ways, and
//! the worker's `StateCache` assembles the state. Whatever the history, the worker sees exactly the state the
//! coordinator meant, and a value crosses the wire once per version.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use weft_proto::RunId;
use weft_proto::v1 as pb;
use weft_proto::worker_protocol::wire::read_coordinator_message;
use weft_worker::state_sync::{Assignment, StateCache};

use crate::dispatch::state_sync::FieldMirror;
use crate::dispatch::{StateField, TaskAssignment, ToWorker};

/// One step: the coordinator changes some fields, then sends a task.
#[derive(Debug, Clone)]
enum Step {
    Change(u8, i64),
    Send,
    Forget,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..4, any::<i64>()).prop_map(|(field, value)| Step::Change(field, value)),
        3 => Just(Step::Send),
        1 => Just(Step::Forget),
    ]
}

pub(super) fn task(fields: &BTreeMap<String, (u64, i64)>, key: u64) -> TaskAssignment {
    TaskAssignment {
        run_id: RunId::from("run"),
        key: weft_proto::TaskKey(key),
        node: "n".into(),
        attempt: 1,
        kind: crate::dispatch::WorkerKind::Task,
        config_json: Arc::from("{}"),
        state: fields
            .iter()
            .map(|(name, (version, value))| StateField {
                name: Arc::from(name.as_str()),
                version: *version,
                json: Some(Arc::from(value.to_string())),
            })
            .collect(),
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

proptest! {
    #[test]
    fn the_worker_sees_what_the_coordinator_meant(steps in proptest::collection::vec(step(), 1..60)) {
        let mut mirror = FieldMirror::default();
        let mut cache = StateCache::default();
        let mut fields: BTreeMap<String, (u64, i64)> =
            (0..4).map(|i| (format!("f{i}"), (1, 0))).collect();
        let mut next_version = 2;
        let mut key = 0;
        // What the worker was sent a value for, per field, since it last
        // forgot the run.
        let mut received: BTreeMap<String, u64> = BTreeMap::new();
        for step in steps {
            match step {
                Step::Change(field, value) => {
                    fields.insert(format!("f{field}"), (next_version, value));
                    next_version += 1;
                }
                Step::Forget => {
                    if mirror.forget("run") {
                        cache.forget("run");
                    }
                    received.clear();
                }
                Step::Send => {
                    key += 1;
                    let (wire, sent) = mirror.prepare(&task(&fields, key));
                    mirror.sent(&RunId::from("run"), sent);
                    let mut read = Vec::new();
                    read_coordinator_message(pb::CoordinatorMessage::from(ToWorker::Task(wire)), &mut read);
                    let [Ok(ToWorker::Task(assignment))] = <[_; 1]>::try_from(read).expect("one message") else {
                        panic!("a task message");
                    };
                    for field in &assignment.state {
                        if field.json.is_some() {
                            prop_assert!(
                                received.insert(field.name.to_string(), field.version) != Some(field.version),
                                "field {} version {} crossed the wire twice", field.name, field.version
                            );
                        }
                    }
                    let got = cache.task(Assignment::read(assignment)).expect("the cache holds what was left out");
                    let expected: String = format!(
                        "{{{}}}",
                        fields
                            .iter()
                            .map(|(name, (_, value))| format!("\"{name}\":{value}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                    prop_assert_eq!(got.state_json(), expected);
                }
            }
        }
    }
}
