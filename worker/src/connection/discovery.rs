//! Where a worker finds its coordinators: at a fixed URL (`--coordinator`),
//! or in etcd (`--etcd`) — the leader of a group of coordinators, read
//! from the leader key before each connection (a standby coordinator
//! refuses a worker with the leader's URL; the worker joins there next),
//! or, for a group whose runs are split into partitions, every member,
//! listed under the group's members prefix, each served at once.

use std::time::Duration;

use tonic::transport::Endpoint;
use weft_proto::transport::ClientTls;
use weft_store::{EtcdStore, GROUP_COUNT_KEY, GROUP_MEMBERS, LEADER_KEY, Store};

use super::Lost;
use crate::config::WorkerConfig;
use crate::error::WorkerError;

/// How a worker looks for its coordinator.
pub(crate) enum Finder {
    /// Always the same URL.
    Fixed(Box<Endpoint>),
    /// The leader named in etcd, reached with these TLS settings.
    Leader(EtcdStore, ClientTls),
    /// Every member of a partitioned group listed in etcd, each served
    /// (and reached with the worker's TLS settings, as a redirect is).
    Members(EtcdStore),
}

impl Finder {
    /// The finder `config` asks for; a malformed URL is refused here.
    pub(crate) fn new(config: &WorkerConfig) -> Result<Self, WorkerError> {
        if config.etcd.is_empty() {
            return endpoint(&config.coordinator, &config.tls).map(|e| Self::Fixed(Box::new(e)));
        }
        EtcdStore::connect_with(&config.etcd, &config.etcd_tls)
            .map(|store| Self::Leader(store, config.tls.clone()))
            .map_err(|e| WorkerError::BadUrl {
                url: config.etcd.join(","),
                reason: e.to_string(),
            })
    }

    /// The longest pause between connection attempts: a group's leader is
    /// looked up in etcd often (one key read), so a failover is noticed
    /// within half a second; a lone coordinator is not hammered.
    pub(crate) fn max_backoff(&self) -> Duration {
        match self {
            Self::Fixed(_) => Duration::from_secs(5),
            Self::Leader(..) | Self::Members(..) => Duration::from_millis(500),
        }
    }

    /// Where to connect now, or why there is nowhere yet. A group that
    /// names no leader but has a partition count is a partitioned one:
    /// [`Lost::Partitioned`] tells the worker to serve every member.
    pub(super) async fn find(&self) -> Result<Endpoint, Lost> {
        match self {
            Self::Fixed(endpoint) => Ok((**endpoint).clone()),
            Self::Leader(store, tls) => match store.get(LEADER_KEY).await {
                Ok(Some(leader)) => {
                    let url = String::from_utf8_lossy(&leader.value).into_owned();
                    endpoint(&url, tls).map_err(Lost::BadUrl)
                }
                Ok(None) => match store.get(GROUP_COUNT_KEY).await {
                    Ok(Some(_)) => Err(Lost::Partitioned),
                    Ok(None) => Err(Lost::NoLeader),
                    Err(error) => Err(Lost::Etcd(error)),
                },
                Err(error) => Err(Lost::Etcd(error)),
            },
            // A member is always joined at its own URL.
            Self::Members(..) => Err(Lost::NoLeader),
        }
    }

    /// The same etcd, read for every member of a partitioned group.
    pub(crate) fn for_members(&self) -> Option<Self> {
        match self {
            Self::Leader(store, _) => Some(Self::Members(store.clone())),
            Self::Fixed(_) | Self::Members(_) => None,
        }
    }

    /// The URLs of a partitioned group's members, as etcd lists them now.
    pub(crate) async fn members(&self) -> Result<Vec<String>, Lost> {
        let Self::Members(store) = self else {
            return Ok(Vec::new());
        };
        let listed = store.scan(GROUP_MEMBERS).await.map_err(Lost::Etcd)?;
        let mut urls: Vec<String> = listed
            .into_iter()
            .map(|entry| {
                let url = String::from_utf8_lossy(&entry.value);
                url.trim_end_matches('/').to_owned()
            })
            .collect();
        urls.sort();
        urls.dedup();
        Ok(urls)
    }
}

impl Finder {
    /// Resolves once the coordinator at `url` no longer leads by etcd's
    /// word (never, for a fixed URL): a worker stops waiting on a leader
    /// that was replaced while it tried to join.
    pub(super) async fn moved_from(&self, url: &str) {
        self.moved_from_every(url, LEADER_POLL).await;
    }

    /// [`Finder::moved_from`], asking etcd every `period`: a session
    /// asks less often than a join, one read a second per worker.
    /// A partitioned group's member is left once etcd no longer lists it.
    pub(crate) async fn moved_from_every(&self, url: &str, period: Duration) {
        let url = url.trim_end_matches('/');
        if let Self::Fixed(_) = self {
            return std::future::pending().await;
        }
        loop {
            tokio::time::sleep(period).await;
            if matches!(self.still_at(url).await, Ok(false)) {
                return;
            }
        }
    }

    /// Whether etcd still names `url`: as the leader, or as a member.
    async fn still_at(&self, url: &str) -> Result<bool, Lost> {
        match self {
            Self::Fixed(_) => Ok(true),
            Self::Members(..) => Ok(self.members().await?.iter().any(|member| member == url)),
            Self::Leader(store, _) => match store.get(LEADER_KEY).await {
                Ok(leader) => Ok(leader.is_some_and(|l| l.value.as_slice() == url.as_bytes())),
                Err(error) => Err(Lost::Etcd(error)),
            },
        }
    }
}

/// How often a joining worker checks that its coordinator still leads.
const LEADER_POLL: Duration = Duration::from_millis(250);

/// A coordinator's endpoint, with TLS for an `https://` URL.
pub(super) fn endpoint(url: &str, tls: &ClientTls) -> Result<Endpoint, WorkerError> {
    weft_proto::transport::endpoint(url, tls).map_err(|e| WorkerError::BadUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

/// The leader a standby coordinator's refusal names, if it names one.
pub(super) fn redirect(status: &tonic::Status) -> Option<String> {
    if status.code() != tonic::Code::Unavailable {
        return None;
    }
    let url = status
        .metadata()
        .get(weft_proto::LEADER_METADATA)?
        .to_str()
        .ok()?;
    Some(url.to_owned())
}
