//! Teammate inboxes (SPEC 5, seed 003's "Teammate messaging in fan-outs"):
//! one identity and one inbox per item of a map whose branch has a
//! `teammates: true` step, provisioned before any item starts, so a fast
//! item can message one that has not started yet.
//!
//! An inbox holds what waits unread and what it handed to the item's
//! flagged step in flight: a script's stdin, or a Rust handler's messages
//! delivered while it runs. Messages are numbered per inbox, and a step
//! says which it read when it returns; the rest go back to the front of
//! the inbox (a message lost on its way to a worker that died among them),
//! and a failed
//! attempt gives back everything, so its retry (or the next flagged step)
//! sees them again: messages are read at least once, like nodes run.
//! Everything here is part of the map's state, and so of the checkpoint.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::events::{Outgoing, RunEvent, TaskKey, TeamMessage, TeamSeat};
use super::super::plan::RunPlan;
use super::MapRun;
use crate::graph::NodeIdx;
use weft_proto::ItemKey;

/// Largest content shown in a `message_sent` event, as JSON.
const SHOWN_CONTENT_BYTES: usize = 1024;

/// A map's team: its members' identities and inboxes, by item.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Team {
    members: Arc<[String]>,
    inboxes: Vec<Inbox>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Inbox {
    unread: VecDeque<TeamMessage>,
    /// Handed to `holder` and not yet known to be read.
    taken: Vec<TeamMessage>,
    holder: Option<Holder>,
    /// The item's chain ended: what still arrives is accepted, never read.
    ended: bool,
    /// The last number given to a message.
    #[serde(default)]
    last_seq: u64,
}

/// The item's flagged step in flight.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Holder {
    key: TaskKey,
    /// It takes messages while it runs (a Rust handler).
    live: bool,
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SendError {
    /// The sending step is not one of a team's.
    #[error(
        "node '{0}' has no team to send to: teammates are the items of a map with at least \
         two items, seen by its branch's `teammates: true` steps"
    )]
    NoTeam(String),
    /// The sender is not a running step of a map item.
    #[error("the sending step is not running in a map item")]
    NotInItem,
    /// The sender's map has ended.
    #[error("the sending step's map is not running")]
    MapEnded,
    /// The recipient is not a member of the sender's team.
    #[error("'{to}' is not a member of this team (members: {members})")]
    NotAMember {
        /// The identity named.
        to: String,
        /// The team's identities.
        members: String,
    },
    /// The recipient's inbox is full.
    #[error(
        "the inbox of '{to}' holds {limit} messages, as many as it may (configuration key max_inbox_messages)"
    )]
    InboxFull {
        /// The recipient.
        to: String,
        /// The limit.
        limit: usize,
    },
}

/// Where a sent message went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Delivery {
    /// Into the recipient's inbox, to wait for its next flagged step.
    Queued,
    /// To the recipient's step in flight, which takes messages as it runs.
    Live(TaskKey),
    /// The recipient's chain has ended: accepted and never read.
    Unread,
}

impl Team {
    /// Whether map `map` over `items` items has a team: some step of its
    /// branch has `teammates: true`, and there are at least two items.
    pub(crate) fn wanted(plan: &RunPlan, map: NodeIdx, items: usize) -> bool {
        items >= 2
            && plan
                .branch_members(map)
                .iter()
                .enumerate()
                .any(|(idx, &member)| member && plan.graph().node(idx).teammates)
    }

    /// One identity (`MAP/INDEX`) and one empty inbox per item.
    pub(crate) fn provision(map: &str, items: usize) -> Self {
        Self {
            members: (0..items)
                .map(|i| ItemKey::new(map, i as u64).to_string())
                .collect(),
            inboxes: (0..items).map(|_| Inbox::default()).collect(),
        }
    }

    /// Hands item `index`'s unread messages to its flagged step `key`:
    /// the seat the step is dispatched with.
    pub(crate) fn seat(&mut self, index: usize, key: TaskKey, live: bool) -> TeamSeat {
        let inbox = &mut self.inboxes[index];
        inbox.taken.extend(inbox.unread.drain(..));
        inbox.holder = Some(Holder { key, live });
        TeamSeat {
            me: self.members[index].clone(),
            members: self.members.clone(),
            inbox: inbox.taken.clone(),
        }
    }

    /// The seat of a step dispatched again after a restart: every message
    /// handed to it so far, those delivered while it ran included.
    pub(crate) fn reseat(&self, index: usize, key: TaskKey) -> Option<TeamSeat> {
        let inbox = &self.inboxes[index];
        (inbox.holder?.key == key).then(|| TeamSeat {
            me: self.members[index].clone(),
            members: self.members.clone(),
            inbox: inbox.taken.clone(),
        })
    }

    /// Item `index`'s flagged step `key` returned, having read the
    /// messages numbered `read` of those handed to it (`None`: the attempt
    /// failed, and read none for good). The others go back to the front of
    /// the inbox, in their order.
    pub(crate) fn step_returned(&mut self, index: usize, key: TaskKey, read: Option<&[u64]>) {
        let inbox = &mut self.inboxes[index];
        if inbox.holder.is_none_or(|h| h.key != key) {
            return;
        }
        inbox.holder = None;
        let read: std::collections::HashSet<u64> =
            read.unwrap_or_default().iter().copied().collect();
        let kept: Vec<TeamMessage> = inbox
            .taken
            .drain(..)
            .filter(|m| !read.contains(&m.seq))
            .collect();
        for message in kept.into_iter().rev() {
            inbox.unread.push_front(message);
        }
    }

    /// Item `index`'s chain ended: what its inbox holds is never read.
    pub(crate) fn item_ended(&mut self, index: usize) {
        let inbox = &mut self.inboxes[index];
        *inbox = Inbox {
            ended: true,
            last_seq: inbox.last_seq,
            ..Inbox::default()
        };
    }

    /// Checks that `to` can take one more message, beyond `pending` already
    /// counted for it; its index when it can.
    pub(crate) fn check(&self, to: &str, pending: usize, limit: usize) -> Result<usize, SendError> {
        let index = self.index_of(to).ok_or_else(|| SendError::NotAMember {
            to: to.to_owned(),
            members: self.listed(),
        })?;
        let inbox = &self.inboxes[index];
        if !inbox.ended && inbox.unread.len() + inbox.taken.len() + pending >= limit {
            return Err(SendError::InboxFull {
                to: to.to_owned(),
                limit,
            });
        }
        Ok(index)
    }

    /// The item whose identity is `to` (`MAP/INDEX`), found by its index
    /// rather than by searching every member: a map may have many items.
    fn index_of(&self, to: &str) -> Option<usize> {
        let index = usize::try_from(ItemKey::parse(to)?.index).ok()?;
        (self.members.get(index)? == to).then_some(index)
    }

    /// The members as an error shows them: all of a small team, the ends
    /// of a large one.
    fn listed(&self) -> String {
        const SHOWN: usize = 10;
        let count = self.members.len();
        if count <= SHOWN {
            return self.members.join(", ");
        }
        format!(
            "{}, {}, …, {} ({count} members)",
            self.members[0],
            self.members[1],
            self.members[count - 1]
        )
    }

    /// Sends `content` from item `from` to `to`.
    pub(crate) fn send(
        &mut self,
        from: usize,
        to: &str,
        content: Value,
        limit: usize,
    ) -> Result<(Delivery, TeamMessage), SendError> {
        let index = self.check(to, 0, limit)?;
        let inbox = &mut self.inboxes[index];
        inbox.last_seq += 1;
        let message = TeamMessage {
            seq: inbox.last_seq,
            from: self.members[from].clone(),
            content,
        };
        let delivery = match inbox.holder {
            _ if inbox.ended => Delivery::Unread,
            Some(Holder { key, live: true }) => {
                inbox.taken.push(message.clone());
                Delivery::Live(key)
            }
            _ => {
                inbox.unread.push_back(message.clone());
                Delivery::Queued
            }
        };
        Ok((delivery, message))
    }

    /// Messages waiting in every inbox (unread or handed to a step).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.inboxes
            .iter()
            .map(|i| i.unread.len() + i.taken.len())
            .sum()
    }
}

/// A message accepted: what watchers see, and the running step to hand it
/// to now, if its recipient's step takes messages as it runs.
pub(crate) type Sent = (RunEvent, Option<(TaskKey, TeamMessage)>);

impl MapRun {
    fn team_of(&self, plan: &RunPlan, node: NodeIdx) -> Result<&Team, SendError> {
        match &self.team {
            Some(team) if plan.graph().node(node).teammates => Ok(team),
            _ => Err(SendError::NoTeam(plan.graph().node(node).id.clone())),
        }
    }

    /// The team seat of item `index`'s step `key` (running `node`), when
    /// the step is flagged and the map has a team: it takes the item's
    /// unread messages. `live` steps take more as they run.
    pub fn seat(
        &mut self,
        plan: &RunPlan,
        node: NodeIdx,
        index: usize,
        key: TaskKey,
        live: bool,
    ) -> Option<TeamSeat> {
        self.team_of(plan, node).ok()?;
        Some(self.team.as_mut()?.seat(index, key, live))
    }

    /// The seat of step `key` dispatched again after a restart.
    pub fn reseat(&self, index: usize, key: TaskKey) -> Option<TeamSeat> {
        self.team.as_ref()?.reseat(index, key)
    }

    /// Item `index`'s step `key` returned, having read the messages
    /// numbered `read` (`None`: the attempt failed).
    pub fn step_returned(&mut self, index: usize, key: TaskKey, read: Option<&[u64]>) {
        if let Some(team) = &mut self.team {
            team.step_returned(index, key, read);
        }
    }

    /// Checks a step's `_send` before the step is accepted: the step must
    /// have a team, and every recipient must be a member with room.
    pub(super) fn check_sends(
        &self,
        plan: &RunPlan,
        node: NodeIdx,
        sends: &[Outgoing],
    ) -> Result<(), SendError> {
        if sends.is_empty() {
            return Ok(());
        }
        let team = self.team_of(plan, node)?;
        let limit = plan.limits().max_inbox_messages;
        let mut pending: HashMap<&str, usize> = HashMap::new();
        for send in sends {
            let counted = pending.entry(&send.to).or_default();
            team.check(&send.to, *counted, limit)?;
            *counted += 1;
        }
        Ok(())
    }

    /// Sends a message from item `from`'s step running `node`.
    pub fn send(
        &mut self,
        plan: &RunPlan,
        node: NodeIdx,
        from: usize,
        outgoing: Outgoing,
    ) -> Result<Sent, SendError> {
        self.team_of(plan, node)?;
        let limit = plan.limits().max_inbox_messages;
        let team = self.team.as_mut().expect("checked above");
        let to = outgoing.to;
        let (delivery, message) = team.send(from, &to, outgoing.content, limit)?;
        let json = message.content.to_string();
        let event = RunEvent::MessageSent {
            node: self.id.clone(),
            from: message.from.clone(),
            to,
            bytes: json.len() as u64,
            content: (json.len() <= SHOWN_CONTENT_BYTES).then(|| message.content.clone()),
        };
        let live = match delivery {
            Delivery::Live(key) => Some((key, message)),
            Delivery::Queued | Delivery::Unread => None,
        };
        Ok((event, live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_waits_for_an_item_that_has_not_started() {
        let mut team = Team::provision("fan", 3);
        let (delivery, _) = team.send(0, "fan/2", json!("hi"), 10).unwrap();
        assert_eq!(delivery, Delivery::Queued);
        let seat = team.seat(2, TaskKey(7), false);
        assert_eq!(seat.me, "fan/2");
        assert_eq!(&*seat.members, ["fan/0", "fan/1", "fan/2"]);
        assert_eq!(
            seat.inbox,
            [TeamMessage {
                seq: 1,
                from: "fan/0".into(),
                content: json!("hi")
            }]
        );
        team.step_returned(2, TaskKey(7), Some(&[1]));
        assert_eq!(team.seat(2, TaskKey(8), false).inbox, [], "reading drains");
    }

    #[test]
    fn a_live_step_gets_messages_as_it_runs_and_gives_back_what_it_did_not_read() {
        let mut team = Team::provision("fan", 2);
        team.send(1, "fan/0", json!(1), 10).unwrap();
        assert_eq!(team.seat(0, TaskKey(3), true).inbox.len(), 1);
        let (delivery, _) = team.send(1, "fan/0", json!(2), 10).unwrap();
        assert_eq!(delivery, Delivery::Live(TaskKey(3)));
        team.send(1, "fan/0", json!(3), 10).unwrap();
        // It read the first and the third; the second never reached it.
        team.step_returned(0, TaskKey(3), Some(&[1, 3]));
        let again = team.seat(0, TaskKey(4), false);
        assert_eq!(again.inbox.len(), 1);
        assert_eq!(again.inbox[0].content, json!(2));
    }

    #[test]
    fn a_failed_attempt_gives_back_everything_it_was_handed() {
        let mut team = Team::provision("fan", 2);
        team.send(1, "fan/0", json!("a"), 10).unwrap();
        team.seat(0, TaskKey(3), false);
        team.send(1, "fan/0", json!("b"), 10).unwrap();
        team.step_returned(0, TaskKey(3), None);
        let contents: Vec<Value> = team
            .seat(0, TaskKey(4), false)
            .inbox
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(contents, [json!("a"), json!("b")], "arrival order kept");
        team.step_returned(0, TaskKey(99), Some(&[1, 2]));
        assert_eq!(team.waiting(), 2, "a stale key changes nothing");
    }

    #[test]
    fn a_large_teams_members_are_listed_by_their_ends() {
        let team = Team::provision("fan", 500);
        assert_eq!(team.index_of("fan/499"), Some(499));
        assert_eq!(team.index_of("fan/500"), None);
        assert_eq!(team.index_of("other/3"), None);
        let error = team.check("fan/x", 0, 10).unwrap_err();
        assert_eq!(
            error.to_string(),
            "'fan/x' is not a member of this team (members: fan/0, fan/1, …, fan/499 (500 members))"
        );
    }

    #[test]
    fn strangers_and_full_inboxes_are_refused_and_ended_items_accept_unread() {
        let mut team = Team::provision("fan", 2);
        let error = team.send(0, "other/1", json!(1), 10).unwrap_err();
        assert_eq!(
            error.to_string(),
            "'other/1' is not a member of this team (members: fan/0, fan/1)"
        );
        team.send(0, "fan/1", json!(1), 2).unwrap();
        team.send(0, "fan/1", json!(2), 2).unwrap();
        let full = team.send(0, "fan/1", json!(3), 2).unwrap_err();
        assert!(matches!(full, SendError::InboxFull { limit: 2, .. }));
        team.item_ended(1);
        for n in 0..5 {
            let (delivery, _) = team.send(0, "fan/1", json!(n), 2).unwrap();
            assert_eq!(delivery, Delivery::Unread);
        }
        assert_eq!(team.waiting(), 0);
    }
}
