//! What stops a worker: SIGTERM or SIGINT from anyone but the processes
//! it started itself.
//!
//! A worker drains on SIGTERM. Its scripts are confined in PID namespaces
//! of their own ([`crate::confinement`]), where the worker is not there to
//! signal; but where they are not (`--sandbox off`), a script doing `kill
//! $PPID` made its worker drain and exit, and with `retry` the same pill
//! drained a whole fleet. So the sender of each signal is read from its
//! `siginfo`, and one sent by a descendant of the worker is logged and
//! ignored. A sender that is already gone, or one the kernel stands for
//! (a terminal's Ctrl-C, a container runtime outside the namespace), is
//! obeyed.

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use tokio_util::sync::CancellationToken;

/// A token cancelled by the first SIGTERM or SIGINT that does not come
/// from one of this process's descendants.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let mut signals = match SignalsInfo::<WithOrigin>::new([SIGTERM, SIGINT]) {
        Ok(signals) => signals,
        Err(error) => {
            tracing::warn!(%error, "cannot read who sends signals; any SIGTERM stops the worker");
            return weft_process::shutdown_on_signal();
        }
    };
    let cancel = token.clone();
    let me = std::process::id() as i32;
    let spawned = std::thread::Builder::new()
        .name("weft-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let sender = origin.process.map(|p| p.pid);
                let name = if origin.signal == SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                match sender {
                    Some(pid) if descends_from(pid, me) => {
                        tracing::warn!(
                            signal = name,
                            sender = pid,
                            "ignored a signal from a process this worker started (a script cannot stop its worker)"
                        );
                    }
                    _ => {
                        tracing::info!(signal = name, sender = ?sender, "stopping: draining the tasks under way");
                        cancel.cancel();
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot watch signals; any SIGTERM stops the worker");
        return weft_process::shutdown_on_signal();
    }
    token
}

/// Whether process `pid` descends from `ancestor` (reading each parent
/// from `/proc/PID/stat`); false when it is gone or not readable.
pub fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut current = pid;
    // Deep enough for any tree a script makes; a cycle cannot last.
    for _ in 0..256 {
        if current <= 1 {
            return false;
        }
        let Some(parent) = parent_of(current) else {
            return false;
        };
        if parent == ancestor {
            return true;
        }
        current = parent;
    }
    false
}

/// The parent of `pid`: the field after the `)` that ends its name.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_and_a_grandchild_descend_from_this_process_and_init_does_not() {
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        assert!(descends_from(child.id() as i32, me));
        assert!(descends_from(grandchild, me));
        assert!(!descends_from(1, me));
        assert!(
            !descends_from(me, me),
            "a process is not its own descendant"
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(grandchild),
            nix::sys::signal::Signal::SIGKILL,
        );
        child.wait().unwrap();
    }
}
