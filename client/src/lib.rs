//! Weft's client library: submit graphs to a coordinator, follow runs and
//! steer them. No generated protobuf type appears in this API; the `.proto`
//! files are the contract for clients in other languages.
//!
//! ```no_run
//! # async fn example() -> Result<(), weft_client::ClientError> {
//! use serde_json::json;
//! let client = weft_client::Client::connect("http://127.0.0.1:7700").await?;
//! let submitted = client.submit_file("examples/critique-loop.yaml".as_ref(), &json!({"topic": "rust"})).await?;
//! let run = client.wait(&submitted.run_id).await?;
//! println!("{:?} {}", run.status, run.state);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod builder;
mod bundle;
mod client;
#[cfg(feature = "embedded")]
mod embedded;
mod error;
mod group;
mod indexes;
mod kept;
mod runs;
mod sent;

pub use builder::{GraphBuilder, NodeBuilder};
pub use bundle::{BundleError, BundleOptions, GraphBundle};
pub use client::{
    Answer, ChildRun, Client, ClientError, ClientTls, Delta, Event, Finding, READ_PATIENCE,
    RECONNECT_PATIENCE, RunErrorInfo, RunEvent, RunInfo, RunStatus, SubmitOptions, Submitted,
    UnhostedWait, WaitingNode,
};
#[cfg(feature = "embedded")]
pub use embedded::{EmbeddedCluster, EmbeddedError, LocalCluster};
pub use group::{GroupInfo, GroupMember, PartitionLed};
pub use indexes::KnowledgeIndex;
pub use runs::{HistoryWave, RunHistory};
/// The configuration an embedded cluster's coordinator starts with (see
/// [`EmbeddedCluster::start_configured`]).
#[cfg(feature = "embedded")]
pub use weft_coordinator::config::CoordinatorConfig;
pub use weft_graph::Priority;
pub use weft_proto::events::HistoryPoint;
