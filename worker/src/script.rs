//! The built-in `script` kind (SPEC section 4.1).
//!
//! The argv runs directly, never through a shell, in a scratch directory
//! that holds the bundle's files, in its own process group. It reads one
//! JSON object on stdin (`state`, `scope`, `inbox`, `team`, `run_id`,
//! `node`, `attempt`, `item`; `team` and a non-empty `inbox` only for a
//! `teammates: true` step) and finds the same state in the file named by
//! `GRAPH_STATE`; it writes one JSON object (or nothing) on stdout. A
//! non-zero exit, stdout that is not one object, or the timeout (which
//! kills the whole process group) fails the attempt with the exit status
//! and the last 2 KiB of stderr.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use serde_json::{Map, Value, json};

use tokio::process::Command;

use crate::blobs::BlobCache;
use crate::confinement::{Confinement, Limits, NodeSandbox, SETUP_RETRY_WAIT, SETUP_TRIES, SetUp};
use crate::script_output::{Finished, collect, judge, redacted, stderr_tail, tool_result};
use crate::secrets::{Redactor, Secrets};
use crate::task::{Failure, FailureKind, Task};
use crate::team::TeamSeat;

#[path = "script_process.rs"]
mod process;

use process::{GroupGuard, Launch, Scratch, launcher};

/// The file in a scratch directory that `GRAPH_STATE` names.
const STATE_FILE: &str = ".weft-state.json";

/// Runs script tasks.
#[derive(Clone)]
pub struct ScriptRunner {
    scratch_root: PathBuf,
    blobs: BlobCache,
    secrets: Arc<Secrets>,
    /// The worker's variables a script inherits; nothing else leaks
    /// through.
    inherited: Arc<[(String, String)]>,
    /// How scripts are confined, and the worker's limits.
    confinement: Arc<Confinement>,
}

impl ScriptRunner {
    /// Scripts run in directories under `scratch_root`; `secrets` are the
    /// worker's own, for `${NAME}` in `run`/`args` and `env:`.
    pub fn new(
        scratch_root: PathBuf,
        blobs: BlobCache,
        secrets: Arc<Secrets>,
        inherited: Arc<[(String, String)]>,
        confinement: Arc<Confinement>,
    ) -> Self {
        Self {
            confinement,
            scratch_root,
            blobs,
            secrets,
            inherited,
        }
    }

    /// Runs one attempt; `Ok` holds the stdout object. Whatever the attempt
    /// reports has the secrets it used masked.
    pub async fn run(&self, task: &Task) -> Result<Value, Failure> {
        let mut redactor = Redactor::default();
        let result = self.run_with(task, &mut redactor).await;
        result.map_err(|failure| Failure {
            message: redactor.redact(&failure.message),
            ..failure
        })
    }

    async fn run_with(&self, task: &Task, redactor: &mut Redactor) -> Result<Value, Failure> {
        let config =
            <ScriptConfig as serde::Deserialize>::deserialize(&*task.config).map_err(|e| {
                Failure::new(
                    FailureKind::InvalidTask,
                    format!("script configuration: {e}"),
                )
            })?;
        let config = config.with_secrets(&self.secrets, redactor, self.confinement.limits())?;
        let scratch = self.scratch(task).await?;
        let state_json = self.prepare(&scratch.0, task).await?;
        let request = stdin_request(task, &state_json);
        let mut finished = self
            .spawn(&scratch.0, &config, task, request, task.timeout, redactor)
            .await?;
        finished.redact_stderr(redactor);
        judge(finished).map_err(|failure| self.name_the_limit(&config.limits, failure))
    }

    /// A failure that a limit of the script's sandbox explains says so.
    fn name_the_limit(&self, limits: &Limits, failure: Failure) -> Failure {
        if failure.kind != FailureKind::ScriptFailed {
            return failure;
        }
        match self.confinement.limit_hit(limits, &failure.message) {
            Some(limit) => Failure {
                message: format!("{}; the script hit {limit}", failure.message),
                ..failure
            },
            None => failure,
        }
    }

    /// Runs an agent's script tool (`run: [argv…]`) for `task`: the
    /// arguments as JSON on stdin, in a scratch directory with the bundle
    /// and `GRAPH_STATE`, within `timeout`. Its stdout (trimmed) is the
    /// result; a failure's message is for the model, secrets masked.
    pub async fn run_tool(
        &self,
        task: &Task,
        argv: &[String],
        arguments: &Value,
        timeout: Duration,
    ) -> Result<String, Failure> {
        let mut redactor = Redactor::default();
        let config = ScriptConfig {
            argv: argv.to_vec(),
            env: Map::new(),
            sandbox: NodeSandbox::default(),
        };
        let ran = async {
            let config =
                config.with_secrets(&self.secrets, &mut redactor, self.confinement.limits())?;
            let scratch = self.scratch(task).await?;
            self.prepare(&scratch.0, task).await?;
            let mut finished = self
                .spawn(
                    &scratch.0,
                    &config,
                    task,
                    arguments.to_string(),
                    timeout,
                    &redactor,
                )
                .await?;
            finished.redact_stderr(&redactor);
            tool_result(finished)
        };
        ran.await.map_err(|failure| Failure {
            message: redactor.redact(&failure.message),
            ..failure
        })
    }

    /// A fresh scratch directory for one execution of `task`.
    async fn scratch(&self, task: &Task) -> Result<Scratch, Failure> {
        // Unique per execution: a directory still being removed after an
        // earlier execution of the same attempt is never reused.
        static EXECUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let execution = EXECUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = self.scratch_root.join(format!(
            "{}-{}-{}-{execution}",
            sanitize(&task.run_id),
            task.key,
            task.attempt
        ));
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| Failure::io("cannot create the scratch directory", e))?;
        Ok(Scratch(dir))
    }

    /// Puts the bundle's files and `GRAPH_STATE` in `dir`; the state's JSON.
    async fn prepare(&self, dir: &Path, task: &Task) -> Result<String, Failure> {
        for file in task.bundle.iter() {
            self.blobs.materialize(file, dir).await?;
        }
        let state_json = task.state_json();
        crate::blobs::write_private(&dir.join(STATE_FILE), state_json.as_bytes())
            .await
            .map_err(|e| Failure::io("cannot write GRAPH_STATE", e))?;
        Ok(state_json)
    }

    /// Runs `config`'s argv in `dir` with `request` on stdin until it ends
    /// or `timeout` passes (then its whole process group is killed); starts
    /// it again while its sandbox could not be set up, up to
    /// [`SETUP_TRIES`] times.
    async fn spawn(
        &self,
        dir: &Path,
        config: &ResolvedConfig,
        task: &Task,
        request: String,
        timeout: Duration,
        redactor: &Redactor,
    ) -> Result<Finished, Failure> {
        let program = config
            .argv
            .first()
            .ok_or_else(|| Failure::new(FailureKind::InvalidTask, "the script's argv is empty"))?;
        let mut wait = SETUP_RETRY_WAIT;
        for tries in 1.. {
            let launch = launcher(dir, program)?;
            let (mut command, set_up) =
                self.command(dir, launch, config, task, &dir.join(STATE_FILE))?;
            let spawned = command.spawn();
            // The command holds the write end of bubblewrap's report: its
            // end must come from bubblewrap alone.
            drop(command);
            let mut finished = Self::feed(spawned, program, &request, timeout, redactor).await?;
            if finished.succeeded() || tries == SETUP_TRIES || set_up.program_started().await {
                return Ok(finished);
            }
            // Nothing of the script ran: the host's mounts changed while
            // bubblewrap set its sandbox up (see `crate::confinement`).
            finished.redact_stderr(redactor);
            tracing::warn!(
                run = %task.run_id,
                node = %task.node,
                said = %finished.stderr_text(),
                "the script's sandbox could not be set up; starting it again"
            );
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        unreachable!("the last try returns")
    }

    /// Feeds `request` to a started script and collects what it says until
    /// it ends or `timeout` passes (then its whole process group is
    /// killed).
    async fn feed(
        spawned: std::io::Result<tokio::process::Child>,
        program: &str,
        request: &str,
        timeout: Duration,
        redactor: &Redactor,
    ) -> Result<Finished, Failure> {
        let mut child = spawned.map_err(|e| {
            Failure::new(
                FailureKind::ScriptFailed,
                format!("cannot start '{program}': {e}"),
            )
        })?;
        // Kills the whole group when this attempt ends, however it ends
        // (finished, timed out, or cancelled by dropping this future).
        let _group = GroupGuard(child.id().map(|id| Pid::from_raw(id as i32)));
        // Shared with the reader, so a script that times out still leaves
        // the end of its stderr as evidence.
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let collected = collect(&mut child, request, stderr.clone());
        let Ok(finished) = tokio::time::timeout(timeout, collected).await else {
            // Masked before it is cut (see `Finished::redact_stderr`).
            let tail = stderr
                .lock()
                .map(|t| stderr_tail(redacted(&t, redactor).as_bytes()))
                .unwrap_or_default();
            return Err(Failure::new(
                FailureKind::Timeout,
                format!(
                    "script timed out after {} and was killed; stderr: {tail}",
                    human(timeout)
                ),
            ));
        };
        Ok(finished)
    }

    /// The script's process: argv without a shell, in the scratch
    /// directory, in its own process group, with SPEC 4.1's environment.
    fn command(
        &self,
        dir: &Path,
        launch: Launch,
        config: &ResolvedConfig,
        task: &Task,
        state_path: &Path,
    ) -> Result<(Command, SetUp), Failure> {
        let mut args = launch.leading_args;
        args.extend(config.argv[1..].iter().map(Into::into));
        let (mut command, set_up) = self
            .confinement
            .command(launch.program, args, (dir, dir), &config.limits)
            .map_err(|e| Failure::io("cannot prepare the script's sandbox", e))?;
        // A script sees SPEC 4.1's variables, a few the system needs, and
        // its node's `env:`, never the rest of the worker's environment.
        command.env_clear();
        command.envs(self.inherited.iter().map(|(name, value)| (name, value)));
        command
            .current_dir(dir)
            .env("GRAPH_STATE", state_path)
            .env("WEFT_RUN_ID", task.run_id.as_str())
            .env("WEFT_NODE", task.node.as_str())
            .env("WEFT_ATTEMPT", task.attempt.to_string())
            .env(
                "WEFT_TASK_KEY",
                crate::handler::task_key(&task.run_id, &task.node, task.item, task.attempt),
            )
            .env(
                "WEFT_ITEM",
                task.item.map(|i| i.to_string()).unwrap_or_default(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if !task.traceparent.is_empty() {
            // An instrumented script joins the run's trace.
            command.env("TRACEPARENT", &task.traceparent);
        }
        command.envs(config.env.iter().map(|(k, v)| (k, v)));
        Ok((command, set_up))
    }
}

/// The request a script reads on stdin (SPEC 4.1).
fn stdin_request(task: &Task, state_json: &str) -> String {
    let (team, inbox) = task
        .team
        .as_ref()
        .map_or((Value::Null, json!([])), TeamSeat::team_and_inbox);
    format!(
        "{{\"state\":{},\"scope\":{},\"inbox\":{},\"team\":{},\"run_id\":{},\"node\":{},\"attempt\":{},\"item\":{}}}",
        state_json,
        Value::Object(task.scope.clone().into_map()),
        inbox,
        team,
        json!(task.run_id),
        json!(task.node),
        task.attempt,
        task.item.map_or(Value::Null, Value::from),
    )
}

/// A script node's configuration as the coordinator sends it, with
/// `${NAME}` references still in place.
#[derive(serde::Deserialize)]
struct ScriptConfig {
    argv: Vec<String>,
    #[serde(default)]
    env: Map<String, Value>,
    /// The node's `sandbox:`, within the worker's limits.
    #[serde(default)]
    sandbox: NodeSandbox,
}

/// A script's argv and `env:` with secrets substituted.
struct ResolvedConfig {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// What the script may use.
    limits: Limits,
}

impl ScriptConfig {
    /// Substitutes the worker's secrets in every argv element and `env:`
    /// value; an unset one fails the attempt naming it and where.
    fn with_secrets(
        self,
        secrets: &Secrets,
        redactor: &mut Redactor,
        limits: Limits,
    ) -> Result<ResolvedConfig, Failure> {
        let unset = |place: String, error: crate::secrets::SecretError| {
            Failure::new(FailureKind::InvalidTask, format!("{place}: {error}"))
        };
        let mut argv = Vec::with_capacity(self.argv.len());
        for (index, arg) in self.argv.iter().enumerate() {
            let value = secrets
                .substitute(arg, redactor)
                .map_err(|e| unset(format!("argv[{index}]"), e))?;
            argv.push(value);
        }
        let mut env = Vec::with_capacity(self.env.len());
        for (key, value) in &self.env {
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            let value = secrets
                .substitute(&text, redactor)
                .map_err(|e| unset(format!("env.{key}"), e))?;
            env.push((key.clone(), value));
        }
        Ok(ResolvedConfig {
            argv,
            env,
            limits: limits.within(&self.sandbox),
        })
    }
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn human(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use weft_proto::types::WorkerKind;

    use super::*;
    use weft_proto::TaskKey;

    /// Polls `condition` every 10 ms for up to 10 s.
    async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
        for _ in 0..1000 {
            if condition() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    fn secrets() -> Secrets {
        Secrets::new([("API_KEY".to_owned(), "s3cret-value".to_owned())])
    }

    /// A runner whose files live under a fresh directory (no coordinator:
    /// these tasks bundle no files).
    fn runner(name: &str) -> (ScriptRunner, PathBuf) {
        let root = std::env::temp_dir().join(format!("weft-{name}-{}", std::process::id()));
        let blobs = BlobCache::new(root.join("files"), Arc::new(crate::blobs::tests::Nowhere));
        (
            ScriptRunner::new(
                root.join("scratch"),
                blobs,
                Arc::new(secrets()),
                crate::WorkerConfig::new("", &crate::Environment::of_process())
                    .inherited_env
                    .into(),
                Arc::new(Confinement::off(Limits::default())),
            ),
            root,
        )
    }

    fn script(argv: &[&str], timeout: Duration) -> Task {
        Task {
            run_id: "run".into(),
            node: "nap".into(),
            timeout,
            ..Task::example(WorkerKind::Script, json!({ "argv": argv }))
        }
    }

    #[tokio::test]
    async fn a_cancelled_scripts_scratch_directory_is_removed() {
        let (runner, root) = runner("scratch-test");
        let task = script(&["sleep", "30"], Duration::from_secs(60));
        let attempt = tokio::spawn(async move { runner.run(&task).await });
        let scratch_root = root.join("scratch");
        let attempts = || -> Vec<PathBuf> {
            std::fs::read_dir(&scratch_root)
                .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default()
        };
        assert!(
            eventually(|| attempts()
                .iter()
                .any(|d| d.join(".weft-state.json").exists()))
            .await
        );
        attempt.abort();
        assert!(
            eventually(|| attempts().is_empty()).await,
            "the scratch directory outlived its cancelled attempt"
        );
        std::fs::remove_dir_all(root).ok();
    }

    #[tokio::test]
    async fn a_timed_out_script_keeps_its_stderr_and_a_killed_one_names_the_signal() {
        let (runner, root) = runner("evidence-test");
        let slow = script(
            &["sh", "-c", "echo 'stuck on the network' >&2; sleep 30"],
            Duration::from_millis(300),
        );
        let error = runner.run(&slow).await.unwrap_err();
        assert_eq!(error.kind, FailureKind::Timeout);
        assert!(
            error.message.contains("stuck on the network"),
            "{}",
            error.message
        );
        let killed = script(&["sh", "-c", "kill -9 $$"], Duration::from_secs(10));
        let error = runner.run(&killed).await.unwrap_err();
        assert!(
            error.message.contains("was killed by signal SIGKILL (9)"),
            "{}",
            error.message
        );
        std::fs::remove_dir_all(root).ok();
    }

    #[tokio::test]
    async fn a_script_does_not_see_the_workers_environment() {
        // Cargo and nextest set CARGO_MANIFEST_DIR for this test process.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let (runner, root) = runner("env-test");
        let probe = script(
            &[
                "sh",
                "-c",
                r#"echo "{\"leaked\": \"${CARGO_MANIFEST_DIR:-none}\", \"node\": \"$WEFT_NODE\", \"key\": \"$WEFT_TASK_KEY\", \"path\": \"${PATH:+set}\"}""#,
            ],
            Duration::from_secs(10),
        );
        let output = runner.run(&probe).await.unwrap();
        assert_eq!(
            output,
            json!({"leaked": "none", "node": "nap", "key": "run/nap/-/1", "path": "set"})
        );
        std::fs::remove_dir_all(root).ok();
    }

    #[tokio::test]
    async fn secrets_reach_argv_and_env_and_are_masked_in_what_fails() {
        let (runner, root) = runner("secrets-test");
        let mut task = script(&[], Duration::from_secs(10));
        task.config = Arc::new(json!({
            "argv": ["sh", "-c", r#"echo "{\"arg\": \"$1\", \"env\": \"$TOKEN\"}""#, "x", "${API_KEY}"],
            "env": {"TOKEN": "Bearer ${API_KEY}", "LITERAL": "$${API_KEY}"},
        }));
        let output = runner.run(&task).await.unwrap();
        assert_eq!(
            output,
            json!({"arg": "s3cret-value", "env": "Bearer s3cret-value"})
        );

        task.key = TaskKey(2);
        task.config = Arc::new(json!({
            "argv": ["sh", "-c", "echo \"token $TOKEN rejected\" >&2; exit 3"],
            "env": {"TOKEN": "${API_KEY}"},
        }));
        let error = runner.run(&task).await.unwrap_err();
        assert!(
            error.message.contains("token *** rejected"),
            "{}",
            error.message
        );
        assert!(!error.message.contains("s3cret"), "{}", error.message);

        // A secret across the 2 KiB cut of the stderr tail: masked before
        // the cut, so no part of it is left (its end leaked before).
        task.key = TaskKey(4);
        task.config = Arc::new(json!({
            "argv": ["sh", "-c", "printf '%s' \"$TOKEN\" >&2; head -c 2041 /dev/zero | tr '\\0' x >&2; exit 3"],
            "env": {"TOKEN": "${API_KEY}"},
        }));
        let error = runner.run(&task).await.unwrap_err();
        assert!(!error.message.contains("value"), "{}", error.message);
        assert!(!error.message.contains("t-val"), "{}", error.message);
        assert!(error.message.contains("xxxx"), "{}", error.message);

        task.key = TaskKey(3);
        task.config = Arc::new(json!({"argv": ["echo", "${NOT_SET}"]}));
        let error = runner.run(&task).await.unwrap_err();
        assert_eq!(error.kind, FailureKind::InvalidTask);
        assert_eq!(
            error.message,
            "argv[1]: secret ${NOT_SET} is not set on this worker (set it in the worker's environment or secrets file)"
        );
        std::fs::remove_dir_all(root).ok();
    }

    #[test]
    fn bundled_scripts_run_from_the_scratch_directory() {
        let dir = std::env::temp_dir().join(format!("weft-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("ready.sh", "#!/bin/sh\necho '{}'\n", 0o755);
        write(
            "shebang.py",
            "#!/usr/bin/env python3 -u\nprint('{}')\n",
            0o644,
        );
        write("plain.txt", "echo hi\n", 0o644);
        let ready = launcher(&dir, "ready.sh").unwrap();
        assert_eq!(ready.program, dir.join("ready.sh").into_os_string());
        assert!(ready.leading_args.is_empty());
        let shebang = launcher(&dir, "shebang.py").unwrap();
        assert_eq!(shebang.program, "/usr/bin/env");
        assert_eq!(
            shebang.leading_args,
            [
                "python3".into(),
                "-u".into(),
                dir.join("shebang.py").into_os_string()
            ]
        );
        let error = launcher(&dir, "plain.txt").err().unwrap();
        assert_eq!(error.kind, FailureKind::InvalidTask);
        assert!(
            error.message.contains("chmod +x plain.txt"),
            "{}",
            error.message
        );
        // A name that is not a bundled file is looked up as usual.
        let system = launcher(&dir, "sh").unwrap();
        assert_eq!(system.program, "sh");
        std::fs::remove_dir_all(dir).ok();
    }
}
