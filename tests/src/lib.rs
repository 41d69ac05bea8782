//! Weft's multi-process tests.
//!
//! This crate will hold the `TestCluster` that starts the real `coordinator`
//! and `worker` binaries on free ports, keeps a log per process, kills its
//! children on drop and waits on conditions rather than sleeping, and the
//! tests that run graphs across processes. The pure semantics are tested
//! inside `weft-coordinator`; this crate fills in with the cluster issue.

#![warn(missing_docs)]
