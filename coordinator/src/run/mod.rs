//! The run state machine (SPEC sections 3, 5 and 7): waves, merge, routing,
//! loops, human input and map bookkeeping, as pure code.
//!
//! [`RunMachine::apply`] takes an [`Input`] and returns [`Effect`]s; it does
//! no I/O and reads no clock. A run actor owns one machine, performs its
//! effects (dispatch, timers, persistence, notifications) and feeds what
//! happens back as inputs. Tests drive it the same way, with no network.

mod actor;
mod checkpoints;
mod child_runs;
mod ending;
mod events;
mod field_table;
mod handle;
mod human;
mod limits;
mod machine;
mod map_run;
pub mod merge;
mod node_output;
mod output;
mod plan;
mod prompts;
mod recovery;
mod routing;
mod subgraphs;
mod task_table;
mod tasks;
mod team_messages;
mod wave;
mod waves;

pub use actor::{History, RunSetup, Start, spawn_run};
pub use child_runs::{ChildRuns, Pending};
pub use events::*;
pub use handle::{FinishedRun, RunHandle, RunRequestError, RunView, StoredEvent, UnhostedWait};
pub use limits::RunLimits;
pub use machine::{NodeStatus, Progress, ProgressMismatch, RunMachine};
pub use plan::RunPlan;
pub use routing::Query;

#[cfg(test)]
mod tests;
