//! The large strings of the inputs this client submitted, kept until it
//! has read each run's end: a claim check with the client as the store.
//!
//! A coordinator keeps a large input string that no template, condition or
//! reducer reads as the text it was sent, and knows while the run leaves
//! it as it was. A read of the state that names the fields the client
//! kept (`GetRunRequest.kept_input`) gets `null` in their places and their
//! names (`RunInfo.input_fields`), and the client puts its own values
//! back: a 10 MB input is sent once, not sent back and parsed again at
//! the end of every run that only read the rest of the state.
//!
//! What is kept is the value the input was written from, moved out of it
//! after writing, so keeping costs no copy. It is bounded: the newest
//! [`MAX_RUNS`] runs and [`MAX_BYTES`] in all; a run whose strings were
//! let go is read whole, as any other client reads it.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::Value;

/// The length from which a top-level input string is kept: a coordinator
/// holds strings whose JSON text is 64 KiB or more, and such a string's
/// text is never shorter than the string.
pub(crate) const KEPT_STRING_BYTES: usize = 64 * 1024;
/// At most this many runs' strings are kept.
pub(crate) const MAX_RUNS: usize = 64;
/// At most this many bytes of strings are kept, in all.
pub(crate) const MAX_BYTES: usize = 1 << 30;

/// One run's kept strings, by field.
struct Kept {
    run: String,
    fields: Vec<(String, Value)>,
    bytes: usize,
}

/// The strings kept, oldest run first.
#[derive(Default)]
pub(crate) struct KeptInputs {
    runs: Mutex<VecDeque<Kept>>,
}

impl std::fmt::Debug for KeptInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runs = self.runs.lock().map_or(0, |runs| runs.len());
        f.debug_struct("KeptInputs").field("runs", &runs).finish()
    }
}

/// Moves the top-level strings of [`KEPT_STRING_BYTES`] or more out of an
/// input already written (leaving `null`), for [`KeptInputs::keep`].
pub(crate) fn take_large(input: &mut Value) -> Vec<(String, Value)> {
    let Value::Object(fields) = input else {
        return Vec::new();
    };
    fields
        .iter_mut()
        .filter(|(_, value)| value.as_str().is_some_and(|s| s.len() >= KEPT_STRING_BYTES))
        .map(|(name, value)| (name.clone(), value.take()))
        .collect()
}

impl KeptInputs {
    /// Keeps `fields` of run `run`'s input, letting the oldest runs' go
    /// past the bounds.
    pub(crate) fn keep(&self, run: &str, fields: Vec<(String, Value)>) {
        let bytes = fields
            .iter()
            .map(|(_, value)| value.as_str().map_or(0, str::len))
            .sum();
        if fields.is_empty() || bytes > MAX_BYTES {
            return;
        }
        let Ok(mut runs) = self.runs.lock() else {
            return;
        };
        runs.push_back(Kept {
            run: run.to_owned(),
            fields,
            bytes,
        });
        let mut total: usize = runs.iter().map(|kept| kept.bytes).sum();
        while runs.len() > MAX_RUNS || total > MAX_BYTES {
            let Some(oldest) = runs.pop_front() else {
                break;
            };
            total -= oldest.bytes;
        }
    }

    /// The fields kept of run `run`'s input.
    pub(crate) fn names(&self, run: &str) -> Vec<String> {
        let Ok(runs) = self.runs.lock() else {
            return Vec::new();
        };
        runs.iter()
            .find(|kept| kept.run == run)
            .map(|kept| kept.fields.iter().map(|(name, _)| name.clone()).collect())
            .unwrap_or_default()
    }

    /// Puts the kept values of `names` into `state` in place of their
    /// `null`s; with `last` (the run has ended), lets them go. False when
    /// one of them is no longer kept (`state` is then unchanged in it).
    pub(crate) fn fill(&self, run: &str, state: &mut Value, names: &[String], last: bool) -> bool {
        let Ok(mut runs) = self.runs.lock() else {
            return false;
        };
        let Some(at) = runs.iter().position(|kept| kept.run == run) else {
            return false;
        };
        let kept = &mut runs[at];
        let Value::Object(fields) = state else {
            return false;
        };
        let all_kept = names.iter().all(|name| {
            kept.fields.iter().any(|(kept, _)| kept == name) && fields.contains_key(name)
        });
        if !all_kept {
            return false;
        }
        for (name, value) in &mut kept.fields {
            if let Some(slot) = names.contains(name).then(|| fields.get_mut(name)).flatten() {
                *slot = match last {
                    true => value.take(),
                    false => value.clone(),
                };
            }
        }
        if last {
            runs.remove(at);
        }
        true
    }

    /// Lets run `run`'s strings go (its end was read whole).
    pub(crate) fn forget(&self, run: &str) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.retain(|kept| kept.run != run);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn big(c: char) -> String {
        std::iter::repeat_n(c, KEPT_STRING_BYTES).collect()
    }

    #[test]
    fn only_large_top_level_strings_are_taken() {
        let mut input = json!({
            "doc": big('a'),
            "short": "hi",
            "list": [big('b')],
            "nested": {"doc": big('c')},
            "just_under": "x".repeat(KEPT_STRING_BYTES - 1),
        });
        let taken = take_large(&mut input);
        assert_eq!(taken, vec![("doc".to_owned(), Value::String(big('a')))]);
        assert_eq!(input["doc"], Value::Null);
        assert_eq!(
            input["list"][0].as_str().map(str::len),
            Some(KEPT_STRING_BYTES)
        );
        assert!(take_large(&mut json!([big('a')])).is_empty());
    }

    #[test]
    fn a_kept_field_fills_its_null_and_goes_at_the_end() {
        let kept = KeptInputs::default();
        kept.keep("run-1", vec![("doc".into(), json!(big('a')))]);
        assert_eq!(kept.names("run-1"), vec!["doc".to_owned()]);
        assert!(kept.names("run-2").is_empty());

        let mut state = json!({"doc": null, "n": 1});
        assert!(kept.fill("run-1", &mut state, &["doc".into()], false));
        assert_eq!(state, json!({"doc": big('a'), "n": 1}));
        // Still kept while the run goes on; let go once its end is read.
        let mut state = json!({"n": 2, "doc": null});
        assert!(kept.fill("run-1", &mut state, &["doc".into()], true));
        assert_eq!(state["doc"], json!(big('a')));
        assert!(kept.names("run-1").is_empty());
        // A field not kept (or no longer) is refused, the state untouched.
        let mut state = json!({"doc": null});
        assert!(!kept.fill("run-1", &mut state, &["doc".into()], true));
        assert_eq!(state, json!({"doc": null}));
    }

    #[test]
    fn a_name_the_client_did_not_keep_is_refused() {
        let kept = KeptInputs::default();
        kept.keep("run-1", vec![("doc".into(), json!(big('a')))]);
        let mut state = json!({"doc": null, "other": null});
        assert!(!kept.fill("run-1", &mut state, &["doc".into(), "other".into()], false));
        assert_eq!(state, json!({"doc": null, "other": null}));
    }

    #[test]
    fn the_oldest_runs_go_past_the_bounds() {
        let kept = KeptInputs::default();
        for i in 0..=MAX_RUNS {
            kept.keep(&format!("run-{i}"), vec![("doc".into(), json!("x"))]);
        }
        assert!(kept.names("run-0").is_empty());
        assert_eq!(kept.names("run-1").len(), 1);
        assert_eq!(kept.names(&format!("run-{MAX_RUNS}")).len(), 1);
        kept.forget("run-1");
        assert!(kept.names("run-1").is_empty());
    }
}
