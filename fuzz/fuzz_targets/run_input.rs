//! A run's input split into its fields' texts (`weft_machine::held`, which
//! holds large strings unparsed): wherever a parse accepts the object, the
//! split accepts it with the same values; a string it accepts is one a
//! parse accepts once its surrogates are checked; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = serde_json::from_str::<Map<String, Value>>(text).ok();
    let Some(split) = weft_machine::held::entries(text) else {
        assert!(parsed.is_none(), "refused what a parse accepts: {text:?}");
        return;
    };
    for (_, field) in &split {
        if field.starts_with('"') && weft_machine::held::escapes_are_valid(field) {
            let value = serde_json::from_str::<Value>(field);
            assert!(value.is_ok_and(|v| v.is_string()), "a string a parse refuses: {field:?}");
        }
    }
    if let Some(parsed) = parsed {
        let mut values = Map::new();
        for (name, field) in split {
            values.insert(name, serde_json::from_str(field).expect("parsed as a whole"));
        }
        assert_eq!(values, parsed, "{text:?}");
    }
});
