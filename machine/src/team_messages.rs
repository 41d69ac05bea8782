//! Teammate messages in the run machine (SPEC 5): a flagged step of a map
//! item is dispatched with its team seat and inbox, tells on return how
//! much of it it read, and sends either as it runs (a Rust handler, through
//! [`Input::TeamSend`]) or when it is accepted (a script's `_send`). The
//! inboxes themselves live with their map ([`MapRun`]); the messages and
//! seats the machine hands out are `crate::task`'s.

use super::events::*;
use super::map_run::{MapRun, SendError};
use super::plan::RunPlan;
use super::*;
use crate::graph::{NodeIdx, NodeKind};

/// The team seat of `task`, if it is a flagged step of an item whose map
/// has a team; the item's unread messages are handed to it.
pub(super) fn seat_for(
    wave: &mut Option<Wave>,
    plan: &RunPlan,
    task: &TaskRef,
) -> Option<TeamSeat> {
    let node = plan.graph().node(task.node);
    let item = task.spec.item.as_ref()?;
    if !node.teammates {
        return None;
    }
    let map = plan.graph().node_index(&item.map)?;
    let Member::Mapping(run) = wave.as_mut()?.member_mut(map)? else {
        return None;
    };
    // A Rust handler or an agent takes messages while it runs; a script
    // read its inbox once, on stdin.
    let live = matches!(node.kind, NodeKind::Task { .. } | NodeKind::Agent(_));
    run.seat(plan, task.node, item.index, task.spec.key, live)
}

impl RunMachine {
    fn map_of(&mut self, item: &ItemRef) -> Option<&mut MapRun> {
        let map = self.graph().node_index(&item.map)?;
        self.map_mut(map)
    }

    /// The seat of item `item`'s step `key`, dispatched again after a
    /// restart.
    pub(super) fn reseat(&mut self, item: &ItemRef, key: TaskKey) -> Option<TeamSeat> {
        self.map_of(item)?.reseat(item.index, key)
    }

    /// Item `item`'s step `key` returned, having read the messages
    /// numbered `read` (`None`: the attempt failed).
    pub(super) fn team_step_returned(
        &mut self,
        item: &ItemRef,
        key: TaskKey,
        read: Option<&[u64]>,
    ) {
        if let Some(run) = self.map_of(item) {
            run.step_returned(item.index, key, read);
        }
    }

    /// Sends what an accepted step of item `item` (running `node`) asked
    /// to send. The step's `_send` was checked before it was accepted.
    pub(super) fn send_all(
        &mut self,
        node: NodeIdx,
        item: &ItemRef,
        sends: Vec<Outgoing>,
        fx: &mut Vec<Effect>,
    ) {
        let plan = self.plan.clone();
        let Some(run) = self.map_of(item) else { return };
        for outgoing in sends {
            match run.send(&plan, node, item.index, outgoing) {
                Ok(sent) => deliver(sent, fx),
                // Checked with the step's output; nothing changed since.
                Err(error) => tracing::warn!(%error, "a checked `_send` was refused"),
            }
        }
    }

    /// A running task sent a message: it is accepted or refused at once.
    pub(super) fn team_send(
        &mut self,
        key: TaskKey,
        send_id: u64,
        message: Outgoing,
        fx: &mut Vec<Effect>,
    ) {
        let result = self.live_send(key, message, fx);
        fx.push(Effect::SendAck {
            key,
            send_id,
            error: result.err().map(|error| error.to_string()),
        });
    }

    fn live_send(
        &mut self,
        key: TaskKey,
        message: Outgoing,
        fx: &mut Vec<Effect>,
    ) -> Result<(), SendError> {
        let (node, item) = self
            .run
            .tasks
            .get(key)
            .filter(|task| task.in_flight)
            .and_then(|task| Some((task.node, task.spec.item.clone()?)))
            .ok_or(SendError::NotInItem)?;
        let plan = self.plan.clone();
        let run = self.map_of(&item).ok_or(SendError::MapEnded)?;
        deliver(run.send(&plan, node, item.index, message)?, fx);
        Ok(())
    }
}

fn deliver((event, live): super::map_run::Sent, fx: &mut Vec<Effect>) {
    fx.push(Effect::Emit(event));
    if let Some((key, message)) = live {
        fx.push(Effect::Deliver { key, message });
    }
}
