//! The etcd backend, through the `etcd-client` crate: each write that
//! carries a fence or a condition is one transaction, so the check and the
//! write cannot be separated by another coordinator's write.
//!
//! The client runs on a tonic channel of ours, balanced over the endpoints
//! and connected lazily: a cluster that is down yet is no error until the
//! first request, and every request is bounded by [`REQUEST_TIMEOUT`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, WatchOptions,
};
use tokio::sync::{OnceCell, mpsc};
use tokio_util::task::TaskTracker;
use tonic::transport::{Channel, Endpoint};

use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// etcd's own default request limit is 1.5 MiB; responses may be larger.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// A store on an etcd cluster.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    channel: Channel,
    /// Made on first use (making it is async, connecting is not).
    client: OnceCell<Client>,
    /// The watches' forwarding tasks.
    tracker: TaskTracker,
}

/// etcd's answer to a failed request.
#[derive(Debug, thiserror::Error)]
#[error("etcd: {0}")]
struct Refused(#[source] etcd_client::Error);

/// An etcd endpoint that is not a URL.
#[derive(Debug, thiserror::Error)]
#[error("etcd endpoint '{url}': {source}")]
struct BadEndpoint {
    url: String,
    #[source]
    source: tonic::transport::Error,
}

fn backend(error: etcd_client::Error) -> StoreError {
    StoreError::Backend {
        source: Box::new(Refused(error)),
    }
}

/// `request`, bounded by [`REQUEST_TIMEOUT`].
async fn timed<T>(
    what: &str,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result.map_err(backend),
        Err(_) => Err(StoreError::Etcd(format!(
            "no answer to {what} within {REQUEST_TIMEOUT:?}"
        ))),
    }
}

impl EtcdStore {
    /// A store on the cluster at `endpoints` (`http://host:2379`, …),
    /// balancing requests over them. Nothing is contacted until the first
    /// request, so a cluster that is down yet is no error here.
    pub fn connect(endpoints: &[String]) -> Result<Self, StoreError> {
        if endpoints.is_empty() {
            return Err(StoreError::Etcd("no endpoints given".into()));
        }
        let mut parsed = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|source| StoreError::Backend {
                    source: Box::new(BadEndpoint {
                        url: url.clone(),
                        source,
                    }),
                })?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true);
            parsed.push(endpoint);
        }
        let channel = if parsed.len() == 1 {
            parsed.remove(0).connect_lazy()
        } else {
            Channel::balance_list(parsed.into_iter())
        };
        Ok(Self {
            inner: Arc::new(Inner {
                channel,
                client: OnceCell::new(),
                tracker: TaskTracker::new(),
            }),
        })
    }

    async fn client(&self) -> Result<Client, StoreError> {
        let client = self
            .inner
            .client
            .get_or_try_init(|| {
                let channel = etcd_client::Channel::Tonic(self.inner.channel.clone());
                Client::from_channel(channel, None)
            })
            .await
            .map_err(backend)?;
        Ok(client.clone())
    }

    /// The entries `options` select at `key`.
    async fn range(&self, key: &str, options: GetOptions) -> Result<Vec<KeyValue>, StoreError> {
        let mut kv = self
            .client()
            .await?
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES);
        let mut response = timed("a read", kv.get(key, Some(options))).await?;
        Ok(response.take_kvs())
    }

    /// A transaction: `success` when every comparison holds, else nothing.
    async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<TxnOp>,
    ) -> Result<(bool, Revision), StoreError> {
        let mut kv = self.client().await?.kv_client();
        let txn = Txn::new().when(compare).and_then(success);
        let response = timed("a transaction", kv.txn(txn)).await?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok((response.succeeded(), revision))
    }
}

fn entry(kv: &KeyValue) -> Entry {
    Entry {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    }
}

/// The fence as a transaction comparison: its key still has the create
/// revision it was won at.
fn guard(fence: Option<&Fence>) -> Vec<Compare> {
    fence
        .map(|f| Compare::create_revision(f.key.as_str(), CompareOp::Equal, f.revision))
        .into_iter()
        .collect()
}

fn fenced(fence: &Fence) -> StoreError {
    StoreError::Fenced {
        key: fence.key.clone(),
        revision: fence.revision,
    }
}

fn put_op(key: String, value: Vec<u8>, lease: Option<LeaseId>) -> TxnOp {
    let options = lease.map(|lease| PutOptions::new().with_lease(lease));
    TxnOp::put(key, value, options)
}

impl Store for EtcdStore {
    fn max_value_bytes(&self) -> usize {
        // etcd refuses requests over 1.5 MiB by default; keep room for the
        // key and the transaction around the value.
        1 << 20
    }

    fn max_writes(&self) -> usize {
        // etcd's --max-txn-ops default.
        128
    }

    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let kvs = self.range(key, GetOptions::new()).await?;
        Ok(kvs.first().map(entry))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        // etcd answers a range sorted by key, as the trait promises.
        let kvs = self.range(prefix, GetOptions::new().with_prefix()).await?;
        Ok(kvs.iter().map(entry).collect())
    }

    async fn scan_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let options = GetOptions::new().with_prefix().with_keys_only();
        let kvs = self.range(prefix, options).await?;
        Ok(kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect())
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        self.put_all(vec![(key.to_owned(), value)], fence).await
    }

    async fn put_all(
        &self,
        writes: Vec<(String, Vec<u8>)>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let puts = writes
            .into_iter()
            .map(|(key, value)| put_op(key, value, None))
            .collect();
        let (succeeded, revision) = self.txn(guard(fence), puts).await?;
        match fence {
            Some(fence) if !succeeded => Err(fenced(fence)),
            _ => Ok(revision),
        }
    }

    async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Option<Revision>, StoreError> {
        let absent = Compare::create_revision(key, CompareOp::Equal, 0);
        let put = put_op(key.to_owned(), value, lease);
        let (succeeded, revision) = self.txn(vec![absent], vec![put]).await?;
        Ok(succeeded.then_some(revision))
    }

    async fn compare_and_put(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: Revision,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        let mut compares = guard(fence);
        compares.push(Compare::mod_revision(key, CompareOp::Equal, expected));
        let put = put_op(key.to_owned(), value, None);
        let (succeeded, _) = self.txn(compares, vec![put]).await?;
        if succeeded {
            return Ok(true);
        }
        // Tell a lost fence from a changed key.
        if let Some(fence) = fence {
            let held = self
                .get(&fence.key)
                .await?
                .is_some_and(|e| e.create_revision == fence.revision);
            if !held {
                return Err(fenced(fence));
            }
        }
        Ok(false)
    }

    async fn delete_prefix(&self, prefix: &str, fence: Option<&Fence>) -> Result<(), StoreError> {
        let delete = TxnOp::delete(prefix, Some(DeleteOptions::new().with_prefix()));
        let (succeeded, _) = self.txn(guard(fence), vec![delete]).await?;
        match fence {
            Some(fence) if !succeeded => Err(fenced(fence)),
            _ => Ok(()),
        }
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let ttl = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let mut lease = self.client().await?.lease_client();
        let response = timed("a lease grant", lease.grant(ttl, None)).await?;
        if !response.error().is_empty() {
            return Err(StoreError::Etcd(format!(
                "lease not granted: {}",
                response.error()
            )));
        }
        Ok(response.id())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        let mut client = self.client().await?.lease_client();
        // One keep-alive, whose answer the client reads: a lease etcd no
        // longer has (TTL 0) is "lease not found".
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, client.keep_alive(lease)).await;
        match answer {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => Ok(false),
            Ok(Err(error)) => Err(backend(error)),
            Err(_) => Err(StoreError::Etcd(format!(
                "no answer to a lease keep-alive within {REQUEST_TIMEOUT:?}"
            ))),
        }
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        let mut client = self.client().await?.lease_client();
        timed("a lease revoke", client.revoke(lease)).await?;
        Ok(())
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let mut client = self
            .client()
            .await?
            .watch_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES);
        let options = WatchOptions::new().with_prefix();
        // The stream holds the request side too: the watch stays open for
        // as long as it is read.
        let mut stream = timed("a watch", client.watch(prefix, Some(options))).await?;
        let (tx, rx) = mpsc::channel(256);
        self.inner.tracker.spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled() {
                    return;
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let change = match event.event_type() {
                        EventType::Delete => WatchEvent::Delete {
                            key: String::from_utf8_lossy(kv.key()).into_owned(),
                        },
                        EventType::Put => WatchEvent::Put(entry(kv)),
                    };
                    if tx.send(change).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(rx)
    }
}
