//! Each step of a run is marked before it starts, so that a coordinator
//! that dies mid-step knows, at its next start, which runs it was stepping
//! (`runs::quarantine` charges them a crash): the ids of the runs being
//! stepped are written to `steps-in-flight` in the data directory (no
//! sync: a process that dies leaves the page cache behind), and removed
//! when the step returns.
//!
//! Every step of every run passes here, so a mark costs one small write
//! and nothing else: the file is a row of fixed slots, one per run being
//! stepped, each a run's id padded with spaces to [`SLOT`] bytes with a
//! newline last, or blank when free. Marking writes the run's id into a
//! free slot, unmarking blanks it: one `pwrite` of one slot, with no seek,
//! no truncation and no rewrite of the others' ids. Read back, the file is
//! lines of ids among blank lines.
//!
//! A run charged once is a suspect: its steps run alone, with no other
//! run's step beside it, so a second crash is charged to it and nothing
//! else, and an innocent run stepped beside the guilty one at the first
//! crash is never quarantined.

use foldhash::{HashMap, HashMapExt};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use weft_proto::RunId;

/// The file that holds the runs being stepped.
const MARKS_FILE: &str = "steps-in-flight";

/// Bytes one run's mark takes in the file, its newline included. A run id
/// is 36 bytes (`run-` and a UUID's 32 hex digits); a longer one is not
/// marked (see [`Marks::mark`]).
const SLOT: usize = 128;

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
    /// Runs being stepped: the slot that holds each one's id and its steps
    /// under way (a run steps one at a time, but a parent and its children
    /// are separate runs).
    stepping: HashMap<RunId, Stepping>,
    /// Blank slots, to be taken before the file grows.
    free: Vec<usize>,
    /// Slots the file has (blank or not).
    slots: usize,
    /// Slot writes made (marks and blanks).
    writes: u64,
}

struct Stepping {
    /// `None`: the id does not fit a slot, so the run is not marked.
    slot: Option<usize>,
    steps: u32,
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
        self.marks.lock().unmark(self.run);
    }
}

impl Marks {
    fn new() -> Self {
        Self {
            file: None,
            stepping: HashMap::new(),
            free: Vec::new(),
            slots: 0,
            writes: 0,
        }
    }

    /// One more step of `run`: its id written to a slot of its own if it
    /// has none.
    fn mark(&mut self, run: &RunId) {
        if let Some(stepping) = self.stepping.get_mut(run) {
            stepping.steps += 1;
            return;
        }
        let slot = (run.as_str().len() < SLOT).then(|| {
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots += 1;
                self.slots - 1
            });
            self.write_slot(slot, run.as_str());
            slot
        });
        if slot.is_none() {
            tracing::warn!(run = %run, "a run id longer than {} bytes is not marked while it steps", SLOT - 1);
        }
        self.stepping
            .insert(run.clone(), Stepping { slot, steps: 1 });
    }

    /// A step of `run` returned: its slot blanked when it was the last.
    fn unmark(&mut self, run: &RunId) {
        let Some(stepping) = self.stepping.get_mut(run) else {
            return;
        };
        stepping.steps -= 1;
        if stepping.steps > 0 {
            return;
        }
        if let Some(Stepping {
            slot: Some(slot), ..
        }) = self.stepping.remove(run)
        {
            self.write_slot(slot, "");
            self.free.push(slot);
        }
    }

    /// Writes `id` (or blanks, for `""`) into `slot`. A failure to write
    /// costs the protection, never the step.
    fn write_slot(&mut self, slot: usize, id: &str) {
        let Some(file) = self.file.as_ref() else {
            return;
        };
        self.writes += 1;
        let mut text = [b' '; SLOT];
        text[..id.len()].copy_from_slice(id.as_bytes());
        text[SLOT - 1] = b'\n';
        if let Err(error) = file.write_all_at(&text, (slot * SLOT) as u64) {
            tracing::warn!(%error, "cannot mark the runs being stepped; poison runs will not be found");
            self.file = None;
        }
    }
}

impl StepMarks {
    /// Marks kept in `dir`; what an earlier process left there is read by
    /// [`Self::take_crashed`] first.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join(MARKS_FILE),
            file: Mutex::new(Marks::new()),
            alone: RwLock::new(()),
        }
    }

    /// Marks kept nowhere (tests of a machine, an in-memory coordinator).
    pub fn none() -> Self {
        Self {
            path: PathBuf::new(),
            file: Mutex::new(Marks::new()),
            alone: RwLock::new(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.file.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The runs an earlier process was stepping when it died, and opens the
    /// file, emptied, for this one's marks.
    pub fn take_crashed(&self) -> Vec<RunId> {
        if self.path.as_os_str().is_empty() {
            return Vec::new();
        }
        let mut text = String::new();
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut marks = self.lock();
        match options.open(&self.path) {
            Ok(mut file) => {
                if let Err(error) = file.read_to_string(&mut text) {
                    tracing::warn!(path = %self.path.display(), %error, "cannot read the marks of an earlier coordinator");
                    text.clear();
                }
                match file.set_len(0) {
                    Ok(()) => marks.file = Some(file),
                    Err(error) => {
                        tracing::warn!(path = %self.path.display(), %error, "cannot clear the marks of an earlier coordinator; poison runs will not be found");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "cannot keep the marks of the runs being stepped; poison runs will not be found");
            }
        }
        let mut crashed: Vec<RunId> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(RunId::from)
            .collect();
        crashed.sort();
        crashed.dedup();
        crashed
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
        self.lock().mark(run);
        Step {
            marks: self,
            run,
            _shared: shared,
            _alone: exclusive,
        }
    }
}

/// A run's mark held across several of its steps: see [`StepMarks::hold`].
pub struct Held<'a> {
    marks: &'a StepMarks,
    run: &'a RunId,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.marks.lock().unmark(self.run);
    }
}

impl StepMarks {
    /// Marks `run` until the guard is dropped, without taking the lock
    /// that a suspect's step takes alone: the steps taken meanwhile (each
    /// still through [`StepMarks::step`]) find the run marked and write
    /// nothing. A burst of results is so marked once, not once a result.
    /// For runs that are not suspects only: a suspect's mark must cover
    /// its steps alone, so that a second crash is charged to it and to
    /// nothing else.
    pub fn hold<'a>(&'a self, run: &'a RunId) -> Held<'a> {
        self.lock().mark(run);
        Held { marks: self, run }
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

    /// The ids the file holds, in file order.
    fn marked(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join(MARKS_FILE))
            .unwrap()
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect()
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
            assert_eq!(marked(&dir), vec!["run-a"]);
        }
        assert!(marked(&dir).is_empty());
        // A process that dies mid-step leaves its marks: the next finds them.
        let step_a = marks.step(&a, false);
        let step_b = marks.step(&b, false);
        std::mem::forget(step_a);
        std::mem::forget(step_b);
        let next = StepMarks::in_dir(&dir);
        assert_eq!(next.take_crashed(), vec![a, b]);
        // And clears them for its own.
        assert!(StepMarks::in_dir(&dir).take_crashed().is_empty());
    }

    #[test]
    fn a_mark_takes_a_free_slot_and_leaves_the_others_alone() {
        let dir = dir("slots");
        let marks = StepMarks::in_dir(&dir);
        marks.take_crashed();
        let (a, b, c) = (
            RunId::from("run-a"),
            RunId::from("run-b"),
            RunId::from("run-c"),
        );
        let step_a = marks.step(&a, false);
        let step_b = marks.step(&b, false);
        assert_eq!(marked(&dir), vec!["run-a", "run-b"]);
        drop(step_a);
        assert_eq!(marked(&dir), vec!["run-b"], "b's mark survives a's end");
        // c takes the slot a left, so the file does not grow.
        let step_c = marks.step(&c, false);
        assert_eq!(marked(&dir), vec!["run-c", "run-b"]);
        let len = std::fs::metadata(dir.join(MARKS_FILE)).unwrap().len();
        assert_eq!(len, 2 * SLOT as u64);
        // A run stepped twice at once (never, but counted) keeps its mark
        // until its last step returns.
        let again = marks.step(&c, false);
        drop(step_c);
        assert_eq!(marked(&dir), vec!["run-c", "run-b"]);
        drop(again);
        drop(step_b);
        assert!(marked(&dir).is_empty());
    }

    #[test]
    fn a_held_run_is_marked_once_for_all_its_steps() {
        let dir = dir("held");
        let marks = StepMarks::in_dir(&dir);
        marks.take_crashed();
        let a = RunId::from("run-a");
        for _ in 0..3 {
            drop(marks.step(&a, false));
        }
        assert_eq!(marks.lock().writes, 6, "a mark and a blank a step");
        {
            let _held = marks.hold(&a);
            assert_eq!(marked(&dir), vec!["run-a"]);
            for _ in 0..3 {
                drop(marks.step(&a, false));
                // Still marked between its steps.
                assert_eq!(marked(&dir), vec!["run-a"]);
            }
        }
        assert!(marked(&dir).is_empty(), "blanked when the hold ends");
        assert_eq!(
            marks.lock().writes,
            8,
            "one mark and one blank for the three"
        );
        // A held run that dies mid-burst leaves its mark.
        std::mem::forget(marks.hold(&a));
        assert_eq!(StepMarks::in_dir(&dir).take_crashed(), vec![a]);
    }

    #[test]
    fn marks_in_the_earlier_format_are_read() {
        // Before slots, the file was the ids one per line, rewritten whole.
        let dir = dir("lines");
        std::fs::write(dir.join(MARKS_FILE), "run-b\nrun-a\n").unwrap();
        let marks = StepMarks::in_dir(&dir);
        assert_eq!(
            marks.take_crashed(),
            vec![RunId::from("run-a"), RunId::from("run-b")]
        );
        assert!(marked(&dir).is_empty());
    }

    #[test]
    fn an_id_too_long_for_a_slot_steps_unmarked() {
        let dir = dir("long");
        let marks = StepMarks::in_dir(&dir);
        marks.take_crashed();
        let long = RunId::from("r".repeat(SLOT));
        let short = RunId::from("run-a");
        let step_long = marks.step(&long, false);
        let step_short = marks.step(&short, false);
        assert_eq!(marked(&dir), vec!["run-a"]);
        drop(step_long);
        drop(step_short);
        assert!(marked(&dir).is_empty());
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
