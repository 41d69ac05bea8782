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
//! A step's writes are read the same way ([`RunInput::read_writes`]): a
//! large string a task returns for a field nothing on the coordinator
//! reads is kept as the text its worker sent, not parsed and written again,
//! when the step's node checks its output against no schema and updates no
//! field from it (those read what the step wrote). The text waits in the
//! wave (stored with it, so a restored run keeps it) and is the field's
//! held text once the wave commits.
//!
//! Strings, lists and objects are held (a held field's placeholder is an
//! empty one of its kind, so a declared type still checks). A held text is
//! passed on as it came, so it must read back, with any JSON reader, as
//! what the coordinator's own parse and write would have passed on: its
//! escapes are checked here as a parse checks them (every surrogate
//! paired); a list or object is held only when every number in it is one
//! that readers agree on (an integer within 64 bits, or a finite float —
//! a longer integer is read exactly by some readers and as a float by
//! others), no object in it has a key twice (some readers refuse that) and
//! it nests no deeper than a parse accepts ([`plain`]). Anything else is
//! parsed as before.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::RunPlan;
use crate::graph::{FieldType, NodeIdx};

/// The size of JSON text from which an input string the coordinator never
/// reads is held as its text.
pub const HELD_FIELD_BYTES: usize = 64 * 1024;

/// A run's input or a step's writes, read: the values, and the text of
/// each field held unparsed (whose value in `values` is `""`).
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
        Self::read_object(plan, text, |_| true)
    }

    /// Reads `text`, what a step of node `node` returned, as
    /// [`RunInput::read`] reads an input (what it holds may be nothing:
    /// its values are parsed already, and are not parsed again); `None`
    /// where `read` gives none, or when the node reads what its step wrote
    /// (an `output_schema` checks it, a `state_updates` entry may take it),
    /// and then the caller parses it whole. `_next` and `_send` are never
    /// held.
    pub fn read_writes(plan: &RunPlan, node: NodeIdx, text: &str) -> Option<Self> {
        let node = plan.graph().node(node);
        if node.output_schema.is_some() || !node.state_updates.is_empty() {
            return None;
        }
        Self::read_object(plan, text, |name| name != "_next" && name != "_send")
    }

    /// Holds `text`, the JSON of field `name` taken from an earlier run's
    /// input (where it was held, so its text was checked and is not read
    /// again), when `plan` lets it be held; `false` when it does not (the
    /// caller parses it).
    pub fn hold_text(&mut self, plan: &RunPlan, name: &str, text: &Arc<str>) -> bool {
        if text_check(plan, name, text).is_none() {
            return false;
        }
        self.values.insert(name.to_owned(), placeholder(text));
        self.held.insert(name.to_owned(), text.clone());
        true
    }

    fn read_object(plan: &RunPlan, text: &str, may_hold: impl Fn(&str) -> bool) -> Option<Self> {
        if text.len() < HELD_FIELD_BYTES || plan.reads_every_field() {
            return None;
        }
        let entries = entries(text)?;
        let mut input = Self {
            values: Map::with_capacity(entries.len()),
            held: BTreeMap::new(),
        };
        for (name, text) in entries {
            // A later duplicate replaces an earlier key, as in a parse.
            input.held.remove(&name);
            if may_hold(&name) && holds(plan, &name, text) {
                input.held.insert(name.clone(), Arc::from(text));
                input.values.insert(name, placeholder(text));
            } else {
                input.values.insert(name, serde_json::from_str(text).ok()?);
            }
        }
        Some(input)
    }
}

/// Whether a step's write of a field as the held `text` changes it, from
/// its committed value `s0`, or from `held`, the field's text when the run
/// holds it. Texts the same byte for byte are the same value. Two held
/// strings are compared as the strings they spell ([`same_string`]: a
/// script that echoes the state with other escapes changes nothing); two
/// held lists or objects that differ in their bytes are parsed and
/// compared (so a change costs what it did before). A committed value is
/// compared only with a text of its kind, parsed then.
pub(crate) fn changes_field(text: &str, s0: Option<&Value>, held: Option<&Arc<str>>) -> bool {
    let parsed_differs =
        |old: &Value| serde_json::from_str::<Value>(text).map_or(true, |new| new != *old);
    if let Some(held) = held {
        if **held == *text {
            return false;
        }
        return match (held.as_bytes()[0], text.as_bytes()[0]) {
            (b'"', b'"') => !same_string(held, text),
            (b'[', b'[') | (b'{', b'{') => {
                serde_json::from_str::<Value>(held).map_or(true, |old| parsed_differs(&old))
            }
            _ => true,
        };
    }
    match (s0, text.as_bytes()[0]) {
        // Its text holds at least its characters and two quotes.
        (Some(Value::String(old)), b'"') if old.len() + 2 <= text.len() => {
            serde_json::from_str::<String>(text).map_or(true, |new| new != *old)
        }
        (Some(old @ Value::Array(_)), b'[') | (Some(old @ Value::Object(_)), b'{') => {
            parsed_differs(old)
        }
        _ => true,
    }
}

/// Whether two JSON strings' texts (quotes included, checked as a parse
/// checks them) spell the same string, whatever their escapes: runs of
/// equal bytes are compared as blocks, and where they part, one character
/// of each is read (its escape decoded) and compared, so texts written by
/// the same writer cost a comparison of their bytes, and no string is
/// made either way.
pub fn same_string(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    loop {
        let common = common_prefix(&a[i..], &b[j..]);
        i += common;
        j += common;
        if i == a.len() || j == b.len() {
            return i == a.len() && j == b.len();
        }
        // Where they part may be inside a character both began alike: go
        // back to its first byte (both sides have the same bytes before).
        while i > 0 && j > 0 && a[i] & 0xC0 == 0x80 {
            i -= 1;
            j -= 1;
        }
        match (decode_one(a, i), decode_one(b, j)) {
            (Some((x, next_i)), Some((y, next_j))) if x == y => (i, j) = (next_i, next_j),
            _ => return false,
        }
    }
}

/// How many bytes `a` and `b` begin with alike, found a block at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 64;
    let shorter = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= shorter && a[at..at + BLOCK] == b[at..at + BLOCK] {
        at += BLOCK;
    }
    at + a[at..shorter]
        .iter()
        .zip(&b[at..shorter])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The character of a JSON string's text that starts at `at` (a quote
/// reads as itself, an escape as what it stands for) and where the next
/// one starts; `None` where the text is not one a parse accepts.
fn decode_one(bytes: &[u8], at: usize) -> Option<(char, usize)> {
    let hex = |at: usize| {
        let digits = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
        u32::from_str_radix(digits, 16).ok()
    };
    if bytes[at] != b'\\' {
        // A character as it is: its UTF-8 bytes.
        let width = match bytes[at] {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        let text = std::str::from_utf8(bytes.get(at..at + width)?).ok()?;
        return Some((text.chars().next()?, at + width));
    }
    let decoded = match *bytes.get(at + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex(at + 2)?;
            if !(0xD800..0xDC00).contains(&unit) {
                return Some((char::from_u32(unit)?, at + 6));
            }
            if bytes.get(at + 6..at + 8)? != b"\\u" {
                return None;
            }
            let low = hex(at + 8)?;
            let code = 0x10000 + ((unit - 0xD800) << 10) + low.checked_sub(0xDC00)?;
            return Some((char::from_u32(code)?, at + 12));
        }
        _ => return None,
    };
    Some((decoded, at + 2))
}

/// Whether field `name`, given as `text`, is held.
fn holds(plan: &RunPlan, name: &str, text: &str) -> bool {
    text_check(plan, name, text).is_some_and(|check| check(text))
}

/// Whether `plan` lets field `name` be held as `text` (its size, its kind
/// against the field's declared type, a field nothing on the coordinator
/// reads): the check the text itself must pass then, `None` when not.
fn text_check(plan: &RunPlan, name: &str, text: &str) -> Option<fn(&str) -> bool> {
    let declared = plan.graph().field(name).map(|field| field.ty);
    let (kind, check): (FieldType, fn(&str) -> bool) = match text.as_bytes().first() {
        Some(b'"') => (FieldType::String, escapes_are_valid),
        Some(b'[') => (FieldType::Array, plain),
        Some(b'{') => (FieldType::Object, plain),
        _ => return None,
    };
    let fits = text.len() >= HELD_FIELD_BYTES
        && declared.is_none_or(|declared| declared == FieldType::Any || declared == kind)
        && (declared.is_some() || !plan.graph().settings.strict_state)
        && plan.never_reads(name);
    fits.then_some(check)
}

/// The value a held field has in the state: an empty one of its text's
/// kind, which nothing on the coordinator reads.
fn placeholder(text: &str) -> Value {
    match text.as_bytes().first() {
        Some(b'[') => Value::Array(Vec::new()),
        Some(b'{') => Value::Object(Map::new()),
        _ => Value::String(String::new()),
    }
}

/// How deep a field's lists and objects may nest: a parse of the whole
/// object refuses 128 levels (`serde_json`'s limit), and the field's value
/// is one level in.
const MOST_NESTED: usize = 126;

/// Whether the text of a list or object (its syntax checked already, as
/// [`entries`] checks it) reads the same with any JSON reader as it would
/// once parsed and written again by the coordinator: its escapes valid,
/// every integer within 64 bits and every other number finite, no key
/// twice in one object, nested no deeper than a parse accepts.
pub fn plain(text: &str) -> bool {
    if !escapes_are_valid(text) {
        return false;
    }
    let bytes = text.as_bytes();
    // One entry an open list (`None`) or object (the keys it has).
    let mut open: Vec<Option<Keys<'_>>> = Vec::new();
    let mut key_next = false;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'{' | b'[' => {
                let object = bytes[at] == b'{';
                open.push(object.then(Keys::default));
                if open.len() > MOST_NESTED {
                    return false;
                }
                key_next = object;
                at += 1;
            }
            b'}' | b']' => {
                open.pop();
                key_next = false;
                at += 1;
            }
            b',' => {
                key_next = matches!(open.last(), Some(Some(_)));
                at += 1;
            }
            b':' => {
                key_next = false;
                at += 1;
            }
            b'"' => {
                let Some(length) = string_length(bytes, at) else {
                    return false;
                };
                if key_next {
                    let key = &text[at..at + length];
                    let added = match open.last_mut() {
                        Some(Some(keys)) => keys.insert(key),
                        _ => false,
                    };
                    if !added {
                        return false;
                    }
                }
                at += length;
            }
            b'-' | b'0'..=b'9' => {
                let length = bytes[at..]
                    .iter()
                    .position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .unwrap_or(bytes.len() - at);
                if !agreed_number(&text[at..at + length]) {
                    return false;
                }
                at += length;
            }
            // The letters of `true`, `false` and `null`, and whitespace.
            b't' | b'r' | b'u' | b'e' | b'f' | b'a' | b'l' | b's' | b'n' => at += 1,
            b' ' | b'\n' | b'\t' | b'\r' => at += 1,
            _ => return false,
        }
    }
    open.is_empty()
}

/// Whether every JSON reader reads number `text` as the coordinator's
/// parse and write would pass it on: an integer within 64 bits, or a
/// finite float.
fn agreed_number(text: &str) -> bool {
    if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        text.parse::<f64>().is_ok_and(f64::is_finite)
    } else if text.starts_with('-') {
        text.parse::<i64>().is_ok()
    } else {
        text.parse::<u64>().is_ok()
    }
}

/// The keys of one object so far, as the strings they spell (a key
/// written with escapes is the same key as written without).
#[derive(Default)]
struct Keys<'a> {
    seen: foldhash::HashSet<std::borrow::Cow<'a, str>>,
}

impl<'a> Keys<'a> {
    /// Adds `text`, a key's JSON text; `false` when the object has it.
    fn insert(&mut self, text: &'a str) -> bool {
        let inner = &text[1..text.len() - 1];
        let key = if inner.contains('\\') {
            match serde_json::from_str::<String>(text) {
                Ok(key) => std::borrow::Cow::Owned(key),
                Err(_) => return false,
            }
        } else {
            std::borrow::Cow::Borrowed(inner)
        };
        self.seen.insert(key)
    }
}

/// Whether a JSON string's `\u` escapes are what a parse into a Rust
/// string accepts: every surrogate paired, leading then trailing. (The
/// rest of the string's syntax was checked when the input was read.)
pub fn escapes_are_valid(text: &str) -> bool {
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

/// A JSON object's entries as written, values unparsed; `None` when
/// `text` is not one (or a value's syntax is wrong). Keys and values other
/// than strings are read by `serde_json`; a string value's end is found
/// here, a block of bytes at a time (`weft_proto::json::next_escape`),
/// with its escapes and control characters checked as a parse checks them
/// ([`escapes_are_valid`] checks the surrogates of a held one): a 10 MB
/// string is scanned at about half the instructions `serde_json` spends
/// skipping it.
pub fn entries(text: &str) -> Option<Vec<(String, &str)>> {
    let bytes = text.as_bytes();
    let mut at = after_whitespace(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = after_whitespace(bytes, at + 1);
    let mut entries = Vec::new();
    if bytes.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            let (key, length) = one::<String>(&text[at..])?;
            at = after_whitespace(bytes, at + length);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            at = after_whitespace(bytes, at + 1);
            let length = match bytes.get(at) {
                Some(b'"') => string_length(bytes, at)?,
                _ => one::<&RawValue>(&text[at..])?.1,
            };
            entries.push((key, &text[at..at + length]));
            at = after_whitespace(bytes, at + length);
            match bytes.get(at) {
                Some(b',') => at = after_whitespace(bytes, at + 1),
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    // Nothing but whitespace after the object, as in a parse.
    (after_whitespace(bytes, at) == bytes.len()).then_some(entries)
}

/// The position of the first byte at or after `at` that is not JSON
/// whitespace.
fn after_whitespace(bytes: &[u8], at: usize) -> usize {
    let rest = bytes.get(at..).unwrap_or_default();
    at + rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
        .unwrap_or(rest.len())
}

/// The first JSON value of `text`, read by `serde_json`, and the length of
/// its text.
fn one<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// The length of the JSON string whose opening quote is at `start`,
/// quotes included; `None` where a parse would refuse it: a control
/// character, an escape JSON does not have, a `\u` without four hex
/// digits, or no closing quote.
fn string_length(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        at = weft_proto::json::next_escape(bytes, at)?;
        match bytes[at] {
            b'"' => return Some(at + 1 - start),
            b'\\' => {
                let escaped = *bytes.get(at + 1)?;
                at += 2;
                match escaped {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        let digits = bytes.get(at..at + 4)?;
                        if !digits.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        at += 4;
                    }
                    _ => return None,
                }
            }
            _ => return None,
        }
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
        assert_eq!(
            input.held.keys().collect::<Vec<_>>(),
            ["list"],
            "read by a template: parsed"
        );
        assert_eq!(input.values["blob"], json!(blob));
        assert_eq!(input.values["list"], json!([]), "a list's placeholder");
        let input = RunInput::read(&plan(CHAIN), &text).unwrap();
        assert_eq!(input.held.keys().collect::<Vec<_>>(), ["blob", "list"]);
        let typed = "version: 1\nname: g\nstate:\n  blob: {type: object}\n  list: {type: array}\nnodes:\n  a: {kind: task, handler: inc, start: true, end: true}\n";
        let input = RunInput::read(&plan(typed), &text).unwrap();
        assert_eq!(
            input.held.keys().collect::<Vec<_>>(),
            ["list"],
            "declared another type: parsed, for the machine to refuse"
        );
        let strict = "version: 1\nname: g\nsettings: {strict_state: true}\nstate:\n  n: {type: integer, default: 0}\nnodes:\n  a: {kind: task, handler: inc, start: true, end: true}\n";
        let input = RunInput::read(&plan(strict), &text).unwrap();
        assert!(
            input.held.is_empty(),
            "undeclared under strict_state: the machine refuses it"
        );
    }

    #[test]
    fn a_list_or_object_is_held_when_every_reader_reads_it_alike() {
        let plan = plan(CHAIN);
        let pad = big("x");
        let held = |value: &str| {
            let text = format!(r#"{{"v": {value}, "pad": ["{pad}"]}}"#);
            let input = RunInput::read(&plan, &text)?;
            let parsed: Map<String, Value> = serde_json::from_str(&text).ok()?;
            match input.held.get("v") {
                Some(held) => {
                    let again: Value = serde_json::from_str(held).unwrap();
                    assert_eq!(again, parsed["v"], "{value}");
                    Some(true)
                }
                None => {
                    assert_eq!(input.values["v"], parsed["v"], "{value}");
                    Some(false)
                }
            }
        };
        let padded = |value: &str| format!(r#"[{value}, "{pad}"]"#);
        for alike in [
            r#"[1, -5, 0, -0, 1.5, 1e3, -2.5E-3, 18446744073709551615, -9223372036854775808]"#,
            r#"{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}], "c": null, "d": [true, false]}"#,
            r#"{"é": 1, "\u00e8": 2, "k\"ey": "v\ud83d\ude00"}"#,
            r#"[[], {}, [[[]]], " x "]"#,
        ] {
            assert_eq!(held(&padded(alike)), Some(true), "{alike}");
        }
        for unlike in [
            // Read exactly by some readers, as a float by others.
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890",
            // A key twice, however it is spelled.
            r#"{"a": 1, "a": 2}"#,
            r#"{"a": 1, "\u0061": 2}"#,
            r#"{"b": {"a": 1, "a": 2}}"#,
        ] {
            assert_eq!(held(&padded(unlike)), Some(false), "{unlike}");
        }
        // What a parse refuses: refused whole, as before.
        for refused in [
            "1e400".to_owned(),
            r#""\ud800""#.to_owned(),
            format!("{}{}", "[".repeat(126), "]".repeat(126)),
        ] {
            let start = &refused[..10.min(refused.len())];
            assert_eq!(held(&padded(&refused)), None, "{start}");
        }
        let deepest = format!("{}{}", "[".repeat(125), "]".repeat(125));
        assert_eq!(
            held(&padded(&deepest)),
            Some(true),
            "as deep as a parse goes"
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

    #[test]
    fn an_object_is_split_exactly_where_a_parse_accepts_it() {
        let cases = [
            r#"{}"#,
            " \n\t{ }\r\n ",
            r#"{"a":1,"b":"two","c":[1,{"d":null}],"e":true,"f":-1.5e3}"#,
            r#" { "a" : "x\"y\\z\/\b\f\n\r\t\u00e9\ud83d\ude00" , "b":{} } "#,
            r#"{"a":1}"#,
            r#"{"a":"é 😀"}"#,
            // What a parse refuses.
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"{"a":"unterminated}"#,
            r#"{"a":"bad \x escape"}"#,
            r#"{"a":"short \u12 escape"}"#,
            r#"{"a":"\u12G4"}"#,
            "{\"a\":\"a raw\ncontrol\"}",
            "{\"a\":\"a tab\there\"}",
            r#"{"a":01}"#,
            r#"{"a":1"#,
            r#"["a"]"#,
            r#""a""#,
            "",
        ];
        for case in cases {
            let parsed = serde_json::from_str::<Map<String, Value>>(case).ok();
            let split = entries(case);
            assert_eq!(split.is_some(), parsed.is_some(), "{case:?}");
            if let (Some(split), Some(parsed)) = (split, parsed) {
                let values: Map<String, Value> = split
                    .into_iter()
                    .map(|(name, text)| (name, serde_json::from_str(text).unwrap()))
                    .collect();
                assert_eq!(values, parsed, "{case:?}");
            }
        }
        // A string's end found past blocks of plain text and escapes.
        let long = format!(
            r#"{{"doc":"{}\"{}","n":1}}"#,
            "x".repeat(100),
            "y".repeat(70)
        );
        let split = entries(&long).unwrap();
        assert_eq!(split[0].1.len(), 100 + 70 + 4);
        assert_eq!(split[1], ("n".to_owned(), "1"));
    }
}
