//! Weft's wire contract.
//!
//! This crate will hold the versioned `.proto` files (`protos/weft/v1/`) for
//! the client-facing run service and the worker-facing task stream, the code
//! generated from them (compiled with `protox`, so no system `protoc` is
//! needed), and the id newtypes shared by every crate. It fills in with the
//! cluster issue; until then it is intentionally empty.

#![warn(missing_docs)]
