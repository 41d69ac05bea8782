//! JSON text of state values, byte for byte what `serde_json` writes, made
//! faster for the values that cross every boundary: long strings.
//!
//! `serde_json` escapes a string one byte at a time (about nine
//! instructions a byte); a 10 MB document field is written whenever its
//! value crosses a boundary: into the coordinator's field table, into the
//! client's submission, out of `GetRun`. Here a string is scanned 32
//! bytes at a time for the bytes that need an escape (controls, `"` and
//! `\`), the clean stretches between them copied whole. Everything else
//! (numbers, structure) is what `serde_json` writes, so the text is the
//! same to the byte: a property test checks it against `serde_json`.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The value of JSON text the protocol carries, `Null` for none (empty or
/// blank text: a task without a scope, prompts or configuration).
pub fn parse_or_null(text: &str) -> Result<Value, serde_json::Error> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text)
}

/// The JSON text of `value`, exactly as `serde_json::to_string` gives it.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(size_hint(value));
    write_value(&mut out, value);
    out
}

/// The JSON text of an object (a state), exactly as `serde_json` gives it.
pub fn object_to_string(map: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(object_size_hint(map));
    write_object(&mut out, map);
    out
}

/// About how long `value`'s text is: exact but for escapes and numbers
/// (counted at their longest), so that a text is written into room made
/// once. A 10 MB field grown as it was written was copied again by every
/// doubling, and its pages faulted in afresh each time.
fn size_hint(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|item| size_hint(item) + 1).sum::<usize>(),
        Value::Object(map) => object_size_hint(map),
    }
}

fn object_size_hint(map: &Map<String, Value>) -> usize {
    2 + map
        .iter()
        .map(|(key, item)| key.len() + 4 + size_hint(item))
        .sum::<usize>()
}

/// The JSON text of an object whose values are JSON texts already
/// (`(name, text)` in order), each copied as it is: a state whose fields
/// were written once is not written again.
pub fn object_of_texts<'a>(fields: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> String {
    let size: usize = fields.clone().map(|(n, t)| n.len() + t.len() + 4).sum();
    let mut out = String::with_capacity(size + 2);
    out.push('{');
    for (i, (name, text)) in fields.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(&mut out, name);
        out.push(':');
        out.push_str(text);
    }
    out.push('}');
    out
}

/// Appends the JSON text of `value` to `out`. The text is built as a
/// `String` from the value's own strings, cut only at ASCII bytes, so it
/// is never checked for UTF-8 again (a 10 MB field was, at 1.3
/// instructions a byte).
pub fn write(out: &mut String, value: &Value) {
    out.reserve(size_hint(value));
    write_value(out, value);
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => {
            // Numbers are short: serde_json's own formatting (itoa, ryu).
            write!(out, "{number}").expect("a String takes any text");
        }
        Value::String(text) => write_str(out, text),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

/// Writes the JSON text of an object (a state) to `out`, exactly as
/// `serde_json` gives it.
pub fn write_object(out: &mut String, map: &Map<String, Value>) {
    out.push('{');
    for (i, (key, item)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, key);
        out.push(':');
        write_value(out, item);
    }
    out.push('}');
}

/// Appends `text` as a JSON string: clean stretches copied whole (room
/// for the whole string made at once), the bytes between them escaped as
/// `serde_json` escapes them. Every byte that needs an escape is ASCII,
/// so the stretches between them are whole characters.
pub fn write_str(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    let mut start = 0;
    while let Some(at) = next_escape(bytes, start) {
        out.push_str(&text[start..at]);
        escape(out, bytes[at]);
        start = at + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

/// Whether a byte needs an escape in a JSON string.
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The position of the first byte at or after `from` that needs an
/// escape in a JSON string — a quote, a backslash, a control character —
/// which is also where a reader of a string's text must look next: a block
/// of 64 bytes at a time while none of them does (a loop the compiler
/// turns into four vector registers' compares and one test a block: 0.8
/// instructions a byte with the baseline x86-64 vectors, where 32-byte
/// blocks with a `bool` took 1.5).
pub fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = &bytes[from..];
    // Blocks of 64 bytes, then of 16 (a short string's), then one by one.
    let skipped = clean_blocks::<64>(rest);
    let skipped = skipped + clean_blocks::<16>(&rest[skipped..]);
    rest[skipped..]
        .iter()
        .position(|&b| needs_escape(b))
        .map(|i| from + skipped + i)
}

/// How many bytes `bytes` begins with, in whole blocks of `BLOCK`, that
/// need no escape.
fn clean_blocks<const BLOCK: usize>(bytes: &[u8]) -> usize {
    let mut skipped = 0;
    for block in bytes.chunks_exact(BLOCK) {
        let mut hit = 0u8;
        for &byte in block {
            hit |= u8::from(byte < 0x20) | u8::from(byte == b'"') | u8::from(byte == b'\\');
        }
        if hit != 0 {
            break;
        }
        skipped += BLOCK;
    }
    skipped
}

/// `serde_json`'s escape of one byte: the short forms where JSON has one,
/// `\u00XX` (lower-case hex) for the other controls.
fn escape(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        0x08 => out.push_str("\\b"),
        0x0C => out.push_str("\\f"),
        b'\n' => out.push_str("\\n"),
        b'\r' => out.push_str("\\r"),
        b'\t' => out.push_str("\\t"),
        other => {
            out.push_str("\\u00");
            out.push(char::from(HEX[(other >> 4) as usize]));
            out.push(char::from(HEX[(other & 0xF) as usize]));
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn same(value: &Value) {
        assert_eq!(to_string(value), serde_json::to_string(value).unwrap());
    }

    #[test]
    fn every_escape_and_every_kind_is_written_as_serde_json_writes_it() {
        let controls: String = (0u8..0x20).map(char::from).collect();
        same(&json!({
            "controls": controls,
            "quotes": "a \"b\" \\ c / d \u{7f} é 😀",
            "numbers": [0, -1, u64::MAX, i64::MIN, 1.5, -0.0, 1e300, 2.5e-8],
            "nested": {"a": [null, true, false, {}, []], "": ""},
        }));
        // Escapes at every offset of the 32-byte scan, and past it.
        for at in 0..70 {
            let mut text = "x".repeat(70);
            text.replace_range(at..at + 1, "\"");
            same(&Value::String(text));
        }
    }

    #[test]
    fn an_object_of_texts_is_the_object_written_whole() {
        let state = json!({"a": [1, "two"], "b \"q\"": {"c": null}, "d": 1.5});
        let map = state.as_object().unwrap();
        let texts: Vec<(String, String)> =
            map.iter().map(|(k, v)| (k.clone(), to_string(v))).collect();
        let of_texts = object_of_texts(texts.iter().map(|(k, t)| (k.as_str(), t.as_str())));
        assert_eq!(of_texts, object_to_string(map));
        assert_eq!(object_of_texts(std::iter::empty()), "{}");
    }

    #[test]
    fn a_text_is_written_into_room_made_once() {
        let big = "x".repeat(1 << 20);
        let values = [
            json!({"counter": 1, "blob": big, "after": [true, null, {"k": "v"}]}),
            json!([big, big]),
            Value::String(big),
        ];
        for value in values {
            let hint = size_hint(&value);
            let text = to_string(&value);
            assert!(text.len() <= hint, "{} > {hint}", text.len());
            // Never grown: the room made at first is the room it has.
            assert_eq!(text.capacity(), hint);
            let mut appended = String::from("[");
            write(&mut appended, &value);
            assert!(appended.capacity() <= 1 + hint + 8, "grown while written");
        }
        let map = json!({"a": "x".repeat(100_000), "b": 2});
        let text = object_to_string(map.as_object().unwrap());
        assert_eq!(text.capacity(), object_size_hint(map.as_object().unwrap()));
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(text in any::<String>()) {
            prop_assert_eq!(to_string(&Value::String(text.clone())), serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn strings_of_controls_and_quotes_are_written_as_serde_json_writes_them(
            bytes in proptest::collection::vec(prop_oneof![0u8..0x21, Just(b'"'), Just(b'\\'), 0x21u8..0x7f], 0..64)
        ) {
            let text = String::from_utf8(bytes).unwrap();
            prop_assert_eq!(to_string(&Value::String(text.clone())), serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn the_next_escape_is_found_past_whole_blocks(
            length in 0usize..400,
            escapes in proptest::collection::vec((0usize..400, prop_oneof![0u8..0x20, Just(b'"'), Just(b'\\')]), 0..3),
            from in 0usize..400,
        ) {
            let mut bytes = vec![b'a'; length];
            for (at, byte) in escapes {
                if at < length {
                    bytes[at] = byte;
                }
            }
            let from = from.min(length);
            let naive = bytes[from..].iter().position(|&b| needs_escape(b)).map(|i| from + i);
            prop_assert_eq!(next_escape(&bytes, from), naive);
        }
    }
}
