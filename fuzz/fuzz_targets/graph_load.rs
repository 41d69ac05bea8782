//! A graph file, YAML or JSON: parsing and validation never panic, and
//! every finding is an error or a warning with a message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_graph::{Format, parse_graph};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for format in [Format::Yaml, Format::Json] {
        let (_graph, findings) = parse_graph(text, format, "fuzzed");
        for finding in findings {
            assert!(!finding.to_string().is_empty());
        }
    }
});
