//! Partitioned leadership's pure core (SPEC 21): which partition a run
//! lives in ([`Partitioning`]), which coordinator should lead each
//! partition ([`placement`]), and what one coordinator does about its
//! share — acquire, serve, drain, release, abandon ([`member`]) — with no
//! runtime, network or clock.
//!
//! A coordinator drives it from etcd: the group's live members and each
//! partition's lease holder come in as a [`placement::Holding`], the
//! member's [`member::Command`]s go out as lease requests and as orders to
//! its run actors. Being pure, the same code is driven in one test process
//! by a deterministic simulation (`tests/simulation`): virtual time, a
//! virtual network and store, and seeded faults, at 1,000 partitions over
//! 50 coordinators.

pub mod member;
mod partition;
pub mod placement;

pub use member::{Command, Input, Member, Share};
pub use partition::{MAX_PARTITIONS, PartitionError, PartitionId, Partitioning};
pub use placement::{Holder, Holding, MemberId, Move, Plan, View, plan};
