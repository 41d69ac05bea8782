//! `weft._native`: the Rust core under Weft's Python SDK.
//!
//! The Python package is a thin layer over the crates the `weft` command
//! line and the `worker` binary are built from, so that a graph bundles
//! the same bytes from Python as from `weft`, and a Python handler is
//! served by the Rust worker's session (connection, field caches,
//! batching, teammates, remote tools, drain) instead of a second copy of
//! the worker protocol:
//!
//! - [`bundle`]: `GraphBundle.from_file` on `weft_client::GraphBundle`.
//! - [`client`]: `weft.Client` and `weft.aio.Client` on
//!   `weft_client::Client`, each call blocking with the interpreter let
//!   go, or handing its outcome to a callback for `asyncio`.
//! - [`worker`]: `weft.Worker` on `weft_worker::Worker`, its handlers,
//!   tools and functions Python callables called from the worker's tasks
//!   (sync ones on [`lanes`], threads that keep their Python thread state,
//!   `async def` on the SDK's event loop), the interpreter attached only
//!   inside a Python call.
//!
//! The classes users see (`TaskContext`, `Team`, the exceptions) stay
//! Python's: this module builds them through [`bridge`].

mod bridge;
mod bundle;
mod client;
mod lanes;
mod runtime;
mod state;
mod team;
mod values;
mod worker;

use pyo3::prelude::*;

/// The module's contents.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(bundle::bundle_file, module)?)?;
    module.add_class::<worker::Worker>()?;
    module.add_class::<team::TeamSeat>()?;
    module.add_class::<worker::Done>()?;
    module.add_class::<client::Client>()?;
    module.add_class::<client::Feed>()?;
    module.add_class::<client::Pending>()?;
    Ok(())
}
