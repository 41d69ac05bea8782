//! Fields a run holds as their JSON text, never parsed by the coordinator.
//!
//! A large string in a run's input that nothing on the coordinator reads
//! (no condition, router, template, reducer or subgraph node of the graph:
//! [`RunPlan::never_reads`]) is only ever moved — into the store, to the
//! workers whose steps read it, back in the run's state — so the run keeps
//! the text it was given and the machine's state holds an empty string in
//! its place, which nothing reads. The text is the field's value until a
//! step writes the field; from then on the field is an ordinary value
//! ([`RunMachine`](crate::RunMachine) releases it when the write is
//! committed, and compares a write with the held value, not the empty
//! string, to tell whether it changed anything).
//!
//! Only strings are held: a string's JSON text is read back as the same
//! string by any JSON reader, once its escapes are checked here as the
//! parser would check them; a list or object may hold numbers that readers
//! take differently. Arrays and objects are parsed as before.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::RunPlan;
use crate::graph::FieldType;

/// The size of JSON text from which an input string the coordinator never
/// reads is held as its text.
pub const HELD_FIELD_BYTES: usize = 64 * 1024;

/// A run's input, read: the values its machine starts from, and the text
/// of each field held unparsed (whose value in `values` is `""`).
#[derive(Debug, Default)]
pub struct RunInput {
    /// Every field of the input, in its order; a held field's value is an
    /// empty string.
    pub values: Map<String, Value>,
    /// The held fields' JSON text, by name.
    pub held: BTreeMap<String, Arc<str>>,
}

impl RunInput {
    /// An input of parsed values only.
    pub fn parsed(values: Map<String, Value>) -> Self {
        Self {
            values,
            held: BTreeMap::new(),
        }
    }

    /// Reads `text`, a run's input for `plan`, holding the strings of
    /// [`HELD_FIELD_BYTES`] or more that the coordinator never reads and
    /// whose field, if declared, takes a string. `None` when `text` is too
    /// short to hold anything, when the coordinator reads every field, or
    /// when `text` is not a JSON object of valid values: the
    /// caller then parses it whole, as before (which says what is wrong,
    /// and refuses a number out of range).
    pub fn read(plan: &RunPlan, text: &str) -> Option<Self> {
        if text.len() < HELD_FIELD_BYTES || plan.reads_every_field() {
            return None;
        }
        let Entries(entries) = serde_json::from_str(text).ok()?;
        let mut input = Self {
            values: Map::with_capacity(entries.len()),
            held: BTreeMap::new(),
        };
        for (name, raw) in entries {
            let text = raw.get();
            // A later duplicate replaces an earlier key, as in a parse.
            input.held.remove(&name);
            if holds(plan, &name, text) {
                input.held.insert(name.clone(), Arc::from(text));
                input.values.insert(name, Value::String(String::new()));
            } else {
                input.values.insert(name, serde_json::from_str(text).ok()?);
            }
        }
        Some(input)
    }
}

/// Whether field `name`, given as `text`, is held.
fn holds(plan: &RunPlan, name: &str, text: &str) -> bool {
    let declared = plan.graph().field(name).map(|field| field.ty);
    text.len() >= HELD_FIELD_BYTES
        && text.starts_with('"')
        && matches!(declared, None | Some(FieldType::Any | FieldType::String))
        && (declared.is_some() || !plan.graph().settings.strict_state)
        && plan.never_reads(name)
        && escapes_are_valid(text)
}

/// Whether a JSON string's `\u` escapes are what a parse into a Rust
/// string accepts: every surrogate paired, leading then trailing. (The
/// rest of the string's syntax was checked when the input was read.)
fn escapes_are_valid(text: &str) -> bool {
    let bytes = text.as_bytes();
    let hex = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u16::from_str_radix(digits, 16).ok())
    };
    let mut at = 0;
    // (A vectorized search: a large text is mostly free of escapes.)
    while let Some(found) = memchr::memchr(b'\\', &bytes[at..]) {
        let escape = at + found;
        if bytes.get(escape + 1) != Some(&b'u') {
            at = escape + 2;
            continue;
        }
        let Some(unit) = hex(escape + 2) else {
            return false;
        };
        at = escape + 6;
        match unit {
            0xDC00..=0xDFFF => return false,
            0xD800..=0xDBFF => {
                let trailing = bytes.get(at..at + 2) == Some(b"\\u")
                    && hex(at + 2).is_some_and(|unit| (0xDC00..=0xDFFF).contains(&unit));
                if !trailing {
                    return false;
                }
                at += 6;
            }
            _ => {}
        }
    }
    true
}

/// A JSON object's entries as written, values unparsed.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Entries<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Object<'a> {
            type Value = Entries<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Entries<'a>, M::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<String, &'a RawValue>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Object(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::RunLimits;
    use crate::graph::{Format, load_str};

    fn plan(yaml: &str) -> Arc<RunPlan> {
        let (graph, _) = load_str(yaml, Format::Yaml, "g").expect("the graph loads");
        RunPlan::new(Arc::new(graph), RunLimits::default())
    }

    const CHAIN: &str =
        "version: 1\nname: g\nnodes:\n  a: {kind: task, handler: inc, start: true, end: true}\n";

    fn big(text: &str) -> String {
        text.repeat(HELD_FIELD_BYTES / text.len() + 1)
    }

    #[test]
    fn a_large_string_nothing_reads_is_held_and_the_rest_parsed() {
        let blob = big("x");
        let text = json!({"blob": blob, "counter": 0, "small": "y"}).to_string();
        let input = RunInput::read(&plan(CHAIN), &text).expect("an object");
        assert_eq!(
            Value::Object(input.values.clone()),
            json!({"blob": "", "counter": 0, "small": "y"}),
            "the order kept, the held field empty"
        );
        let held = &input.held["blob"];
        assert_eq!(serde_json::from_str::<Value>(held).unwrap(), json!(blob));
        assert_eq!(input.held.len(), 1);
    }

    #[test]
    fn a_string_is_held_from_its_texts_64_kib_on() {
        let plan = plan(CHAIN);
        // Its text: the quotes and HELD_FIELD_BYTES - 2 characters.
        let exactly = "x".repeat(HELD_FIELD_BYTES - 2);
        let input = RunInput::read(&plan, &json!({"doc": exactly}).to_string()).unwrap();
        assert_eq!(input.held["doc"].len(), HELD_FIELD_BYTES);
        let under = "x".repeat(HELD_FIELD_BYTES - 3);
        let input = RunInput::read(&plan, &json!({"doc": under}).to_string()).unwrap();
        assert!(input.held.is_empty());
        assert_eq!(input.values["doc"], json!(under));
    }

    #[test]
    fn a_field_the_coordinator_reads_or_types_otherwise_is_parsed() {
        let blob = big("x");
        let text = json!({"blob": blob, "list": [blob]}).to_string();
        let read = "version: 1\nname: g\nnodes:\n  a:\n    kind: task\n    handler: inc\n    start: true\n    end: true\n    state_updates: {n: \"{{ blob | length }}\"}\n";
        let input = RunInput::read(&plan(read), &text).unwrap();
        assert!(input.held.is_empty(), "read by a template: parsed");
        assert_eq!(input.values["blob"], json!(blob));
        let input = RunInput::read(&plan(CHAIN), &text).unwrap();
        assert_eq!(
            input.held.keys().collect::<Vec<_>>(),
            ["blob"],
            "a list is parsed"
        );
        let strict = "version: 1\nname: g\nsettings: {strict_state: true}\nstate:\n  n: {type: integer, default: 0}\nnodes:\n  a: {kind: task, handler: inc, start: true, end: true}\n";
        let input = RunInput::read(&plan(strict), &text).unwrap();
        assert!(
            input.held.is_empty(),
            "undeclared under strict_state: the machine refuses it"
        );
    }

    #[test]
    fn what_a_parse_refuses_is_not_held() {
        let plan = plan(CHAIN);
        let body = big("x");
        for bad in [r"\udc00", r"\ud800", r"\ud800x", r"\ud800\u0041"] {
            let text = format!(r#"{{"blob": "{body}{bad}"}}"#);
            assert!(serde_json::from_str::<Value>(&text).is_err(), "{bad}");
            assert!(RunInput::read(&plan, &text).is_none(), "{bad}");
        }
        let paired = format!(r#"{{"blob": "{body}\ud83d\ude00 \\u \" \n"}}"#);
        let input = RunInput::read(&plan, &paired).expect("valid escapes");
        let held: Value = serde_json::from_str(&input.held["blob"]).unwrap();
        let parsed: Value = serde_json::from_str(&paired).unwrap();
        assert_eq!(held, parsed["blob"]);
        // Beside a string that would be held: not an object, a number out
        // of range, bad syntax.
        for bad in [
            format!(r#"["{body}"]"#),
            format!(r#"{{"blob": "{body}", "a": 1e999}}"#),
            format!(r#"{{"blob": "{body}", "a": }}"#),
        ] {
            assert!(serde_json::from_str::<Value>(&bad).is_err() || bad.starts_with('['));
            assert!(
                RunInput::read(&plan, &bad).is_none(),
                "{}",
                &bad[bad.len() - 12..]
            );
        }
        // Too short to hold anything: parsed whole by the caller.
        assert!(RunInput::read(&plan, r#"{"a": 1}"#).is_none());
    }

    #[test]
    fn a_duplicate_key_replaces_the_held_text_as_a_parse_would() {
        let blob = big("x");
        let text = format!(r#"{{"blob": "{blob}", "n": 1, "blob": 7}}"#);
        let input = RunInput::read(&plan(CHAIN), &text).unwrap();
        let parsed: Map<String, Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(input.values, parsed);
        assert!(input.held.is_empty());
    }
}
