//! A task's state as a Python dict, each field's value made once per
//! version the worker holds.
//!
//! The Rust worker keeps each run's fields, one shared `FieldValue` per
//! version, and hands a task the versions it sees. A map's items all see
//! the same versions: making each value again for each item would cost
//! the whole state per item (a 10,000-item list, read 10,000 times). So
//! the Python object of a version is kept beside it, keyed by the shared
//! value's address and held by a weak reference that keeps the address
//! from being reused; it is dropped when the worker drops the version.
//! Tasks of a run share those objects, as they did in the SDK's Python
//! worker: a handler should return new values rather than change the
//! ones it was given in place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use weft_worker::field::FieldValue;

use crate::bridge::bridge;

/// A kept object, and the version it was made from.
struct Kept {
    version: Weak<FieldValue>,
    object: Py<PyAny>,
}

/// Every kept object, by its version's address.
#[derive(Default)]
struct Objects {
    kept: HashMap<usize, Kept>,
    /// How many were kept after the last sweep of dropped versions.
    swept_to: usize,
}

static OBJECTS: Mutex<Option<Objects>> = Mutex::new(None);

/// The dict of `fields`: each value the object kept for its version, or
/// one made (with `json.loads`) and kept.
pub(crate) fn state_dict<'py>(
    py: Python<'py>,
    fields: &[(Arc<str>, Arc<FieldValue>)],
) -> PyResult<Bound<'py, PyDict>> {
    let loads = bridge(py)?.loads.bind(py);
    let mut objects = OBJECTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let objects = objects.get_or_insert_with(Objects::default);
    let state = PyDict::new(py);
    for (name, value) in fields {
        let key = Arc::as_ptr(value) as usize;
        let object = match objects.kept.get(&key) {
            Some(kept) if kept.version.strong_count() > 0 => kept.object.bind(py).clone(),
            _ => {
                let object = loads.call1((value.json(),))?;
                let kept = Kept {
                    version: Arc::downgrade(value),
                    object: object.clone().unbind(),
                };
                objects.kept.insert(key, kept);
                object
            }
        };
        state.set_item(&**name, object)?;
    }
    // Versions the worker dropped, swept once their number has doubled.
    if objects.kept.len() > 2 * objects.swept_to.max(64) {
        objects
            .kept
            .retain(|_, kept| kept.version.strong_count() > 0);
        objects.swept_to = objects.kept.len();
    }
    Ok(state)
}
