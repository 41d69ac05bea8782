//! The etcd backend, through the `etcd-client` crate: each write that
//! carries a fence or a condition is one transaction, so the check and the
//! write cannot be separated by another coordinator's write.
//!
//! Each member of the cluster has its own lazily connected tonic channel;
//! a request goes to the member that last answered, and moves on to the
//! next when that one cannot answer (its address is gone, it refuses
//! connections, it is cut off or has lost quorum and stays silent). A
//! balanced channel over all members would not: it keeps picking a dead
//! member and fails the request. Every request is bounded by
//! [`REQUEST_TIMEOUT`] in all, and by [`MEMBER_TIMEOUT`] on a member while
//! others are left to try. A lease keep-alive, whose time is the lease's,
//! goes to every member at once. Fenced writes of many runs share
//! transactions ([`batch`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, WatchOptions,
};
use tokio::sync::{OnceCell, mpsc};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tonic::transport::{Channel, Endpoint};

use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

mod batch;

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take, over every member it is tried on.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one member may take to answer while others are left to try:
/// a healthy member answers in milliseconds, and a leader's lease renewal
/// must have time to reach a second member within its TTL.
const MEMBER_TIMEOUT: Duration = Duration::from_millis(1500);
/// etcd's own default request limit is 1.5 MiB; responses may be larger.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// TLS to etcd (`https://` endpoints): the CA that signed the members'
/// certificates (default: the system's roots) and a client certificate
/// with its key, for members that ask for one (`--client-cert-auth`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA (PEM).
    pub ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM chain) and its key (PEM).
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl EtcdTls {
    /// Whether anything is set.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.identity.is_none()
    }

    /// The tonic TLS settings: the files read now.
    fn config(&self) -> Result<tonic::transport::ClientTlsConfig, StoreError> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let read = |what: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|error| {
                StoreError::Etcd(format!("TLS {what} '{}': {error}", path.display()))
            })
        };
        let mut config = ClientTlsConfig::new();
        config = match &self.ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(read("ca", ca)?)),
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(read("cert", cert)?, read("key", key)?));
        }
        Ok(config)
    }
}

/// A store on an etcd cluster.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

/// What the etcd store has sent since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EtcdStats {
    /// Writes ([`Store::put`] and [`Store::put_all`]) answered.
    pub writes: u64,
    /// Transactions they took (several writes share one when they
    /// gather while others are out).
    pub transactions: u64,
}

struct Inner {
    members: Vec<Member>,
    /// The member that answered last: requests start there.
    preferred: AtomicUsize,
    /// The watches' forwarding tasks.
    tracker: TaskTracker,
    /// The batcher's queue, started with the first write (and again if
    /// the runtime that ran it is gone).
    batcher: std::sync::Mutex<Option<batch::Queue>>,
    /// Writes answered through the batcher, and their transactions.
    batched: std::sync::atomic::AtomicU64,
    transactions: std::sync::atomic::AtomicU64,
}

/// One member's endpoint and its client.
struct Member {
    url: String,
    channel: Channel,
    /// Made on first use (making it is async, connecting is not).
    client: OnceCell<Client>,
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

/// Whether `error` says that the member could not answer (so another may),
/// rather than that etcd refused the request.
fn unanswered(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
        ),
        _ => false,
    }
}

/// What a member's failure comes down to: the gRPC status's message, or
/// the innermost error (a name that does not resolve, a refused
/// connection), without the layers around it.
fn cause(error: &etcd_client::Error) -> String {
    let mut innermost: &dyn std::error::Error = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    if let Some(status) = innermost.downcast_ref::<tonic::Status>() {
        return status.message().to_owned();
    }
    if let Some(etcd_client::Error::GRpcStatus(status)) = innermost.downcast_ref() {
        return status.message().to_owned();
    }
    innermost.to_string()
}

impl EtcdStore {
    /// A store on the cluster at `endpoints` (`http://host:2379`, …), one
    /// per member. Nothing is contacted until the first request, so a
    /// cluster that is down yet is no error here.
    pub fn connect(endpoints: &[String]) -> Result<Self, StoreError> {
        Self::connect_with(endpoints, &EtcdTls::default())
    }

    /// Like [`connect`](Self::connect), with `tls` for `https://`
    /// endpoints (its files are read now).
    pub fn connect_with(endpoints: &[String], tls: &EtcdTls) -> Result<Self, StoreError> {
        if endpoints.is_empty() {
            return Err(StoreError::Etcd("no endpoints given".into()));
        }
        let secure = endpoints.iter().any(|url| url.starts_with("https://"));
        if !tls.is_empty() && !secure {
            return Err(StoreError::Etcd(
                "TLS settings are for https:// endpoints; these are plaintext".into(),
            ));
        }
        let config = if secure { Some(tls.config()?) } else { None };
        let mut members = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let bad = |source| StoreError::Backend {
                source: Box::new(BadEndpoint {
                    url: url.clone(),
                    source,
                }),
            };
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(bad)?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true);
            if let Some(config) = &config
                && url.starts_with("https://")
            {
                endpoint = endpoint.tls_config(config.clone()).map_err(bad)?;
            }
            members.push(Member {
                url: url.clone(),
                channel: endpoint.connect_lazy(),
                client: OnceCell::new(),
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                members,
                preferred: AtomicUsize::new(0),
                tracker: TaskTracker::new(),
                batcher: std::sync::Mutex::new(None),
                batched: Default::default(),
                transactions: Default::default(),
            }),
        })
    }

    /// What the store has sent since it was made.
    pub fn stats(&self) -> EtcdStats {
        EtcdStats {
            writes: self.inner.batched.load(Ordering::Relaxed),
            transactions: self.inner.transactions.load(Ordering::Relaxed),
        }
    }

    async fn client(&self, member: &Member) -> Result<Client, StoreError> {
        let client = member
            .client
            .get_or_try_init(|| {
                let channel = etcd_client::Channel::Tonic(member.channel.clone());
                Client::from_channel(channel, None)
            })
            .await
            .map_err(backend)?;
        Ok(client.clone())
    }

    /// [`on_any`](Self::on_any) in a box: a request's future, with the
    /// member clients', is some 11 KB, which would otherwise be inlined in
    /// (and copied with) every future that awaits the store — each run's
    /// checkpoint writer and watch feed among them.
    async fn on_member<T, F, Fut>(&self, what: &str, request: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        Box::pin(self.on_any(what, request)).await
    }

    /// `request` on the member that answered last, then on each other in
    /// turn while they cannot answer, within [`REQUEST_TIMEOUT`] in all.
    /// When every member refused for now (an election after the leader
    /// was lost answers "leader changed" for a second or two), they are
    /// tried again after a pause that grows from 50 to 500 ms.
    async fn on_any<T, F, Fut>(&self, what: &str, request: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let members = &self.inner.members;
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let mut pause = Duration::from_millis(50);
        loop {
            let first = self.inner.preferred.load(Ordering::Relaxed);
            let mut failures = Vec::new();
            for step in 0..members.len() {
                let index = (first + step) % members.len();
                let member = &members[index];
                let left = deadline.saturating_duration_since(Instant::now());
                let bound = if step + 1 == members.len() {
                    left
                } else {
                    left.min(MEMBER_TIMEOUT)
                };
                let answer = tokio::time::timeout(bound, request(self.client(member).await?)).await;
                match answer {
                    Ok(Ok(value)) => {
                        self.inner.preferred.store(index, Ordering::Relaxed);
                        return Ok(value);
                    }
                    Ok(Err(error)) if unanswered(&error) => {
                        failures.push(format!("{}: {}", member.url, cause(&error)));
                    }
                    Ok(Err(error)) => return Err(backend(error)),
                    Err(_) => failures.push(format!("{}: no answer within {bound:?}", member.url)),
                }
            }
            if deadline.saturating_duration_since(Instant::now()) <= pause {
                return Err(StoreError::Etcd(format!(
                    "no member answered {what}: {}",
                    failures.join("; ")
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// The entries `options` select at `key`.
    async fn range(&self, key: &str, options: GetOptions) -> Result<Vec<KeyValue>, StoreError> {
        Ok(self.range_at(key, options).await?.0)
    }

    /// A range and the revision etcd read it at (its answer's header).
    async fn range_at(
        &self,
        key: &str,
        options: GetOptions,
    ) -> Result<(Vec<KeyValue>, Revision), StoreError> {
        let mut response = self
            .on_member("a read", |client| {
                let options = options.clone();
                async move {
                    let mut kv = client
                        .kv_client()
                        .max_decoding_message_size(MAX_RESPONSE_BYTES);
                    kv.get(key, Some(options)).await
                }
            })
            .await?;
        let revision = response.header().map_or(0, |header| header.revision());
        Ok((response.take_kvs(), revision))
    }

    /// A transaction: `success` when every comparison holds, else nothing.
    /// Tried again on another member only when the first could not answer:
    /// the conditions make a repeat harmless (a repeated fenced write
    /// writes the same values; a repeated create finds the key and says
    /// so).
    async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<TxnOp>,
    ) -> Result<(bool, Revision), StoreError> {
        let txn = Txn::new().when(compare).and_then(success);
        let response = self
            .on_member("a transaction", |client| {
                let txn = txn.clone();
                async move { client.kv_client().txn(txn).await }
            })
            .await?;
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

    async fn scan_at(&self, prefix: &str) -> Result<(Vec<Entry>, Revision), StoreError> {
        // etcd answers a range sorted by key, as the trait promises.
        let (kvs, revision) = self
            .range_at(prefix, GetOptions::new().with_prefix())
            .await?;
        Ok((kvs.iter().map(entry).collect(), revision))
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
        let queue = {
            let mut batcher = self.inner.batcher.lock().unwrap_or_else(|e| e.into_inner());
            batcher
                .as_ref()
                .filter(|queue| !queue.is_closed())
                .cloned()
                .unwrap_or_else(|| {
                    let queue = batch::spawn(Arc::downgrade(&self.inner));
                    *batcher = Some(queue.clone());
                    queue
                })
        };
        batch::put_all(&queue, writes, fence).await
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

    async fn delete_prefixes(
        &self,
        prefixes: &[String],
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        // A range deletion is one operation: a transaction takes as many
        // as etcd's operation limit.
        for batch in prefixes.chunks(self.max_writes()) {
            let deletes = batch
                .iter()
                .map(|prefix| {
                    TxnOp::delete(prefix.as_str(), Some(DeleteOptions::new().with_prefix()))
                })
                .collect();
            let (succeeded, _) = self.txn(guard(fence), deletes).await?;
            if let Some(fence) = fence.filter(|_| !succeeded) {
                return Err(fenced(fence));
            }
        }
        Ok(())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let ttl = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let response = self
            .on_member("a lease grant", |client| async move {
                client.lease_client().grant(ttl, None).await
            })
            .await?;
        if !response.error().is_empty() {
            return Err(StoreError::Etcd(format!(
                "lease not granted: {}",
                response.error()
            )));
        }
        Ok(response.id())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        // Sent to every member at once, the first answer taken: a leader's
        // renewal has only what is left of its lease, and cannot spend it
        // waiting on a member that died with the connection open. A
        // keep-alive etcd answers is its leader's: a lease it no longer
        // has (TTL 0) is "lease not found".
        let mut asked = tokio::task::JoinSet::new();
        for (index, member) in self.inner.members.iter().enumerate() {
            let (client, url) = (self.client(member).await?, member.url.clone());
            asked.spawn(async move {
                let answer =
                    tokio::time::timeout(REQUEST_TIMEOUT, client.lease_client().keep_alive(lease))
                        .await;
                let answer = match answer {
                    Ok(Ok(_)) => Ok(true),
                    Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => Ok(false),
                    Ok(Err(error)) => Err(format!("{url}: {}", cause(&error))),
                    Err(_) => Err(format!("{url}: no answer within {REQUEST_TIMEOUT:?}")),
                };
                (index, answer)
            });
        }
        let mut failures = Vec::new();
        while let Some(joined) = asked.join_next().await {
            let Ok((index, answer)) = joined else {
                continue;
            };
            match answer {
                Ok(alive) => {
                    self.inner.preferred.store(index, Ordering::Relaxed);
                    return Ok(alive);
                }
                Err(failure) => failures.push(failure),
            }
        }
        Err(StoreError::Etcd(format!(
            "no member answered a lease keep-alive: {}",
            failures.join("; ")
        )))
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.on_member("a lease revoke", |client| async move {
            client.lease_client().revoke(lease).await
        })
        .await?;
        Ok(())
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        // The stream holds the request side too: the watch stays open for
        // as long as it is read, and ends when its member goes.
        let mut stream = self
            .on_member("a watch", |client| async move {
                let options = WatchOptions::new().with_prefix();
                let mut watch = client
                    .watch_client()
                    .max_decoding_message_size(MAX_RESPONSE_BYTES);
                watch.watch(prefix, Some(options)).await
            })
            .await?;
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
