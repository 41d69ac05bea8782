//! Python where a graph names it (SPEC 4.3): `function` nodes, called with
//! the state's fields, `tool_args` and the step's scope merged into keyword
//! arguments (later winning); and reducers, conditions, routers and
//! `until`s, called as the coordinator asks.
//!
//! A function gets only the state fields its signature takes (all of them
//! with `**kwargs`), and a Python process is sent each field's value once
//! per version (see `state_cache.rs`), so a call carries what changed, not the
//! whole state. `tool_args` have their `${NAME}` secrets substituted here;
//! the values are masked in everything the attempt reports.

use serde_json::{Map, Value};

use super::{Call, PythonError, PythonHosts};
use crate::blobs::BlobCache;
use crate::confinement::NodeSandbox;
use crate::secrets::{Redactor, Secrets};
use crate::task::{Completed, Failure, FailureKind, FunctionCall, PythonCall, Task};

/// Runs one attempt of a `function` node.
pub async fn run_function(
    hosts: &PythonHosts,
    blobs: &BlobCache,
    secrets: &Secrets,
    task: &Task,
) -> Result<Completed, Failure> {
    let config = &task.config;
    let text = |key: &str| config[key].as_str().unwrap_or_default().to_owned();
    let (module, function, dir) = (text("module"), text("function"), text("dir"));
    let output_key = match text("output_key") {
        key if key.is_empty() => task.node.to_string(),
        key => key,
    };
    // A node's `sandbox:` was checked by validation; one that does not
    // read is a coordinator speaking another version, refused.
    let sandbox = match config.get("sandbox") {
        None => NodeSandbox::default(),
        Some(value) => serde_json::from_value(value.clone()).map_err(|error| {
            Failure::new(
                FailureKind::InvalidTask,
                format!("the node's sandbox cannot be read: {error}"),
            )
        })?,
    };
    let hosted = hosts.pool(blobs, &task.bundle, &dir, sandbox).await?;
    let signature = hosted.signature(&module, &function).await;
    let taken = |name: &str| signature.as_ref().is_none_or(|s| s.takes(name));
    let mut kwargs = Map::new();
    // The fields the function takes are read now: one whose text is not
    // JSON fails the step, naming it.
    for (name, value) in task.state.iter().filter(|(name, _)| taken(name)) {
        if let Err(why) = value.value() {
            return Err(Failure::new(
                FailureKind::StateCacheMiss,
                format!("field '{name}' is not JSON: {why}"),
            ));
        }
    }
    // Each field's value goes to a process once per version when the
    // versions are known; else with the call.
    let held_as = hosts.state_key(&task.run_id);
    let state = if task.state_versions.len() == task.state.len() {
        let fields = task
            .state
            .iter()
            .zip(&task.state_versions)
            .filter(|((name, _), _)| taken(name))
            .map(|((name, value), version)| (name.to_string(), *version, value.clone()))
            .collect();
        Some((held_as.as_str(), fields))
    } else {
        for (name, value) in task.state.iter().filter(|(name, _)| taken(name)) {
            let value = value.value().map_or(Value::Null, Value::clone);
            kwargs.insert(name.to_string(), value);
        }
        None
    };
    let mut redactor = Redactor::default();
    if let Some(args) = config["tool_args"].as_object() {
        for (name, value) in args {
            let value = substitute(secrets, value, &mut redactor).map_err(|e| {
                Failure::new(FailureKind::InvalidTask, format!("tool_args.{name}: {e}"))
            })?;
            kwargs.insert(name.to_string(), value);
        }
    }
    kwargs.extend(task.scope.clone().into_map());
    let call = Call {
        module: &module,
        function: &function,
        args: Vec::new(),
        kwargs,
        form: "positional",
        mask: redactor.values().to_vec(),
        state,
    };
    let returned = hosted
        .pool
        .call_with(call, task.timeout)
        .await
        .map_err(|error| failure(error, &redactor))?;
    // A secret a function returns is masked too: no record holds one.
    let returned = if redactor.values().is_empty() {
        returned
    } else {
        redacted(returned, &redactor)
    };
    let writes = match &returned {
        Value::Object(update) => Value::Object(update.clone()),
        other => Value::Object(Map::from_iter([(output_key, other.clone())])),
    };
    Ok(Completed {
        writes,
        output: Some(returned),
        notes: Vec::new(),
    })
}

/// `${NAME}`s substituted in every string of `value`.
fn substitute(
    secrets: &Secrets,
    value: &Value,
    used: &mut Redactor,
) -> Result<Value, crate::secrets::SecretError> {
    Ok(match value {
        Value::String(text) => Value::String(secrets.substitute(text, used)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| substitute(secrets, item, used))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), substitute(secrets, v, used)?)))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// `value` with every substituted secret masked in its strings and keys.
fn redacted(value: Value, redactor: &Redactor) -> Value {
    match value {
        Value::String(text) => Value::String(redactor.redact(&text)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| redacted(item, redactor))
                .collect(),
        ),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (redactor.redact(&k), redacted(v, redactor)))
                .collect(),
        ),
        other => other,
    }
}

fn failure(error: PythonError, redactor: &Redactor) -> Failure {
    let kind = match &error {
        PythonError::Raised(_) => FailureKind::HandlerError,
        PythonError::Timeout(_) => FailureKind::Timeout,
        PythonError::Start { .. } | PythonError::Host(_) | PythonError::NotSetUp(_) => {
            FailureKind::WorkerError
        }
    };
    Failure::new(kind, redactor.redact(&error.to_string()))
}

/// Why a Python reducer, condition, router or `until` has no answer.
#[derive(Debug, thiserror::Error)]
pub enum PythonCallError {
    /// The bundle's Python process could not be had.
    #[error("{0}")]
    Unavailable(String),
    /// The function failed.
    #[error("{function}: {error}")]
    Failed {
        /// `module:function`.
        function: String,
        /// Why.
        #[source]
        error: PythonError,
    },
}

/// Calls a Python reducer, condition, router or `until` for the
/// coordinator; the answer or the error's text.
pub(crate) async fn call_python(
    hosts: &PythonHosts,
    blobs: &BlobCache,
    call: &FunctionCall,
    python: &PythonCall,
) -> Result<Value, PythonCallError> {
    let hosted = hosts
        .pool(blobs, &call.bundle, &python.dir, NodeSandbox::default())
        .await
        .map_err(|failure| PythonCallError::Unavailable(failure.message))?;
    let timeout = call.timeout;
    let call = Call {
        module: &python.module,
        function: &python.function,
        args: call.args.clone(),
        kwargs: Map::new(),
        form: python.form.as_str(),
        mask: Vec::new(),
        state: None,
    };
    hosted
        .pool
        .call_with(call, timeout)
        .await
        .map_err(|error| PythonCallError::Failed {
            function: format!("{}:{}", python.module, python.function),
            error,
        })
}
