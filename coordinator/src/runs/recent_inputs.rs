//! The large input values of recent runs, as their submitters sent them,
//! so a client may name one again instead of sending it again: a claim
//! check with the coordinator as the store (`SubmitRequest.input_refs`).
//!
//! A run's input field held as its text (`weft_machine::held`, 64 KiB of
//! JSON or more) is kept here under its run and field when the run is
//! accepted. A submission that names it gets the same text, shared, not a
//! copy: while the runs that use it go on it costs nothing more, and past
//! [`MOST_BYTES`] or [`MOST_ENTRIES`] the oldest are let go. A reference is
//! found only in the namespace that submitted the run, so no tenant learns
//! of another's values; one not found is refused, and the client sends the
//! value (after a restart, a failover, or when it was let go).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use weft_proto::RunId;

/// At most this many bytes of values are kept.
const MOST_BYTES: usize = 256 << 20;
/// At most this many values are kept.
const MOST_ENTRIES: usize = 1024;

/// One value kept: whose, under which field, and its text.
struct Entry {
    namespace: String,
    run: RunId,
    field: String,
    text: Arc<str>,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct RecentInputs {
    entries: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Oldest first.
    entries: VecDeque<Entry>,
    bytes: usize,
}

impl RecentInputs {
    /// Keeps run `run`'s held input `fields` (of `namespace`), letting the
    /// oldest go past the bounds.
    pub(crate) fn keep(
        &self,
        namespace: &str,
        run: &RunId,
        fields: impl IntoIterator<Item = (String, Arc<str>)>,
    ) {
        let Ok(mut kept) = self.entries.lock() else {
            return;
        };
        for (field, text) in fields {
            if text.len() > MOST_BYTES {
                continue;
            }
            kept.bytes += text.len();
            kept.entries.push_back(Entry {
                namespace: namespace.to_owned(),
                run: run.clone(),
                field,
                text,
            });
        }
        while kept.bytes > MOST_BYTES || kept.entries.len() > MOST_ENTRIES {
            let Some(oldest) = kept.entries.pop_front() else {
                break;
            };
            kept.bytes -= oldest.text.len();
        }
    }

    /// The text run `run`'s input gave `field`, if it is kept and the run
    /// is `namespace`'s.
    pub(crate) fn find(&self, namespace: &str, run: &str, field: &str) -> Option<Arc<str>> {
        let kept = self.entries.lock().ok()?;
        kept.entries
            .iter()
            .rev()
            .find(|entry| {
                &*entry.run == run && entry.field == field && entry.namespace == namespace
            })
            .map(|entry| entry.text.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Arc<str> {
        Arc::from("x".repeat(n))
    }

    #[test]
    fn a_value_is_found_by_its_run_and_field_in_its_own_namespace_only() {
        let recent = RecentInputs::default();
        let run = RunId::from("run-1".to_owned());
        recent.keep("team-a", &run, [("doc".to_owned(), text(10))]);
        let found = recent.find("team-a", "run-1", "doc").expect("kept");
        assert_eq!(found.len(), 10);
        assert!(
            recent.find("team-b", "run-1", "doc").is_none(),
            "another namespace"
        );
        assert!(recent.find("team-a", "run-1", "other").is_none());
        assert!(recent.find("team-a", "run-2", "doc").is_none());
    }

    #[test]
    fn the_oldest_values_go_past_the_bounds() {
        let recent = RecentInputs::default();
        let quarter = MOST_BYTES / 4;
        for n in 0..5 {
            let run = RunId::from(format!("run-{n}"));
            recent.keep("ns", &run, [("doc".to_owned(), text(quarter))]);
        }
        assert!(recent.find("ns", "run-0", "doc").is_none(), "let go");
        for n in 1..5 {
            assert!(recent.find("ns", &format!("run-{n}"), "doc").is_some());
        }
        for n in 0..MOST_ENTRIES + 1 {
            let run = RunId::from(format!("small-{n}"));
            recent.keep("ns", &run, [("doc".to_owned(), text(1))]);
        }
        assert!(recent.find("ns", "small-0", "doc").is_none());
        assert!(
            recent
                .find("ns", &format!("small-{MOST_ENTRIES}"), "doc")
                .is_some()
        );
    }
}
