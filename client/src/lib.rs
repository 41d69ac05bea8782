//! Weft's client library.
//!
//! It will hold the typed gRPC client (submit a graph from a file or from a
//! builder that mirrors the YAML, await results, stream events, resume,
//! cancel, retry) with no generated protobuf type in its public API. The
//! crate's `weft` binary already validates and draws graphs; the client and
//! `weft run` arrive with the cluster issue.

#![warn(missing_docs)]
