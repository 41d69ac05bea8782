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

use serde_json::{Map, Value};

/// The JSON text of `value`, exactly as `serde_json::to_string` gives it.
pub fn to_string(value: &Value) -> String {
    let mut out = Vec::new();
    write(&mut out, value);
    text(out)
}

/// The JSON text of an object (a state), exactly as `serde_json` gives it.
pub fn object_to_string(map: &Map<String, Value>) -> String {
    let mut out = Vec::new();
    write_object(&mut out, map);
    text(out)
}

fn text(out: Vec<u8>) -> String {
    // Only whole UTF-8 sequences and ASCII are ever written.
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// Appends the JSON text of `value` to `out`.
pub fn write(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => {
            // Numbers are short: serde_json's own formatting (itoa, ryu).
            serde_json::to_writer(&mut *out, number).expect("a number always serializes");
        }
        Value::String(text) => write_str(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>) {
    out.push(b'{');
    for (i, (key, item)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, key);
        out.push(b':');
        write(out, item);
    }
    out.push(b'}');
}

/// Appends `text` as a JSON string: clean stretches copied whole (room
/// for the whole string made at once), the bytes between them escaped as
/// `serde_json` escapes them.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    while let Some(at) = next_escape(bytes, start) {
        out.extend_from_slice(&bytes[start..at]);
        escape(out, bytes[at]);
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether a byte needs an escape in a JSON string.
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The position of the first byte at or after `from` that needs an
/// escape: a block of 32 bytes at a time while none of them does (a loop
/// the compiler turns into vector compares).
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const BLOCK: usize = 32;
    let rest = &bytes[from..];
    let mut skipped = 0;
    for block in rest.chunks_exact(BLOCK) {
        let mut hit = false;
        for &byte in block {
            hit |= needs_escape(byte);
        }
        if hit {
            break;
        }
        skipped += BLOCK;
    }
    rest[skipped..]
        .iter()
        .position(|&b| needs_escape(b))
        .map(|i| from + skipped + i)
}

/// `serde_json`'s escape of one byte: the short forms where JSON has one,
/// `\u00XX` (lower-case hex) for the other controls.
fn escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0C => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        other => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[(other >> 4) as usize],
            HEX[(other & 0xF) as usize],
        ]),
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
    }
}
