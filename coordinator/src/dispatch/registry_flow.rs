//! The registry's flow control (SPEC 18): the `[[limits]]` a task's
//! first call is admitted under at dispatch, the permits a running step's
//! later calls ask for, their settlement with the provider's usage, the
//! concurrency keys steps hold while they run, and the runs' budgets
//! their calls are held against. What a job holds of these is given back
//! wherever it ends or goes back to the queue ([`Registry::let_go`]).

use super::*;

impl<T> Registry<T> {
    /// The registry with rate limits.
    pub fn with_rates(mut self, rates: RateLimits) -> Self {
        self.rates = rates;
        self
    }

    /// The registry with budgets priced by `prices`.
    pub fn with_prices(mut self, prices: Arc<crate::prices::Prices>) -> Self {
        self.budgets = Budgets::new(prices);
        self
    }

    /// The registry of a member of a partitioned group: concurrency keys
    /// and `[[limits]]` are asked of the group's flow authority.
    pub fn with_group(mut self) -> Self {
        self.group = Some(crate::dispatch::group_gate::GroupGate::default());
        self
    }

    /// The gate to the group's flow authority, in a partitioned group.
    pub fn gate(&mut self) -> Option<&mut crate::dispatch::group_gate::GroupGate> {
        self.group.as_mut()
    }

    /// Whether keys and limits are the group's.
    pub fn in_group(&self) -> bool {
        self.group.is_some()
    }

    /// The group's authority answered; whether to place again.
    pub fn group_answer(&mut self, answer: crate::dispatch::group_flow::Answer) -> bool {
        self.group.as_mut().is_some_and(|gate| gate.answer(answer))
    }

    /// Connected to the group's authority (again): what is held is
    /// declared, what waits asked again.
    pub fn group_connected(&mut self) {
        if let Some(gate) = &mut self.group {
            gate.declare();
        }
    }

    /// The connection to the group's authority ended.
    pub fn group_disconnected(&mut self) {
        if let Some(gate) = &mut self.group {
            gate.disconnected();
        }
    }

    /// What is to be sent to the group's authority.
    pub fn group_outbox(&mut self) -> Vec<crate::dispatch::group_gate::ToAuthority> {
        self.group
            .as_mut()
            .map(crate::dispatch::group_gate::GroupGate::take_outbox)
            .unwrap_or_default()
    }

    /// Whether the group's authority lets job `id` start: its key and its
    /// first call's limits, asked once (no more starts waiting for an
    /// answer than `free` slots). A job that must wait has its run told,
    /// once.
    pub(super) fn group_admitted(
        &mut self,
        id: &JobId,
        free: usize,
        out: &mut Vec<Decision<T>>,
    ) -> bool {
        let Some(job) = self.jobs.get_mut(id) else {
            return false;
        };
        let Some(gate) = &mut self.group else {
            return true;
        };
        let keyed = job
            .concurrency
            .as_ref()
            .map(|keyed| crate::dispatch::group_flow::Keyed {
                namespace: job.namespace.clone(),
                key: keyed.key.clone(),
                max: keyed.max,
            });
        // A step under a budget asks before each call, its first too.
        let counted = job.flow.as_ref().filter(|needs| {
            self.rates.applies(&needs.subject)
                && (job.budgets.is_empty() || needs.subject.model_call.is_none())
        });
        if keyed.is_none() && counted.is_none() {
            return true;
        }
        let asked = gate.unanswered_starts();
        let gated = match gate.start_asked(id) {
            Some(gated) => gated,
            None if asked >= free => return false,
            None => gate.start(
                id,
                keyed,
                counted.map(|needs| needs.subject.clone()),
                counted.map_or(0, |needs| needs.tokens),
            ),
        };
        match gated {
            crate::dispatch::group_gate::Gated::Go { grant } => {
                job.grant = (grant != 0).then_some(grant);
                job.throttled = false;
                true
            }
            crate::dispatch::group_gate::Gated::Waits { limit, wait, keyed } => {
                if !std::mem::replace(&mut job.throttled, true) {
                    out.push(Decision::Throttled {
                        job: id.clone(),
                        limit,
                        wait,
                        keyed,
                    });
                }
                false
            }
            crate::dispatch::group_gate::Gated::Asking => false,
        }
    }

    /// The limits' windows at `now`, to keep across a failover.
    pub fn windows(&mut self, now: Instant) -> BTreeMap<String, crate::dispatch::limits::Window> {
        self.rates.windows(now)
    }

    /// Starts the limits from windows an earlier leader kept.
    pub fn restore_windows(
        &mut self,
        kept: &BTreeMap<String, crate::dispatch::limits::Window>,
        now: Instant,
    ) {
        self.rates.restore(kept, now);
    }

    /// A run that counts against budgets started: see [`Budgets::start`].
    pub fn budget(&mut self, start: &crate::dispatch::BudgetStart) {
        self.budgets.start(start);
    }

    /// Whether any `[[limits]]` entry is configured: the dispatcher
    /// describes tasks for them only then.
    pub fn rate_limited(&self) -> bool {
        !self.rates.is_empty()
    }

    /// When a job or call waiting for a limit may go by time alone: the
    /// dispatcher places again then.
    pub fn wake(&self) -> Option<Instant> {
        self.wake
    }

    /// How a task's model calls are controlled, as its assignment says.
    pub fn flow_of(&self, job: &JobId) -> Option<CallFlow> {
        let job = self.jobs.get(job)?;
        let needs = job.flow.as_ref()?;
        needs.subject.model_call.as_ref()?;
        Some(CallFlow {
            grant: job.grant,
            ask: true,
        })
    }

    /// Whether a task needs describing for limits or budgets.
    pub fn counts(&self, budgets: &[RunId]) -> bool {
        self.rate_limited() || !budgets.is_empty()
    }

    /// A running step asks to call a model: granted now, or when the limits
    /// that count it have room (its run told it waits). A request for a
    /// job the worker does not hold is ignored.
    pub fn permit(
        &mut self,
        worker: WorkerId,
        job: &JobId,
        request: PermitRequest,
        now: Instant,
    ) -> Vec<Decision<T>> {
        if self.held_by(job) != Some(worker) {
            return Vec::new();
        }
        let mut decisions = Vec::new();
        let waiting = WaitingPermit {
            worker,
            job: job.clone(),
            request,
        };
        if let Some(waiting) = self.try_permit(waiting, now, &mut decisions) {
            self.permits.push_back(waiting);
        }
        decisions
    }

    /// A running step's model call ended: its grant is settled with what
    /// the provider reported.
    pub fn usage(&mut self, worker: WorkerId, job: &JobId, usage: &CallUsage, now: Instant) {
        if self.held_by(job) != Some(worker) {
            return;
        }
        let call = Settlement {
            target: Target {
                provider: Some(usage.provider.clone()),
                model: Some(usage.model.clone()),
            },
            tokens: usage.prompt_tokens + usage.completion_tokens,
            rate_limited: usage.rate_limited,
        };
        match &mut self.group {
            Some(gate) => gate.settle(job, usage.grant, call),
            None => self.rates.settle(usage.grant, job, &call, now),
        }
        if let Some(chain) = self.jobs.get(job).map(|j| j.budgets.clone())
            && !chain.is_empty()
        {
            let used = weft_proto::types::Usage {
                calls: 1,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_tokens: usage.cached_tokens,
                cost: None,
            };
            self.budgets.settle(job, &chain, &usage.model, &used);
        }
    }

    /// Grants `waiting` its call, or hands it back to wait (its run told
    /// the first time).
    pub(super) fn try_permit(
        &mut self,
        waiting: WaitingPermit,
        now: Instant,
        out: &mut Vec<Decision<T>>,
    ) -> Option<WaitingPermit> {
        let job = self.jobs.get_mut(&waiting.job)?;
        let answer = |outcome| Decision::Permit {
            worker: waiting.worker,
            job: waiting.job.clone(),
            request_id: waiting.request.request_id,
            outcome,
        };
        let Some(needs) = &job.flow else {
            out.push(answer(Ok(0)));
            return None;
        };
        if !job.budgets.is_empty()
            && let Err(why) = self.budgets.hold(
                &waiting.job,
                &job.budgets,
                &job.label,
                waiting.request.tokens,
                Some(&waiting.request.model),
            )
        {
            out.push(answer(Err(why)));
            return None;
        }
        let mut subject = needs.subject.clone();
        subject.model_call = Some(Target {
            provider: Some(waiting.request.provider.clone()),
            model: Some(waiting.request.model.clone()),
        });
        if let Some(gate) = &mut self.group {
            if !self.rates.applies(&subject) {
                out.push(answer(Ok(0)));
                return None;
            }
            let request = waiting.request.request_id;
            return match gate.call(&waiting.job, request, subject, waiting.request.tokens) {
                crate::dispatch::group_gate::Gated::Go { grant } => {
                    job.throttled = false;
                    out.push(answer(Ok(grant)));
                    None
                }
                crate::dispatch::group_gate::Gated::Waits { limit, wait, keyed } => {
                    if !std::mem::replace(&mut job.throttled, true) {
                        out.push(Decision::Throttled {
                            job: waiting.job.clone(),
                            limit,
                            wait,
                            keyed,
                        });
                    }
                    Some(waiting)
                }
                crate::dispatch::group_gate::Gated::Asking => Some(waiting),
            };
        }
        match self
            .rates
            .admit(&subject, waiting.request.tokens, &waiting.job, now)
        {
            Ok(grant) => {
                job.throttled = false;
                out.push(answer(Ok(grant.unwrap_or(0))));
                None
            }
            Err(wait) => {
                self.wake = earliest(self.wake, wait.until);
                if !std::mem::replace(&mut job.throttled, true) {
                    out.push(throttled(&waiting.job, wait, now));
                }
                Some(waiting)
            }
        }
    }

    /// A job ended or went back to the queue: what it held of the limits
    /// is given back, and its waiting calls are dropped.
    pub(super) fn let_go(&mut self, id: &JobId) {
        match &mut self.group {
            Some(gate) => gate.release(id),
            None => self.rates.release(id),
        }
        self.budgets.release(id);
        if !self.permits.is_empty() {
            self.permits.retain(|waiting| waiting.job != *id);
        }
        if let Some(job) = self.jobs.get_mut(id) {
            job.grant = None;
            if std::mem::take(&mut job.holds_key)
                && let Some(keyed) = &job.concurrency
            {
                let held = (job.namespace.clone(), keyed.key.clone());
                if let Some(count) = self.keys.get_mut(&held) {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.keys.remove(&held);
                    }
                }
            }
        }
    }

    /// Why job `id`, a step that calls a model, may not start: a budget it
    /// counts against is spent.
    pub(super) fn spent(&self, id: &JobId) -> Option<TaskFailure> {
        let job = self.jobs.get(id)?;
        if job.budgets.is_empty() {
            return None;
        }
        job.flow.as_ref()?.subject.model_call.as_ref()?;
        let message = self.budgets.exhausted(&job.budgets, &job.label)?;
        Some(TaskFailure {
            kind: FailureKind::BudgetExceeded,
            message,
            worker: None,
        })
    }

    /// Whether job `id`'s concurrency key has room (SPEC 18). A job that
    /// must wait has its run told, once.
    pub(super) fn key_free(&mut self, id: &JobId, out: &mut Vec<Decision<T>>) -> bool {
        let Some(job) = self.jobs.get_mut(id) else {
            return false;
        };
        let Some(keyed) = &job.concurrency else {
            return true;
        };
        let held = (job.namespace.clone(), keyed.key.clone());
        if self.keys.get(&held).copied().unwrap_or(0) < keyed.max {
            return true;
        }
        if !std::mem::replace(&mut job.throttled, true) {
            out.push(Decision::Throttled {
                job: id.clone(),
                limit: format!("concurrency key '{}' (max {})", keyed.key, keyed.max).into(),
                wait: None,
                keyed: true,
            });
        }
        false
    }

    /// Whether the limits let job `id` go now; its first call's grant is
    /// kept with it. A job that must wait has its run told, once.
    /// (`Err` with the limit's wait when a limit holds it.)
    pub(super) fn admitted(
        &mut self,
        id: &JobId,
        now: Instant,
        out: &mut Vec<Decision<T>>,
    ) -> Result<(), Option<Wait>> {
        let Some(job) = self.jobs.get_mut(id) else {
            return Err(None);
        };
        let Some(needs) = &job.flow else {
            return Ok(());
        };
        // A step under a budget asks before each call, its first too: the
        // budget is checked there, with the limits.
        if !job.budgets.is_empty() && needs.subject.model_call.is_some() {
            return Ok(());
        }
        match self.rates.admit(&needs.subject, needs.tokens, id, now) {
            Ok(grant) => {
                job.grant = grant;
                job.throttled = false;
                Ok(())
            }
            Err(wait) => {
                self.wake = earliest(self.wake, wait.until);
                if !std::mem::replace(&mut job.throttled, true) {
                    out.push(throttled(id, wait.clone(), now));
                }
                Err(Some(wait))
            }
        }
    }
}

/// The earlier of two times to wake; a wait with no time changes nothing.
pub(super) fn earliest(current: Option<Instant>, until: Option<Instant>) -> Option<Instant> {
    match (current, until) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The decision that tells a job's run it waits for `wait`.
pub(super) fn throttled<T>(id: &JobId, wait: Wait, now: Instant) -> Decision<T> {
    Decision::Throttled {
        job: id.clone(),
        limit: wait.limit,
        wait: wait.until.map(|until| until.saturating_duration_since(now)),
        keyed: false,
    }
}
