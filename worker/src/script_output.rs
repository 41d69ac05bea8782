//! What a script's process leaves behind and what it comes to: reading its
//! stdout and the tail of its stderr while it runs, then judging its exit
//! (a status or a signal) and its stdout (one JSON object, or nothing).

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};

use nix::sys::signal::Signal;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::task::{Failure, FailureKind};

/// How much of stderr an error keeps.
const STDERR_TAIL: usize = 2048;
/// Largest stdout accepted from a script.
const MAX_STDOUT: usize = 64 << 20;

/// What a script left behind: its exit, stdout, and the tail of stderr.
pub(crate) struct Finished {
    status: std::io::Result<std::process::ExitStatus>,
    stdout: Vec<u8>,
    stderr_tail: Vec<u8>,
}

impl Finished {
    /// Whether the process exited 0.
    pub(crate) fn succeeded(&self) -> bool {
        self.status.as_ref().is_ok_and(|status| status.success())
    }

    /// The end of what the process printed on stderr, as text.
    pub(crate) fn stderr_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.stderr_tail)
    }

    /// Masks the secrets in what is kept of stderr, before it is cut to
    /// its tail: a secret across the cut would leave a part of itself.
    pub(crate) fn redact_stderr(&mut self, redactor: &crate::secrets::Redactor) {
        self.stderr_tail = redacted(&self.stderr_tail, redactor).into_bytes();
    }
}

/// `bytes` (a window of stderr) as text with its secrets masked.
pub(crate) fn redacted(bytes: &[u8], redactor: &crate::secrets::Redactor) -> String {
    redactor.redact(&String::from_utf8_lossy(bytes))
}

/// Feeds the request and reads both outputs until the script exits; the
/// tail of stderr accumulates in `stderr_tail` as it arrives.
pub(crate) async fn collect(
    child: &mut tokio::process::Child,
    request: &str,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
) -> Finished {
    let mut child_stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let feed = async move {
        // A script that never reads stdin must not block us.
        let _ = child_stdin.write_all(request.as_bytes()).await;
        drop(child_stdin);
    };
    let read_out = async move {
        let mut buffer = Vec::new();
        let mut limited = (&mut stdout).take(MAX_STDOUT as u64 + 1);
        let _ = limited.read_to_end(&mut buffer).await;
        buffer
    };
    let read_err = async move {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let Ok(mut tail) = stderr_tail.lock() else {
                break;
            };
            tail.extend_from_slice(&chunk[..n]);
            if tail.len() > STDERR_TAIL * 2 {
                let excess = tail.len() - STDERR_TAIL;
                tail.drain(..excess);
            }
        }
        stderr_tail.lock().map(|t| t.clone()).unwrap_or_default()
    };
    let (_, stdout, stderr_tail, status) = tokio::join!(feed, read_out, read_err, child.wait());
    Finished {
        status,
        stdout,
        stderr_tail,
    }
}

/// A process that did not exit 0 as a failure naming `what` ("script",
/// "the tool"), how it ended, and the tail of its stderr; `waited` names
/// it when it could not be waited for.
fn exit_failure(what: &str, waited: &str, finished: &Finished) -> Result<(), Failure> {
    let status = match &finished.status {
        Ok(status) => *status,
        Err(error) => {
            let error = std::io::Error::new(error.kind(), error.to_string());
            return Err(Failure::io(&format!("cannot wait for {waited}"), error));
        }
    };
    if status.success() {
        return Ok(());
    }
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {}", signal_name(signal)),
        (None, None) => "ended abnormally".to_owned(),
    };
    let tail = stderr_tail(&finished.stderr_tail);
    Err(Failure::new(
        FailureKind::ScriptFailed,
        format!("{what} {how}; stderr: {tail}"),
    ))
}

/// The attempt's result: the stdout object, or why it failed.
pub(crate) fn judge(finished: Finished) -> Result<Value, Failure> {
    exit_failure("script", "the script", &finished)?;
    let tail = stderr_tail(&finished.stderr_tail);
    if finished.stdout.len() > MAX_STDOUT {
        return Err(Failure::new(
            FailureKind::ScriptFailed,
            format!("script wrote more than {MAX_STDOUT} bytes to stdout"),
        ));
    }
    parse_stdout(&finished.stdout).map_err(|message| {
        Failure::new(
            FailureKind::InvalidOutput,
            format!("{message}; stderr: {tail}"),
        )
    })
}

/// A tool script's result: its stdout, trimmed, when it exited 0.
pub(crate) fn tool_result(finished: Finished) -> Result<String, Failure> {
    exit_failure("the tool", "the tool", &finished)?;
    Ok(String::from_utf8_lossy(&finished.stdout).trim().to_owned())
}

/// Why a script's stdout was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StdoutError {
    /// Not UTF-8 text.
    #[error("stdout is not UTF-8")]
    NotUtf8,
    /// JSON, but not an object.
    #[error("stdout must be one JSON object, got {0}")]
    NotAnObject(&'static str),
    /// Not one JSON value.
    #[error(
        "stdout is not one JSON object: {detail} at line {line}, column {column}; it began {first:?}{}",
        if *.stray { " (a script's logs belong on stderr: stdout is for its JSON object alone)" } else { "" }
    )]
    NotJson {
        /// What the parser said, without its position.
        detail: String,
        /// Where (1-based).
        line: usize,
        /// Where (1-based).
        column: usize,
        /// The first line of stdout, cut at 80 characters.
        first: String,
        /// Stdout does not start with `{`: a log line came first.
        stray: bool,
    },
}

/// Reads a script's stdout: empty means no writes; otherwise one JSON object.
pub fn parse_stdout(out: &[u8]) -> Result<Value, StdoutError> {
    let text = std::str::from_utf8(out).map_err(|_| StdoutError::NotUtf8)?;
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(Value::Object(map)),
        Ok(other) => Err(StdoutError::NotAnObject(type_name(&other))),
        Err(error) => {
            let shown = error.to_string();
            let position = format!(" at line {} column {}", error.line(), error.column());
            let first: String = text
                .trim_start()
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(80)
                .collect();
            Err(StdoutError::NotJson {
                detail: shown.strip_suffix(&position).unwrap_or(&shown).to_owned(),
                line: error.line(),
                column: error.column(),
                stray: !text.trim_start().starts_with('{'),
                first,
            })
        }
    }
}

pub(crate) fn stderr_tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    let text = String::from_utf8_lossy(&bytes[start..]).trim().to_owned();
    if text.is_empty() {
        "(empty)".to_owned()
    } else {
        text
    }
}

/// `SIGKILL (9)` for 9.
fn signal_name(number: i32) -> String {
    match Signal::try_from(number) {
        Ok(signal) => format!("{} ({number})", signal.as_str()),
        Err(_) => number.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stdout_must_be_one_object() {
        assert_eq!(parse_stdout(b"").unwrap(), json!({}));
        assert_eq!(parse_stdout(b" {\"a\": 1}\n").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_stdout(b"[1]").unwrap_err(),
            StdoutError::NotAnObject("an array")
        );
        assert!(
            parse_stdout(b"{\"a\": 1} {\"b\": 2}")
                .unwrap_err()
                .to_string()
                .contains("not one JSON object")
        );
        assert!(parse_stdout(b"hello").is_err());
        assert_eq!(
            parse_stdout(b"loading the model\n{\"a\": 1}\n")
                .unwrap_err()
                .to_string(),
            "stdout is not one JSON object: expected value at line 1, column 1; it began \"loading the model\" \
             (a script's logs belong on stderr: stdout is for its JSON object alone)"
        );
    }
}
