//! A run forked from another's history (SPEC 20): the original's progress
//! after one of its waves, with fields of its state replaced, continued as
//! a new run.
//!
//! The progress is the checkpoint the original took once that wave had
//! merged: the edges it decided are taken, and the next wave, when it had
//! begun, is the fork's first — its steps sent to workers again, reading
//! the fork's state (the replaced fields included). A checkpoint taken
//! while that wave was at work keeps what it had done: a map's finished
//! items, a loop's iterations (the replaced fields replace what items and
//! iterations in progress wrote of them, so their next steps read them).
//! Child runs in progress are the original's, so the fork starts its own
//! afresh — except the child a fork of a child run is made for, which the
//! parent's fork takes on. What the original's model calls used is not
//! the fork's; who answered its earlier waves' questions is.

use std::sync::Arc;

use serde_json::{Map, Value};
use weft_proto::events::ForkedFrom;

use super::events::*;
use super::output::{WriteError, check_writes};
use super::wave::Member;
use super::*;

/// Why a fork cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    /// A field given is not one the graph's `state:` declares, under
    /// `strict_state`.
    #[error(
        "cannot set field '{field}': the graph's `state:` does not declare it (settings.strict_state is on)"
    )]
    Undeclared {
        /// The field.
        field: String,
    },
    /// A field given is not of its declared type.
    #[error("cannot set field '{field}' to {got}: it is declared {declared}")]
    WrongType {
        /// The field.
        field: String,
        /// What was given.
        got: &'static str,
        /// What is declared.
        declared: &'static str,
    },
    /// A field given does not fit the graph's state otherwise.
    #[error("cannot set the state: {0}")]
    Other(String),
    /// The progress does not fit the graph.
    #[error(transparent)]
    Mismatch(#[from] ProgressMismatch),
}

impl From<WriteError> for ForkError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::Undeclared { field } => Self::Undeclared { field },
            WriteError::WrongType {
                field,
                got,
                declared,
            } => Self::WrongType {
                field,
                got,
                declared,
            },
            other => Self::Other(other.to_string()),
        }
    }
}

impl RunMachine {
    /// A run for `owner` that continues from `progress` (`from`'s, at a
    /// place in its history) with `set` replacing fields of its state;
    /// `adopt` is `(child, its fork)` when the fork is made for a fork of
    /// one of its child runs. Nothing runs until
    /// [`RunMachine::start_fork`].
    pub fn fork(
        plan: Arc<RunPlan>,
        mut progress: Progress,
        set: Map<String, Value>,
        owner: Owner,
        from: ForkedFrom,
        adopt: Option<(&RunId, &RunId)>,
    ) -> Result<Self, ForkError> {
        let graph = plan.graph();
        check_writes(graph, &set, graph.settings.strict_state)?;
        if let Some(wave) = &mut progress.wave {
            wave.fork_members(&set, adopt);
        }
        Arc::make_mut(&mut progress.state).extend(set);
        progress.owner = owner;
        progress.usage = BTreeMap::new();
        progress.forked_from = Some(from);
        Ok(Self::restore(plan, progress)?)
    }

    /// Where a fork came from.
    pub fn forked_from(&self) -> Option<&ForkedFrom> {
        self.run.forked_from.as_ref()
    }

    /// Records who forked the run and from where, then goes on from its
    /// progress: its next wave, or the one that had begun (told as
    /// started, its steps sent again, the child run it took on told as
    /// started). A fork of a run's end ends at once, as the original did.
    pub fn start_fork(&mut self) -> Vec<Effect> {
        let owner = &self.run.owner;
        let mut fx = vec![Effect::Emit(RunEvent::RunSubmitted {
            by: owner.submitted_by.clone(),
            namespace: owner.namespace.clone(),
            forked_from: self.run.forked_from.clone(),
        })];
        if self.run.status.is_terminal() {
            let error = self.run.error.clone();
            self.finish(self.run.status, error, &mut fx);
            return fx;
        }
        // The wave the original had begun is the fork's first: its log
        // says so, as it says of every wave.
        if let Some(wave) = &self.run.wave {
            fx.push(Effect::Emit(RunEvent::WaveStarted {
                step: wave.step(),
                nodes: wave
                    .members()
                    .iter()
                    .map(|&idx| self.graph().node(idx).id.clone())
                    .collect(),
            }));
            for (idx, slot) in wave.iter() {
                if let Member::Child {
                    run_id: Some(run_id),
                    ..
                } = slot
                {
                    fx.push(Effect::Emit(RunEvent::SubgraphStarted {
                        node: self.graph().node(idx).id.clone().into(),
                        run_id: run_id.clone(),
                    }));
                }
            }
        }
        let mut fx = self.pick_up(fx, false);
        // A wave whose members left wait for people (an approval the
        // original had asked) asks them again, in the fork's own log.
        self.maybe_finish_wave(&mut fx);
        fx
    }
}
