//! Human input: answers to waiting `approval` and `input` nodes, which are
//! checked before they change anything (their prompts are rendered when they
//! start waiting, in the wave).

use serde_json::Map;

use super::events::*;
use super::output::{answer_writes, finish_output};
use super::*;

impl RunMachine {
    // ----- human input -------------------------------------------------

    pub(super) fn answered(
        &mut self,
        node_id: &str,
        answer: HumanAnswer,
        fx: &mut Vec<Effect>,
    ) -> Result<(), Rejected> {
        let not_waiting = || Rejected::NotWaiting {
            node: node_id.to_owned(),
            waiting: self
                .waiting()
                .into_iter()
                .map(|(node, _, _)| node)
                .collect(),
        };
        let idx = self.graph().node_index(node_id).ok_or_else(not_waiting)?;
        if self.run.nodes[idx] != NodeStatus::Waiting || self.run.status.is_terminal() {
            return Err(not_waiting());
        }
        let node = self.graph().node(idx).clone();
        check_approvers(&node, answer.by.as_ref())?;
        let s0 = self.wave_s0();
        let bad = |reason: &dyn std::fmt::Display| Rejected::BadAnswer {
            node: node_id.to_owned(),
            reason: reason.to_string(),
        };
        let mut writes = answer_writes(&node, &answer).map_err(|e| bad(&e))?;
        // An answer without a comment clears an earlier answer's (a loop
        // asks again): a rejection's reason must not stand beside a later
        // approval.
        if let crate::graph::NodeKind::Approval { output_key, .. } = &node.kind {
            let comment = format!("{output_key}_comment");
            if answer.comment.is_none() && s0.contains_key(&comment) {
                writes.insert(comment, Value::String(String::new()));
            }
        }
        let output = NodeOutput {
            writes,
            output: Some(answer.value.clone()),
            ..NodeOutput::default()
        };
        let (writes, _) = finish_output(
            self.graph(),
            &node,
            || fields_of(&s0, self.plan.update_reads(idx)),
            &Map::new(),
            output,
            true,
            &self.run.meter,
        )
        .map_err(|e| bad(&e))?;
        let by = answer.by.as_ref().map(|caller| caller.name.clone());
        fx.push(Effect::Emit(RunEvent::InputReceived {
            node: node_id.to_owned().into(),
            by: by.clone(),
        }));
        if let Some(by) = by {
            let approved = match &node.kind {
                crate::graph::NodeKind::Approval { output_key, .. } => {
                    writes.get(output_key).and_then(serde_json::Value::as_bool)
                }
                _ => None,
            };
            self.record_answer(Answered {
                node: node_id.to_owned(),
                by,
                approved,
            });
        }
        self.set_member(
            idx,
            Member::Succeeded {
                changes: self.changes(&s0, writes),
                next: None,
            },
        );
        self.run.status = RunStatus::Running;
        self.maybe_finish_wave(fx);
        Ok(())
    }
}

/// Refuses an answer from anyone not among the node's `approvers:`.
fn check_approvers(node: &crate::graph::Node, by: Option<&Caller>) -> Result<(), Rejected> {
    use crate::graph::NodeKind;
    let (NodeKind::Approval { approvers, .. } | NodeKind::Input { approvers, .. }) = &node.kind
    else {
        return Ok(());
    };
    if approvers.is_empty()
        || by.is_some_and(|caller| {
            approvers
                .iter()
                .any(|a| a.admits(&caller.name, &caller.role))
        })
    {
        return Ok(());
    }
    let listed: Vec<String> = approvers.iter().map(ToString::to_string).collect();
    Err(Rejected::NotApprover {
        node: node.id.clone(),
        who: by.map_or_else(
            || "an unnamed caller".to_owned(),
            |c| format!("'{}'", c.name),
        ),
        approvers: listed.join(", "),
    })
}
