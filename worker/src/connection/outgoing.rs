//! The worker's side of its stream: what the session sends, on the wire,
//! with the results waiting behind a result sent with it as one batch.
//!
//! Under load many attempts finish between two sends; one message for all
//! of them saves the coordinator and this worker a message's work per
//! result (framing, a wakeup on each side). Nothing waits to fill a batch:
//! a batch is what is already queued when the first result goes. A batch
//! holds at most what the welcome allows (none before it, or when the
//! coordinator does not say), and about [`BATCH_BYTES`] of results.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use tokio::sync::mpsc;
use tokio_stream::Stream;
use weft_proto::BATCH_BYTES;
use weft_proto::v1 as pb;
use weft_proto::v1::worker_message::Body;

use super::Outbound;
use super::convert;

/// What the coordinator's welcome told this session about its messages.
#[derive(Debug)]
pub(super) struct Told {
    /// The largest result it takes.
    result_bytes: AtomicUsize,
    /// The most results a batch may carry (0 and 1: no batches).
    batch: AtomicUsize,
}

impl Told {
    /// Before the welcome: any result goes, one per message.
    pub(super) fn unwelcomed() -> Self {
        Self {
            result_bytes: AtomicUsize::new(usize::MAX),
            batch: AtomicUsize::new(0),
        }
    }

    /// What the welcome said; 0 for either means it said nothing.
    pub(super) fn welcomed(&self, welcome: &pb::Welcome) {
        let result_bytes = match welcome.max_result_bytes {
            0 => usize::MAX,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        self.result_bytes.store(result_bytes, Ordering::Relaxed);
        let batch = usize::try_from(welcome.max_batch).unwrap_or(usize::MAX);
        self.batch.store(batch, Ordering::Relaxed);
    }
}

/// The session's messages as the stream to the coordinator sends them.
pub(super) struct Outgoing {
    queue: mpsc::Receiver<Outbound>,
    told: std::sync::Arc<Told>,
    /// A message taken from the queue that did not fit the last batch.
    held: Option<pb::WorkerMessage>,
}

impl Outgoing {
    pub(super) fn new(queue: mpsc::Receiver<Outbound>, told: std::sync::Arc<Told>) -> Self {
        Self {
            queue,
            told,
            held: None,
        }
    }

    fn wire(&self, message: Outbound) -> pb::WorkerMessage {
        let limit = self.told.result_bytes.load(Ordering::Relaxed);
        convert::to_coordinator(message, limit).into()
    }

    /// `first`, or, when it is a result and more are queued behind it, a
    /// batch of them. A message met that does not go in the batch is held
    /// for the next send.
    fn with_queued(&mut self, first: pb::WorkerMessage) -> pb::WorkerMessage {
        let most = self.told.batch.load(Ordering::Relaxed);
        let result = match first.body {
            Some(Body::Result(result)) if most > 1 => result,
            body => return pb::WorkerMessage { body },
        };
        let mut bytes = weight(&result);
        let mut results = vec![result];
        while results.len() < most && bytes < BATCH_BYTES {
            let Ok(next) = self.queue.try_recv() else {
                break;
            };
            match self.wire(next).body {
                Some(Body::Result(result)) => {
                    let size = weight(&result);
                    if bytes + size > BATCH_BYTES {
                        let body = Some(Body::Result(result));
                        self.held = Some(pb::WorkerMessage { body });
                        break;
                    }
                    bytes += size;
                    results.push(result);
                }
                body => {
                    self.held = Some(pb::WorkerMessage { body });
                    break;
                }
            }
        }
        let body = if results.len() == 1 {
            Body::Result(results.remove(0))
        } else {
            Body::Results(pb::ResultBatch { results })
        };
        pb::WorkerMessage { body: Some(body) }
    }
}

impl Stream for Outgoing {
    type Item = pb::WorkerMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let first = match this.held.take() {
            Some(message) => message,
            None => match ready!(this.queue.poll_recv(cx)) {
                Some(message) => this.wire(message),
                None => return Poll::Ready(None),
            },
        };
        Poll::Ready(Some(this.with_queued(first)))
    }
}

/// About how many bytes a result takes on the wire: its texts.
fn weight(result: &pb::TaskResult) -> usize {
    match &result.outcome {
        Some(pb::task_result::Outcome::Output(output)) => {
            output.json.len()
                + output.output_json.len()
                + output.notes_json.iter().map(String::len).sum::<usize>()
        }
        Some(pb::task_result::Outcome::Error(error)) => error.message.len(),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use tokio_stream::StreamExt;

    use super::*;
    use crate::task::{Completed, TaskReport};
    use weft_proto::TaskKey;

    fn report(key: u64, writes: serde_json::Value) -> Outbound {
        Outbound::Report(TaskReport {
            run_id: "r".into(),
            key: TaskKey(key),
            outcome: Ok(Completed::writes(writes)),
            read: Vec::new(),
        })
    }

    fn welcomed(batch: u32) -> Arc<Told> {
        let told = Arc::new(Told::unwelcomed());
        told.welcomed(&pb::Welcome {
            max_batch: batch,
            ..pb::Welcome::default()
        });
        told
    }

    /// The task keys each message carries, in order; `None` for a message
    /// that carries no result.
    fn keys(message: &pb::WorkerMessage) -> Option<Vec<u64>> {
        match &message.body {
            Some(Body::Result(result)) => Some(vec![result.task_key]),
            Some(Body::Results(batch)) => Some(batch.results.iter().map(|r| r.task_key).collect()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn queued_results_go_as_batches_in_order_around_other_messages() {
        let (tx, rx) = mpsc::channel(64);
        for key in 0..5 {
            tx.send(report(key, json!({"n": key}))).await.unwrap();
        }
        tx.send(Outbound::Heartbeat).await.unwrap();
        for key in 5..7 {
            tx.send(report(key, json!({"n": key}))).await.unwrap();
        }
        drop(tx);
        let sent: Vec<_> = Outgoing::new(rx, welcomed(3)).collect().await;
        let carried: Vec<_> = sent.iter().map(keys).collect();
        assert_eq!(
            carried,
            vec![
                Some(vec![0, 1, 2]),
                Some(vec![3, 4]),
                None,
                Some(vec![5, 6]),
            ]
        );
        assert!(matches!(sent[2].body, Some(Body::Heartbeat(_))));
    }

    #[tokio::test]
    async fn without_a_welcome_that_allows_batches_each_result_goes_alone() {
        let (tx, rx) = mpsc::channel(64);
        for key in 0..3 {
            tx.send(report(key, json!({}))).await.unwrap();
        }
        drop(tx);
        let sent: Vec<_> = Outgoing::new(rx, Arc::new(Told::unwelcomed()))
            .collect()
            .await;
        assert!(
            sent.iter()
                .all(|message| matches!(message.body, Some(Body::Result(_))))
        );
        assert_eq!(sent.len(), 3);
    }

    #[tokio::test]
    async fn a_batch_closes_before_it_outgrows_its_bytes() {
        let (tx, rx) = mpsc::channel(64);
        let big = "x".repeat(BATCH_BYTES / 2);
        for key in 0..3 {
            tx.send(report(key, json!({ "text": big }))).await.unwrap();
        }
        drop(tx);
        let sent: Vec<_> = Outgoing::new(rx, welcomed(64)).collect().await;
        let carried: Vec<_> = sent.iter().map(keys).collect();
        assert_eq!(carried, vec![Some(vec![0]), Some(vec![1]), Some(vec![2])]);
    }
}
