//! Python functions on a worker (SPEC 4.3, seed 002's "Python in a
//! Graph"): a small pool of long-lived Python processes per bundle that
//! serve calls as JSON lines, so a call costs a round trip over a pipe, not
//! a process start.
//!
//! Each process runs `harness.py` (shipped inside the worker binary, no
//! installation): it imports a sidecar by path under a private module name
//! (two bundles' `helpers.py` never collide) or a dotted module from the
//! bundle, then installed packages; it answers `{"ok": value}` or
//! `{"error": the traceback's last lines}`. What user code prints goes to
//! stderr, never into the protocol. A call that outlives its timeout kills
//! its process (a fresh one serves the next call), and so does a process
//! that dies.
//!
//! [`PythonHosts`] keeps one pool per bundle (its files materialized once
//! in the work directory); [`function`] runs `function` nodes and Python
//! reducers, conditions, routers and `until`s on it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{Mutex, Semaphore};

use crate::confinement::{SETUP_RETRY_WAIT, SETUP_TRIES, SetUp};

/// The harness each Python process runs.
const HARNESS: &str = include_str!("harness.py");

/// Why a Python call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PythonError {
    /// The interpreter could not be started.
    #[error("cannot start the Python interpreter '{interpreter}': {reason}")]
    Start {
        /// The interpreter.
        interpreter: String,
        /// Why.
        reason: String,
    },
    /// The function raised; the traceback's last lines.
    #[error("{0}")]
    Raised(String),
    /// The call outlived its timeout; its process was killed.
    #[error("the Python call did not return within {0:?}; its process was killed")]
    Timeout(Duration),
    /// The process died or broke the protocol.
    #[error("the Python host failed: {0}")]
    Host(String),
    /// The process's sandbox could not be set up (the host's mounts
    /// changed meanwhile): nothing of it ran, and it is started again.
    #[error("the Python process's sandbox could not be set up: {0}")]
    NotSetUp(String),
}

/// How much of a Python process's stderr an error about its end quotes.
const STDERR_TAIL: usize = 2048;

/// One Python process.
struct Host {
    child: Child,
    /// The end of what it wrote to stderr (which is passed on to the
    /// worker's stderr as it comes).
    stderr_tail: std::sync::Arc<std::sync::Mutex<String>>,
    /// The task copying it, done once the process's stderr closes.
    stderr_copy: tokio::task::JoinHandle<()>,
    stdin: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// The state field versions it holds.
    held: Held,
    /// Whether its sandbox was set up, until its end is looked into.
    set_up: Option<SetUp>,
}

impl Host {
    /// Starts the harness in `dir`, confined: a long-lived process keeps
    /// the worker's limits (tightened by a node's `sandbox`) but CPU time,
    /// which it would spend over many calls (each call has its timeout).
    fn spawn(
        interpreter: &str,
        dir: &Path,
        writable: &Path,
        confinement: &crate::confinement::Confinement,
        sandbox: &crate::confinement::NodeSandbox,
    ) -> Result<Self, PythonError> {
        let limits = crate::confinement::Limits {
            cpu: None,
            ..confinement.limits().within(sandbox)
        };
        let start = |reason: String| PythonError::Start {
            interpreter: interpreter.to_owned(),
            reason,
        };
        let (mut command, set_up) = confinement
            .command(
                interpreter.into(),
                ["-u", "-c", HARNESS].map(Into::into).to_vec(),
                (writable, dir),
                &limits,
            )
            .map_err(|error| start(error.to_string()))?;
        let mut child = command
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| start(error.to_string()))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_tail = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr_copy = tokio::spawn(pass_on_stderr(stderr, stderr_tail.clone()));
        Ok(Self {
            child,
            stderr_tail,
            stderr_copy,
            stdin,
            answers: BufReader::new(stdout).lines(),
            next_id: 0,
            held: Held::default(),
            set_up: Some(set_up),
        })
    }

    /// Why the process stopped answering: its exit status and the end of
    /// its stderr. It has closed its pipes, so both follow at once (or are
    /// not waited for).
    async fn ended(&mut self) -> PythonError {
        let patience = Duration::from_secs(1);
        let status = match tokio::time::timeout(patience, self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(error)) => error.to_string(),
            Err(_) => "still closing".to_owned(),
        };
        let _ = tokio::time::timeout(patience, &mut self.stderr_copy).await;
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.trim().to_owned())
            .unwrap_or_default();
        let said = if tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ended with: {tail}")
        };
        if let Some(set_up) = self.set_up.take()
            && !set_up.program_started().await
        {
            return PythonError::NotSetUp(tail);
        }
        PythonError::Host(format!("the process ended ({status}){said}"))
    }

    /// Sends one request, with `state` (a run and its fields) when the
    /// call takes state fields, and reads its answer.
    async fn ask(
        &mut self,
        mut request: Map<String, Value>,
        state: Option<(&str, &[VersionedField])>,
    ) -> Result<Value, PythonError> {
        if let Some((run, fields)) = state {
            self.held.add_to(&mut request, run, fields);
        }
        self.next_id += 1;
        let id = self.next_id;
        request.insert("id".into(), id.into());
        let mut line = weft_proto::json::object_to_string(&request);
        line.push('\n');
        // A process that ended before answering (or before taking the
        // request) is reported with its exit status and its last words.
        let written = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await?;
            self.answers.next_line().await
        }
        .await;
        let answer = match written {
            Ok(Some(answer)) => answer,
            Ok(None) => return Err(self.ended().await),
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                return Err(self.ended().await);
            }
            Err(error) => return Err(PythonError::Host(error.to_string())),
        };
        let answer: Value = serde_json::from_str(&answer)
            .map_err(|e| PythonError::Host(format!("an answer that is not JSON: {e}")))?;
        if answer["id"] != json!(id) {
            return Err(PythonError::Host("an answer to another request".into()));
        }
        match (answer.get("ok"), answer.get("error")) {
            (_, Some(Value::String(error))) => Err(PythonError::Raised(error.clone())),
            (Some(value), _) => Ok(value.clone()),
            _ => Err(PythonError::Host(
                "an answer with neither ok nor error".into(),
            )),
        }
    }
}

/// One call of a Python function.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// A `.py` path relative to the pool's directory, or a dotted module.
    pub module: &'a str,
    /// The function's name.
    pub function: &'a str,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Keyword arguments (those the function does not take are left out,
    /// unless it takes `**kwargs`).
    pub kwargs: Map<String, Value>,
    /// `positional` (also what any other value means), `keywords` (the one
    /// argument's fields as keywords) or `loop_iteration` (the one argument
    /// as a `LoopIteration` object).
    pub form: &'a str,
    /// Secret values to mask in what the call prints and raises.
    pub mask: Vec<String>,
    /// State fields passed as keyword arguments (before `kwargs`, which
    /// win), with the run they belong to; each value is sent to a process
    /// once per version.
    pub state: Option<(&'a str, Vec<VersionedField>)>,
}

/// The Python processes of one bundle directory.
pub struct PythonPool {
    interpreter: String,
    dir: PathBuf,
    /// How its processes are confined, and the directory they may write
    /// (the bundle's).
    confinement: std::sync::Arc<crate::confinement::Confinement>,
    /// The `sandbox:` of the `function` node it serves, if any.
    sandbox: crate::confinement::NodeSandbox,
    writable: PathBuf,
    idle: Mutex<Vec<Host>>,
    permits: Semaphore,
}

impl std::fmt::Debug for PythonPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonPool")
            .field("interpreter", &self.interpreter)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl PythonPool {
    /// At most `size` processes of `interpreter`, working in `dir` (the
    /// bundle's files); started on first use.
    pub fn new(interpreter: impl Into<String>, dir: impl Into<PathBuf>, size: usize) -> Self {
        Self {
            interpreter: interpreter.into(),
            writable: PathBuf::new(),
            dir: dir.into(),
            confinement: std::sync::Arc::new(crate::confinement::Confinement::off(
                crate::confinement::Limits::default(),
            )),
            sandbox: crate::confinement::NodeSandbox::default(),
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.max(1)),
        }
    }

    /// The same pool, its processes confined by `confinement` within a
    /// node's `sandbox`.
    pub fn confined(
        mut self,
        confinement: std::sync::Arc<crate::confinement::Confinement>,
        writable: PathBuf,
        sandbox: crate::confinement::NodeSandbox,
    ) -> Self {
        self.confinement = confinement;
        self.writable = writable;
        self.sandbox = sandbox;
        self
    }

    /// Calls `module`'s `function` with `args` and `kwargs` within
    /// `timeout`. `module` is a `.py` path relative to the bundle, or a
    /// dotted module name.
    pub async fn call(
        &self,
        module: &str,
        function: &str,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, PythonError> {
        let call = Call {
            module,
            function,
            args,
            kwargs,
            form: "positional",
            mask: Vec::new(),
            state: None,
        };
        self.call_with(call, timeout).await
    }

    /// Makes `call` within `timeout`.
    pub async fn call_with(&self, call: Call<'_>, timeout: Duration) -> Result<Value, PythonError> {
        let mut request = Map::new();
        request.insert("op".into(), "call".into());
        request.insert("module".into(), call.module.into());
        request.insert("function".into(), call.function.into());
        request.insert("args".into(), Value::Array(call.args));
        request.insert("kwargs".into(), Value::Object(call.kwargs));
        request.insert("form".into(), call.form.into());
        if !call.mask.is_empty() {
            request.insert("mask".into(), call.mask.into());
        }
        let state = call
            .state
            .as_ref()
            .map(|(run, fields)| (*run, fields.as_slice()));
        self.ask(request, state, timeout).await
    }

    /// Each public function of `module` with its parameters:
    /// `{name: {"params": [...], "var_keyword": bool}}`.
    pub async fn signatures(&self, module: &str, timeout: Duration) -> Result<Value, PythonError> {
        let mut request = Map::new();
        request.insert("op".into(), "signatures".into());
        request.insert("module".into(), module.into());
        self.ask(request, None, timeout).await
    }

    async fn ask(
        &self,
        request: Map<String, Value>,
        state: Option<(&str, &[VersionedField])>,
        timeout: Duration,
    ) -> Result<Value, PythonError> {
        let _permit = self.permits.acquire().await;
        let idle = self.idle.lock().await.pop();
        match idle {
            Some(host) => self.ask_host(host, request, state, timeout).await,
            None => self.ask_new(request, state, timeout).await,
        }
    }

    /// Asks a process started for this request, started again while its
    /// sandbox could not be set up (see `crate::confinement`).
    async fn ask_new(
        &self,
        mut request: Map<String, Value>,
        state: Option<(&str, &[VersionedField])>,
        timeout: Duration,
    ) -> Result<Value, PythonError> {
        let writable = if self.writable.as_os_str().is_empty() {
            &self.dir
        } else {
            &self.writable
        };
        let mut wait = SETUP_RETRY_WAIT;
        for tries in 1.. {
            let host = Host::spawn(
                &self.interpreter,
                &self.dir,
                writable,
                &self.confinement,
                &self.sandbox,
            )?;
            let again = (tries < SETUP_TRIES).then(|| request.clone());
            match (self.ask_host(host, request, state, timeout).await, again) {
                (Err(PythonError::NotSetUp(said)), Some(again)) => {
                    tracing::warn!(%said, "a Python process's sandbox could not be set up; starting it again");
                    request = again;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                (answer, _) => return answer,
            }
        }
        unreachable!("the last try returns")
    }

    /// Asks `host`, keeping it for the next call if it is still sound.
    async fn ask_host(
        &self,
        mut host: Host,
        request: Map<String, Value>,
        state: Option<(&str, &[VersionedField])>,
        timeout: Duration,
    ) -> Result<Value, PythonError> {
        match tokio::time::timeout(timeout, host.ask(request, state)).await {
            // A raised exception leaves the process sound: keep it.
            Ok(result @ (Ok(_) | Err(PythonError::Raised(_)))) => {
                self.idle.lock().await.push(host);
                result
            }
            // A broken host is dropped, which kills it.
            Ok(Err(error)) => Err(error),
            Err(_) => Err(PythonError::Timeout(timeout)),
        }
    }
}

mod function;
mod hosts;
mod state_cache;

use state_cache::Held;
pub use state_cache::VersionedField;

/// Copies a Python process's stderr to the worker's, keeping its last
/// [`STDERR_TAIL`] bytes for an error about the process's end.
async fn pass_on_stderr(
    stderr: tokio::process::ChildStderr,
    tail: std::sync::Arc<std::sync::Mutex<String>>,
) {
    use tokio::io::AsyncReadExt;
    let mut stderr = stderr;
    let mut out = tokio::io::stderr();
    let mut buffer = [0u8; 4096];
    while let Ok(read) = stderr.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let _ = out.write_all(&buffer[..read]).await;
        if let Ok(mut kept) = tail.lock() {
            kept.push_str(&String::from_utf8_lossy(&buffer[..read]));
            if kept.len() > STDERR_TAIL {
                let mut cut = kept.len() - STDERR_TAIL;
                while !kept.is_char_boundary(cut) {
                    cut += 1;
                }
                kept.drain(..cut);
            }
        }
    }
}

pub use function::PythonCallError;
pub(crate) use function::call_python;
pub use function::run_function;
pub use hosts::{PythonHosts, PythonSettings};

#[cfg(test)]
mod tests;
