//! What a script prints on stdout: read as one JSON object or refused with
//! a reason, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match weft_worker::parse_stdout(data) {
        Ok(value) => assert!(value.is_object() || value.is_null()),
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
