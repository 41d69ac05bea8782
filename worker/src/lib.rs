//! Weft's worker library: the SDK for custom workers.
//!
//! It will hold the handler registry (Rust handlers registered by name, over
//! serde-typed state), the built-in `script`, `llm` and `agent` kinds, slots,
//! reconnection with backoff and graceful shutdown, plus the `worker`
//! binary. It fills in with the cluster issue; until then it is
//! intentionally empty.

#![warn(missing_docs)]
