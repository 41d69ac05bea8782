//! Both ends of state sync driven together: the coordinator's
//! [`FieldMirror`] and [`KeptMirror`] decide what a task carries, the
//! message goes through the worker protocol's real conversion both ways,
//! and the worker's `StateCache` and `Kept` assemble the task.
//! Whatever the history, the worker sees exactly the state, the node and
//! the bundle list the coordinator meant, a value crosses the wire once per
//! version and a node's definition or a run's list once while the worker
//! keeps it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use weft_proto::RunId;
use weft_proto::v1 as pb;
use weft_proto::worker_protocol::wire::{
    Kept, MAX_KEPT_BUNDLES, MAX_KEPT_NODES, read_coordinator_message,
};
use weft_worker::state_sync::{Assignment, StateCache};

use crate::dispatch::kept_sync::KeptMirror;
use crate::dispatch::kept_sync::tests::definition;
use crate::dispatch::state_sync::FieldMirror;
use crate::dispatch::{BlobRef, KeptRef, NodeDefinition, StateField, TaskAssignment, ToWorker};

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
        attempt: 1,
        definition: definition("n"),
        node_ref: KeptRef::Carried,
        bundle_ref: KeptRef::Carried,
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
                    read_coordinator_message(pb::CoordinatorMessage::from(ToWorker::Task(wire)), &mut Kept::default(), &mut read);
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

/// Tasks of ever more nodes and runs (more than a worker keeps of each),
/// each sent to one worker as the dispatcher sends it: the worker reads
/// each task's node and bundle list as the coordinator meant them, whether
/// the message carried them or named them.
#[test]
fn every_task_reads_the_node_and_bundle_the_coordinator_meant() {
    let mut nodes_kept = KeptMirror::new(true, MAX_KEPT_NODES);
    let mut bundles_kept = KeptMirror::new(true, MAX_KEPT_BUNDLES);
    let mut kept = Kept::default();
    let mut nodes: Vec<Arc<NodeDefinition>> = Vec::new();
    let mut bundles: Vec<Arc<Vec<BlobRef>>> = Vec::new();
    let (mut carried, mut seed) = ([0, 0], 7u64);
    let sends = 3 * MAX_KEPT_NODES;
    let mut pick = |made: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // One time in three one not seen before; else one seen lately.
        let pick = (seed >> 33) as usize;
        let new = made == 0 || pick.is_multiple_of(3);
        (
            new,
            pick % (made + usize::from(new)).min(MAX_KEPT_NODES as usize + 200),
        )
    };
    for key in 1..=sends {
        let (new, back) = pick(nodes.len());
        if new {
            nodes.push(definition(&format!("n{key}")));
        }
        let node = nodes[nodes.len() - 1 - back].clone();
        let (new, back) = pick(bundles.len());
        if new {
            bundles.push(Arc::new(vec![BlobRef {
                path: format!("run-{key}.yaml"),
                sha256: format!("{key:064x}"),
                mode: 0o644,
            }]));
        }
        let bundle = bundles[bundles.len() - 1 - back].clone();
        let mut task = task(&BTreeMap::new(), key);
        task.definition = node.clone();
        task.node_ref = nodes_kept.prepare(&node);
        nodes_kept.sent(&node, task.node_ref);
        task.bundle = bundle.clone();
        task.bundle_ref = bundles_kept.prepare(&bundle);
        bundles_kept.sent(&bundle, task.bundle_ref);
        for (count, how) in carried.iter_mut().zip([task.node_ref, task.bundle_ref]) {
            *count += u64::from(!matches!(how, KeptRef::Held(_)));
        }
        let mut read = Vec::new();
        let message = pb::CoordinatorMessage::from(ToWorker::Task(task));
        read_coordinator_message(message, &mut kept, &mut read);
        let [Ok(ToWorker::Task(got))] = <[_; 1]>::try_from(read).expect("one message") else {
            panic!("task {key} was not read");
        };
        assert_eq!(got.definition, node, "task {key}");
        assert_eq!(got.bundle, bundle, "task {key}");
    }
    assert!(kept.nodes() <= MAX_KEPT_NODES as usize);
    assert!(kept.bundles() <= MAX_KEPT_BUNDLES as usize);
    // Most tasks named a node and a bundle list already kept.
    for count in carried {
        assert!(count < sends / 2, "{count} of {sends} carried theirs");
    }
}
