//! Weft's coordinator: the graph model (parse, validate, diagram), the pure
//! run state machine that computes waves, merges state and routes, and the
//! cluster around it: one actor per run, the dispatcher that hands tasks to
//! workers, and the gRPC services.

#![warn(missing_docs)]

pub mod bundle;
pub mod config;
pub mod dispatch;
pub mod graph;
mod grpc;
pub mod metrics;
pub mod run;
pub mod runs;
pub mod server;
