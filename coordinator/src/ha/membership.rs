//! A coordinator's part in a partitioned group: its session, its member
//! key, the group read from the store, the pure core
//! ([`weft_partitions::Member`]) driven by what it reads, and the core's
//! commands carried out — lease keys created and deleted on the store,
//! partitions served, drained and abandoned by a [`Runtime`].
//!
//! Everything lives under one prefix, [`GROUP_PREFIX`], so one read gives
//! one consistent holding at one revision:
//!
//! - `group/count`: the partition count, written by the group's first
//!   coordinator; a coordinator configured with another count is refused
//!   ([`fix_count`]);
//! - `group/members/<id>`: one per live coordinator, under its session
//!   lease, holding its advertised URL; the id is the lease's, so a
//!   coordinator that lost its session comes back as a new member;
//! - `group/partitions/<00000>`: a partition's lease key, created only
//!   where none is, under its leader's session lease, holding the leader's
//!   id. Its create revision is the partition's fence: every write for the
//!   partition's runs is conditional on it.
//!
//! A coordinator re-reads the group whenever its watch of the prefix says
//! something changed, and every third of the lease's time to live (a watch
//! can break; the embedded store expires leases when it is next used), and
//! once more after each answer of its own (an acquire, a drain, a release:
//! what it may do next depends on them, while the group may show no
//! change at all), and drops a read older than one it has already acted
//! on. A crashed
//! coordinator's keys go with its session lease: its partitions are free,
//! and taken, within one time to live.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use weft_partitions::{Command, Holder, Holding, Input, Member, MemberId, View};
pub use weft_partitions::{PartitionError, PartitionId, Partitioning};
use weft_store::{AnyStore, Entry, Fence, LeaseId, Revision, Store, StoreError};

use super::election::{self, Term};
use crate::metrics::{HAND_OVER_SECONDS, HAND_OVERS, PARTITIONS_ABANDONED, PARTITIONS_LED};
use crate::term::LeaseClock;

/// The prefix every key of a partitioned group lives under.
pub const GROUP_PREFIX: &str = "group/";
const COUNT_KEY: &str = weft_store::GROUP_COUNT_KEY;
const MEMBERS: &str = weft_store::GROUP_MEMBERS;
const HOLDERS: &str = "group/partitions/";

/// A partition's lease key: fixed-width, so no key is a prefix of another.
pub fn holder_key(partition: PartitionId) -> String {
    format!("{HOLDERS}{:05}", partition.0)
}

fn member_key(id: &MemberId) -> String {
    format!("{MEMBERS}{id}")
}

/// Why a coordinator cannot take part in its group.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The configured partition count is not the group's.
    #[error(transparent)]
    Partitions(#[from] PartitionError),
    /// `group/count` holds something that is not a count.
    #[error("the store's '{COUNT_KEY}' holds {0:?}, not a partition count")]
    Corrupt(String),
    /// The group's key is kept empty.
    #[error("the store's '{KEY_KEY}' holds no key")]
    NoKey,
}

/// Fixes the group's partition count on first use; refuses a count that
/// differs from the one the group's store was created with, naming both.
pub async fn fix_count(store: &AnyStore, partitioning: Partitioning) -> Result<(), GroupError> {
    let configured = partitioning.count();
    let text = configured.to_string().into_bytes();
    if store.create(COUNT_KEY, text, None).await?.is_some() {
        return Ok(());
    }
    let stored = store
        .get(COUNT_KEY)
        .await?
        .map(|entry| String::from_utf8_lossy(&entry.value).into_owned())
        .unwrap_or_default();
    let stored = stored
        .parse::<u32>()
        .map_err(|_| GroupError::Corrupt(stored))?;
    partitioning.against_store(Some(stored))?;
    Ok(())
}

/// Where the group's key is kept: what a member shows another's group
/// service (`crate::grpc::group_flow`). Outside the membership's prefix,
/// so the membership never reads it.
const KEY_KEY: &str = "flow/group-key";

/// The group's key: made by the first member to ask (two random UUIDs),
/// read by the others.
pub async fn group_key(store: &AnyStore) -> Result<std::sync::Arc<str>, GroupError> {
    let made = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    if store
        .create(KEY_KEY, made.clone().into_bytes(), None)
        .await?
        .is_some()
    {
        return Ok(made.into());
    }
    let kept = store
        .get(KEY_KEY)
        .await?
        .map(|entry| String::from_utf8_lossy(&entry.value).into_owned())
        .unwrap_or_default();
    if kept.is_empty() {
        return Err(GroupError::NoKey);
    }
    Ok(kept.into())
}

/// What serves the partitions a coordinator leads.
pub trait Runtime: Send + Sync + 'static {
    /// Serves `partition`: restores its runs and takes work for them, every
    /// write fenced on `fence`. What it starts stops, without writing, when
    /// `abandoned` is cancelled (another coordinator leads it now).
    fn serve(
        &self,
        partition: PartitionId,
        fence: Fence,
        abandoned: CancellationToken,
    ) -> impl Future<Output = ()> + Send;

    /// Stops serving `partition` for a hand-over: takes no more work for
    /// it, stops its run actors and checkpoints them; returns once done.
    fn drain(&self, partition: PartitionId) -> impl Future<Output = ()> + Send;
}

/// How a coordinator takes part.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// The group's partitions.
    pub partitioning: Partitioning,
    /// This coordinator's advertised URL, kept in its member key.
    pub url: String,
    /// The session lease's time to live.
    pub ttl: Duration,
}

/// Takes part in the group until `leave` is cancelled, then hands every
/// partition over (drained, checkpointed, released) and leaves; `seen`
/// is told the group as each newer read shows it. A session
/// lost (its lease expired while the process was paused or cut off)
/// abandons what it led and starts another. Fails only when the partition
/// count is refused.
pub async fn take_part(
    store: AnyStore,
    settings: GroupSettings,
    runtime: Arc<impl Runtime>,
    leave: CancellationToken,
    seen: watch::Sender<GroupView>,
) -> Result<(), GroupError> {
    let mut pause = Duration::from_millis(100);
    // A store that does not answer yet is waited for; a count that is not
    // the group's is final.
    while let Err(error) = fix_count(&store, settings.partitioning).await {
        let GroupError::Store(error) = error else {
            return Err(error);
        };
        tracing::warn!(%error, "the group's partition count cannot be read yet; trying again");
        if back_off(&mut pause, settings.ttl, &leave).await {
            return Ok(());
        }
    }
    let mut pause = Duration::from_millis(100);
    loop {
        match session(&store, &settings, &runtime, &leave, &seen).await {
            Ok(Ended::Left) => return Ok(()),
            Ok(Ended::Lost) => {
                tracing::warn!("the group session was lost: partitions abandoned, joining again");
            }
            Err(error) => {
                tracing::warn!(%error, "the group session failed; joining again");
                if back_off(&mut pause, settings.ttl, &leave).await {
                    return Ok(());
                }
            }
        }
        if leave.is_cancelled() {
            return Ok(());
        }
    }
}

enum Ended {
    Left,
    Lost,
}

/// What a request or order sent off answers.
enum Answer {
    Acquired(PartitionId, Revision),
    Refused(PartitionId),
    Drained(PartitionId),
    Released(PartitionId),
    Lost,
}

/// An order for the runtime, carried out one after another.
enum Order {
    Serve(PartitionId, Fence, CancellationToken),
    Drain(PartitionId),
}

/// One session: a member from joining until it leaves or loses its lease.
async fn session(
    store: &AnyStore,
    settings: &GroupSettings,
    runtime: &Arc<impl Runtime>,
    leave: &CancellationToken,
    seen_group: &watch::Sender<GroupView>,
) -> Result<Ended, StoreError> {
    // Watching before joining, and before the first read: no change is
    // missed, and once joined nothing ends the session but its lease (a
    // member that failed after joining would stay listed, leading
    // nothing, until its lease ran out).
    let mut changes = store.watch(GROUP_PREFIX).await?;
    let lease = store.grant_lease(settings.ttl).await?;
    let id = MemberId(format!("{lease:016x}"));
    let key = member_key(&id);
    let Some(revision) = store
        .create(&key, settings.url.as_bytes().to_vec(), Some(lease))
        .await?
    else {
        let _ = store.revoke(lease).await;
        return Err(StoreError::Etcd(format!("member key {key} exists already")));
    };
    tracing::info!(member = %id, url = %settings.url, "joined the group");
    // Dropped with the session: its tasks end with it.
    let mut tasks = JoinSet::new();
    let ended = CancellationToken::new();
    let _stop = ended.clone().drop_guard();
    let (answers, mut answered) = mpsc::unbounded_channel();
    let term = Term {
        fence: Fence { key, revision },
        lease,
    };
    // Apart from the other tasks: on leaving, it is awaited while it gives
    // the session up.
    let mut holding_session = JoinSet::new();
    holding_session.spawn({
        let (store, answers, stop) = (store.clone(), answers.clone(), ended.clone());
        let clock = LeaseClock::new(settings.ttl);
        async move {
            if election::hold(store, term, clock, stop).await {
                let _ = answers.send(Answer::Lost);
            }
        }
    });
    let (orders, mut ordered) = mpsc::unbounded_channel::<Order>();
    tasks.spawn({
        let (runtime, answers) = (runtime.clone(), answers.clone());
        async move {
            while let Some(order) = ordered.recv().await {
                match order {
                    Order::Serve(partition, fence, abandoned) => {
                        runtime.serve(partition, fence, abandoned).await;
                    }
                    Order::Drain(partition) => {
                        runtime.drain(partition).await;
                        let _ = answers.send(Answer::Drained(partition));
                    }
                }
            }
        }
    });
    let mut group = Group {
        store: store.clone(),
        member: Member::new(id),
        lease,
        answers,
        orders,
        served: HashMap::new(),
        draining: HashMap::new(),
        ended: ended.clone(),
        leaving: false,
        left: false,
    };
    let mut seen: Revision = 0;
    // The group is read at the start and after every event: a change the
    // watch reports, a tick, a leave, an answer of its own.
    loop {
        // A read that fails is tried again at the next change or tick:
        // only the session's lease decides whether this member is in.
        match store.scan_at(GROUP_PREFIX).await {
            // A read as new as the last one acted on is acted on
            // again: this member's own state may have moved since.
            Ok((entries, revision)) if revision >= seen => {
                seen = revision;
                let (group_view, holding) =
                    GroupView::read(&entries, revision, settings.partitioning);
                let view = View::new(settings.partitioning, holding);
                let commands = group.member.step(Input::Viewed(&view));
                group.carry_out(commands, &mut tasks);
                seen_group.send_replace(group_view);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reading the group failed"),
        }
        if group.left {
            // Gives the session up: the member key goes at once.
            while holding_session.join_next().await.is_some() {}
            return Ok(Ended::Left);
        }
        tokio::select! {
            () = leave.cancelled(), if !group.leaving => {
                group.leaving = true;
                let commands = group.member.step(Input::Leave);
                group.carry_out(commands, &mut tasks);
            }
            change = changes.recv() => match change {
                Some(_) => while changes.try_recv().is_ok() {},
                None => {
                    match store.watch(GROUP_PREFIX).await {
                        Ok(watch) => changes = watch,
                        Err(error) => {
                            tracing::warn!(%error, "watching the group failed");
                            tokio::time::sleep(settings.ttl / 6).await;
                        }
                    }
                }
            },
            () = tokio::time::sleep(settings.ttl / 3) => {}
            Some(answer) = answered.recv() => {
                // Every answer already in is taken before the next read.
                let mut next = Some(answer);
                while let Some(answer) = next {
                    let input = match answer {
                        Answer::Lost => {
                            let commands = group.member.step(Input::Lost);
                            group.carry_out(commands, &mut tasks);
                            return Ok(Ended::Lost);
                        }
                        Answer::Acquired(partition, fence) => Input::Acquired {
                            partition,
                            fence: fence as u64,
                        },
                        Answer::Refused(partition) => Input::Refused(partition),
                        Answer::Drained(partition) => Input::Drained(partition),
                        Answer::Released(partition) => Input::Released(partition),
                    };
                    let commands = group.member.step(input);
                    group.carry_out(commands, &mut tasks);
                    next = answered.try_recv().ok();
                }
                // What it may do next is decided on a view, read again
                // at the loop's top: a hand-over planned for a partition
                // whose acquire had not yet been answered waits for one,
                // and the group may change no more (everyone waiting on
                // this member).
            }
        }
    }
}

/// A session's state beside its core.
struct Group {
    store: AnyStore,
    member: Member,
    lease: LeaseId,
    answers: mpsc::UnboundedSender<Answer>,
    orders: mpsc::UnboundedSender<Order>,
    /// Each served partition's token, cancelled when it is abandoned.
    served: HashMap<PartitionId, CancellationToken>,
    /// When each partition being handed over began to drain.
    draining: HashMap<PartitionId, Instant>,
    ended: CancellationToken,
    /// Asked to leave.
    leaving: bool,
    /// Every partition handed over.
    left: bool,
}

impl Group {
    /// Stops serving `partition` (its token cancelled); whether it was.
    fn stop_serving(&mut self, partition: PartitionId) -> bool {
        let Some(served) = self.served.remove(&partition) else {
            return false;
        };
        served.cancel();
        metrics::gauge!(PARTITIONS_LED).decrement(1.0);
        true
    }

    fn carry_out(&mut self, commands: Vec<Command>, tasks: &mut JoinSet<()>) {
        for command in commands {
            match command {
                Command::Acquire(partition) => {
                    let (store, answers) = (self.store.clone(), self.answers.clone());
                    let (id, lease) = (self.member.id().0.clone(), self.lease);
                    tasks.spawn(async move {
                        let key = holder_key(partition);
                        let answer = match store.create(&key, id.into_bytes(), Some(lease)).await {
                            Ok(Some(fence)) => Answer::Acquired(partition, fence),
                            Ok(None) => Answer::Refused(partition),
                            // Created or not: a later read shows it, and
                            // the core gives back one held unknowingly.
                            Err(error) => {
                                tracing::warn!(%error, %partition, "asking for a partition failed");
                                Answer::Refused(partition)
                            }
                        };
                        let _ = answers.send(answer);
                    });
                }
                Command::Serve { partition, fence } => {
                    tracing::info!(%partition, fence, "leading");
                    let abandoned = self.ended.child_token();
                    if self.served.insert(partition, abandoned.clone()).is_none() {
                        metrics::gauge!(PARTITIONS_LED).increment(1.0);
                    }
                    let fence = Fence {
                        key: holder_key(partition),
                        revision: fence as Revision,
                    };
                    let _ = self.orders.send(Order::Serve(partition, fence, abandoned));
                }
                Command::Drain(partition) => {
                    tracing::info!(%partition, "handing over: draining");
                    self.draining.insert(partition, Instant::now());
                    let _ = self.orders.send(Order::Drain(partition));
                }
                Command::Release { partition, fence } => {
                    // A hand-over is counted as its release is sent: the
                    // member may see it done (in a read) before the answer.
                    if let Some(began) = self.draining.remove(&partition) {
                        metrics::counter!(HAND_OVERS).increment(1);
                        metrics::histogram!(HAND_OVER_SECONDS)
                            .record(began.elapsed().as_secs_f64());
                    }
                    self.stop_serving(partition);
                    let (store, answers) = (self.store.clone(), self.answers.clone());
                    let ended = self.ended.clone();
                    tasks.spawn(async move {
                        release(&store, partition, fence as Revision, &ended).await;
                        let _ = answers.send(Answer::Released(partition));
                    });
                }
                Command::Abandon(partition) => {
                    tracing::warn!(%partition, "another coordinator leads it now: abandoned");
                    self.draining.remove(&partition);
                    if self.stop_serving(partition) {
                        metrics::counter!(PARTITIONS_ABANDONED).increment(1);
                    }
                }
                Command::Left => {
                    self.left = true;
                    self.ended.cancel();
                }
            }
        }
    }
}

/// Deletes a partition's lease key while it still has `fence`; tried again
/// until it is gone or the session ends (then the lease takes it).
async fn release(
    store: &AnyStore,
    partition: PartitionId,
    fence: Revision,
    ended: &CancellationToken,
) {
    let key = holder_key(partition);
    let held = Fence {
        key: key.clone(),
        revision: fence,
    };
    let mut pause = Duration::from_millis(50);
    loop {
        match store.delete_prefix(&key, Some(&held)).await {
            Ok(()) | Err(StoreError::Fenced { .. }) => return,
            Err(error) => {
                tracing::warn!(%error, %partition, "releasing a partition failed; trying again");
            }
        }
        if back_off(&mut pause, Duration::from_secs(1), ended).await {
            return;
        }
    }
}

/// Waits `pause` before trying again, doubling it up to `max`; true when
/// `stop` came first (nothing more to try).
pub(super) async fn back_off(
    pause: &mut Duration,
    max: Duration,
    stop: &CancellationToken,
) -> bool {
    tokio::select! {
        () = stop.cancelled() => return true,
        () = tokio::time::sleep(*pause) => {}
    }
    *pause = (*pause * 2).min(max);
    false
}

/// The group as a coordinator last read it: who is in it, and who leads
/// each partition — what forwarding by run id and workers looking for
/// every leader go by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupView {
    /// The store's revision it was read at.
    pub revision: Revision,
    /// Each live member's advertised URL, by member id.
    pub members: BTreeMap<String, String>,
    /// Each led partition's leader's URL.
    pub leaders: BTreeMap<PartitionId, String>,
}

/// A session's partitions stop being led with it, however it ends.
impl Drop for Group {
    fn drop(&mut self) {
        let led = self.served.len();
        if led > 0 {
            metrics::gauge!(PARTITIONS_LED).decrement(led as f64);
            metrics::counter!(PARTITIONS_ABANDONED).increment(led as u64);
        }
    }
}

impl GroupView {
    /// The group as `entries` under [`GROUP_PREFIX`] read at `revision`
    /// say, with the pure core's holding of it.
    fn read(entries: &[Entry], revision: Revision, partitioning: Partitioning) -> (Self, Holding) {
        let mut view = Self {
            revision,
            ..Self::default()
        };
        let mut holding = Holding {
            revision: revision as u64,
            ..Holding::default()
        };
        for entry in entries {
            if let Some(id) = entry.key.strip_prefix(MEMBERS) {
                let url = String::from_utf8_lossy(&entry.value).into_owned();
                view.members.insert(id.to_owned(), url);
                holding.members.insert(MemberId(id.to_owned()));
            }
        }
        for entry in entries {
            if let Some(number) = entry.key.strip_prefix(HOLDERS)
                && let Ok(number) = number.parse::<u32>()
                && number < partitioning.count()
            {
                let partition = PartitionId(number);
                let id = String::from_utf8_lossy(&entry.value).into_owned();
                if let Some(url) = view.members.get(&id) {
                    view.leaders.insert(partition, url.clone());
                }
                holding.holders.insert(
                    partition,
                    Holder {
                        member: MemberId(id),
                        fence: entry.create_revision as u64,
                    },
                );
            }
        }
        (view, holding)
    }

    /// The URL of the coordinator leading `partition`, if one does.
    pub fn leader_of(&self, partition: PartitionId) -> Option<&str> {
        self.leaders.get(&partition).map(String::as_str)
    }

    /// The partitions each member leads, by URL (a member leading none
    /// with none).
    pub fn led_by(&self) -> BTreeMap<String, Vec<PartitionId>> {
        let mut led: BTreeMap<String, Vec<PartitionId>> = self
            .members
            .values()
            .map(|url| (url.clone(), Vec::new()))
            .collect();
        for (partition, url) in &self.leaders {
            led.entry(url.clone()).or_default().push(*partition);
        }
        led
    }
}

/// The group as it stands now in `store`.
pub async fn read_group(
    store: &AnyStore,
    partitioning: Partitioning,
) -> Result<GroupView, StoreError> {
    let (entries, revision) = store.scan_at(GROUP_PREFIX).await?;
    Ok(GroupView::read(&entries, revision, partitioning).0)
}
