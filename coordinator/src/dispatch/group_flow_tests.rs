use super::*;
use crate::dispatch::limits::{LimitSpec, Matcher, Target};

fn limit(name: &str, concurrency: Option<u64>, requests_per_minute: Option<u64>) -> LimitSpec {
    LimitSpec {
        name: name.into(),
        matcher: Matcher {
            kind: Some("llm".into()),
            ..Matcher::default()
        },
        requests_per_minute,
        tokens_per_minute: None,
        concurrency,
    }
}

fn call() -> Subject {
    Subject {
        namespace: "default".into(),
        kind: "llm".into(),
        handler: None,
        model_call: Some(Target::default()),
    }
}

fn start(ticket: Ticket, key: Option<(&str, u32)>, subject: Option<Subject>) -> Ask {
    Ask {
        ticket,
        keyed: key.map(|(key, max)| Keyed {
            namespace: "default".into(),
            key: key.into(),
            max,
        }),
        subject,
        tokens: 10,
        held: false,
    }
}

fn granted(member: MemberId, ticket: Ticket, limited: bool) -> (MemberId, Answer) {
    (member, Answer::Granted { ticket, limited })
}

fn used() -> Settlement {
    Settlement {
        target: Target {
            provider: Some("default".into()),
            model: Some("m".into()),
        },
        tokens: 12,
        rate_limited: None,
    }
}

#[test]
fn a_key_is_held_across_members_and_passes_in_arrival_order() {
    let now = Instant::now();
    let mut authority = FlowAuthority::default();
    assert_eq!(
        authority.ask(1, start(1, Some(("acme", 1)), None), now),
        vec![granted(1, 1, false)]
    );
    let waits = authority.ask(2, start(7, Some(("acme", 1)), None), now);
    assert_eq!(
        waits,
        vec![(
            2,
            Answer::Waits {
                ticket: 7,
                limit: "concurrency key 'acme' (max 1)".into(),
                wait: None,
                keyed: true,
            }
        )]
    );
    // Told once: a third ask behind it tells only its own member.
    let third = authority.ask(3, start(9, Some(("acme", 1)), None), now);
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].0, 3);
    // Another key, or another namespace's, is free.
    assert_eq!(
        authority.ask(2, start(8, Some(("globex", 1)), None), now),
        vec![granted(2, 8, false)]
    );
    assert_eq!(authority.holding("default", "acme"), 1);
    assert_eq!(authority.release(1, 1, now), vec![granted(2, 7, false)]);
    assert_eq!(authority.release(2, 7, now), vec![granted(3, 9, false)]);
    assert_eq!(authority.waiting(), 0);
    assert_eq!(authority.holding("default", "acme"), 1);
}

#[test]
fn calls_in_flight_are_counted_across_members_and_freed_by_settling() {
    let now = Instant::now();
    let mut authority = FlowAuthority::new(RateLimits::new(vec![limit("gpt", Some(2), None)], now));
    assert_eq!(
        authority.ask(1, start(1, None, Some(call())), now),
        vec![granted(1, 1, true)]
    );
    assert_eq!(
        authority.ask(2, start(1, None, Some(call())), now),
        vec![granted(2, 1, true)]
    );
    let waits = authority.ask(3, start(1, None, Some(call())), now);
    assert!(
        matches!(&waits[..], [(3, Answer::Waits { keyed: false, wait: None, limit, .. })] if &**limit == "gpt")
    );
    // Settling member 2's call gives its place to member 3.
    assert_eq!(
        authority.settle(2, 1, &used(), now),
        vec![granted(3, 1, true)]
    );
    // A settled ticket's release frees nothing more.
    assert_eq!(authority.release(2, 1, now), vec![]);
    let waits = authority.ask(2, start(2, None, Some(call())), now);
    assert!(matches!(&waits[..], [(2, Answer::Waits { .. })]));
}

#[test]
fn a_rate_holds_asks_until_its_window_refills() {
    let now = Instant::now();
    // 60 a minute: one a second.
    let mut authority =
        FlowAuthority::new(RateLimits::new(vec![limit("rpm", None, Some(60))], now));
    assert_eq!(
        authority.ask(1, start(1, None, Some(call())), now),
        vec![granted(1, 1, true)]
    );
    let waits = authority.ask(2, start(1, None, Some(call())), now);
    let [
        (
            2,
            Answer::Waits {
                wait: Some(wait), ..
            },
        ),
    ] = &waits[..]
    else {
        panic!("waits by time: {waits:?}");
    };
    assert!(*wait > Duration::from_millis(900) && *wait <= Duration::from_secs(1));
    let at = authority.wake().expect("a time to wake");
    assert!(authority.tick(at - Duration::from_millis(100)).is_empty());
    assert_eq!(authority.tick(at), vec![granted(2, 1, true)]);
}

#[test]
fn a_member_gone_gives_back_what_it_held_and_its_asks_are_dropped() {
    let now = Instant::now();
    let mut authority = FlowAuthority::new(RateLimits::new(vec![limit("gpt", Some(1), None)], now));
    authority.ask(1, start(1, Some(("acme", 1)), Some(call())), now);
    authority.ask(1, start(2, Some(("acme", 1)), None), now);
    authority.ask(2, start(1, Some(("acme", 1)), Some(call())), now);
    assert_eq!(authority.waiting(), 2);
    assert_eq!(authority.gone(1, now), vec![granted(2, 1, true)]);
    assert_eq!(authority.waiting(), 0);
}

#[test]
fn a_new_authority_counts_what_members_declare_they_hold() {
    let now = Instant::now();
    let mut authority = FlowAuthority::new(RateLimits::new(vec![limit("gpt", Some(1), None)], now));
    let mut held = start(4, Some(("acme", 1)), Some(call()));
    held.held = true;
    assert_eq!(authority.ask(1, held.clone(), now), vec![]);
    // Declared again (a resend): counted once.
    assert_eq!(authority.ask(1, held, now), vec![]);
    let waits = authority.ask(2, start(1, Some(("acme", 1)), Some(call())), now);
    assert!(matches!(
        &waits[..],
        [(2, Answer::Waits { keyed: true, .. })]
    ));
    // The declared call settles, its key is still held; released, both free.
    assert_eq!(authority.settle(1, 4, &used(), now), vec![]);
    assert_eq!(authority.release(1, 4, now), vec![granted(2, 1, true)]);
}

#[test]
fn an_ask_no_limit_counts_is_granted_and_holds_nothing() {
    let now = Instant::now();
    let mut authority = FlowAuthority::new(RateLimits::new(vec![limit("gpt", Some(1), None)], now));
    let script = Subject {
        kind: "script".into(),
        model_call: None,
        ..call()
    };
    assert_eq!(
        authority.ask(1, start(1, None, Some(script)), now),
        vec![granted(1, 1, false)]
    );
    assert_eq!(authority.release(1, 1, now), vec![]);
}

#[test]
fn a_new_authority_grants_nothing_until_every_member_declared() {
    let now = Instant::now();
    let members = ["a".to_owned(), "b".to_owned()].into_iter().collect();
    let mut authority = FlowAuthority::default().recounting(members, now + Duration::from_secs(6));
    // Member 2 (b) asks again before member 1 (a) declared its holding.
    assert_eq!(
        authority.ask(2, start(1, Some(("acme", 1)), None), now),
        vec![]
    );
    assert_eq!(authority.declared("b", now), vec![]);
    let mut held = start(4, Some(("acme", 1)), None);
    held.held = true;
    authority.ask(1, held, now);
    // Every member declared: b's ask waits for a's key.
    let answers = authority.declared("a", now);
    assert!(
        matches!(&answers[..], [(2, Answer::Waits { keyed: true, .. })]),
        "{answers:?}"
    );
    assert!(!authority.is_recounting());
    assert_eq!(authority.release(1, 4, now), vec![granted(2, 1, false)]);
}

#[test]
fn a_recount_ends_after_its_time_when_a_member_never_declares() {
    let now = Instant::now();
    let members = ["a".to_owned(), "gone".to_owned()].into_iter().collect();
    let until = now + Duration::from_secs(6);
    let mut authority = FlowAuthority::default().recounting(members, until);
    authority.declared("a", now);
    assert_eq!(
        authority.ask(1, start(1, Some(("acme", 1)), None), now),
        vec![]
    );
    assert_eq!(authority.wake(), Some(until));
    assert!(authority.tick(until - Duration::from_millis(1)).is_empty());
    assert_eq!(authority.tick(until), vec![granted(1, 1, false)]);
}

fn capped() -> FlowAuthority {
    let days = crate::day_spend::DaySpend::new(
        [(
            "team".to_owned(),
            crate::day_spend::DayBudget {
                tokens: Some(100),
                cost: None,
            },
        )]
        .into(),
    );
    FlowAuthority::default().with_runs([("team".to_owned(), 2)].into(), days)
}

const NOON: i64 = 20_000 * 86_400_000 + 43_200_000;

#[test]
fn a_namespaces_runs_going_are_counted_across_partitions_and_admissions() {
    let mut authority = capped();
    authority.report_going(0, 10, [("team".to_owned(), 1)].into());
    assert_eq!(
        authority.admit_run(1, 5, "team".into(), NOON),
        vec![(1, Answer::RunAdmitted { ticket: 5 })]
    );
    // Admitted, not yet in a report: counted as reserved.
    assert_eq!(authority.runs_going("team"), 2);
    assert_eq!(
        authority.admit_run(2, 1, "team".into(), NOON),
        vec![(
            2,
            Answer::RunRefused {
                ticket: 1,
                refusal: RunRefusal::TooMany { running: 2, max: 2 }
            }
        )]
    );
    // Its partition's report counts it; its ticket released: still two.
    authority.report_going(3, 7, [("team".to_owned(), 1)].into());
    authority.release(1, 5, Instant::now());
    assert_eq!(authority.runs_going("team"), 2);
    // A report of partition 3's earlier leader is ignored; its next
    // leader's counts.
    authority.report_going(3, 6, [("team".to_owned(), 5)].into());
    assert_eq!(authority.runs_going("team"), 2);
    authority.report_going(3, 9, [("team".to_owned(), 0)].into());
    assert_eq!(authority.runs_going("team"), 1);
    // A namespace without a cap is admitted.
    assert!(matches!(
        &authority.admit_run(2, 2, "other".into(), NOON)[..],
        [(2, Answer::RunAdmitted { ticket: 2 })]
    ));
}

#[test]
fn a_namespaces_day_is_what_every_member_spent() {
    let mut authority = capped();
    authority.spend("team", 60, 0.0, NOON);
    assert!(matches!(
        &authority.admit_run(1, 1, "team".into(), NOON)[..],
        [(1, Answer::RunAdmitted { .. })]
    ));
    authority.release(1, 1, Instant::now());
    authority.spend("team", 40, 0.0, NOON);
    let refused = authority.admit_run(2, 1, "team".into(), NOON);
    assert_eq!(
        refused,
        vec![(
            2,
            Answer::RunRefused {
                ticket: 1,
                refusal: RunRefusal::DaySpent(
                    "namespace 'team' has spent 100 tokens today, its tokens_per_day is 100; it starts again at 00:00 UTC".into()
                )
            }
        )]
    );
    assert_eq!(authority.days().snapshot()["team"].tokens, 100);
}

#[test]
fn a_run_admission_waits_for_the_recount_and_a_members_reservations_go_with_it() {
    let now = Instant::now();
    let members = ["a".to_owned()].into_iter().collect();
    let mut authority = capped().recounting(members, now + Duration::from_secs(6));
    assert_eq!(authority.admit_run(1, 1, "team".into(), NOON), vec![]);
    authority.report_going(0, 1, [("team".to_owned(), 1)].into());
    assert_eq!(
        authority.declared("a", now),
        vec![(1, Answer::RunAdmitted { ticket: 1 })]
    );
    assert_eq!(authority.runs_going("team"), 2);
    // The member is gone before its release: its reservation goes.
    authority.gone(1, now);
    assert_eq!(authority.runs_going("team"), 1);
}
