//! What a member of a partitioned group serves with: the coordinator's
//! own dispatcher, bundle files and knowledge indexes, the registries of
//! the partitions it leads ([`PartitionRuns`]), and the group as it last
//! read it ([`GroupView`]), by which a request for a run of a partition
//! led elsewhere is forwarded to that partition's leader.
//!
//! A member takes workers itself (every member does: workers serve them
//! all, sharing their slots), answers for the runs of its partitions, and
//! makes new runs in them; everything else goes by the view.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::membership::{GroupView, PartitionId};
use super::partition_runs::PartitionRuns;
use crate::access::RunAccess;
use crate::bundle::BlobStore;
use crate::dispatch::DispatcherHandle;
use crate::indexes::SharedIndexes;

/// A member's services; see the module docs.
pub struct Member {
    /// The registries of the partitions it leads.
    pub partitions: PartitionRuns,
    /// The group as last read: members and each partition's leader.
    pub view: watch::Receiver<GroupView>,
    /// Its own URL, as the group lists it.
    pub url: String,
    /// Its dispatcher, which the workers' streams feed.
    pub dispatcher: DispatcherHandle,
    /// The bundle files workers fetch.
    pub blobs: BlobStore,
    /// The knowledge indexes workers share.
    pub indexes: SharedIndexes,
    /// Largest bundle a submission may carry.
    pub max_bundle_bytes: usize,
    /// Largest task result taken from a worker.
    pub max_result_bytes: usize,
    /// How often workers beat.
    pub heartbeat: Duration,
    /// How long a silent worker keeps its tasks.
    pub worker_timeout: Duration,
    /// Where workers' streams run.
    pub tracker: TaskTracker,
    /// Cancelled when the member stops.
    pub ended: CancellationToken,
    /// The group's key, which members show one another's group service.
    pub group_key: std::sync::Arc<str>,
    /// The group's flow authority, while partition 0 is led here.
    pub authority: super::flow_authority::AuthoritySlot,
}

impl Member {
    /// Run `id`'s access, when its partition is led here.
    pub fn access(&self, id: &str) -> Option<RunAccess> {
        self.partitions.access(id, self.max_bundle_bytes)
    }

    /// Access to a partition led here for a new run, in turn; `None`
    /// while none is.
    pub fn access_for_new_run(&self) -> Option<RunAccess> {
        self.partitions.access_for_new_run(self.max_bundle_bytes)
    }

    /// The URL of the other member that leads run `id`'s partition, if
    /// one does by the last view (this one, about to serve it, is none).
    pub fn leader_of(&self, id: &str) -> Option<String> {
        let partition = self.partitions.partition_of(id);
        let view = self.view.borrow();
        let url = view.leaders.get(&partition)?;
        (!same_url(url, &self.url)).then(|| url.clone())
    }

    /// Another member that leads a partition, for a new run when none is
    /// led here: the one that leads the most (the view's first on a tie).
    pub fn another_leader(&self) -> Option<String> {
        let view = self.view.borrow();
        let mut led: std::collections::BTreeMap<&str, usize> = Default::default();
        for url in view.leaders.values() {
            if !same_url(url, &self.url) {
                *led.entry(url.as_str()).or_default() += 1;
            }
        }
        led.into_iter()
            .max_by_key(|(url, count)| (*count, std::cmp::Reverse(*url)))
            .map(|(url, _)| url.to_owned())
    }

    /// The other members' URLs, by the last view.
    pub fn others(&self) -> Vec<String> {
        let view = self.view.borrow();
        let mut urls: Vec<String> = view
            .members
            .values()
            .filter(|url| !same_url(url, &self.url))
            .cloned()
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }

    /// Resolves when the group's view changes (a partition led
    /// elsewhere now, a member joined or left) or a partition led here has
    /// its runs restored.
    pub fn view_changed(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut view = self.view.clone();
        view.mark_unchanged();
        let restored = self.partitions.restores();
        async move {
            tokio::select! {
                _ = view.changed() => {}
                () = restored => {}
            }
        }
    }

    /// The partition run `id` lives in.
    pub fn partition_of(&self, id: &str) -> u32 {
        self.partitions.partition_of(id).0
    }

    /// Each other member's URL with the partitions the last view names it
    /// leader of, and the partitions nobody leads at the moment.
    pub fn led_elsewhere(&self) -> (BTreeMap<String, Vec<u32>>, Vec<u32>) {
        // Before the view is borrowed: `others` borrows it too.
        let mut led: BTreeMap<String, Vec<u32>> = self
            .others()
            .into_iter()
            .map(|url| (url, Vec::new()))
            .collect();
        let view = self.view.borrow();
        let mut unled = Vec::new();
        for partition in 0..self.partitions.count() {
            match view.leaders.get(&PartitionId(partition)) {
                Some(url) if same_url(url, &self.url) => {}
                Some(url) => led.entry(url.clone()).or_default().push(partition),
                None => unled.push(partition),
            }
        }
        (led, unled)
    }

    /// Whether run `id`'s partition is led here, its runs still being
    /// restored.
    pub fn restoring(&self, id: &str) -> bool {
        self.partitions.restoring(id)
    }
}

/// Whether two URLs name one coordinator (a trailing slash aside).
fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}
