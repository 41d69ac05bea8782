//! A script's process around it: how its argv[0] starts (a bundled file
//! from the scratch directory, by its execute bit or its `#!` line), the
//! scratch directory removed however the attempt ends, and the process
//! group killed with it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::task::{Failure, FailureKind};

/// How a script's process starts.
pub(super) struct Launch {
    pub(super) program: std::ffi::OsString,
    /// Arguments before the argv's own (an interpreter's, then the file).
    pub(super) leading_args: Vec<std::ffi::OsString>,
}

/// How to start `program` (argv[0]). A file of the bundle, found in the
/// scratch directory, runs from there and never through `PATH`; one without
/// its execute bit runs through its `#!` line, and one without either is a
/// clear error. Anything else is looked up as usual.
pub(super) fn launcher(dir: &Path, program: &str) -> Result<Launch, Failure> {
    let local = dir.join(program);
    if Path::new(program).is_absolute() || !local.is_file() {
        return Ok(Launch {
            program: program.into(),
            leading_args: Vec::new(),
        });
    }
    let mode = std::fs::metadata(&local).map_or(0, |m| m.permissions().mode());
    if mode & 0o111 != 0 {
        return Ok(Launch {
            program: local.into_os_string(),
            leading_args: Vec::new(),
        });
    }
    let head = std::fs::read(&local).unwrap_or_default();
    let first_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let shebang = std::str::from_utf8(first_line)
        .ok()
        .and_then(|line| line.strip_prefix("#!"))
        .map(|line| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|parts| !parts.is_empty());
    let Some(mut parts) = shebang else {
        return Err(Failure::new(
            FailureKind::InvalidTask,
            format!(
                "bundled script '{program}' is not executable and has no #! line: make it executable (chmod +x {program}) before running weft, or name its interpreter in `run` (e.g. run: [python3, {program}])"
            ),
        ));
    };
    let interpreter = parts.remove(0);
    let mut leading_args: Vec<std::ffi::OsString> = parts.into_iter().map(Into::into).collect();
    leading_args.push(local.into_os_string());
    Ok(Launch {
        program: interpreter.into(),
        leading_args,
    })
}

/// An attempt's scratch directory, removed however the attempt ends:
/// finished, failed, or cancelled by dropping its future.
pub(super) struct Scratch(pub(super) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.0);
        // Off the async thread when there is a runtime to take it.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || std::fs::remove_dir_all(dir));
            }
            Err(_) => {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// Kills a script's process group on drop, so neither a timeout, a
/// cancellation nor children the script left behind outlive the attempt.
pub(super) struct GroupGuard(pub(super) Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = killpg(pid, Signal::SIGKILL);
        }
    }
}
