//! The Python classes the native core builds and raises: the SDK's own
//! (`weft.worker.TaskContext`, `weft.team.Team`, `weft.errors.…`), looked
//! up once and kept, so users keep the classes, fields and exceptions
//! they know.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The SDK's classes and helpers, by what they are for.
pub(crate) struct Bridge {
    /// `weft.worker.TaskContext(run_id, node, attempt, task_key, scope,
    /// item, config, team)`.
    pub task_context: Py<PyAny>,
    /// `weft.worker.ToolContext(run_id, node, attempt, task_key, scope,
    /// item)`.
    pub tool_context: Py<PyAny>,
    /// `weft.worker.Item(map, index, step)`.
    pub item: Py<PyAny>,
    /// `weft.worker._failure(exception, tool)`: what a handler's or a
    /// tool's exception reports.
    pub failure: Py<PyAny>,
    /// `weft.worker._joined(name)`: told each time the worker joins.
    pub joined: Py<PyAny>,
    /// `weft.team.Team(seat)`.
    pub team: Py<PyAny>,
    /// `weft.team.Message(sender, content, seq)`.
    pub message: Py<PyAny>,
    /// `weft.team.TeamError`.
    pub team_error: Py<PyAny>,
    /// `weft.bundle.BundleError`.
    pub bundle_error: Py<PyAny>,
    /// `weft.errors.GraphInvalid(message, findings)`.
    pub graph_invalid: Py<PyAny>,
    /// `weft.errors.WeftError(message, code)`.
    pub weft_error: Py<PyAny>,
    /// `weft.errors.of_status(code, message, graph)`: the exception for
    /// a gRPC status the core received.
    pub of_status: Py<PyAny>,
    /// `json.loads`: a state field's text to its value.
    pub loads: Py<PyAny>,
}

static BRIDGE: PyOnceLock<Bridge> = PyOnceLock::new();

/// The SDK's classes, imported on first use.
pub(crate) fn bridge(py: Python<'_>) -> PyResult<&Bridge> {
    BRIDGE.get_or_try_init(py, || {
        let worker = PyModule::import(py, "weft.worker")?;
        let team = PyModule::import(py, "weft.team")?;
        let bundle = PyModule::import(py, "weft.bundle")?;
        let errors = PyModule::import(py, "weft.errors")?;
        let get = |module: &Bound<'_, PyModule>, name: &str| -> PyResult<Py<PyAny>> {
            Ok(module.getattr(name)?.unbind())
        };
        Ok(Bridge {
            task_context: get(&worker, "TaskContext")?,
            tool_context: get(&worker, "ToolContext")?,
            item: get(&worker, "Item")?,
            failure: get(&worker, "_failure")?,
            joined: get(&worker, "_joined")?,
            team: get(&team, "Team")?,
            message: get(&team, "Message")?,
            team_error: get(&team, "TeamError")?,
            bundle_error: get(&bundle, "BundleError")?,
            graph_invalid: get(&errors, "GraphInvalid")?,
            weft_error: get(&errors, "WeftError")?,
            of_status: get(&errors, "of_status")?,
            loads: get(&PyModule::import(py, "json")?, "loads")?,
        })
    })
}

/// An exception of class `class` made with `args`.
pub(crate) fn raise<'py>(
    py: Python<'py>,
    class: &Py<PyAny>,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyErr {
    match class.bind(py).call1(args) {
        Ok(exception) => PyErr::from_value(exception),
        Err(error) => error,
    }
}
