//! Fenced writes of many runs in one etcd transaction. Every run's
//! checkpoint is a [`Store::put_all`](crate::Store::put_all) under the
//! leader's fence; sent one by one, a thousand busy runs make a thousand
//! round trips a wave, each a raft proposal. Writes are queued instead, and
//! a batcher sends what has gathered as one transaction — at once when
//! nothing is out, so a lone write waits for nobody; while [`IN_FLIGHT`]
//! transactions are out, the queue gathers the next one. A batch holds
//! writes under one fence (the comparison is the transaction's), distinct
//! keys (etcd refuses a key twice in one transaction), at most
//! [`MAX_OPS`] keys and [`MAX_BYTES`] bytes, so it fits one request as
//! each write did. Every write of a batch gets the transaction's answer:
//! its revision, or the fence that no longer holds.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{EtcdStore, Inner, fenced, guard, put_op};
use crate::{Fence, Revision, StoreError};

/// Transactions of batched writes out at once.
const IN_FLIGHT: usize = 4;
/// Keys in one batch: etcd's `--max-txn-ops` default.
const MAX_OPS: usize = 128;
/// Bytes of keys and values in one batch, within etcd's 1.5 MiB request
/// limit (as one write's are).
const MAX_BYTES: usize = 1 << 20;

/// One caller's writes, waiting for their batch.
pub(super) struct Queued {
    writes: Vec<(String, Vec<u8>)>,
    fence: Option<Fence>,
    reply: oneshot::Sender<Result<Revision, StoreError>>,
}

impl Queued {
    fn bytes(&self) -> usize {
        self.writes.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// The queue into the batcher.
pub(super) type Queue = mpsc::UnboundedSender<Queued>;

/// Queues `writes` under `fence` and waits for their batch's answer.
pub(super) async fn put_all(
    queue: &Queue,
    writes: Vec<(String, Vec<u8>)>,
    fence: Option<&Fence>,
) -> Result<Revision, StoreError> {
    let (reply, answer) = oneshot::channel();
    let queued = Queued {
        writes,
        fence: fence.cloned(),
        reply,
    };
    let closed = || StoreError::Etcd("the store is closing".into());
    queue.send(queued).map_err(|_| closed())?;
    answer.await.map_err(|_| closed())?
}

/// Starts the batcher of `inner`'s store; it ends with the store.
pub(super) fn spawn(inner: Weak<Inner>) -> Queue {
    let (queue, queued) = mpsc::unbounded_channel();
    tokio::spawn(batcher(inner, queued));
    queue
}

/// A batch being gathered.
struct Batch {
    queued: Vec<Queued>,
    keys: HashSet<String>,
    bytes: usize,
}

impl Batch {
    fn new(first: Queued) -> Self {
        let mut batch = Self {
            queued: Vec::new(),
            keys: HashSet::new(),
            bytes: 0,
        };
        batch.add(first);
        batch
    }

    fn fits(&self, next: &Queued) -> bool {
        next.fence == self.queued[0].fence
            && self.keys.len() + next.writes.len() <= MAX_OPS
            && self.bytes + next.bytes() <= MAX_BYTES
            && next.writes.iter().all(|(key, _)| !self.keys.contains(key))
    }

    fn add(&mut self, queued: Queued) {
        self.bytes += queued.bytes();
        self.keys
            .extend(queued.writes.iter().map(|(key, _)| key.clone()));
        self.queued.push(queued);
    }
}

async fn batcher(inner: Weak<Inner>, mut queued: mpsc::UnboundedReceiver<Queued>) {
    let out = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut held = None;
    loop {
        // A slot first: while every one is taken, writes gather.
        let Ok(slot) = out.clone().acquire_owned().await else {
            return;
        };
        let first = match held.take() {
            Some(first) => first,
            None => match queued.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut batch = Batch::new(first);
        while let Ok(next) = queued.try_recv() {
            if batch.fits(&next) {
                batch.add(next);
            } else {
                held = Some(next);
                break;
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let store = EtcdStore { inner };
        tokio::spawn(async move {
            store.send(batch.queued).await;
            drop(slot);
        });
    }
}

impl EtcdStore {
    /// One transaction of a batch's writes, answered to each caller.
    async fn send(&self, batch: Vec<Queued>) {
        let fence = batch[0].fence.clone();
        let mut replies = Vec::with_capacity(batch.len());
        let mut puts = Vec::new();
        for queued in batch {
            replies.push(queued.reply);
            puts.extend(
                queued
                    .writes
                    .into_iter()
                    .map(|(key, value)| put_op(key, value, None)),
            );
        }
        let answer = self.txn(guard(fence.as_ref()), puts).await;
        self.inner
            .transactions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner
            .batched
            .fetch_add(replies.len() as u64, std::sync::atomic::Ordering::Relaxed);
        match answer {
            Ok((succeeded, revision)) => {
                for reply in replies {
                    let _ = reply.send(match &fence {
                        Some(fence) if !succeeded => Err(fenced(fence)),
                        _ => Ok(revision),
                    });
                }
            }
            Err(error) => {
                let said = error.to_string();
                let mut replies = replies.into_iter();
                if let Some(first) = replies.next() {
                    let _ = first.send(Err(error));
                }
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Etcd(said.clone())));
                }
            }
        }
    }
}
