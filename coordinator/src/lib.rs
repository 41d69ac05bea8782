//! Weft's coordinator: the cluster around the run machine — one actor per
//! run, the dispatcher that hands tasks to workers, the store, and the gRPC
//! and HTTP front doors. The machine that computes waves, merges state and
//! routes is the `weft-machine` crate (re-exported as [`run_actor::machine`]),
//! pure by construction; the graph model it runs is the `weft-graph`
//! crate, re-exported as [`graph`].

#![warn(missing_docs)]

pub mod access;
pub mod auth;
pub mod bundle;
pub mod config;
pub mod dispatch;
pub mod durable;
#[doc(hidden)]
pub mod fuzzing;
pub use weft_graph as graph;
pub mod connections;
pub mod day_spend;
mod grpc;
pub mod ha;
mod http;
pub mod indexes;
pub mod metrics;
pub mod node_cache;
pub mod prices;
pub mod run_actor;
pub mod runs;
pub mod server;
pub use weft_machine::task;
pub mod term;
pub mod tls;
