//! The etcd backend: the same operations as etcd requests, each write that
//! carries a fence or a condition sent as one transaction, so the check and
//! the write cannot be separated by another coordinator's write.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use tokio::sync::mpsc;

use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

/// A store on an etcd cluster.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
}

fn backend(error: etcd_client::Error) -> StoreError {
    StoreError::Backend(format!("etcd: {error}"))
}

impl EtcdStore {
    /// Connects to the cluster at `endpoints` (`http://host:2379`, …).
    /// Nothing is contacted until the first request.
    pub async fn connect(endpoints: &[String]) -> Result<Self, StoreError> {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(10));
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(backend)?;
        Ok(Self { client })
    }

    fn client(&self) -> Client {
        self.client.clone()
    }
}

fn entry(kv: &etcd_client::KeyValue) -> Entry {
    Entry {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    }
}

/// The fence as a transaction comparison.
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

fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map_or(0, etcd_client::ResponseHeader::revision)
}

impl Store for EtcdStore {
    fn max_value_bytes(&self) -> usize {
        // etcd refuses requests over 1.5 MiB by default; keep room for the
        // key and the transaction around the value.
        1 << 20
    }

    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let response = self.client().get(key, None).await.map_err(backend)?;
        Ok(response.kvs().first().map(entry))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        let options = GetOptions::new().with_prefix();
        let response = self
            .client()
            .get(prefix, Some(options))
            .await
            .map_err(backend)?;
        Ok(response.kvs().iter().map(entry).collect())
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let Some(fence) = fence else {
            let response = self.client().put(key, value, None).await.map_err(backend)?;
            return Ok(revision_of(response.header()));
        };
        let txn = Txn::new()
            .when(guard(Some(fence)))
            .and_then(vec![TxnOp::put(key, value, None)]);
        let response = self.client().txn(txn).await.map_err(backend)?;
        if !response.succeeded() {
            return Err(fenced(fence));
        }
        Ok(revision_of(response.header()))
    }

    async fn put_all(
        &self,
        writes: Vec<(String, Vec<u8>)>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let puts: Vec<TxnOp> = writes
            .into_iter()
            .map(|(key, value)| TxnOp::put(key, value, None))
            .collect();
        let txn = Txn::new().when(guard(fence)).and_then(puts);
        let response = self.client().txn(txn).await.map_err(backend)?;
        match fence {
            Some(fence) if !response.succeeded() => Err(fenced(fence)),
            _ => Ok(revision_of(response.header())),
        }
    }

    async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Option<Revision>, StoreError> {
        let options = lease.map(|id| PutOptions::new().with_lease(id));
        let txn = Txn::new()
            .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(key, value, options)]);
        let response = self.client().txn(txn).await.map_err(backend)?;
        Ok(response.succeeded().then(|| revision_of(response.header())))
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
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::put(key, value, None)]);
        let response = self.client().txn(txn).await.map_err(backend)?;
        if response.succeeded() {
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
        let txn = Txn::new().when(guard(fence)).and_then(vec![delete]);
        let response = self.client().txn(txn).await.map_err(backend)?;
        match fence {
            Some(fence) if !response.succeeded() => Err(fenced(fence)),
            _ => Ok(()),
        }
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let response = self
            .client()
            .lease_grant(seconds, None)
            .await
            .map_err(backend)?;
        Ok(response.id())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        let expired = |error: etcd_client::Error| match error {
            // etcd answers a keep-alive of an expired lease with an error.
            etcd_client::Error::LeaseKeepAliveError(_) => Ok(false),
            other => Err(backend(other)),
        };
        let (mut keeper, mut answers) = match self.client().lease_keep_alive(lease).await {
            Ok(pair) => pair,
            Err(error) => return expired(error),
        };
        if let Err(error) = keeper.keep_alive().await {
            return expired(error);
        }
        match answers.message().await {
            Ok(answer) => Ok(answer.is_some_and(|a| a.ttl() > 0)),
            Err(error) => expired(error),
        }
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.client().lease_revoke(lease).await.map_err(backend)?;
        Ok(())
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let options = WatchOptions::new().with_prefix();
        let mut stream = self
            .client()
            .watch(prefix, Some(options))
            .await
            .map_err(backend)?;
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let change = match event.event_type() {
                        etcd_client::EventType::Put => WatchEvent::Put(entry(kv)),
                        etcd_client::EventType::Delete => WatchEvent::Delete {
                            key: String::from_utf8_lossy(kv.key()).into_owned(),
                        },
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
