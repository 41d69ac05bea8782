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
use std::sync::{Arc, LazyLock, Mutex, Weak};

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

static OBJECTS: LazyLock<Mutex<Objects>> = LazyLock::new(Mutex::default);

/// The dict of `fields`: each value the object kept for its version, or
/// one made (with `json.loads`) and kept.
///
/// The lock is never held while Python code may run (making an object,
/// dropping one), since that code may let another thread take the
/// interpreter, which could then wait on the lock.
pub(crate) fn state_dict<'py>(
    py: Python<'py>,
    fields: &[(Arc<str>, Arc<FieldValue>)],
) -> PyResult<Bound<'py, PyDict>> {
    let state = PyDict::new(py);
    for (name, value) in fields {
        let key = Arc::as_ptr(value) as usize;
        let kept = locked()
            .kept
            .get(&key)
            .and_then(|kept| (kept.version.strong_count() > 0).then(|| kept.object.clone_ref(py)));
        let object = match kept {
            Some(object) => object.into_bound(py),
            None => {
                let object = bridge(py)?.loads.bind(py).call1((value.json(),))?;
                let kept = Kept {
                    version: Arc::downgrade(value),
                    object: object.clone().unbind(),
                };
                let replaced = locked().kept.insert(key, kept);
                drop(replaced);
                object
            }
        };
        state.set_item(&**name, object)?;
    }
    // Versions the worker dropped, swept once their number has doubled.
    let dropped: Vec<Kept> = {
        let mut objects = locked();
        if objects.kept.len() > 2 * objects.swept_to.max(64) {
            let gone: Vec<usize> = objects
                .kept
                .iter()
                .filter(|(_, kept)| kept.version.strong_count() == 0)
                .map(|(key, _)| *key)
                .collect();
            let dropped = gone
                .iter()
                .filter_map(|key| objects.kept.remove(key))
                .collect();
            objects.swept_to = objects.kept.len();
            dropped
        } else {
            Vec::new()
        }
    };
    drop(dropped);
    Ok(state)
}

/// The kept objects, locked.
fn locked() -> std::sync::MutexGuard<'static, Objects> {
    OBJECTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
