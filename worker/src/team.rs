//! Teammates on the worker's side (SPEC 5): what a `teammates: true` step
//! of a map item knows of its team, and how a Rust handler talks to it.
//!
//! The coordinator holds every inbox. A flagged step is dispatched with its
//! identity, the members and its unread messages; a handler's step also
//! receives the messages sent to it while it runs, and sends through the
//! worker's stream, each send answered by the coordinator (accepted, or
//! refused with why). When the step ends the worker reports how many
//! messages it read; the coordinator keeps the rest for the item's next
//! flagged step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_proto::RunId;
use weft_proto::TaskKey;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use weft_proto::worker_protocol::{FromWorker, TeamSend};
pub use weft_proto::worker_protocol::{TeamMessage, TeamSeat};

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TeamError {
    /// The step has no team.
    #[error(
        "this step has no team: teammates are the items of a map with at least two items, seen by \
         its branch's `teammates: true` steps"
    )]
    NoTeam,
    /// The recipient is not a member.
    #[error("'{to}' is not a member of this team (members: {members})")]
    NotAMember {
        /// The identity named.
        to: String,
        /// The team.
        members: String,
    },
    /// The content does not serialize.
    #[error("the message does not serialize: {0}")]
    Content(String),
    /// The coordinator refused it (a full inbox, say).
    #[error("{0}")]
    Refused(String),
    /// The connection to the coordinator ended before it answered.
    #[error("the coordinator did not answer the send (its connection ended)")]
    Disconnected,
}

/// Answers to sends, by send id, shared by a session's tasks.
#[derive(Debug, Default)]
pub(crate) struct Acks {
    next: AtomicU64,
    /// Each send's waiting sender, told the coordinator's refusal (`None`:
    /// taken).
    waiting: Mutex<HashMap<u64, oneshot::Sender<Option<String>>>>,
}

impl Acks {
    fn expect(&self) -> (u64, oneshot::Receiver<Option<String>>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("acks lock").insert(id, tx);
        (id, rx)
    }

    /// The coordinator answered send `id`: taken, or refused with why.
    pub(crate) fn answered(&self, id: u64, refusal: Option<String>) {
        let waiter = self.waiting.lock().expect("acks lock").remove(&id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(refusal);
        }
    }
}

/// A flagged step's team.
#[derive(Clone)]
pub struct Team {
    me: String,
    members: Arc<[String]>,
    link: Arc<Link>,
}

struct Link {
    run_id: RunId,
    task_key: TaskKey,
    inbox: tokio::sync::Mutex<mpsc::UnboundedReceiver<TeamMessage>>,
    read: Mutex<Vec<u64>>,
    /// The session's stream ([`FromWorker::TeamSend`]).
    outbound: mpsc::Sender<FromWorker>,
    acks: Arc<Acks>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("me", &self.me)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Team {
    fn eq(&self, other: &Self) -> bool {
        self.me == other.me && self.members == other.members
    }
}

/// The worker's end of a handler's team: where deliveries go, and how
/// many messages the handler read.
pub(crate) struct TeamEnd {
    pub(crate) deliveries: mpsc::UnboundedSender<TeamMessage>,
    link: Arc<Link>,
}

impl TeamEnd {
    /// The numbers of the messages the step read so far.
    pub(crate) fn read(&self) -> Vec<u64> {
        self.link.read.lock().expect("read lock").clone()
    }
}

/// Where a team sends from: the task and the session's stream.
pub(crate) struct Sender {
    pub(crate) run_id: RunId,
    pub(crate) task_key: TaskKey,
    pub(crate) outbound: mpsc::Sender<FromWorker>,
    pub(crate) acks: Arc<Acks>,
}

impl Team {
    /// A handler's team from its assignment's seat, with the inbox the
    /// seat brought queued first.
    pub(crate) fn open(seat: TeamSeat, sender: Sender) -> (Self, TeamEnd) {
        let (deliveries, inbox) = mpsc::unbounded_channel();
        for message in seat.inbox {
            let _ = deliveries.send(message);
        }
        let link = Arc::new(Link {
            run_id: sender.run_id,
            task_key: sender.task_key,
            inbox: tokio::sync::Mutex::new(inbox),
            read: Mutex::new(Vec::new()),
            outbound: sender.outbound,
            acks: sender.acks,
        });
        let team = Self {
            me: seat.me,
            members: seat.members,
            link: link.clone(),
        };
        (team, TeamEnd { deliveries, link })
    }

    /// This item's identity, `MAP/INDEX`.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Every member's identity, this item's included.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Sends `content` to the member `to`; returns once the coordinator has
    /// accepted it (it then waits in `to`'s inbox, or reaches its running
    /// step at once).
    pub async fn send(&self, to: &str, content: impl Serialize) -> Result<(), TeamError> {
        if !self.members.iter().any(|m| m == to) {
            return Err(TeamError::NotAMember {
                to: to.to_owned(),
                members: self.members.join(", "),
            });
        }
        let content =
            serde_json::to_value(&content).map_err(|e| TeamError::Content(e.to_string()))?;
        let link = &self.link;
        let (send_id, answer) = link.acks.expect();
        let send = FromWorker::TeamSend {
            run_id: link.run_id.clone(),
            key: link.task_key,
            send: TeamSend {
                send_id,
                to: to.to_owned(),
                content: Ok(content),
            },
        };
        if link.outbound.send(send).await.is_err() {
            link.acks.answered(send_id, None);
            return Err(TeamError::Disconnected);
        }
        match answer.await {
            Ok(None) => Ok(()),
            Ok(Some(why)) => Err(TeamError::Refused(why)),
            Err(_) => Err(TeamError::Disconnected),
        }
    }

    /// Takes every message that has arrived, in arrival order, without
    /// waiting. Reading drains them.
    pub fn inbox(&self) -> Vec<TeamMessage> {
        let Ok(mut inbox) = self.link.inbox.try_lock() else {
            return Vec::new();
        };
        let mut messages = Vec::new();
        while let Ok(message) = inbox.try_recv() {
            messages.push(message);
        }
        let mut read = self.link.read.lock().expect("read lock");
        read.extend(messages.iter().map(|m| m.seq));
        messages
    }

    /// Waits up to `timeout` for the next message.
    pub async fn recv(&self, timeout: Duration) -> Option<TeamMessage> {
        let mut inbox = self.link.inbox.lock().await;
        let message = tokio::time::timeout(timeout, inbox.recv()).await.ok()??;
        self.link.read.lock().expect("read lock").push(message.seq);
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn seat(inbox: &[&str]) -> TeamSeat {
        TeamSeat {
            me: "fan/0".into(),
            members: vec!["fan/0".to_owned(), "fan/1".to_owned()].into(),
            inbox: inbox
                .iter()
                .enumerate()
                .map(|(i, c)| TeamMessage {
                    from: "fan/1".into(),
                    content: json!(c),
                    seq: i as u64 + 1,
                })
                .collect(),
        }
    }

    fn open(inbox: &[&str]) -> (Team, TeamEnd, mpsc::Receiver<FromWorker>, Arc<Acks>) {
        let (outbound, sent) = mpsc::channel(8);
        let acks = Arc::new(Acks::default());
        let sender = Sender {
            run_id: "r".into(),
            task_key: TaskKey(4),
            outbound,
            acks: acks.clone(),
        };
        let (team, end) = Team::open(seat(inbox), sender);
        (team, end, sent, acks)
    }

    #[tokio::test]
    async fn the_seat_inbox_comes_first_and_reads_are_counted() {
        let (team, end, _sent, _) = open(&["a", "b"]);
        assert_eq!(team.me(), "fan/0");
        end.deliveries
            .send(TeamMessage {
                from: "fan/1".into(),
                content: json!("c"),
                seq: 5,
            })
            .unwrap();
        let first = team.recv(Duration::from_secs(1)).await.unwrap();
        assert_eq!(first.content, json!("a"));
        assert_eq!(end.read(), [1]);
        let rest: Vec<Value> = team.inbox().into_iter().map(|m| m.content).collect();
        assert_eq!(rest, [json!("b"), json!("c")]);
        assert_eq!(end.read(), [1, 2, 5]);
        assert_eq!(team.recv(Duration::from_millis(10)).await, None);
    }

    #[tokio::test]
    async fn a_send_waits_for_the_coordinators_answer() {
        let (team, _end, mut sent, acks) = open(&[]);
        let stranger = team.send("fan/9", 1).await.unwrap_err();
        assert_eq!(
            stranger.to_string(),
            "'fan/9' is not a member of this team (members: fan/0, fan/1)"
        );
        let answer = tokio::spawn({
            let acks = acks.clone();
            async move {
                let Some(FromWorker::TeamSend { key, send, .. }) = sent.recv().await else {
                    panic!("no send went out");
                };
                assert_eq!((send.to.as_str(), key), ("fan/1", TaskKey(4)));
                assert_eq!(send.content, Ok(json!({"n": 1})));
                acks.answered(send.send_id, Some("the inbox is full".into()));
            }
        });
        let refused = team.send("fan/1", json!({"n": 1})).await.unwrap_err();
        assert_eq!(refused, TeamError::Refused("the inbox is full".into()));
        answer.await.unwrap();
    }
}
