//! The etcd backend: the same operations as etcd v3 requests over gRPC,
//! each write that carries a fence or a condition sent as one transaction,
//! so the check and the write cannot be separated by another coordinator's
//! write.
//!
//! etcd's API is compiled from `protos/etcd/rpc.proto` (the subset Weft
//! uses) with protox, like Weft's own protocol, rather than taken from the
//! etcd-client crate, whose build needs a system `protoc`: with this, every
//! build of the coordinator and worker speaks etcd.

use std::time::Duration;

use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

/// etcd's v3 API, generated.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod api {
    tonic::include_proto!("etcdserverpb");
}

use api::compare::{CompareResult, CompareTarget, TargetUnion};
use api::kv_client::KvClient;
use api::lease_client::LeaseClient;
use api::request_op::Request as Op;
use api::watch_client::WatchClient;
use api::{
    Compare, DeleteRangeRequest, KeyValue, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp, ResponseHeader, TxnRequest,
    WatchCreateRequest, WatchRequest,
};

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// etcd's own default request limit is 1.5 MiB; responses may be larger.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// A store on an etcd cluster.
#[derive(Clone)]
pub struct EtcdStore {
    channel: Channel,
}

fn backend(status: &tonic::Status) -> StoreError {
    StoreError::Backend {
        source: Box::new(Refused(status.clone())),
    }
}

/// etcd's answer to a failed request.
#[derive(Debug, thiserror::Error)]
#[error("etcd: {}", .0.message())]
struct Refused(#[source] tonic::Status);

/// An etcd endpoint that is not a URL.
#[derive(Debug, thiserror::Error)]
#[error("etcd endpoint '{url}': {source}")]
struct BadEndpoint {
    url: String,
    #[source]
    source: tonic::transport::Error,
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
        Ok(Self { channel })
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    fn lease(&self) -> LeaseClient<Channel> {
        LeaseClient::new(self.channel.clone())
    }

    /// The keys a range request names.
    async fn range(&self, request: RangeRequest) -> Result<Vec<KeyValue>, StoreError> {
        let response = self
            .kv()
            .range(timed(request))
            .await
            .map_err(|s| backend(&s))?;
        Ok(response.into_inner().kvs)
    }

    /// A transaction: `success` when every comparison holds, else nothing.
    async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<Op>,
    ) -> Result<(bool, Revision), StoreError> {
        let request = TxnRequest {
            compare,
            success: success
                .into_iter()
                .map(|op| RequestOp { request: Some(op) })
                .collect(),
            failure: Vec::new(),
        };
        let response = self
            .kv()
            .txn(timed(request))
            .await
            .map_err(|s| backend(&s))?
            .into_inner();
        Ok((response.succeeded, revision_of(response.header.as_ref())))
    }
}

/// Every key starting with `prefix` (their names only, with `keys_only`).
fn prefix_range(prefix: &str, keys_only: bool) -> RangeRequest {
    RangeRequest {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix),
        keys_only,
        ..RangeRequest::default()
    }
}

/// A request bounded by [`REQUEST_TIMEOUT`] (sent to etcd as a deadline).
fn timed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(REQUEST_TIMEOUT);
    request
}

/// The end of the key range that holds every key starting with `prefix`:
/// the prefix with its last byte that is not 0xff incremented.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every key: etcd reads "\0" as "to the end of the keyspace".
    vec![0]
}

fn entry(kv: KeyValue) -> Entry {
    Entry {
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        value: kv.value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
    }
}

fn compare(key: &str, target: CompareTarget, value: TargetUnion) -> Compare {
    Compare {
        result: CompareResult::Equal.into(),
        target: target.into(),
        key: key.as_bytes().to_vec(),
        target_union: Some(value),
    }
}

/// The fence as a transaction comparison: its key still has the create
/// revision it was won at.
fn guard(fence: Option<&Fence>) -> Vec<Compare> {
    fence
        .map(|f| {
            compare(
                &f.key,
                CompareTarget::Create,
                TargetUnion::CreateRevision(f.revision),
            )
        })
        .into_iter()
        .collect()
}

fn fenced(fence: &Fence) -> StoreError {
    StoreError::Fenced {
        key: fence.key.clone(),
        revision: fence.revision,
    }
}

fn revision_of(header: Option<&ResponseHeader>) -> Revision {
    header.map_or(0, |h| h.revision)
}

fn put_op(key: impl Into<String>, value: Vec<u8>, lease: LeaseId) -> Op {
    Op::RequestPut(PutRequest {
        key: key.into().into_bytes(),
        value,
        lease,
    })
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
        let request = RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        };
        Ok(self.range(request).await?.into_iter().next().map(entry))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        let request = prefix_range(prefix, false);
        // etcd answers a range sorted by key, as the trait promises.
        Ok(self.range(request).await?.into_iter().map(entry).collect())
    }

    async fn scan_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let kvs = self.range(prefix_range(prefix, true)).await?;
        Ok(kvs
            .into_iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
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
            .map(|(key, value)| put_op(key, value, 0))
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
        let absent = compare(key, CompareTarget::Create, TargetUnion::CreateRevision(0));
        let put = put_op(key, value, lease.unwrap_or(0));
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
        compares.push(compare(
            key,
            CompareTarget::Mod,
            TargetUnion::ModRevision(expected),
        ));
        let (succeeded, _) = self.txn(compares, vec![put_op(key, value, 0)]).await?;
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
        let delete = Op::RequestDeleteRange(DeleteRangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix),
        });
        let (succeeded, _) = self.txn(guard(fence), vec![delete]).await?;
        match fence {
            Some(fence) if !succeeded => Err(fenced(fence)),
            _ => Ok(()),
        }
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let request = LeaseGrantRequest {
            ttl: i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX),
            id: 0,
        };
        let response = self
            .lease()
            .lease_grant(timed(request))
            .await
            .map_err(|s| backend(&s))?
            .into_inner();
        if !response.error.is_empty() {
            return Err(StoreError::Etcd(format!(
                "lease not granted: {}",
                response.error
            )));
        }
        Ok(response.id)
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        let request = tokio_stream::once(LeaseKeepAliveRequest { id: lease });
        let mut answers = self
            .lease()
            .lease_keep_alive(timed(request))
            .await
            .map_err(|s| backend(&s))?
            .into_inner();
        // etcd answers an expired or unknown lease with a TTL of 0.
        match tokio::time::timeout(REQUEST_TIMEOUT, answers.message()).await {
            Ok(Ok(answer)) => Ok(answer.is_some_and(|a| a.ttl > 0)),
            Ok(Err(status)) => Err(backend(&status)),
            Err(_) => Err(StoreError::Etcd("no answer to a lease keep-alive".into())),
        }
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.lease()
            .lease_revoke(timed(LeaseRevokeRequest { id: lease }))
            .await
            .map_err(|s| backend(&s))?;
        Ok(())
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        // The request side stays open for as long as the watch is wanted:
        // etcd ends a watch whose client stops sending.
        let (requests, outgoing) = mpsc::channel(1);
        let create = WatchRequest {
            request_union: Some(api::watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: prefix.as_bytes().to_vec(),
                    range_end: prefix_end(prefix),
                    start_revision: 0,
                },
            )),
        };
        requests
            .send(create)
            .await
            .map_err(|_| StoreError::Etcd("watch request not sent".into()))?;
        let mut stream = WatchClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .watch(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .map_err(|s| backend(&s))?
            .into_inner();
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(async move {
            let _requests = requests;
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled {
                    return;
                }
                for event in response.events {
                    let Some(kv) = event.kv else { continue };
                    let change = if event.r#type == api::event::EventType::Delete as i32 {
                        WatchEvent::Delete {
                            key: String::from_utf8_lossy(&kv.key).into_owned(),
                        }
                    } else {
                        WatchEvent::Put(entry(kv))
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

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_range_ends_after_its_last_key() {
        assert_eq!(prefix_end("runs/"), b"runs0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
