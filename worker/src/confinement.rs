//! Confinement of the code a worker runs for graphs: scripts, script tools
//! and Python function processes (SPEC 11).
//!
//! A graph's code is not trusted with what its worker holds: the worker's
//! token and keys, its other runs' files, its process. Without confinement
//! a script could `kill $PPID` (the worker took its child's SIGTERM as a
//! request to drain, and a pill with `retry` drained a whole fleet), read
//! `/proc/$PPID/environ` (the worker's token), or read another run's
//! scratch directory. So each process is started under bubblewrap
//! (`bwrap`, Debian's `bubblewrap`), in namespaces of its own:
//!
//! - a **PID namespace**: the worker, other scripts and other runs are not
//!   there to signal, trace or read (`kill $PPID` reaches bubblewrap's own
//!   init inside, which ends the script alone);
//! - a **mount namespace**: the file system read-only but for the
//!   script's scratch directory, `/tmp` (shared as on the host, unless
//!   `[sandbox] private_tmp` gives each process its own) and the
//!   directories `[sandbox] writable` lists; the worker's work directory
//!   (every run's scratch and cached files) hidden but for the script's
//!   own scratch directory, and the worker's credential files (client
//!   key, CA, secrets file, configuration file) replaced by empty ones;
//! - IPC and UTS namespaces, a new session (no terminal to inject into),
//!   and a **network namespace** of its own with `sandbox: {network:
//!   false}` (only a loopback inside);
//! - resource limits (`prlimit`, util-linux): memory (`RLIMIT_DATA`), CPU
//!   time (`RLIMIT_CPU`) and open files (`RLIMIT_NOFILE`) set on bubblewrap,
//!   processes (`RLIMIT_NPROC`) set inside the sandbox, where its user
//!   namespace counts them apart from the worker's; the one hit is named
//!   in the failure.
//!
//! The worker itself is made non-dumpable at start (`PR_SET_DUMPABLE`), so
//! even a process of its user outside any sandbox cannot read its memory
//! or environment through `/proc`, and it ignores SIGTERM and SIGINT sent
//! by its own descendants ([`crate::signals`]).
//!
//! bubblewrap binds the host's file system with its mounts and then makes
//! each mount read-only; a mount the host adds or removes meanwhile (a
//! container engine starting a container, a kubelet mounting a volume)
//! makes that fail, and the process ends before its program starts. So a
//! confined process is started with bubblewrap's status descriptor
//! (`--json-status-fd`), whose `exit-code` line comes only once the
//! sandbox was set up and the program started ([`SetUp`]): a process that
//! never got that far ran nothing of the graph's code, and is started
//! again, a few times, a little later ([`SETUP_TRIES`]).
//!
//! A worker whose configuration asks for confinement (the default) and
//! cannot have it — no `bwrap`, or a kernel or container that refuses it
//! user namespaces — refuses to start, naming the reason, unless the
//! operator says `--sandbox off` (or `[sandbox] confine = "off"`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use serde::Deserialize;

/// Memory a script may use by default: 1 GiB.
pub const DEFAULT_MEMORY: u64 = 1 << 30;
/// CPU time a script may use by default: 5 minutes.
pub const DEFAULT_CPU: Duration = Duration::from_secs(300);
/// Processes (and threads) a script may run at once by default.
pub const DEFAULT_PROCESSES: u32 = 64;
/// Files a script may hold open by default.
pub const DEFAULT_OPEN_FILES: u32 = 256;

/// How many times a confined process is started when bubblewrap could not
/// set its sandbox up (see the module's docs), the waits between them
/// doubling from [`SETUP_RETRY_WAIT`].
pub const SETUP_TRIES: u32 = 5;
/// The first wait before a confined process is started again.
pub const SETUP_RETRY_WAIT: Duration = Duration::from_millis(20);
/// The descriptor a confined process's bubblewrap reports its status on.
const STATUS_FD: i32 = 3;

/// How a worker confines what it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confine {
    /// Under bubblewrap, or the worker refuses to start.
    Bwrap,
    /// Under bubblewrap where it can be had, else unconfined with a
    /// warning: the embedded cluster of `weft run`, which runs the user's
    /// own graphs on the user's own machine.
    Auto,
    /// Unconfined: the operator said so.
    Off,
}

impl std::str::FromStr for Confine {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "bwrap" => Ok(Self::Bwrap),
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "unknown sandbox mode '{other}' (bwrap, auto or off)"
            )),
        }
    }
}

/// What a confined process may use. `None` is no limit; the worker's
/// limits are the ceilings a node's `sandbox:` may only lower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of memory (data segment and anonymous mappings).
    pub memory: Option<u64>,
    /// CPU time.
    pub cpu: Option<Duration>,
    /// Processes and threads at once.
    pub processes: Option<u32>,
    /// Open files.
    pub open_files: Option<u32>,
    /// Whether it reaches the network.
    pub network: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: Some(DEFAULT_MEMORY),
            cpu: Some(DEFAULT_CPU),
            processes: Some(DEFAULT_PROCESSES),
            open_files: Some(DEFAULT_OPEN_FILES),
            network: true,
        }
    }
}

/// A node's `sandbox:` as the coordinator sends it in a task's
/// configuration: numbers, already parsed and checked by validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSandbox {
    /// Bytes.
    pub memory: Option<u64>,
    /// Seconds.
    pub cpu: Option<u64>,
    /// Processes.
    pub processes: Option<u32>,
    /// Open files.
    pub open_files: Option<u32>,
    /// Network.
    pub network: Option<bool>,
}

impl Limits {
    /// These limits tightened by a node's `sandbox:`: a node may ask for
    /// less than the worker allows, never more.
    pub fn within(self, node: &NodeSandbox) -> Self {
        let lower = |worker: Option<u64>, asked: Option<u64>| match (worker, asked) {
            (Some(w), Some(a)) => Some(w.min(a)),
            (None, asked) => asked,
            (worker, None) => worker,
        };
        Self {
            memory: lower(self.memory, node.memory),
            cpu: lower(self.cpu.map(|d| d.as_secs()), node.cpu).map(Duration::from_secs),
            processes: lower(self.processes.map(u64::from), node.processes.map(u64::from))
                .map(|n| n as u32),
            open_files: lower(
                self.open_files.map(u64::from),
                node.open_files.map(u64::from),
            )
            .map(|n| n as u32),
            network: self.network && node.network.unwrap_or(true),
        }
    }
}

/// Why a worker cannot confine what it runs.
#[derive(Debug, thiserror::Error)]
#[error(
    "scripts cannot be confined here: {reason}; install bubblewrap (Debian's `bubblewrap`) and util-linux's prlimit, allow unprivileged user namespaces (in a container: see docs/security.md), or run the worker with `--sandbox off` to run graphs' code unconfined"
)]
pub struct Unconfinable {
    reason: String,
}

/// How a worker starts the processes it runs for graphs.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// `bwrap` and `prlimit`, or `None`: unconfined.
    tools: Option<(PathBuf, PathBuf)>,
    /// The worker's limits (defaults and ceilings).
    limits: Limits,
    /// Files the worker holds that its scripts must not read.
    hidden_files: Vec<PathBuf>,
    /// Directories hidden whole (the worker's work directory).
    hidden_dirs: Vec<PathBuf>,
    /// Where confined processes may write besides their own directory.
    places: Places,
}

/// Where confined processes may write, besides their own directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Places {
    /// Each process gets a `/tmp` of its own instead of the host's.
    pub private_tmp: bool,
    /// The host's `/proc`, bound read-only, instead of one of the
    /// process's own PID namespace: for a container whose `/proc` is
    /// masked (Docker's default), where a new one cannot be mounted. The
    /// worker and other scripts are then listed there, though still out
    /// of reach of signals (another PID namespace) and, for the worker,
    /// of reads (it is non-dumpable).
    pub host_proc: bool,
    /// Directories of the host they may write (outputs, caches).
    pub writable: Vec<PathBuf>,
}

impl Confinement {
    /// No confinement: processes start as they are (tests of a pure part,
    /// `--sandbox off`).
    pub fn off(limits: Limits) -> Self {
        Self {
            tools: None,
            limits,
            hidden_files: Vec::new(),
            hidden_dirs: Vec::new(),
            places: Places::default(),
        }
    }

    /// Sets up confinement as `mode` asks, checking that it works here by
    /// confining `true`: an error (for [`Confine::Bwrap`]) names why not.
    pub fn set_up(
        mode: Confine,
        limits: Limits,
        places: Places,
        (hidden_files, hidden_dirs): (Vec<PathBuf>, Vec<PathBuf>),
    ) -> Result<Self, Unconfinable> {
        if mode == Confine::Off {
            tracing::warn!(
                "graphs' scripts and Python functions run unconfined (--sandbox off): they can signal and read this worker and each other"
            );
            return Ok(Self::off(limits));
        }
        let found = find("bwrap").zip(find("prlimit"));
        let confinement = Self {
            tools: found.clone(),
            limits,
            hidden_files,
            hidden_dirs,
            places,
        };
        let probe = match &found {
            None => Err(format!(
                "{} not found on PATH",
                match (find("bwrap"), find("prlimit")) {
                    (None, None) => "bwrap and prlimit are",
                    (None, _) => "bwrap is",
                    _ => "prlimit is",
                }
            )),
            Some(_) => confinement.probe(),
        };
        match (probe, mode) {
            (Ok(()), _) => Ok(confinement),
            (Err(reason), Confine::Auto) => {
                tracing::warn!(
                    %reason,
                    "scripts run unconfined: this machine cannot confine them (a worker of a shared cluster refuses to start here)"
                );
                Ok(Self::off(limits))
            }
            (Err(reason), _) => Err(Unconfinable { reason }),
        }
    }

    /// Confines `true`, as a script would be: a few times, as a script
    /// would be, when the host's mounts changed meanwhile.
    fn probe(&self) -> Result<(), String> {
        let dir = std::env::temp_dir();
        let limits = Limits {
            network: false,
            ..self.limits
        };
        let (program, args) = self.argv("true".into(), Vec::new(), (&dir, &dir), &limits, false);
        let mut wait = SETUP_RETRY_WAIT;
        let mut tries = 1;
        let output = loop {
            let output = std::process::Command::new(&program)
                .args(&args)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
            if output.status.success() || tries == SETUP_TRIES {
                break output;
            }
            tries += 1;
            std::thread::sleep(wait);
            wait *= 2;
        };
        if output.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let hint = if said.contains("Can't mount proc") {
            " (a container's masked /proc: run it with systempaths=unconfined, or set [sandbox] proc = \"host\" / WEFT_SANDBOX_PROC=host)"
        } else {
            ""
        };
        Err(if said.is_empty() {
            format!("bwrap failed ({})", output.status)
        } else {
            format!("bwrap says: {said}{hint}")
        })
    }

    /// Whether processes are confined.
    pub fn is_on(&self) -> bool {
        self.tools.is_some()
    }

    /// The worker's limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The command that runs `program args` confined, with `writable` (its
    /// scratch directory) the one directory it may write and `cwd` its
    /// working directory — `program args` themselves when confinement is
    /// off — and what tells, once it has ended, whether its program ran.
    /// The caller adds its environment, pipes and working directory.
    pub fn command(
        &self,
        program: OsString,
        args: Vec<OsString>,
        dirs: (&Path, &Path),
        limits: &Limits,
    ) -> std::io::Result<(tokio::process::Command, SetUp)> {
        let (program, args) = self.argv(program, args, dirs, limits, true);
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        if !self.is_on() {
            return Ok((command, SetUp(None)));
        }
        let (sender, receiver) = tokio::net::unix::pipe::pipe()?;
        // The write end reaches the child as its descriptor 3 only: here
        // it is close-on-exec, so no other process the worker starts
        // meanwhile inherits it.
        command
            .fd_mappings(vec![FdMapping {
                parent_fd: sender.into_blocking_fd()?,
                child_fd: STATUS_FD,
            }])
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok((command, SetUp(Some(receiver))))
    }

    /// The program and arguments that run `program args` confined (see
    /// [`Self::command`]), bubblewrap reporting on [`STATUS_FD`] when
    /// `report`.
    fn argv(
        &self,
        program: OsString,
        args: Vec<OsString>,
        (writable, cwd): (&Path, &Path),
        limits: &Limits,
        report: bool,
    ) -> (OsString, Vec<OsString>) {
        let Some((bwrap, prlimit)) = &self.tools else {
            return (program, args);
        };
        let mut argv: Vec<OsString> = Vec::with_capacity(40 + args.len());
        if let Some(memory) = limits.memory {
            argv.push(format!("--data={memory}").into());
        }
        if let Some(cpu) = limits.cpu {
            // SIGXCPU at the limit (which names it), SIGKILL a second on.
            let seconds = cpu.as_secs().max(1);
            argv.push(format!("--cpu={seconds}:{}", seconds + 1).into());
        }
        if let Some(files) = limits.open_files {
            argv.push(format!("--nofile={files}").into());
        }
        argv.push("--".into());
        argv.push(bwrap.clone().into_os_string());
        argv.extend(["--die-with-parent".into(), "--new-session".into()]);
        if report {
            argv.push("--json-status-fd".into());
            argv.push(STATUS_FD.to_string().into());
        }
        if nix::unistd::geteuid().is_root() {
            // Root's scripts run as nobody in a user namespace, with no
            // capability left (a root inside without one could remount).
            for flag in ["--unshare-user", "--uid", "65534", "--gid", "65534"] {
                argv.push(flag.into());
            }
        } else {
            argv.push("--unshare-user-try".into());
        }
        for flag in [
            "--cap-drop",
            "ALL",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ] {
            argv.push(flag.into());
        }
        if !limits.network {
            argv.push("--unshare-net".into());
        }
        push_mount(&mut argv, "--ro-bind", Path::new("/"), Some(Path::new("/")));
        push_mount(&mut argv, "--dev", Path::new("/dev"), None);
        if self.places.host_proc {
            push_mount(
                &mut argv,
                "--ro-bind",
                Path::new("/proc"),
                Some(Path::new("/proc")),
            );
        } else {
            push_mount(&mut argv, "--proc", Path::new("/proc"), None);
        }
        if self.places.private_tmp {
            push_mount(&mut argv, "--tmpfs", Path::new("/tmp"), None);
        } else {
            push_mount(
                &mut argv,
                "--bind",
                Path::new("/tmp"),
                Some(Path::new("/tmp")),
            );
        }
        for place in self.places.writable.iter().filter(|p| p.is_dir()) {
            push_mount(&mut argv, "--bind", place, Some(place));
        }
        for hidden in self.hidden_dirs.iter().filter(|d| d.is_dir()) {
            push_mount(&mut argv, "--tmpfs", hidden, None);
        }
        for hidden in self.hidden_files.iter().filter(|f| f.is_file()) {
            push_mount(&mut argv, "--ro-bind", Path::new("/dev/null"), Some(hidden));
        }
        push_mount(&mut argv, "--bind", writable, Some(writable));
        push_mount(&mut argv, "--chdir", cwd, None);
        argv.push("--".into());
        if let Some(processes) = limits.processes {
            // Set inside the sandbox's user namespace, where its processes
            // are counted apart: set outside, the count would be every
            // process of the worker's user (its own threads included), and
            // the namespace would inherit that ceiling too.
            argv.push(prlimit.clone().into_os_string());
            argv.push(format!("--nproc={processes}").into());
            argv.push("--".into());
        }
        argv.push(program);
        argv.extend(args);
        (prlimit.clone().into_os_string(), argv)
    }

    /// What a failed confined process's message says of the limit it hit,
    /// read from how it ended and what it printed: `None` when nothing
    /// points at one.
    pub fn limit_hit(&self, limits: &Limits, message: &str) -> Option<String> {
        if !self.is_on() {
            return None;
        }
        let human_bytes = |b: u64| {
            if b.is_multiple_of(1 << 30) {
                format!("{}GiB", b >> 30)
            } else if b.is_multiple_of(1 << 20) {
                format!("{}MiB", b >> 20)
            } else {
                format!("{b} bytes")
            }
        };
        let has = |texts: &[&str]| texts.iter().any(|t| message.contains(t));
        if has(&["status 152", "SIGXCPU"]) {
            let cpu = limits.cpu?;
            return Some(format!(
                "its CPU time limit (sandbox cpu: {}s)",
                cpu.as_secs()
            ));
        }
        if has(&[
            "MemoryError",
            "Cannot allocate memory",
            "out of memory",
            "bad_alloc",
            "memory allocation",
        ]) {
            let memory = limits.memory?;
            return Some(format!(
                "its memory limit (sandbox memory: {})",
                human_bytes(memory)
            ));
        }
        if has(&["Too many open files"]) {
            let files = limits.open_files?;
            return Some(format!(
                "its open files limit (sandbox open_files: {files})"
            ));
        }
        if has(&[
            "Cannot fork",
            "fork: retry",
            "Resource temporarily unavailable",
            "can't start new thread",
        ]) {
            let processes = limits.processes?;
            return Some(format!(
                "its processes limit (sandbox processes: {processes})"
            ));
        }
        None
    }
}

/// Whether bubblewrap set a confined process's sandbox up and started its
/// program: read once the process has ended.
#[derive(Debug)]
pub struct SetUp(Option<tokio::net::unix::pipe::Receiver>);

impl SetUp {
    /// Whether the process's program started: `false` when bubblewrap
    /// ended before it (its sandbox could not be set up), so that nothing
    /// of the program ran and starting it again is safe. Always `true`
    /// unconfined. Reads bubblewrap's report to its end, which comes when
    /// bubblewrap exits: call it once the process has ended.
    pub async fn program_started(self) -> bool {
        use tokio::io::AsyncReadExt;
        let Some(mut report) = self.0 else {
            return true;
        };
        // `{ "exit-code": N }`, written only after the program started,
        // before bubblewrap exits: read until it shows, or the pipe ends.
        let started = |said: &[u8]| said.windows(b"exit-code".len()).any(|w| w == b"exit-code");
        let read = async {
            let mut said = Vec::new();
            let mut chunk = [0u8; 512];
            while let Ok(n) = report.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                said.extend_from_slice(&chunk[..n]);
                if started(&said) {
                    return true;
                }
            }
            false
        };
        // Bounded all the same (bubblewrap has exited); a report that does
        // not end is taken as a start, so nothing that may have run is
        // started again.
        tokio::time::timeout(Duration::from_secs(1), read)
            .await
            .unwrap_or(true)
    }
}

/// A size in a configuration file: a number of bytes, or a number with a
/// unit (`512MiB`, `1GiB`, `100MB`, `64k`).
pub fn bytes_of(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        toml::Value::String(text) => parse_bytes(text),
        other => Err(format!("expected bytes (e.g. 1GiB), found {other}")),
    }
}

/// A duration in a configuration file: seconds, or `30s`, `5m`, `1h`.
pub fn seconds_of(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        toml::Value::String(text) => {
            with_unit(text, "a duration (e.g. 30s, 5m, 1h)", |unit| match unit {
                "" | "s" => Some(1),
                "m" => Some(60),
                "h" => Some(3600),
                _ => None,
            })
        }
        other => Err(format!("expected a duration (e.g. 5m), found {other}")),
    }
}

/// `512MiB`, `1GiB`, `100MB`, `64k`, `4096`: bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    with_unit(text, "a size (e.g. 512MiB, 1GiB)", |unit| {
        match unit.to_ascii_lowercase().as_str() {
            "" | "b" => Some(1),
            "k" | "kb" => Some(1_000),
            "ki" | "kib" => Some(1 << 10),
            "m" | "mb" => Some(1_000_000),
            "mi" | "mib" => Some(1 << 20),
            "g" | "gb" => Some(1_000_000_000),
            "gi" | "gib" => Some(1 << 30),
            _ => None,
        }
    })
}

/// A whole number followed by a unit that `factor` knows, times that
/// unit's factor; `what` names the kind of value in the error.
fn with_unit(text: &str, what: &str, factor: impl Fn(&str) -> Option<u64>) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let wrong = || format!("'{text}' is not {what}");
    let number: u64 = number.parse().map_err(|_| wrong())?;
    let factor = factor(unit.trim()).ok_or_else(wrong)?;
    Ok(number.saturating_mul(factor))
}

/// Adds `flag FROM [TO]` to a bubblewrap command line.
fn push_mount(argv: &mut Vec<OsString>, flag: &str, from: &Path, to: Option<&Path>) {
    argv.push(flag.into());
    argv.push(from.as_os_str().to_owned());
    if let Some(to) = to {
        argv.push(to.as_os_str().to_owned());
    }
}

/// `name` on the worker's `PATH`.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Makes this process non-dumpable: processes of its user can no longer
/// read its memory or environment (`/proc/PID/mem`, `environ`), nor
/// attach to it.
pub fn make_undumpable() {
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(%error, "cannot make the worker non-dumpable");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_with_their_units() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes(" 1GiB "), Ok(1 << 30));
        assert_eq!(parse_bytes("100MB"), Ok(100_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(
            parse_bytes("1 gig"),
            Err("'1 gig' is not a size (e.g. 512MiB, 1GiB)".to_owned())
        );
        assert_eq!(seconds_of(&toml::Value::String("5m".into())), Ok(300));
        assert_eq!(seconds_of(&toml::Value::Integer(30)), Ok(30));
        assert!(seconds_of(&toml::Value::String("5 minutes".into())).is_err());
    }

    #[test]
    fn a_node_may_lower_the_workers_limits_never_raise_them() {
        let worker = Limits::default();
        let node = NodeSandbox {
            memory: Some(64 << 20),
            cpu: Some(10_000),
            processes: None,
            open_files: Some(16),
            network: Some(false),
        };
        let limits = worker.within(&node);
        assert_eq!(limits.memory, Some(64 << 20));
        assert_eq!(
            limits.cpu,
            Some(DEFAULT_CPU),
            "10,000 s is above the worker's"
        );
        assert_eq!(limits.processes, Some(DEFAULT_PROCESSES));
        assert_eq!(limits.open_files, Some(16));
        assert!(!limits.network);
        let closed = Limits {
            network: false,
            ..Limits::default()
        };
        let asked_open = NodeSandbox {
            network: Some(true),
            ..NodeSandbox::default()
        };
        assert!(
            !closed.within(&asked_open).network,
            "a node cannot open the network"
        );
    }
}
