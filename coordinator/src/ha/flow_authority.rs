//! The group's flow authority as a task: the pure
//! [`FlowAuthority`] driven by one actor on the leader of partition 0,
//! started when that partition is served here and stopped with it (its
//! members then find the next leader and declare what they hold there).
//!
//! Members reach it through `GroupService.Flow` (`crate::grpc::group_flow`),
//! each connection a [`MemberId`] whose answers go back on its own
//! channel. The actor wakes when a limit's window lets a waiting ask go.
//! A new authority waits for the members the group lists as it starts to
//! declare what they hold (at most two leases) before it grants anything.
//! The limits' windows are kept in the store (partition 0's writes,
//! fenced) at most a second after they change, and a new authority
//! starts from them, as a lone leader's failover does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::membership::GroupView;
use crate::dispatch::group_flow::{Answer, FlowAuthority, MemberId};
use crate::dispatch::group_gate::ToAuthority;
use crate::dispatch::limits::{LimitSpec, RateLimits};
use crate::durable::Keeper;
use crate::term::flow_state::{self, FlowState};

/// What the actor is told.
enum Command {
    Connect {
        name: String,
        answers: mpsc::UnboundedSender<Answer>,
        reply: oneshot::Sender<MemberId>,
    },
    Request {
        member: MemberId,
        request: ToAuthority,
    },
    Gone {
        member: MemberId,
    },
}

/// The running authority.
#[derive(Clone)]
pub struct AuthorityHandle {
    tx: mpsc::UnboundedSender<Command>,
}

/// Where the authority is found while partition 0 is led here.
#[derive(Clone)]
pub struct AuthoritySlot {
    running: Arc<Mutex<Option<AuthorityHandle>>>,
    /// The group, whose members a new authority waits for.
    view: watch::Receiver<GroupView>,
    /// The group's lease: a new authority waits at most two for members
    /// to declare what they hold.
    lease: Duration,
}

impl AuthoritySlot {
    /// No authority yet, in the group seen through `view`.
    pub fn new(view: watch::Receiver<GroupView>, lease: Duration) -> Self {
        Self {
            running: Arc::default(),
            view,
            lease,
        }
    }

    /// The authority, while it runs here.
    pub fn get(&self) -> Option<AuthorityHandle> {
        let slot = self.running.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().filter(|h| !h.tx.is_closed()).cloned()
    }

    /// Starts the authority over `limits`, the namespaces' `caps` on runs
    /// going and their day budgets; it stops when `stop` is cancelled
    /// (partition 0 drained or abandoned).
    pub fn start(
        &self,
        limits: Vec<LimitSpec>,
        caps: std::collections::HashMap<String, u32>,
        days: crate::day_spend::DaySpend,
        keeper: Keeper,
        stop: CancellationToken,
        tracker: &TaskTracker,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let now = std::time::Instant::now();
        let members = self.view.borrow().members.values().cloned().collect();
        let authority = FlowAuthority::new(RateLimits::new(limits, now))
            .recounting(members, now + self.lease * 2)
            .with_runs(caps, days);
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(AuthorityHandle { tx });
        let slot = self.clone();
        tracker.spawn(async move {
            run(authority, rx, keeper, stop).await;
            slot.running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            tracing::info!("the group's flow authority stopped here");
        });
        tracing::info!("the group's flow authority runs here (partition 0 is led here)");
    }
}

impl AuthorityHandle {
    /// Member `name` (its URL) connected: its number, and where its
    /// answers come.
    pub async fn connect(
        &self,
        name: String,
    ) -> Option<(MemberId, mpsc::UnboundedReceiver<Answer>)> {
        let (answers, rx) = mpsc::unbounded_channel();
        let (reply, member) = oneshot::channel();
        self.tx
            .send(Command::Connect {
                name,
                answers,
                reply,
            })
            .ok()?;
        Some((member.await.ok()?, rx))
    }

    /// `member` asks, settles or releases.
    pub fn request(&self, member: MemberId, request: ToAuthority) {
        let _ = self.tx.send(Command::Request { member, request });
    }

    /// `member`'s connection ended.
    pub fn gone(&self, member: MemberId) {
        let _ = self.tx.send(Command::Gone { member });
    }
}

async fn run(
    mut authority: FlowAuthority,
    mut rx: mpsc::UnboundedReceiver<Command>,
    keeper: Keeper,
    stop: CancellationToken,
) {
    // The windows the last authority (or lone leader) kept: started from,
    // erring on the side of waiting.
    let mut kept = FlowState::default();
    if let Some(state) = flow_state::read(&keeper).await {
        tracing::info!(
            limits = state.limits.len(),
            "the group's limits start from the windows the last authority kept"
        );
        authority
            .rates()
            .restore(&state.limits, std::time::Instant::now());
        authority.days().restore(state.days.clone());
        kept = state;
    }
    let mut ticks = tokio::time::interval(flow_state::EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut members: foldhash::HashMap<MemberId, (String, mpsc::UnboundedSender<Answer>)> =
        Default::default();
    let mut last = 0;
    loop {
        let wake = authority.wake();
        let answers = tokio::select! {
            () = stop.cancelled() => break,
            _ = ticks.tick() => {
                let windows = authority.rates().windows(std::time::Instant::now());
                let days = authority.days().snapshot();
                if windows != kept.limits || days != kept.days {
                    let state = FlowState { limits: windows, days };
                    match flow_state::write(&keeper, &state).await {
                        Ok(()) => kept = state,
                        Err(error) => tracing::warn!(%error, "the group's limits' windows were not kept; trying again"),
                    }
                }
                Vec::new()
            }
            () = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => authority.tick(std::time::Instant::now()),
            command = rx.recv() => {
                let Some(command) = command else { break };
                let now = std::time::Instant::now();
                match command {
                    Command::Connect { name, answers, reply } => {
                        last += 1;
                        members.insert(last, (name, answers));
                        let _ = reply.send(last);
                        Vec::new()
                    }
                    Command::Request { member, request } => match request {
                        ToAuthority::Ask(ask) => authority.ask(member, ask, now),
                        ToAuthority::Settle { ticket, call } => {
                            authority.settle(member, ticket, &call, now)
                        }
                        ToAuthority::Release(ticket) => authority.release(member, ticket, now),
                        ToAuthority::Declared => match members.get(&member) {
                            Some((name, _)) => authority.declared(&name.clone(), now),
                            None => Vec::new(),
                        },
                        ToAuthority::AdmitRun { ticket, namespace } => {
                            authority.admit_run(member, ticket, namespace, now_ms())
                        }
                        ToAuthority::Going { partition, revision, counts } => {
                            authority.report_going(partition, revision, counts.into_iter().collect());
                            Vec::new()
                        }
                        ToAuthority::Spent { namespace, tokens, cost } => {
                            authority.spend(&namespace, tokens, cost, now_ms());
                            Vec::new()
                        }
                    },
                    Command::Gone { member } => {
                        members.remove(&member);
                        authority.gone(member, now)
                    }
                }
            }
        };
        for (member, answer) in answers {
            if let Some((_, answers)) = members.get(&member) {
                let _ = answers.send(answer);
            }
        }
    }
}

/// Milliseconds since 1970, for the day budgets.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}
