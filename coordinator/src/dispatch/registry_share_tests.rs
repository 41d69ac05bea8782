//! A worker that shares its slots between coordinators: placed within
//! the share it gave, and told the demand it could serve.

use super::*;

/// A worker that shares `shared` slots between coordinators, `slots` of
/// them given to this one.
fn sharing(name: &str, slots: u32, shared: u32) -> WorkerInfo {
    let mut info = worker(name, slots, &[]);
    info.hello.shared_slots = shared;
    info
}

#[test]
fn a_worker_that_shares_its_slots_gets_no_more_than_its_share() {
    let now = Instant::now();
    let mut reg = registry();
    let a = reg.join(sharing("a", 2, 4), now).unwrap();
    for key in 1..=6 {
        reg.submit(task(key));
    }
    assert_eq!(sends(&reg.place(now)), vec![(a, 1), (a, 2)]);
    // Its share lowered below what it runs: nothing new, even as one ends.
    reg.set_slots(a, 1);
    assert!(reg.finish(a, &id(1), now).is_some());
    assert!(reg.place(now).is_empty(), "one runs, one is its share");
    // Raised: filled at once.
    reg.set_slots(a, 3);
    assert_eq!(sends(&reg.place(now)), vec![(a, 3), (a, 4)]);
    // A task that came past a share just lowered is handed back: queued
    // again, and the worker is not taken to be leaving.
    reg.set_slots(a, 2);
    assert!(reg.refuse(a, &id(4)).is_empty());
    assert!(!reg.workers()[0].draining);
    assert_eq!(reg.load().queued, 3);
    assert!(reg.place(now).is_empty(), "two run, two is its share");
    assert!(reg.finish(a, &id(2), now).is_some());
    assert_eq!(sends(&reg.place(now)), vec![(a, 4)]);
}

#[test]
fn a_sharing_worker_is_told_the_queued_tasks_it_could_run_up_to_its_slots() {
    let now = Instant::now();
    let mut reg = registry();
    let shares = reg.join(sharing("shares", 0, 3), now).unwrap();
    let keeps = reg.join(worker("keeps", 0, &[]), now).unwrap();
    assert_eq!(reg.demand(shares), Some(0));
    assert_eq!(reg.demand(keeps), None, "told only to a worker that shares");
    reg.submit(task(1));
    assert_eq!(reg.demand(shares), Some(1));
    // A task of a kind it does not host is not its demand.
    let mut llm = task(2);
    llm.requirement = Requirement::Kind(WorkerKind::Llm);
    reg.submit(llm);
    assert_eq!(reg.demand(shares), Some(1));
    // A running task is no longer demand.
    reg.set_slots(shares, 1);
    assert_eq!(sends(&reg.place(now)), vec![(shares, 1)]);
    assert_eq!(reg.demand(shares), Some(0));
    for key in 3..=9 {
        reg.submit(task(key));
    }
    assert_eq!(reg.demand(shares), Some(3), "never more than its slots");
}
