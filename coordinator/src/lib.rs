//! Weft's coordinator: the graph model (parse, validate, diagram) and the
//! pure run state machine that computes waves, merges state and routes.
//!
//! The cluster side (run actors, dispatch, stores, gRPC) builds on these two
//! pure modules and comes with the cluster issue.

#![warn(missing_docs)]

pub mod graph;
pub mod run;
