//! Where a worker finds its coordinator: at a fixed URL (`--coordinator`),
//! or as the leader of a group of coordinators, read from etcd's leader key
//! before each connection (`--etcd`). A standby coordinator refuses a
//! worker with the leader's URL; the worker joins there next.

use std::time::Duration;

use tonic::transport::Endpoint;
use weft_proto::transport::ClientTls;
use weft_store::{EtcdStore, LEADER_KEY, Store};

use super::Lost;
use crate::config::WorkerConfig;
use crate::error::WorkerError;

/// How a worker looks for its coordinator.
pub(crate) enum Finder {
    /// Always the same URL.
    Fixed(Box<Endpoint>),
    /// The leader named in etcd, reached with these TLS settings.
    Leader(EtcdStore, ClientTls),
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
            Self::Leader(..) => Duration::from_millis(500),
        }
    }

    /// Where to connect now, or why there is nowhere yet.
    pub(super) async fn find(&self) -> Result<Endpoint, Lost> {
        match self {
            Self::Fixed(endpoint) => Ok((**endpoint).clone()),
            Self::Leader(store, tls) => match store.get(LEADER_KEY).await {
                Ok(Some(leader)) => {
                    let url = String::from_utf8_lossy(&leader.value).into_owned();
                    endpoint(&url, tls).map_err(Lost::BadUrl)
                }
                Ok(None) => Err(Lost::NoLeader),
                Err(error) => Err(Lost::Etcd(error)),
            },
        }
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
    pub(crate) async fn moved_from_every(&self, url: &str, period: Duration) {
        let Self::Leader(store, _) = self else {
            return std::future::pending().await;
        };
        let url = url.trim_end_matches('/');
        loop {
            tokio::time::sleep(period).await;
            match store.get(LEADER_KEY).await {
                Ok(Some(leader)) if leader.value.as_slice() == url.as_bytes() => {}
                Ok(_) => return,
                Err(_) => {}
            }
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
