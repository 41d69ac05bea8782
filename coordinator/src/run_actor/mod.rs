//! One run's actor, which carries out what the run's machine decides
//! (`actor`: dispatch, timers, checkpoints, child runs, the event log,
//! spans), with the machine's types re-exported beside it ([`machine`],
//! the `weft-machine` crate: waves, merge, routing, loops, human input and
//! map bookkeeping; SPEC sections 3, 5 and 7). The registry of every run is
//! `runs`.
//!
//! [`RunMachine::apply`] takes an [`Input`] and returns [`Effect`]s; it does
//! no I/O and reads no clock. A run's actor owns one machine, performs its
//! effects and feeds what happens back as inputs; everything else reaches
//! the run through a [`RunHandle`]. Tests drive the machine the same way,
//! with no network.

mod actor;
mod step_marks;
pub mod streams;
pub use weft_machine as machine;

pub use actor::{
    ChildOutcome, ChildRuns, FinishedRun, History, Pending, RunHandle, RunRequestError, RunSetup,
    RunView, Start, StoredEvent, UnhostedWait, WaitReports, spawn_run,
};
pub use machine::events::*;
pub use machine::merge;
pub use machine::{
    Answered, Caller, NodeStatus, Owner, Progress, ProgressMismatch, Query, RunInput, RunLimits,
    RunMachine, RunPlan,
};
pub use step_marks::StepMarks;

/// A run's progress is what its stored record holds of its machine.
impl crate::durable::restore::Progress for Progress {
    fn set_state(&mut self, state: serde_json::Map<String, serde_json::Value>) {
        Progress::set_state(self, state);
    }
}
