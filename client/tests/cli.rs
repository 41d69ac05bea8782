//! The `weft` binary as a user runs it: output and exit statuses of
//! `validate` and `diagram` (SPEC section 12).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn weft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .args(args)
        .output()
        .expect("the weft binary runs")
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("utf-8 output")
}

#[test]
fn validate_prints_ok_and_exits_zero() {
    let out = weft(&[
        "validate",
        repo("examples/critique-loop.yaml").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "ok\n");
}

#[test]
fn validate_prints_one_line_per_finding_and_exits_two() {
    let out = weft(&[
        "validate",
        repo("graph/tests/fixtures/invalid/unknown_nodes.yaml")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 7, "{stdout}");
    assert!(lines.iter().all(|l| l.starts_with("error: ")), "{stdout}");
}

#[test]
fn validate_keeps_warnings_with_ok() {
    let dir = std::env::temp_dir().join(format!("weft-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("warn.yaml");
    std::fs::write(
        &path,
        "nodes:\n  fan: {kind: map, start: true, over: \"{{ xs }}\", as: x, branch: s, collect_into: out}\n  s: {kind: llm, prompt: hi}\n",
    )
    .unwrap();
    let out = weft(&["validate", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("warning: map node 'fan': no node in the branch subgraph declares a write to output_key 'output'"), "{stdout}");
    assert!(stdout.ends_with("ok\n"), "{stdout}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn missing_file_is_an_error_with_exit_two() {
    let out = weft(&["validate", "no/such/graph.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stdout).starts_with("error: cannot read graph file 'no/such/graph.yaml'"));
}

#[test]
fn diagram_draws_the_seed_picture() {
    let out = weft(&[
        "diagram",
        repo("examples/critique-loop.yaml").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let expected = include_str!("../../graph/tests/fixtures/critique-loop.diagram.txt");
    assert_eq!(text(&out.stdout), expected);
}

#[test]
fn diagram_of_an_invalid_graph_exits_two() {
    let out = weft(&[
        "diagram",
        repo("graph/tests/fixtures/invalid/cycle.yaml")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cycle through forward edges"));
    assert!(out.stdout.is_empty());
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(weft(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(weft(&["validate"]).status.code(), Some(2));
}
