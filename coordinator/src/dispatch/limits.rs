//! Cluster-wide rate limits on model calls (SPEC 18): the pure core that
//! the registry asks before a step may call a model.
//!
//! Each `[[limits]]` entry of the coordinator's configuration becomes a
//! [`Limit`]: what it matches, and up to three meters — requests per
//! minute and tokens per minute as token buckets whose burst is one
//! second's share (so the rate is spread as providers enforce it, and a
//! limit set just under a provider's never draws a 429 from it), and calls
//! in flight. A call takes one request, its estimated tokens and one place
//! in flight from every limit it matches, or waits: [`RateLimits::admit`]
//! says which limit holds it and until when. What it takes is a grant,
//! settled with the usage the provider reports ([`RateLimits::settle`]): the
//! tokens are corrected, the place in flight given back. A provider's 429
//! pauses every limit the call matched until its `Retry-After` and empties
//! their buckets, for every worker at once.
//!
//! Limits count model calls. An entry that names a kind making no model
//! call (`script`, `handler`, …) or a handler counts that kind's tasks
//! instead: a request is a task dispatched, in flight a task running.
//!
//! Time is an argument: nothing here reads a clock, so every rule is tested
//! with virtual time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::jobs::JobId;

/// The built-in kinds whose steps call models.
pub const MODEL_KINDS: [&str; 3] = ["llm", "agent", "rag"];

/// How long limits pause after a 429 that names no `Retry-After`.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

/// One `[[limits]]` entry, as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitSpec {
    /// Its name, in events, metrics and errors.
    pub name: Arc<str>,
    /// What it counts.
    pub matcher: Matcher,
    /// Requests a minute.
    pub requests_per_minute: Option<u64>,
    /// Tokens a minute (prompt and completion, as the provider reports).
    pub tokens_per_minute: Option<u64>,
    /// Calls in flight at once.
    pub concurrency: Option<u64>,
}

/// What a limit counts: every field it sets must match.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    /// The provider's name, as the worker's configuration names it.
    pub provider: Option<String>,
    /// The model, a glob (`gpt-*`).
    pub model: Option<globset::GlobMatcher>,
    /// The step's kind.
    pub kind: Option<String>,
    /// The step's handler.
    pub handler: Option<String>,
    /// The run's namespace.
    pub namespace: Option<String>,
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.provider == other.provider
            && self.model.as_ref().map(|m| m.glob()) == other.model.as_ref().map(|m| m.glob())
            && self.kind == other.kind
            && self.handler == other.handler
            && self.namespace == other.namespace
    }
}

impl Matcher {
    /// Whether the entry counts tasks of a kind that makes no model call
    /// (or of a handler) rather than model calls.
    pub fn counts_tasks(&self) -> bool {
        self.handler.is_some()
            || self
                .kind
                .as_deref()
                .is_some_and(|kind| !MODEL_KINDS.contains(&kind))
    }

    /// Whether it counts `subject`. A provider or model the subject does
    /// not know yet (a step that names none, before its worker resolves
    /// it) matches: what is reserved at dispatch is settled against what
    /// the call really was.
    fn matches(&self, subject: &Subject) -> bool {
        let same = |set: &Option<String>, value: Option<&str>| {
            set.as_deref().is_none_or(|want| value == Some(want))
        };
        if !same(&self.namespace, Some(&subject.namespace))
            || !same(&self.kind, Some(&subject.kind))
            || !same(&self.handler, subject.handler.as_deref())
        {
            return false;
        }
        match &subject.model_call {
            None => self.counts_tasks(),
            Some(target) => self.targets(target),
        }
    }

    /// Whether its provider and model take in `target` (what `target` does
    /// not name yet matches).
    fn targets(&self, target: &Target) -> bool {
        let provider = self
            .provider
            .as_deref()
            .is_none_or(|want| target.provider.as_deref().is_none_or(|p| p == want));
        let model = self
            .model
            .as_ref()
            .is_none_or(|glob| target.model.as_deref().is_none_or(|m| glob.is_match(m)));
        provider && model
    }
}

/// What a limit is asked about: a model call, or a task that calls none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The run's namespace.
    pub namespace: Arc<str>,
    /// The step's kind.
    pub kind: String,
    /// The step's handler, for a handler step.
    pub handler: Option<String>,
    /// The model called; `None` for a task that calls none.
    pub model_call: Option<Target>,
}

/// The provider and model of a call; `None` where the step names none and
/// its worker has not said yet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// The provider's name.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
}

/// Why a call may not go yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The limit that holds it.
    pub limit: Arc<str>,
    /// When it may go, if time alone frees it; `None`: when a call in
    /// flight ends.
    pub until: Option<Instant>,
}

/// A grant's number, unique for the coordinator's lifetime (0 is none).
pub type GrantId = u64;

/// What a call actually was, as its worker reports after it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settlement {
    /// The provider and model it called.
    pub target: Target,
    /// Prompt and completion tokens the provider reported.
    pub tokens: u64,
    /// The provider answered 429, with its `Retry-After` when given.
    pub rate_limited: Option<Option<Duration>>,
}

/// A meter that refills at a steady rate up to one second's share.
#[derive(Debug, Clone)]
struct Bucket {
    /// Units a second.
    rate: f64,
    /// Its burst: one second's share, at least one unit.
    capacity: f64,
    /// Units available (negative: owed).
    level: f64,
    /// When `level` was last brought up to date (later than now while a
    /// limit is paused).
    at: Instant,
}

impl Bucket {
    fn per_minute(amount: u64, now: Instant) -> Self {
        let rate = amount as f64 / 60.0;
        let capacity = rate.max(1.0);
        Self {
            rate,
            capacity,
            level: capacity,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        if now > self.at {
            let gained = self.rate * (now - self.at).as_secs_f64();
            self.level = (self.level + gained).min(self.capacity);
            self.at = now;
        }
    }

    /// When `amount` can be taken: a call larger than the burst waits for
    /// a full bucket and leaves it owing.
    fn ready_at(&self, amount: f64, now: Instant) -> Option<Instant> {
        let need = amount.min(self.capacity);
        if self.at <= now && self.level + 1e-9 >= need {
            return None;
        }
        let missing = (need - self.level).max(0.0);
        Some(self.at.max(now) + Duration::from_secs_f64(missing / self.rate.max(1e-9)))
    }

    fn take(&mut self, amount: f64) {
        self.level -= amount;
    }

    fn give_back(&mut self, amount: f64) {
        self.level = (self.level + amount).min(self.capacity);
    }

    /// Empties the bucket and stops its refill until `until`.
    fn pause(&mut self, until: Instant) {
        self.level = self.level.min(0.0);
        self.at = self.at.max(until);
    }
}

/// A configured limit and its meters.
#[derive(Debug)]
struct Limit {
    spec: LimitSpec,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    in_flight: u64,
}

impl Limit {
    /// Why `tokens` more may not go now, if they may not.
    fn blocks(&self, tokens: u64, now: Instant) -> Option<Option<Instant>> {
        if let Some(max) = self.spec.concurrency
            && self.in_flight >= max
        {
            return Some(None);
        }
        let requests = self.requests.as_ref().and_then(|b| b.ready_at(1.0, now));
        let tokens = self
            .tokens
            .as_ref()
            .and_then(|b| b.ready_at(tokens as f64, now));
        requests.max(tokens).map(Some)
    }
}

/// What one grant took, to be settled.
#[derive(Debug)]
struct Grant<O> {
    owner: O,
    /// The limits it took from, with the tokens it reserved of each.
    taken: Vec<(usize, u64)>,
}

/// Every configured limit, and the grants not yet settled, each held by
/// an owner: a job in a coordinator's registry, a member's ask at the
/// group's flow authority ([`super::group_flow`]).
#[derive(Debug)]
pub struct RateLimits<O = JobId> {
    limits: Vec<Limit>,
    grants: HashMap<GrantId, Grant<O>>,
    last_grant: GrantId,
}

impl<O> Default for RateLimits<O> {
    fn default() -> Self {
        Self {
            limits: Vec::new(),
            grants: HashMap::new(),
            last_grant: 0,
        }
    }
}

impl<O: Clone + PartialEq> RateLimits<O> {
    /// Limits as configured, full at `now`.
    pub fn new(specs: Vec<LimitSpec>, now: Instant) -> Self {
        let limits = specs
            .into_iter()
            .map(|spec| Limit {
                requests: spec.requests_per_minute.map(|n| Bucket::per_minute(n, now)),
                tokens: spec.tokens_per_minute.map(|n| Bucket::per_minute(n, now)),
                in_flight: 0,
                spec,
            })
            .collect();
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Whether any limit is configured.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// Whether some limit counts `subject`.
    pub fn applies(&self, subject: &Subject) -> bool {
        self.limits.iter().any(|l| l.spec.matcher.matches(subject))
    }

    /// Takes one request, `tokens` and a place in flight from every limit
    /// `subject` matches, for `owner`; or says which limit holds it (the
    /// one that frees last). `Ok(None)`: no limit counts it.
    pub fn admit(
        &mut self,
        subject: &Subject,
        tokens: u64,
        owner: &O,
        now: Instant,
    ) -> Result<Option<GrantId>, Wait> {
        let mut matched = Vec::new();
        let mut held: Option<Wait> = None;
        for (index, limit) in self.limits.iter_mut().enumerate() {
            if !limit.spec.matcher.matches(subject) {
                continue;
            }
            for bucket in limit.requests.iter_mut().chain(limit.tokens.iter_mut()) {
                bucket.refill(now);
            }
            let tokens = if subject.model_call.is_some() {
                tokens
            } else {
                0
            };
            if let Some(until) = limit.blocks(tokens, now) {
                // The one that frees last decides; one freed by a call's end
                // (no time) outranks any time.
                let later = match &held {
                    None => true,
                    Some(wait) => match (wait.until, until) {
                        (Some(_), None) => true,
                        (Some(a), Some(b)) => b > a,
                        (None, _) => false,
                    },
                };
                if later {
                    held = Some(Wait {
                        limit: limit.spec.name.clone(),
                        until,
                    });
                }
            }
            matched.push((index, tokens));
        }
        if let Some(wait) = held {
            return Err(wait);
        }
        if matched.is_empty() {
            return Ok(None);
        }
        for &(index, tokens) in &matched {
            let limit = &mut self.limits[index];
            if let Some(bucket) = &mut limit.requests {
                bucket.take(1.0);
            }
            if let Some(bucket) = &mut limit.tokens {
                bucket.take(tokens as f64);
            }
            limit.in_flight += 1;
        }
        Ok(Some(self.grant(owner, matched)))
    }

    /// Settles a grant of `owner`'s with what the call was: limits the call
    /// turned out not to match get back what they gave, the others have
    /// their tokens corrected to the provider's count, and all give back
    /// the place in flight. A 429 pauses the limits it matched. A grant
    /// that is not `owner`'s, or already settled, is ignored.
    pub fn settle(&mut self, grant: GrantId, owner: &O, call: &Settlement, now: Instant) {
        if self.grants.get(&grant).is_none_or(|g| g.owner != *owner) {
            return;
        }
        let Some(Grant { taken, .. }) = self.grants.remove(&grant) else {
            return;
        };
        for (index, reserved) in taken {
            let limit = &mut self.limits[index];
            limit.in_flight = limit.in_flight.saturating_sub(1);
            let subject_matches = limit.spec.matcher.targets(&call.target);
            for bucket in limit.requests.iter_mut().chain(limit.tokens.iter_mut()) {
                bucket.refill(now);
            }
            if !subject_matches {
                if let Some(bucket) = &mut limit.requests {
                    bucket.give_back(1.0);
                }
                if let Some(bucket) = &mut limit.tokens {
                    bucket.give_back(reserved as f64);
                }
                continue;
            }
            if let Some(bucket) = &mut limit.tokens {
                if call.tokens >= reserved {
                    bucket.take((call.tokens - reserved) as f64);
                } else {
                    bucket.give_back((reserved - call.tokens) as f64);
                }
            }
            if let Some(retry_after) = call.rate_limited {
                let until = now + retry_after.unwrap_or(DEFAULT_PAUSE);
                for bucket in limit.requests.iter_mut().chain(limit.tokens.iter_mut()) {
                    bucket.pause(until);
                }
            }
        }
    }

    /// The grants `owner` did not settle (its job ended): each gives back
    /// its place in flight; its request and tokens stay counted, as the
    /// call may have been made.
    pub fn release(&mut self, owner: &O) {
        let ended: Vec<GrantId> = self
            .grants
            .iter()
            .filter(|(_, grant)| grant.owner == *owner)
            .map(|(&id, _)| id)
            .collect();
        for id in ended {
            if let Some(grant) = self.grants.remove(&id) {
                for (index, _) in grant.taken {
                    let limit = &mut self.limits[index];
                    limit.in_flight = limit.in_flight.saturating_sub(1);
                }
            }
        }
    }

    /// Counts a call already granted elsewhere (a grant an earlier
    /// authority gave, declared again to its successor): a place in
    /// flight of every limit `subject` matches, without asking, and
    /// nothing from the windows (what it took is in the windows kept).
    /// `None`: no limit counts it.
    pub fn hold(&mut self, subject: &Subject, owner: &O) -> Option<GrantId> {
        let matched: Vec<(usize, u64)> = self
            .limits
            .iter()
            .enumerate()
            .filter(|(_, limit)| limit.spec.matcher.matches(subject))
            .map(|(index, _)| (index, 0))
            .collect();
        if matched.is_empty() {
            return None;
        }
        for &(index, _) in &matched {
            self.limits[index].in_flight += 1;
        }
        Some(self.grant(owner, matched))
    }

    /// Records a grant of `owner`'s that took `taken`; its number.
    fn grant(&mut self, owner: &O, taken: Vec<(usize, u64)>) -> GrantId {
        self.last_grant += 1;
        self.grants.insert(
            self.last_grant,
            Grant {
                owner: owner.clone(),
                taken,
            },
        );
        self.last_grant
    }

    /// Grants not yet settled.
    pub fn open_grants(&self) -> usize {
        self.grants.len()
    }

    /// What each limit's windows hold at `now`, by name, to keep across a
    /// failover.
    pub fn windows(&mut self, now: Instant) -> BTreeMap<String, Window> {
        self.limits
            .iter_mut()
            .map(|limit| {
                let meter = |bucket: &mut Option<Bucket>| {
                    bucket.as_mut().map(|bucket| {
                        bucket.refill(now);
                        Meter {
                            level: bucket.level,
                            paused_ms: bucket.at.saturating_duration_since(now).as_millis() as u64,
                        }
                    })
                };
                let window = Window {
                    requests: meter(&mut limit.requests),
                    tokens: meter(&mut limit.tokens),
                };
                (limit.spec.name.to_string(), window)
            })
            .collect()
    }

    /// Starts from windows an earlier leader kept, erring on the side of
    /// waiting: each meter holds the less of what it holds and what was
    /// kept (no refill is credited for the time between), and a pause
    /// lasts what was left of it. Limits renamed or added since start
    /// full; kept ones no longer configured are ignored.
    pub fn restore(&mut self, kept: &BTreeMap<String, Window>, now: Instant) {
        for limit in &mut self.limits {
            let Some(window) = kept.get(&*limit.spec.name) else {
                continue;
            };
            let pairs = [
                (&mut limit.requests, window.requests),
                (&mut limit.tokens, window.tokens),
            ];
            for (bucket, meter) in pairs {
                if let (Some(bucket), Some(meter)) = (bucket.as_mut(), meter)
                    && meter.level.is_finite()
                {
                    bucket.level = bucket.level.min(meter.level.max(-bucket.capacity * 60.0));
                    bucket.at = now.max(bucket.at) + Duration::from_millis(meter.paused_ms);
                }
            }
        }
    }
}

/// A limit's windows as kept across a failover.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// Its requests' meter.
    pub requests: Option<Meter>,
    /// Its tokens' meter.
    pub tokens: Option<Meter>,
}

/// A meter as kept: what it held, and how long it stays paused.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Meter {
    /// Units it held (negative: owed).
    pub level: f64,
    /// How long it still refills nothing (a 429's `Retry-After`).
    pub paused_ms: u64,
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
