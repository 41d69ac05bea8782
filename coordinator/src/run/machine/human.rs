//! Human input: answers to waiting `approval` and `input` nodes, which are
//! checked before they change anything (their prompts are rendered when they
//! start waiting, in the wave).

use serde_json::Map;

use super::events::*;
use super::merge::changed_fields;
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
        let idx = self
            .graph()
            .node_index(node_id)
            .ok_or_else(|| Rejected::NotWaiting(node_id.to_owned()))?;
        if self.run.nodes[idx] != NodeStatus::Waiting || self.run.status.is_terminal() {
            return Err(Rejected::NotWaiting(node_id.to_owned()));
        }
        let node = self.graph().node(idx).clone();
        let s0 = self.wave_s0();
        let bad = |reason: &dyn std::fmt::Display| Rejected::BadAnswer {
            node: node_id.to_owned(),
            reason: reason.to_string(),
        };
        let writes = answer_writes(&node, &answer).map_err(|e| bad(&e))?;
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
        )
        .map_err(|e| bad(&e))?;
        fx.push(Effect::Emit(RunEvent::InputReceived {
            node: node_id.to_owned().into(),
        }));
        self.set_member(
            idx,
            Member::Succeeded {
                changes: changed_fields(&s0, writes),
                next: None,
            },
        );
        self.run.status = RunStatus::Running;
        self.maybe_finish_wave(fx);
        Ok(())
    }
}
