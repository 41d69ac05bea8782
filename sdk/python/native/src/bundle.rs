//! `GraphBundle.from_file` on the Rust bundler, so a graph bundles the
//! same files, modes and bytes from Python as from `weft`.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use weft_client::{BundleError, BundleOptions, GraphBundle};
use weft_graph::GraphError;

use crate::bridge::{bridge, raise};

/// A bundle's files: `(path, content, mode)`.
type Files = Vec<(String, Py<PyBytes>, u32)>;

/// The graph file at `path` and the files it names: `(graph_path,
/// files)`. Raises `weft.GraphInvalid` for a graph that does not
/// validate (its findings, as the coordinator would give them) and
/// `weft.BundleError` for a file that cannot be read or may not be sent.
#[pyfunction]
#[pyo3(signature = (path, allow_outside_links = false))]
pub(crate) fn bundle_file(
    py: Python<'_>,
    path: PathBuf,
    allow_outside_links: bool,
) -> PyResult<(String, Files)> {
    let options = BundleOptions {
        allow_outside_links,
    };
    // Reading and validating need no interpreter.
    let bundled = py.detach(|| GraphBundle::from_file_with(&path, options));
    let bundle = bundled.map_err(|error| refusal(py, error))?;
    let files = bundle
        .files
        .into_iter()
        .map(|(path, content, mode)| (path, PyBytes::new(py, &content).unbind(), mode))
        .collect();
    Ok((bundle.graph_path, files))
}

/// The SDK's exception for a bundle that cannot be made.
pub(crate) fn refusal(py: Python<'_>, error: BundleError) -> PyErr {
    let classes = match bridge(py) {
        Ok(classes) => classes,
        Err(error) => return error,
    };
    match error {
        BundleError::Graph(GraphError::Invalid(findings)) => {
            let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
            raise(py, &classes.graph_invalid, (lines.join("\n"), lines))
        }
        other => raise(py, &classes.bundle_error, (other.to_string(),)),
    }
}
