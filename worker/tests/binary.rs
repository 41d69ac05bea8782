//! The `worker` binary as an operator runs it.

use std::process::Command;

#[test]
fn refuses_a_malformed_coordinator_url() {
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(["--coordinator", "not a url", "--slots", "1"])
        .output()
        .expect("the worker binary runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid coordinator URL 'not a url'"),
        "{stderr}"
    );
}

#[test]
fn help_names_the_flags_deployments_rely_on() {
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .arg("--help")
        .output()
        .expect("the worker binary runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--coordinator", "--slots", "--name"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn refuses_a_secrets_file_it_cannot_read_without_showing_its_lines() {
    let missing = std::env::temp_dir().join("weft-no-such-secrets-file");
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .arg("--secrets-file")
        .arg(&missing)
        .output()
        .expect("the worker binary runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot read secrets file"), "{stderr}");

    let malformed = std::env::temp_dir().join(format!("weft-bad-secrets-{}", std::process::id()));
    std::fs::write(&malformed, "TOKEN=fine\nhunter2\n").expect("written");
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .arg("--secrets-file")
        .arg(&malformed)
        .output()
        .expect("the worker binary runs");
    std::fs::remove_file(&malformed).ok();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2: expected NAME=value"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
