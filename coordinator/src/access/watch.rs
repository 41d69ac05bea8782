//! A run's events from a position, live until the run ends.
//!
//! The log is whole: a watcher that falls behind the live feed reads what
//! it missed from the log and carries on, so no event is lost. The feed
//! ends with the run's last event (at once for an ended run), when the
//! watcher goes away, and with the term.

use std::pin::Pin;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_proto::events::{RunEvent, StoredEvent};

use crate::run_actor::streams::{Piece, RunStreams};
use crate::run_actor::{RunHandle, RunRequestError};

/// A run's events in order; an error ends it.
pub type EventFeed = Pin<Box<dyn Stream<Item = Result<StoredEvent, RunRequestError>> + Send>>;

/// Events a feed holds for a slow watcher before the run's log is read
/// again.
const FEED_BUFFER: usize = 256;

/// The event types a watcher asked for (none: every type).
#[derive(Debug, Clone, Default)]
pub struct EventTypes(Vec<String>);

impl EventTypes {
    /// `types`, each checked to be an event's type (its JSON `type`).
    pub fn parse(types: Vec<String>) -> Result<Self, String> {
        let kinds = RunEvent::KINDS;
        if let Some(unknown) = types.iter().find(|t| !kinds.contains(&t.as_str())) {
            return Err(format!(
                "'{unknown}' is not an event type (the types are {})",
                kinds.join(", ")
            ));
        }
        Ok(Self(types))
    }

    /// Whether an event of type `kind` is wanted.
    pub fn wants(&self, kind: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|t| t == kind)
    }
}

/// Whether `stored` ends its run's log.
fn is_final(stored: &StoredEvent) -> bool {
    matches!(&*stored.event, RunEvent::RunFinished { .. })
}

/// The events of `handle` from `from`, fed by a task on `tracker` that
/// stops with `stop`.
pub(super) async fn feed(
    handle: RunHandle,
    from: u64,
    tracker: &TaskTracker,
    stop: CancellationToken,
) -> Result<EventFeed, RunRequestError> {
    let (past, live) = handle.watch(from).await?;
    let (tx, rx) = mpsc::channel(FEED_BUFFER);
    tracker.spawn(async move {
        let mut next = from;
        let (mut past, mut live) = (past, live);
        loop {
            // In the log, only the last event of an ended run ends the
            // feed: a failure a retry undid is followed by more.
            let ended = live.is_none();
            for (index, stored) in past.iter().enumerate() {
                if stored.seq < next {
                    continue;
                }
                next = stored.seq + 1;
                let last = ended && index + 1 == past.len();
                let end = last && is_final(stored);
                if tx.send(Ok(stored.clone())).await.is_err() || end {
                    return;
                }
            }
            if ended {
                return;
            }
            let Some(mut feed) = live.take() else {
                return;
            };
            loop {
                let received = tokio::select! {
                    received = feed.recv() => received,
                    () = tx.closed() => return,
                    () = stop.cancelled() => return,
                };
                match received {
                    Ok(stored) if stored.seq < next => continue,
                    Ok(stored) => {
                        next = stored.seq + 1;
                        let end = is_final(&stored);
                        if tx.send(Ok(stored)).await.is_err() || end {
                            return;
                        }
                    }
                    // Fallen behind, or the actor ended: what is missed
                    // is in the log (or the run's record).
                    Err(RecvError::Lagged(_) | RecvError::Closed) => break,
                }
            }
            match handle.watch(next).await {
                Ok((missed, fresh)) => (past, live) = (missed, fresh),
                Err(error) => {
                    let _ = tx.send(Err(error)).await;
                    return;
                }
            }
        }
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// A run's stream pieces in order (SPEC 19).
pub type PieceFeed = Pin<Box<dyn Stream<Item = std::sync::Arc<Piece>> + Send>>;

/// Pieces read from the run's stream at once.
const PIECES_READ: usize = 256;

/// The pieces of `streams` from offset `from`, as they come: read from
/// the run's list at the watcher's own pace (the run never waits for it),
/// ending once the run has ended and every piece is read, or with `stop`.
pub fn pieces(
    streams: std::sync::Arc<RunStreams>,
    from: u64,
    stop: CancellationToken,
) -> PieceFeed {
    let feed = async_stream_of(
        move |sender: mpsc::Sender<std::sync::Arc<Piece>>| async move {
            let mut changed = streams.changed();
            let mut at = from;
            loop {
                let mark = *changed.borrow_and_update();
                let read = streams.read(at, PIECES_READ);
                if read.is_empty() {
                    if mark.ended && at >= mark.next {
                        return;
                    }
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = sender.closed() => return,
                        moved = changed.changed() => if moved.is_err() { return },
                    }
                    continue;
                }
                for piece in read {
                    at = piece.offset + 1;
                    if sender.send(piece).await.is_err() {
                        return;
                    }
                }
            }
        },
    );
    Box::pin(feed)
}

/// A stream of what `produce` sends, produced on a task of its own.
fn async_stream_of<T, F, Fut>(produce: F) -> impl Stream<Item = T> + Send
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel(FEED_BUFFER);
    tokio::spawn(produce(sender));
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

#[cfg(test)]
mod types_tests {
    use super::EventTypes;

    #[test]
    fn a_watch_may_ask_for_some_types_and_not_for_an_unknown_one() {
        let all = EventTypes::parse(Vec::new()).unwrap();
        assert!(all.wants("node_started") && all.wants("run_finished"));
        let ends =
            EventTypes::parse(vec!["run_finished".into(), "waiting_for_input".into()]).unwrap();
        assert!(ends.wants("run_finished") && ends.wants("waiting_for_input"));
        assert!(!ends.wants("node_started"));
        let error = EventTypes::parse(vec!["run_finished".into(), "run_ended".into()])
            .expect_err("an unknown type is refused");
        assert!(
            error.contains("'run_ended' is not an event type"),
            "{error}"
        );
        assert!(
            error.contains("map_item_finished"),
            "names the types: {error}"
        );
    }
}
