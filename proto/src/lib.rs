//! Weft's wire contract: the versioned `.proto` files under
//! `protos/weft/v1/` and the code generated from them.
//!
//! Generated types stay at the edges: the coordinator's `grpc` module, the
//! worker's connection, and the client library convert them to domain types
//! and never expose them.

#![warn(missing_docs)]

/// The protocol version a worker announces in its hello; a coordinator
/// refuses workers with another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest gRPC message either side accepts or sends: bundles and
/// states travel whole.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// A batch of tasks or results on a worker's stream closes once their
/// texts come to this many bytes (one larger item goes alone), so a batch
/// stays far below [`MAX_MESSAGE_BYTES`].
pub const BATCH_BYTES: usize = 1 << 20;

/// Metadata on a standby coordinator's refusal of a worker: the URL of the
/// coordinator that leads, for the worker to join instead.
pub const LEADER_METADATA: &str = "weft-leader";

/// Metadata on a request a standby coordinator forwards to its leader; a
/// coordinator that does not lead refuses such a request rather than
/// forwarding it again.
pub const FORWARDED_METADATA: &str = "weft-forwarded";

#[cfg(feature = "wire")]
pub mod codec;
pub mod events;
pub mod ids;
#[cfg(feature = "wire")]
pub mod index_pieces;
pub mod json;
pub mod text;
#[cfg(feature = "wire")]
pub mod transport;
pub mod types;
pub mod worker_protocol;

pub use ids::{ItemKey, NodeId, RunId, TaskKey, WorkerId};
pub use text::SharedText;

/// Version 1 of the protocol.
#[cfg(feature = "wire")]
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("weft.v1");

    // Written and read by hand (their modules say why), under the names
    // the generated messages would have.
    pub use crate::worker_protocol::wire::batch::TaskBatch;
    pub use crate::worker_protocol::wire::result::TaskResult;

    /// The `outcome` of a [`TaskResult`].
    pub mod task_result {
        pub use crate::worker_protocol::wire::result::Outcome;
    }
}
