use super::*;
use crate::dispatch::jobs::JobKey;
use crate::task::TaskKey;

fn glob(text: &str) -> globset::GlobMatcher {
    globset::Glob::new(text).expect("glob").compile_matcher()
}

fn spec(name: &str, matcher: Matcher) -> LimitSpec {
    LimitSpec {
        name: name.into(),
        matcher,
        requests_per_minute: None,
        tokens_per_minute: None,
        concurrency: None,
    }
}

fn call(provider: Option<&str>, model: Option<&str>) -> Subject {
    Subject {
        namespace: "default".into(),
        kind: "llm".into(),
        handler: None,
        model_call: Some(Target {
            provider: provider.map(str::to_owned),
            model: model.map(str::to_owned),
        }),
    }
}

fn job(n: u64) -> JobId {
    JobId {
        run: "run".into(),
        key: JobKey::Task(TaskKey(n)),
    }
}

fn settled(model: &str, tokens: u64) -> Settlement {
    Settlement {
        target: Target {
            provider: Some("default".into()),
            model: Some(model.into()),
        },
        tokens,
        rate_limited: None,
    }
}

/// Admits calls one after another as fast as the limits allow, from
/// `start` for `span`; returns when each went.
fn drive(
    limits: &mut RateLimits,
    subject: &Subject,
    start: Instant,
    span: Duration,
) -> Vec<Instant> {
    let mut now = start;
    let mut went = Vec::new();
    let mut n = 0;
    while now < start + span {
        n += 1;
        match limits.admit(subject, 0, &job(n), now) {
            Ok(grant) => {
                went.push(now);
                if let Some(grant) = grant {
                    limits.settle(grant, &job(n), &settled("gpt-4o", 0), now);
                }
            }
            Err(wait) => now = wait.until.expect("rates free with time"),
        }
    }
    went
}

#[test]
fn a_rate_is_spread_evenly_with_a_burst_of_one_seconds_share() {
    let start = Instant::now();
    let mut limit = spec("api", Matcher::default());
    limit.requests_per_minute = Some(1_200);
    let mut limits = RateLimits::new(vec![limit], start);
    let went = drive(
        &mut limits,
        &call(None, None),
        start,
        Duration::from_secs(60),
    );
    // A minute admits its share plus one second's burst, never more.
    assert!(went.len() <= 1_200 + 20, "{} in a minute", went.len());
    assert!(went.len() >= 1_200, "{} in a minute", went.len());
    // No second (sliding) ever holds more than the burst plus a second's rate.
    for (i, at) in went.iter().enumerate() {
        let within = went[i..]
            .iter()
            .take_while(|t| **t < *at + Duration::from_secs(1))
            .count();
        assert!(within <= 40, "{within} calls within one second");
    }
    // After the first second, calls are evenly spaced (1/20 s apart).
    let late: Vec<_> = went
        .iter()
        .filter(|t| **t > start + Duration::from_secs(2))
        .collect();
    for pair in late.windows(2) {
        let gap = *pair[1] - *pair[0];
        assert!(
            gap >= Duration::from_millis(49),
            "{gap:?} between two calls"
        );
    }
}

#[test]
fn a_limit_counts_only_what_it_matches() {
    let now = Instant::now();
    let mut gpt = spec(
        "gpt",
        Matcher {
            model: Some(glob("gpt-*")),
            provider: Some("default".into()),
            ..Matcher::default()
        },
    );
    gpt.concurrency = Some(1);
    let mut limits = RateLimits::new(vec![gpt], now);
    let first = limits
        .admit(&call(Some("default"), Some("gpt-4o")), 10, &job(1), now)
        .expect("room")
        .expect("counted");
    // Another gpt call waits for the first to end.
    let wait = limits
        .admit(
            &call(Some("default"), Some("gpt-4o-mini")),
            10,
            &job(2),
            now,
        )
        .unwrap_err();
    assert_eq!(wait.limit.as_ref(), "gpt");
    assert_eq!(wait.until, None);
    // Another model, or another provider, is not counted.
    assert_eq!(
        limits.admit(&call(Some("default"), Some("llama3")), 10, &job(3), now),
        Ok(None)
    );
    assert_eq!(
        limits.admit(&call(Some("local"), Some("gpt-4o")), 10, &job(4), now),
        Ok(None)
    );
    // A step that names no model is counted until its worker says.
    assert!(limits.admit(&call(None, None), 10, &job(5), now).is_err());
    // A task that calls no model is not counted by a model limit.
    let script = Subject {
        kind: "script".into(),
        model_call: None,
        ..call(None, None)
    };
    assert_eq!(limits.admit(&script, 0, &job(6), now), Ok(None));
    limits.settle(first, &job(1), &settled("gpt-4o", 10), now);
    assert!(limits.admit(&call(None, None), 10, &job(7), now).is_ok());
}

#[test]
fn a_reservation_that_turns_out_unmatched_is_given_back() {
    let now = Instant::now();
    let mut gpt = spec(
        "gpt",
        Matcher {
            model: Some(glob("gpt-*")),
            ..Matcher::default()
        },
    );
    gpt.requests_per_minute = Some(60); // one a second, burst one
    let mut limits = RateLimits::new(vec![gpt], now);
    let grant = limits
        .admit(&call(None, None), 0, &job(1), now)
        .expect("room")
        .expect("counted");
    assert!(limits.admit(&call(None, None), 0, &job(2), now).is_err());
    // The step's worker called llama3: the gpt limit gets its request back.
    limits.settle(grant, &job(1), &settled("llama3", 0), now);
    assert!(
        limits
            .admit(&call(None, Some("gpt-4")), 0, &job(3), now)
            .is_ok()
    );
}

#[test]
fn tokens_are_reserved_then_settled_to_the_providers_count() {
    let now = Instant::now();
    let mut tpm = spec("tokens", Matcher::default());
    tpm.tokens_per_minute = Some(6_000); // 100 a second
    let mut limits = RateLimits::new(vec![tpm], now);
    let grant = limits
        .admit(&call(None, None), 100, &job(1), now)
        .expect("room")
        .expect("counted");
    // The bucket is empty: the next call waits one second for its share.
    let wait = limits
        .admit(&call(None, None), 50, &job(2), now)
        .unwrap_err();
    assert_eq!(wait.until, Some(now + Duration::from_millis(500)));
    // The call used 20: 80 come back at once.
    limits.settle(grant, &job(1), &settled("m", 20), now);
    assert!(limits.admit(&call(None, None), 50, &job(3), now).is_ok());
    // A call larger than the burst waits for a full bucket and leaves it
    // owing (30 left, 500 wanted: it waits for 100, then owes 400).
    let wait = limits
        .admit(&call(None, None), 500, &job(4), now)
        .unwrap_err();
    assert_eq!(wait.until, Some(now + Duration::from_millis(700)));
    let later = now + Duration::from_millis(700);
    assert!(limits.admit(&call(None, None), 500, &job(4), later).is_ok());
    let wait = limits
        .admit(&call(None, None), 1, &job(5), later)
        .unwrap_err();
    assert_eq!(wait.until, Some(later + Duration::from_millis(4_010)));
}

#[test]
fn a_429_pauses_every_matching_limit_until_retry_after() {
    let now = Instant::now();
    let mut rpm = spec("api", Matcher::default());
    rpm.requests_per_minute = Some(6_000);
    let mut limits = RateLimits::new(vec![rpm], now);
    let grant = limits
        .admit(&call(None, None), 0, &job(1), now)
        .expect("room")
        .expect("counted");
    let throttled = Settlement {
        rate_limited: Some(Some(Duration::from_secs(3))),
        ..settled("m", 0)
    };
    limits.settle(grant, &job(1), &throttled, now);
    // Paused for three seconds, then refilling from empty: one request
    // takes 1/100 s more.
    let wait = limits
        .admit(&call(None, None), 0, &job(2), now)
        .unwrap_err();
    assert_eq!(wait.until, Some(now + Duration::from_millis(3_010)));
    let during = now + Duration::from_secs(2);
    assert!(limits.admit(&call(None, None), 0, &job(2), during).is_err());
    // From the pause's end it refills from empty: one request after 1/100 s.
    let after = now + Duration::from_millis(3_010);
    assert!(limits.admit(&call(None, None), 0, &job(2), after).is_ok());
}

#[test]
fn a_grant_is_settled_only_by_its_owner_and_released_with_its_job() {
    let now = Instant::now();
    let mut one = spec("one", Matcher::default());
    one.concurrency = Some(1);
    let mut limits = RateLimits::new(vec![one], now);
    let grant = limits
        .admit(&call(None, None), 0, &job(1), now)
        .expect("room")
        .expect("counted");
    // Another job cannot settle it.
    limits.settle(grant, &job(2), &settled("m", 0), now);
    assert!(limits.admit(&call(None, None), 0, &job(3), now).is_err());
    // Its job ended without settling: the place in flight comes back.
    limits.release(&job(1));
    assert_eq!(limits.open_grants(), 0);
    assert!(limits.admit(&call(None, None), 0, &job(3), now).is_ok());
}

#[test]
fn an_entry_naming_a_handler_counts_its_tasks() {
    let now = Instant::now();
    let mut scrape = spec(
        "scrape",
        Matcher {
            handler: Some("scrape".into()),
            ..Matcher::default()
        },
    );
    scrape.concurrency = Some(1);
    let mut limits = RateLimits::new(vec![scrape], now);
    let task = Subject {
        kind: "handler".into(),
        handler: Some("scrape".into()),
        model_call: None,
        ..call(None, None)
    };
    assert!(
        limits
            .admit(&task, 0, &job(1), now)
            .expect("room")
            .is_some()
    );
    assert!(limits.admit(&task, 0, &job(2), now).is_err());
    let other = Subject {
        handler: Some("parse".into()),
        ..task.clone()
    };
    assert_eq!(limits.admit(&other, 0, &job(3), now), Ok(None));
    // Model calls are not its business.
    assert_eq!(limits.admit(&call(None, None), 0, &job(4), now), Ok(None));
}

#[test]
fn the_limit_that_frees_last_is_named() {
    let now = Instant::now();
    let mut fast = spec("fast", Matcher::default());
    fast.requests_per_minute = Some(600);
    let mut slow = spec("slow", Matcher::default());
    slow.requests_per_minute = Some(60);
    let mut limits = RateLimits::new(vec![fast, slow], now);
    assert!(limits.admit(&call(None, None), 0, &job(1), now).is_ok());
    let wait = limits
        .admit(&call(None, None), 0, &job(2), now)
        .unwrap_err();
    assert_eq!(wait.limit.as_ref(), "slow");
    assert_eq!(wait.until, Some(now + Duration::from_secs(1)));
}

#[test]
fn a_new_leader_starts_from_the_windows_kept_and_never_fuller() {
    let start = Instant::now();
    let limit = || LimitSpec {
        requests_per_minute: Some(60),
        ..spec("api", Matcher::default())
    };
    let mut old = RateLimits::new(vec![limit()], start);
    // The old leader spent its second's request.
    old.admit(&call(None, None), 10, &job(1), start).unwrap();
    let kept = old.windows(start);
    assert!(kept["api"].requests.unwrap().level.abs() < 1e-9);
    // Stored as JSON, as the store keeps it.
    let kept: BTreeMap<String, Window> =
        serde_json::from_str(&serde_json::to_string(&kept).unwrap()).unwrap();
    let later = start + Duration::from_secs(5);
    let mut new = RateLimits::new(vec![limit()], later);
    new.restore(&kept, later);
    // Empty as kept: the next request waits a second's refill.
    let wait = new
        .admit(&call(None, None), 10, &job(2), later)
        .expect_err("it waits");
    assert_eq!(wait.until, Some(later + Duration::from_secs(1)));
    // A window kept fuller than a fresh one is not taken as more, and a
    // pause kept goes on for what was left of it.
    let mut fuller = kept.clone();
    fuller.get_mut("api").unwrap().requests = Some(Meter {
        level: 1_000.0,
        paused_ms: 2_000,
    });
    let mut fresh = RateLimits::new(vec![limit()], later);
    fresh.restore(&fuller, later);
    let wait = fresh
        .admit(&call(None, None), 10, &job(3), later)
        .expect_err("paused");
    assert_eq!(wait.until, Some(later + Duration::from_secs(2)));
}
