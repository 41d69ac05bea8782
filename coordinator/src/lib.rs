//! Weft's coordinator: the pure run state machine that computes waves,
//! merges state and routes, and the cluster around it: one actor per run,
//! the dispatcher that hands tasks to workers, and the gRPC services. The
//! graph model it runs is the `weft-graph` crate, re-exported as [`graph`].

#![warn(missing_docs)]

pub mod auth;
pub mod bundle;
pub mod config;
pub mod dispatch;
pub mod durable;
#[doc(hidden)]
pub mod fuzzing;
pub use weft_graph as graph;
pub mod connections;
mod grpc;
pub mod ha;
mod http;
pub mod metrics;
pub mod run;
pub mod runs;
pub mod server;
pub mod task;
pub mod term;
pub mod tls;
