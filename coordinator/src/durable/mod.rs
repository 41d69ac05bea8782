//! Durable runs: what the coordinator keeps in its store so a run outlives
//! the process that started it (SPEC 9). [`records`] is the stored format.

pub mod journal;
pub mod records;
pub mod restore;
