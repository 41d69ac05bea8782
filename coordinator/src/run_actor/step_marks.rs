//! Each step of a run is marked before it starts, so that a coordinator
//! that dies mid-step knows, at its next start, which runs it was stepping
//! (`runs::quarantine` charges them a crash): the ids of the runs being
//! stepped are written to `steps-in-flight` in the data directory (no
//! sync: a process that dies leaves the page cache behind), and removed
//! when the step returns.
//!
//! A run charged once is a suspect: its steps run alone, with no other
//! run's step beside it, so a second crash is charged to it and nothing
//! else, and an innocent run stepped beside the guilty one at the first
//! crash is never quarantined.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use weft_proto::RunId;

/// The file that holds the runs being stepped.
const MARKS_FILE: &str = "steps-in-flight";

/// The marks of the runs being stepped, shared by every run of a
/// coordinator.
pub struct StepMarks {
    path: PathBuf,
    file: Mutex<Marks>,
    /// Held shared by a step, alone by a suspect's step.
    alone: RwLock<()>,
}

struct Marks {
    file: Option<File>,
    /// Steps under way per run (a run steps one at a time, but a parent
    /// and its children are separate runs).
    stepping: BTreeMap<RunId, u32>,
}

impl std::fmt::Debug for StepMarks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepMarks")
            .field("path", &self.path)
            .finish()
    }
}

/// A step under way: unmarked when dropped.
pub struct Step<'a> {
    marks: &'a StepMarks,
    run: &'a RunId,
    _shared: Option<RwLockReadGuard<'a, ()>>,
    _alone: Option<RwLockWriteGuard<'a, ()>>,
}

impl Drop for Step<'_> {
    fn drop(&mut self) {
        let mut marks = self.marks.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = marks.stepping.get_mut(self.run) {
            *count -= 1;
            if *count == 0 {
                marks.stepping.remove(self.run);
            }
        }
        marks.write();
    }
}

impl Marks {
    /// Rewrites the file with the runs being stepped. A failure to write
    /// costs the protection, never the step.
    fn write(&mut self) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut text = String::new();
        for run in self.stepping.keys() {
            text.push_str(run.as_str());
            text.push('\n');
        }
        let written = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(text.as_bytes()))
            .and_then(|()| file.set_len(text.len() as u64));
        if let Err(error) = written {
            tracing::warn!(%error, "cannot mark the runs being stepped; poison runs will not be found");
            self.file = None;
        }
    }
}

impl StepMarks {
    /// Marks kept in `dir`; what an earlier process left there is read by
    /// [`Self::take_crashed`] first.
    pub fn in_dir(dir: &Path) -> Self {
        let path = dir.join(MARKS_FILE);
        Self {
            path,
            file: Mutex::new(Marks {
                file: None,
                stepping: BTreeMap::new(),
            }),
            alone: RwLock::new(()),
        }
    }

    /// Marks kept nowhere (tests of a machine, an in-memory coordinator).
    pub fn none() -> Self {
        Self {
            path: PathBuf::new(),
            file: Mutex::new(Marks {
                file: None,
                stepping: BTreeMap::new(),
            }),
            alone: RwLock::new(()),
        }
    }

    /// The runs an earlier process was stepping when it died, and opens the
    /// file for this one's marks.
    pub fn take_crashed(&self) -> Vec<RunId> {
        if self.path.as_os_str().is_empty() {
            return Vec::new();
        }
        let mut text = String::new();
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut marks = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match options.open(&self.path) {
            Ok(mut file) => {
                if let Err(error) = file.read_to_string(&mut text) {
                    tracing::warn!(path = %self.path.display(), %error, "cannot read the marks of an earlier coordinator");
                    text.clear();
                }
                marks.file = Some(file);
            }
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "cannot keep the marks of the runs being stepped; poison runs will not be found");
            }
        }
        marks.write();
        text.lines()
            .filter(|line| !line.is_empty())
            .map(RunId::from)
            .collect()
    }

    /// Marks a step of `run`; `alone` (a suspect's step) waits until no
    /// other run steps and keeps them waiting until it is done.
    pub fn step<'a>(&'a self, run: &'a RunId, alone: bool) -> Step<'a> {
        let (shared, exclusive) = if alone {
            (
                None,
                Some(self.alone.write().unwrap_or_else(|e| e.into_inner())),
            )
        } else {
            (
                Some(self.alone.read().unwrap_or_else(|e| e.into_inner())),
                None,
            )
        };
        let mut marks = self.file.lock().unwrap_or_else(|e| e.into_inner());
        *marks.stepping.entry(run.clone()).or_default() += 1;
        marks.write();
        drop(marks);
        Step {
            marks: self,
            run,
            _shared: shared,
            _alone: exclusive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-marks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_step_is_marked_until_it_returns_and_a_death_leaves_the_mark() {
        let dir = dir("steps");
        let a = RunId::from("run-a");
        let b = RunId::from("run-b");
        let marks = StepMarks::in_dir(&dir);
        assert!(marks.take_crashed().is_empty());
        {
            let _step = marks.step(&a, false);
            let text = std::fs::read_to_string(dir.join(MARKS_FILE)).unwrap();
            assert_eq!(text, format!("{a}\n"));
        }
        assert_eq!(std::fs::read_to_string(dir.join(MARKS_FILE)).unwrap(), "");
        // A process that dies mid-step leaves its marks: the next finds them.
        let step_a = marks.step(&a, false);
        let step_b = marks.step(&b, false);
        std::mem::forget(step_a);
        std::mem::forget(step_b);
        let next = StepMarks::in_dir(&dir);
        let mut found = next.take_crashed();
        found.sort();
        let mut expected = vec![a, b];
        expected.sort();
        assert_eq!(found, expected);
        // And clears them for its own.
        assert!(StepMarks::in_dir(&dir).take_crashed().is_empty());
    }

    #[test]
    fn a_suspects_step_runs_alone() {
        let marks = std::sync::Arc::new(StepMarks::none());
        let suspect = RunId::from("run-suspect");
        let other = RunId::from("run-other");
        let alone = marks.step(&suspect, true);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = {
            let marks = marks.clone();
            let other = other.clone();
            std::thread::spawn(move || {
                let _step = marks.step(&other, false);
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "another run steps while the suspect does"
        );
        drop(alone);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the other run steps once the suspect is done");
        thread.join().unwrap();
    }
}
