//! The binaries' allocator keeps a big state's freed buffers for reuse
//! (`.cargo/config.toml`, docs/benchmarks.md): jemalloc built with
//! `oversize_threshold:0` and `muzzy_decay_ms:-1`, and giving freed pages
//! back after a second by a thread of its own (`background_thread:true`,
//! `dirty_decay_ms:1000`), so a busy coordinator's resident memory is not
//! ten seconds of freed buffers. Without `muzzy_decay_ms:-1`,
//! jemalloc gives every freed buffer of 8 MiB or more in its first arena
//! (the main thread's) back to the kernel at once, and the next state of
//! that size faults in again page by page (W4's 10 MB in and out lost a
//! third of its CPU to it). Which arena serves a buffer is jemalloc's
//! choice, so the settings themselves are what is checked: each binary
//! prints its options when jemalloc is asked to (`stats_print`).

use std::process::Command;

use weft_tests::binary;

/// jemalloc's options as `binary --version` reports them at exit.
fn options_of(name: &str) -> String {
    let output = Command::new(binary(name))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap_or_else(|error| panic!("{name} does not start: {error}"));
    assert!(
        output.status.success(),
        "{name} --version failed: {output:?}"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn every_binary_keeps_freed_big_buffers_for_reuse() {
    for name in ["coordinator", "worker", "weft"] {
        let options = options_of(name);
        for option in ["opt.oversize_threshold: 0", "opt.muzzy_decay_ms: -1"] {
            assert!(
                options.contains(option),
                "{name} is not built with {option}; jemalloc reports:\n{options}"
            );
        }
        // Freed pages still go back after the dirty decay, lazily.
        assert!(
            options.contains("opt.dirty_decay_ms: 1000 "),
            "{name} does not give freed pages back after a second:\n{options}"
        );
        // On a timer of jemalloc's own, not at the next allocation.
        assert!(
            options.contains("opt.background_thread: true"),
            "{name} does not give freed pages back by a thread of its own:\n{options}"
        );
    }
}
