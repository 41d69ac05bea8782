//! The placement core's rules, driven without a network or a clock.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::task::TaskKey;

use super::*;
use crate::dispatch::{Hello, WorkerKind};
use weft_graph::Priority;
use weft_machine::events::KeyedConcurrency;

const SECOND: Duration = Duration::from_secs(1);

fn worker(name: &str, slots: u32, handlers: &[&str]) -> WorkerInfo {
    WorkerInfo {
        hello: Hello {
            name: name.into(),
            slots,
            kinds: vec![WorkerKind::Script],
            handlers: handlers.iter().map(|h| (*h).to_owned()).collect(),
            functions: vec!["pick".into()],
            ..Hello::default()
        },
        namespaces: None,
    }
}

/// Tests number their tasks with plain numbers; each is its own payload.
fn task(key: u64) -> JobSpec<u64> {
    JobSpec {
        namespace: "default".into(),
        id: id(key),
        label: format!("node{key}").into(),
        requirement: Requirement::Kind(WorkerKind::Script),
        timeout: 10 * SECOND,
        payload: key,
        lineage: None,
        flow: None,
        priority: Priority::Normal,
        concurrency: None,
        budgets: std::sync::Arc::from([]),
    }
}

fn id(key: u64) -> JobId {
    JobId {
        run: RunId::from("run"),
        key: JobKey::Task(TaskKey(key)),
    }
}

fn registry() -> Registry<u64> {
    Registry::new(Limits {
        worker_timeout: 10 * SECOND,
        grace: 2 * SECOND,
        max_losses: 2,
        jam_timeout: 5 * SECOND,
    })
}

/// The (worker, task) pairs of the `Send` decisions.
fn sends(decisions: &[Decision<u64>]) -> Vec<(WorkerId, u64)> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Send {
                worker,
                job:
                    JobId {
                        key: JobKey::Task(key),
                        ..
                    },
            } => Some((*worker, key.0)),
            _ => None,
        })
        .collect()
}

fn failures(decisions: &[Decision<u64>]) -> Vec<(u64, TaskFailure)> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Fail { payload, failure } => Some((*payload, failure.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn placement_spreads_by_load_within_slots() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 2, &[]), now).unwrap();
    let b = reg.join(worker("b", 1, &[]), now).unwrap();
    for key in 1..=5 {
        reg.submit(task(key));
    }
    let placed = sends(&reg.place(now));
    // a (0/2) and b (0/1) tie and a wins by id; then b (0/1) is less
    // loaded than a (1/2); then only a has a slot.
    assert_eq!(placed, vec![(a, 1), (b, 2), (a, 3)]);
    assert_eq!(reg.load().queued, 2, "two tasks wait for a slot");
    assert!(reg.place(now).is_empty(), "no slot is free");
    let done = reg.finish(b, &id(2), now).expect("b held task 2");
    assert_eq!(done.payload, 2);
    assert_eq!(sends(&reg.place(now)), vec![(b, 4)]);
}

#[test]
fn a_draining_worker_gets_nothing_new() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 4, &[]), now).unwrap();
    reg.submit(task(1));
    assert_eq!(sends(&reg.place(now)), vec![(a, 1)]);
    reg.drain(a);
    reg.submit(task(2));
    assert!(reg.place(now).is_empty());
    // Its task in flight still finishes normally.
    assert!(reg.finish(a, &id(1), now).is_some());
    assert!(reg.place(now).is_empty());
    let b = reg.join(worker("b", 1, &[]), now).unwrap();
    assert_eq!(sends(&reg.place(now)), vec![(b, 2)]);
}

#[test]
fn a_refused_task_goes_elsewhere_without_an_attempt() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), now).unwrap();
    reg.submit(task(1));
    reg.place(now);
    reg.refuse(a, &id(1));
    let b = reg.join(worker("b", 1, &[]), now).unwrap();
    assert_eq!(sends(&reg.place(now)), vec![(b, 1)]);
    assert!(reg.workers()[0].draining, "a refusing worker is draining");
}

#[test]
fn a_lost_workers_tasks_are_placed_again_in_order() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 3, &[]), now).unwrap();
    for key in 1..=4 {
        reg.submit(task(key));
    }
    assert_eq!(sends(&reg.place(now)), vec![(a, 1), (a, 2), (a, 3)]);
    let decisions = reg.lose(a, "stream closed");
    assert!(matches!(decisions[0], Decision::Disconnect { worker, .. } if worker == a));
    assert!(failures(&decisions).is_empty(), "one loss is not a failure");
    let requeued: Vec<(u64, &str)> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Requeued {
                job:
                    JobId {
                        key: JobKey::Task(key),
                        ..
                    },
                worker,
            } => Some((key.0, worker.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        requeued,
        [(1, "a"), (2, "a"), (3, "a")],
        "the runs are told what goes out again, and why"
    );
    let b = reg.join(worker("b", 4, &[]), now).unwrap();
    assert_eq!(
        sends(&reg.place(now)),
        vec![(b, 1), (b, 2), (b, 3), (b, 4)],
        "orphans go first, in their order"
    );
}

#[test]
fn a_task_that_keeps_killing_workers_fails_after_the_limit() {
    let now = Instant::now();
    let mut reg = registry();
    reg.submit(task(1));
    let first = reg.join(worker("w1", 1, &[]), now).unwrap();
    reg.place(now);
    assert!(failures(&reg.lose(first, "stream closed")).is_empty());
    let second = reg.join(worker("w2", 1, &[]), now).unwrap();
    assert_eq!(sends(&reg.place(now)), vec![(second, 1)]);
    let failed = failures(&reg.lose(second, "stream closed"));
    assert_eq!(failed.len(), 1);
    let (key, failure) = &failed[0];
    assert_eq!(*key, 1);
    assert_eq!(failure.kind, FailureKind::WorkerLost);
    assert!(failure.message.contains("w1, w2"), "{}", failure.message);
    // The next worker survives: nothing is sent to it.
    let third = reg.join(worker("w3", 1, &[]), now).unwrap();
    assert!(reg.place(now).is_empty());
    assert_eq!(reg.workers()[0].id, third);
}

#[test]
fn the_workers_lost_count_across_a_tasks_attempts() {
    let now = Instant::now();
    let mut reg = registry();
    // A first attempt is its own lineage.
    reg.submit(JobSpec {
        namespace: "default".into(),
        lineage: Some(id(1)),
        ..task(1)
    });
    let first = reg.join(worker("w1", 1, &[]), now).unwrap();
    reg.place(now);
    assert!(failures(&reg.lose(first, "stream closed")).is_empty());
    // The attempt then ends some other way (a timeout, say), and the run
    // tries again under a new key.
    let second = reg.join(worker("w2", 1, &[]), now).unwrap();
    reg.place(now);
    assert!(reg.finish(second, &id(1), now).is_some());
    reg.submit(JobSpec {
        namespace: "default".into(),
        lineage: Some(id(1)),
        ..task(2)
    });
    assert_eq!(sends(&reg.place(now)), vec![(second, 2)]);
    let failed = failures(&reg.lose(second, "stream closed"));
    assert_eq!(
        failed.len(),
        1,
        "the second attempt's loss is the lineage's second"
    );
    assert!(
        failed[0].1.message.contains("w1, w2"),
        "{}",
        failed[0].1.message
    );
    // Another run's task of the same key starts afresh, and so does this
    // lineage once its run is forgotten.
    reg.forget_run(&RunId::from("run"));
    reg.submit(JobSpec {
        namespace: "default".into(),
        lineage: Some(id(1)),
        ..task(3)
    });
    let third = reg.join(worker("w3", 1, &[]), now).unwrap();
    reg.place(now);
    assert!(failures(&reg.lose(third, "stream closed")).is_empty());
}

#[test]
fn a_late_result_from_a_lost_worker_is_ignored() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), now).unwrap();
    reg.submit(task(1));
    reg.place(now);
    reg.lose(a, "heartbeats missed");
    let b = reg.join(worker("b", 1, &[]), now).unwrap();
    reg.place(now);
    assert!(reg.finish(a, &id(1), now).is_none(), "a no longer holds it");
    assert!(!reg.heard(a, now), "a lost worker's messages are ignored");
    assert!(reg.finish(b, &id(1), now).is_some());
}

#[test]
fn silence_loses_a_worker() {
    let start = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), start).unwrap();
    let b = reg.join(worker("b", 1, &[]), start).unwrap();
    reg.heard(b, start + 8 * SECOND);
    let decisions = reg.tick(start + 11 * SECOND);
    let lost: Vec<WorkerId> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Disconnect { worker, .. } => Some(*worker),
            _ => None,
        })
        .collect();
    assert_eq!(lost, vec![a]);
}

#[test]
fn a_task_past_its_deadline_times_out_and_is_cancelled() {
    let start = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), start).unwrap();
    reg.submit(task(1));
    reg.place(start);
    // Heartbeats keep the worker alive, but the task never answers.
    reg.heard(a, start + 11 * SECOND);
    assert!(reg.tick(start + 11 * SECOND).is_empty(), "within the grace");
    reg.heard(a, start + 13 * SECOND);
    let decisions = reg.tick(start + 13 * SECOND);
    assert!(
        decisions.iter().any(
            |d| matches!(d, Decision::Cancel { worker, job } if *worker == a && *job == id(1))
        )
    );
    let failed = failures(&decisions);
    assert_eq!(failed[0].1.kind, FailureKind::Timeout);
    assert_eq!(failed[0].1.worker.as_deref(), Some("a"));
    assert_eq!(reg.workers()[0].in_flight, 0, "the slot is free again");
    assert!(
        reg.finish(a, &id(1), start + 14 * SECOND).is_none(),
        "its late result is ignored"
    );
}

#[test]
fn a_jammed_worker_is_skipped_then_dropped() {
    let start = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 4, &[]), start).unwrap();
    let b = reg.join(worker("b", 4, &[]), start).unwrap();
    reg.submit(task(1));
    assert_eq!(sends(&reg.place(start)), vec![(a, 1)]);
    assert!(reg.send_failed(&id(1), false, start).is_empty());
    assert!(reg.is_jammed(a));
    assert_eq!(
        sends(&reg.place(start)),
        vec![(b, 1)],
        "the jammed worker is skipped"
    );
    reg.submit(task(2));
    assert_eq!(sends(&reg.place(start)), vec![(b, 2)]);
    reg.heard(a, start + 6 * SECOND);
    reg.heard(b, start + 6 * SECOND);
    let decisions = reg.tick(start + 6 * SECOND);
    assert!(
        matches!(&decisions[..], [Decision::Disconnect { worker, reason, .. }] if *worker == a && reason == "stream jammed")
    );
}

#[test]
fn a_worker_that_unjams_takes_tasks_again() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), now).unwrap();
    reg.submit(task(1));
    reg.place(now);
    reg.send_failed(&id(1), false, now);
    assert!(reg.place(now).is_empty());
    reg.unjam(a);
    assert_eq!(sends(&reg.place(now)), vec![(a, 1)]);
}

#[test]
fn unhosted_tasks_are_reported_once_even_with_no_worker() {
    let now = Instant::now();
    let mut reg = registry();
    let mut spec = task(1);
    spec.requirement = Requirement::Handler("summarize".into());
    let decisions = reg.submit(spec);
    assert!(matches!(
        &decisions[..],
        [Decision::Unhosted { label, requirement: Requirement::Handler(h), .. }] if &**label == "node1" && &**h == "summarize"
    ));
    assert!(reg.place(now).is_empty());
    assert_eq!(reg.load().unhosted, 1);
    let w = reg.join(worker("w", 1, &["summarize"]), now).unwrap();
    let placed = reg.place(now);
    assert!(
        matches!(&placed[0], Decision::Hosted { job } if job.key == JobKey::Task(TaskKey(1))),
        "the run hears that its task found a host: {placed:?}"
    );
    assert_eq!(sends(&placed), vec![(w, 1)]);
    assert_eq!(reg.load().unhosted, 0);
}

#[test]
fn a_task_left_without_host_by_a_loss_is_reported() {
    let now = Instant::now();
    let mut reg = registry();
    let w = reg.join(worker("w", 1, &["summarize"]), now).unwrap();
    let mut spec = task(1);
    spec.requirement = Requirement::Handler("summarize".into());
    assert!(reg.submit(spec).is_empty());
    reg.place(now);
    let decisions = reg.lose(w, "stream closed");
    assert!(
        decisions
            .iter()
            .any(|d| matches!(d, Decision::Unhosted { .. }))
    );
}

#[test]
fn calls_take_no_slot_and_time_out() {
    let start = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), start).unwrap();
    reg.submit(task(1));
    reg.submit(JobSpec {
        namespace: "default".into(),
        id: JobId {
            run: RunId::from("run"),
            key: JobKey::Call(7),
        },
        label: "pick".into(),
        requirement: Requirement::Function("pick".into()),
        timeout: SECOND,
        lineage: None,
        flow: None,
        priority: Priority::Normal,
        concurrency: None,
        budgets: std::sync::Arc::from([]),
        payload: 70,
    });
    let decisions = reg.place(start);
    assert_eq!(decisions.len(), 2, "the task and the call both go to a");
    assert_eq!(reg.workers()[0].in_flight, 1, "the call takes no slot");
    reg.heard(a, start + 4 * SECOND);
    let failed = failures(&reg.tick(start + 4 * SECOND));
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, 70);
    assert_eq!(failed[0].1.kind, FailureKind::Timeout);
}

#[test]
fn cancel_and_forget_free_slots_and_cancel_on_workers() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), now).unwrap();
    reg.submit(task(1));
    reg.submit(task(2));
    reg.place(now);
    let run = weft_proto::RunId::from("run");
    let decisions = reg.cancel(&run, &[JobKey::Task(TaskKey(1))]);
    assert!(matches!(&decisions[..], [Decision::Cancel { worker, .. }] if *worker == a));
    assert_eq!(sends(&reg.place(now)), vec![(a, 2)]);
    reg.submit(task(3));
    let decisions = reg.forget_run(&run);
    assert_eq!(decisions.len(), 1, "task 2 is cancelled, task 3 dropped");
    assert_eq!(reg.load().queued, 0);
    assert!(reg.place(now).is_empty());
}

/// One step of a random history.
#[derive(Debug, Clone)]
enum Op {
    Join(u32),
    Submit,
    Place,
    Finish(usize),
    Drain(usize),
    Lose(usize),
    Jam(usize),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u32..4).prop_map(Op::Join),
        Just(Op::Submit),
        Just(Op::Place),
        (0usize..16).prop_map(Op::Finish),
        (0usize..4).prop_map(Op::Drain),
        (0usize..4).prop_map(Op::Lose),
        (0usize..16).prop_map(Op::Jam),
        (0u64..4).prop_map(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever happens, no worker holds more tasks than its slots, a
    /// draining or jammed worker is sent nothing, and every task is either
    /// finished, failed or still known to the registry.
    #[test]
    fn placement_keeps_its_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let start = Instant::now();
        let mut now = start;
        let mut reg = registry();
        let mut joined: Vec<WorkerId> = Vec::new();
        let mut running: HashMap<u64, WorkerId> = HashMap::new();
        let mut ended: Vec<u64> = Vec::new();
        let mut next = 1;
        for op in ops {
            let mut decisions = Vec::new();
            match op {
                Op::Join(slots) => joined.push(reg.join(worker(&format!("w{}", joined.len()), slots, &[]), now).unwrap()),
                Op::Submit => {
                    decisions = reg.submit(task(next));
                    next += 1;
                }
                Op::Place => decisions = reg.place(now),
                Op::Finish(i) => {
                    let mut keys: Vec<_> = running.keys().copied().collect();
                    keys.sort();
                    if let Some(&key) = keys.get(i % keys.len().max(1)) {
                        let w = running.remove(&key).unwrap();
                        prop_assert!(reg.finish(w, &id(key), now).is_some());
                        ended.push(key);
                    }
                }
                Op::Drain(i) => if let Some(&w) = joined.get(i) { decisions = reg.drain(w) },
                Op::Lose(i) => if let Some(&w) = joined.get(i) { decisions = reg.lose(w, "test") },
                Op::Jam(i) => {
                    let mut keys: Vec<_> = running.keys().copied().collect();
                    keys.sort();
                    if let Some(&key) = keys.get(i % keys.len().max(1)) {
                        running.remove(&key);
                        decisions = reg.send_failed(&id(key), false, now);
                    }
                }
                Op::Tick(secs) => {
                    now += Duration::from_secs(secs);
                    for &w in &joined { reg.heard(w, now); }
                    decisions = reg.tick(now);
                    let cancelled: Vec<u64> = decisions.iter().filter_map(|d| match d {
                        Decision::Cancel { job: JobId { key: JobKey::Task(k), .. }, .. } => Some(k.0),
                        _ => None,
                    }).collect();
                    for key in cancelled { running.remove(&key); }
                }
            }
            for decision in &decisions {
                if let Decision::Disconnect { worker, .. } = decision {
                    running.retain(|_, holder| holder != worker);
                }
            }
            let status = reg.workers();
            for (w, key) in sends(&decisions) {
                let entry = status.iter().find(|s| s.id == w).expect("sent to a known worker");
                prop_assert!(!entry.draining && !entry.jammed, "sent to a worker that takes nothing");
                prop_assert!(running.insert(key, w).is_none(), "task {key} placed twice");
            }
            for (key, _) in failures(&decisions) {
                running.remove(&key);
                ended.push(key);
            }
            for entry in &status {
                let held = running.values().filter(|&&w| w == entry.id).count();
                prop_assert_eq!(held, entry.in_flight);
                prop_assert!(entry.in_flight <= entry.info.hello.slots as usize);
            }
            for key in 1..next {
                prop_assert!(
                    ended.contains(&key) || reg.payload(&id(key)).is_some(),
                    "task {} vanished", key
                );
            }
        }
    }
}

#[path = "registry_tool_tests.rs"]
mod tools;

#[test]
fn a_name_is_held_by_one_connected_worker_at_a_time() {
    let now = Instant::now();
    let mut reg = registry();
    let first = reg.join(worker("w1", 1, &[]), now).unwrap();
    let taken = reg.join(worker("w1", 4, &[]), now).unwrap_err();
    assert_eq!(taken.held_by, first);
    assert!(
        taken
            .to_string()
            .contains("a worker named 'w1' is already connected"),
        "{taken}"
    );
    assert_eq!(reg.workers().len(), 1, "the second one is not registered");
    // Once the holder is gone (a worker that reconnects), the name is free.
    reg.lose(first, "stream closed");
    let again = reg.join(worker("w1", 1, &[]), now).unwrap();
    assert_ne!(again, first);
}

mod flow {
    //! Tasks and running steps' model calls under `[[limits]]`.

    use super::*;
    use crate::dispatch::limits::{LimitSpec, Matcher, RateLimits, Subject, Target};
    use crate::dispatch::{CallUsage, PermitRequest};

    fn limited(now: Instant, per_minute: u64) -> Registry<u64> {
        let spec = LimitSpec {
            name: "api".into(),
            matcher: Matcher::default(),
            requests_per_minute: Some(per_minute),
            tokens_per_minute: None,
            concurrency: None,
        };
        registry().with_rates(RateLimits::new(vec![spec], now))
    }

    fn llm_task(key: u64) -> JobSpec<u64> {
        JobSpec {
            flow: Some(FlowNeeds {
                subject: Subject {
                    namespace: "default".into(),
                    kind: "llm".into(),
                    handler: None,
                    model_call: Some(Target::default()),
                },
                tokens: 100,
            }),
            ..task(key)
        }
    }

    fn throttles(decisions: &[Decision<u64>]) -> Vec<(u64, Option<Duration>)> {
        decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Throttled {
                    job:
                        JobId {
                            key: JobKey::Task(key),
                            ..
                        },
                    limit,
                    wait,
                    ..
                } => {
                    assert_eq!(limit.as_ref(), "api");
                    Some((key.0, *wait))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_task_over_a_limit_waits_in_the_queue_without_a_slot_and_is_told_once() {
        let start = Instant::now();
        // 60 a minute: one a second, a burst of one.
        let mut reg = limited(start, 60);
        let a = reg.join(worker("a", 4, &[]), start).unwrap();
        for key in 1..=3 {
            reg.submit(llm_task(key));
        }
        reg.submit(task(4));
        let first = reg.place(start);
        // One llm task goes; the script task goes past the waiting ones.
        assert_eq!(sends(&first), [(a, 1), (a, 4)]);
        assert_eq!(throttles(&first), [(2, Some(SECOND)), (3, Some(SECOND))]);
        assert_eq!(reg.wake(), Some(start + SECOND));
        assert_eq!(reg.load().queued, 2);
        // Placing again before the window frees tells nobody twice.
        let again = reg.place(start + SECOND / 2);
        assert!(sends(&again).is_empty() && throttles(&again).is_empty());
        // Each second lets one more go, in order.
        assert_eq!(sends(&reg.place(start + SECOND)), [(a, 2)]);
        assert_eq!(sends(&reg.place(start + 2 * SECOND)), [(a, 3)]);
        assert_eq!(reg.wake(), None);
        // The task sent carries its reserved grant; the script none.
        let flow = reg.flow_of(&id(2)).expect("controlled");
        assert!(flow.grant.is_some() && flow.ask);
        assert_eq!(reg.flow_of(&id(4)), None);
    }

    #[test]
    fn a_running_steps_later_call_waits_ahead_of_the_queue() {
        let start = Instant::now();
        let mut reg = limited(start, 60);
        let a = reg.join(worker("a", 2, &[]), start).unwrap();
        reg.submit(llm_task(1));
        assert_eq!(sends(&reg.place(start)), [(a, 1)]);
        reg.submit(llm_task(2));
        assert_eq!(throttles(&reg.place(start)), [(2, Some(SECOND))]);
        // Task 1's second call asks; it waits, then goes before task 2.
        let request = PermitRequest {
            request_id: 5,
            provider: "default".into(),
            model: "m".into(),
            tokens: 10,
        };
        let asked = reg.permit(a, &id(1), request.clone(), start);
        assert_eq!(throttles(&asked), [(1, Some(SECOND))]);
        let freed = reg.place(start + SECOND);
        let granted: Vec<_> = freed
            .iter()
            .filter_map(|d| match d {
                Decision::Permit {
                    request_id,
                    outcome,
                    ..
                } => Some((*request_id, outcome.is_ok())),
                _ => None,
            })
            .collect();
        assert_eq!(granted, [(5, true)]);
        assert!(sends(&freed).is_empty(), "the queue waits behind the call");
        // A request for a job the worker does not hold is ignored.
        let b = reg.join(worker("b", 1, &[]), start).unwrap();
        assert!(reg.permit(b, &id(1), request, start).is_empty());
    }

    #[test]
    fn what_a_job_held_comes_back_when_it_ends_or_is_lost() {
        let start = Instant::now();
        let spec = LimitSpec {
            name: "api".into(),
            matcher: Matcher::default(),
            requests_per_minute: None,
            tokens_per_minute: None,
            concurrency: Some(1),
        };
        let mut reg = registry().with_rates(RateLimits::new(vec![spec], start));
        let a = reg.join(worker("a", 2, &[]), start).unwrap();
        reg.submit(llm_task(1));
        reg.submit(llm_task(2));
        let placed = reg.place(start);
        assert_eq!(sends(&placed), [(a, 1)]);
        assert_eq!(throttles(&placed), [(2, None)]);
        // Its worker is lost: task 1 is queued again and gives its place
        // back; one of the two goes to the new worker.
        reg.lose(a, "stream closed");
        let b = reg.join(worker("b", 2, &[]), start).unwrap();
        assert_eq!(sends(&reg.place(start)), [(b, 1)]);
        // Its usage settles the grant: task 2 goes.
        let grant = reg.flow_of(&id(1)).and_then(|f| f.grant).expect("a grant");
        let usage = CallUsage {
            grant,
            provider: "default".into(),
            model: "m".into(),
            prompt_tokens: 3,
            completion_tokens: 4,
            ..CallUsage::default()
        };
        reg.usage(b, &id(1), &usage, start);
        assert_eq!(sends(&reg.place(start)), [(b, 2)]);
        // A finished job gives back what it did not settle.
        assert!(reg.finish(b, &id(2), start).is_some());
        reg.submit(llm_task(3));
        assert_eq!(sends(&reg.place(start)), [(b, 3)]);
    }
}

/// A task of run `run` in namespace `namespace`.
fn tenant_task(namespace: &str, run: &str, key: u64) -> JobSpec<u64> {
    JobSpec {
        namespace: namespace.into(),
        id: JobId {
            run: RunId::from(run),
            key: JobKey::Task(TaskKey(key)),
        },
        ..task(key)
    }
}

fn keyed(key: &str, max: u32) -> Option<KeyedConcurrency> {
    Some(KeyedConcurrency {
        key: key.into(),
        max,
    })
}

#[test]
fn a_concurrency_key_holds_across_runs_and_frees_as_its_steps_end() {
    let now = Instant::now();
    let mut reg = registry();
    let w = reg.join(worker("w", 8, &[]), now).unwrap();
    // Three runs' steps under key "acme" (max 2), one under "globex".
    for (run, key, customer) in [
        ("r1", 1, "acme"),
        ("r2", 2, "acme"),
        ("r3", 3, "acme"),
        ("r3", 4, "globex"),
    ] {
        reg.submit(JobSpec {
            concurrency: keyed(customer, 2),
            ..tenant_task("default", run, key)
        });
    }
    let placed = reg.place(now);
    assert_eq!(sends(&placed), vec![(w, 1), (w, 2), (w, 4)]);
    let held: Vec<String> = placed
        .iter()
        .filter_map(|d| match d {
            Decision::Throttled { limit, wait, .. } => {
                assert_eq!(*wait, None, "a key frees when a step ends, not with time");
                Some(limit.to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(held, ["concurrency key 'acme' (max 2)"], "told once");
    assert!(sends(&reg.place(now)).is_empty(), "the key is still full");
    let first = JobId {
        run: RunId::from("r1"),
        key: JobKey::Task(TaskKey(1)),
    };
    assert!(reg.finish(w, &first, now).is_some());
    assert_eq!(sends(&reg.place(now)), vec![(w, 3)]);
    // The same key in another namespace is another key.
    reg.submit(JobSpec {
        concurrency: keyed("acme", 2),
        ..tenant_task("team-b", "r4", 5)
    });
    assert_eq!(sends(&reg.place(now)), vec![(w, 5)]);
}

#[test]
fn a_lost_workers_keyed_steps_give_their_places_back() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 1, &[]), now).unwrap();
    reg.submit(JobSpec {
        concurrency: keyed("acme", 1),
        ..tenant_task("default", "r1", 1)
    });
    reg.submit(JobSpec {
        concurrency: keyed("acme", 1),
        ..tenant_task("default", "r2", 2)
    });
    assert_eq!(sends(&reg.place(now)), vec![(a, 1)]);
    let b = reg.join(worker("b", 1, &[]), now).unwrap();
    assert!(sends(&reg.place(now)).is_empty(), "a free slot, a full key");
    reg.lose(a, "stream closed");
    // Requeued at the front, the lost step goes again, alone under its key.
    assert_eq!(sends(&reg.place(now)), vec![(b, 1)]);
}

#[test]
fn a_namespaces_flood_does_not_starve_another_and_priority_orders_one() {
    let now = Instant::now();
    let mut reg = registry();
    let w = reg.join(worker("w", 1, &[]), now).unwrap();
    for key in 1..=100 {
        reg.submit(JobSpec {
            priority: Priority::Low,
            ..tenant_task("a", "flood", key)
        });
    }
    reg.submit(tenant_task("b", "b-run", 1000));
    reg.submit(tenant_task("b", "b-run", 1001));
    reg.submit(JobSpec {
        priority: Priority::High,
        ..tenant_task("a", "urgent", 500)
    });
    // One slot: each placement is the next turn.
    let mut order = Vec::new();
    for _ in 0..6 {
        let sent = sends(&reg.place(now));
        assert_eq!(sent.len(), 1);
        let (_, key) = sent[0];
        order.push(key);
        let run = match key {
            1000 | 1001 => "b-run",
            500 => "urgent",
            _ => "flood",
        };
        let done = JobId {
            run: RunId::from(run),
            key: JobKey::Task(TaskKey(key)),
        };
        assert!(reg.finish(w, &done, now).is_some());
    }
    // Namespaces alternate; within a, the high priority run goes first.
    assert_eq!(order, [500, 1000, 1, 1001, 2, 3]);
}

#[test]
fn weights_give_a_namespace_its_share_of_the_slots() {
    let now = Instant::now();
    let mut reg = registry().with_weights([("heavy".to_owned(), 3)].into());
    let w = reg.join(worker("w", 40, &[]), now).unwrap();
    for key in 0..100 {
        reg.submit(tenant_task("heavy", "h", key));
        reg.submit(tenant_task("light", "l", 1000 + key));
    }
    let placed = sends(&reg.place(now));
    assert_eq!(placed.len(), 40);
    let heavy = placed.iter().filter(|(_, key)| *key < 1000).count();
    assert_eq!(heavy, 30, "three turns in four: {placed:?}");
    assert!(placed.iter().all(|(worker, _)| *worker == w));
}

#[path = "registry_share_tests.rs"]
mod shared_slots;

/// A run held for its partition's hand-over: its tasks in flight finish,
/// none of its queued ones is placed, another run's are.
#[test]
fn a_held_runs_queued_tasks_wait_while_its_running_ones_finish() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(worker("a", 2, &[]), now).unwrap();
    reg.submit(task(1));
    assert_eq!(sends(&reg.place(now)), vec![(a, 1)]);
    reg.submit(task(2));
    let mut other = task(3);
    other.id.run = RunId::from("other");
    reg.submit(other);
    let held: HashSet<RunId> = [RunId::from("run")].into();
    reg.hold_runs(held.iter().cloned());
    assert_eq!(reg.running_of(&held), 1);
    let placed = reg.place(now);
    assert_eq!(placed.len(), 1, "only the other run's task is placed");
    reg.finish(a, &id(1), now).expect("a held task 1");
    assert_eq!(reg.running_of(&held), 0);
    assert!(sends(&reg.place(now)).is_empty(), "task 2 stays queued");
    // Forgotten (the partition moved), the hold goes with it.
    reg.forget_run(&RunId::from("run"));
    reg.submit(task(4));
    assert_eq!(sends(&reg.place(now)), vec![(a, 4)]);
}
