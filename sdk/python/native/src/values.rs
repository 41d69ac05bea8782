//! JSON values to Python objects and back.

use pyo3::prelude::*;
use serde_json::Value;

/// `value` as a Python object (`dict`, `list`, `str`, `int`, `float`,
/// `bool`, `None`).
pub(crate) fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, value).map_err(PyErr::from)
}

/// A Python object as a JSON value, or why it is not one (a set, a
/// class's instance, a key that is not a string).
pub(crate) fn from_python(object: &Bound<'_, PyAny>) -> Result<Value, String> {
    pythonize::depythonize(object).map_err(|error| error.to_string())
}
