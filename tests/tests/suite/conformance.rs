//! SPEC's semantics through `weft run` on the embedded cluster, one graph
//! per rule, with script nodes run as real processes (issue #7).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use weft_tests::binary;

/// Writes `yaml` to a fresh directory and runs it with `weft run --json`.
fn run_graph(name: &str, yaml: &str) -> Output {
    run_graph_with(name, yaml, "{}")
}

/// As [`run_graph`], with `input` as the run's input.
fn run_graph_with(name: &str, yaml: &str, input: &str) -> Output {
    run_with_files(name, yaml, &[], input)
}

/// As [`run_graph`], with `env` added to `weft`'s environment (the
/// embedded worker's secrets).
fn run_graph_env(name: &str, yaml: &str, env: &[(&str, &str)]) -> Output {
    run_in(name, yaml, &[], "{}", env)
}

/// Writes `yaml` and these files beside it (name, text, mode) to a fresh
/// directory, and runs the graph with `weft run --json --input INPUT`.
fn run_with_files(name: &str, yaml: &str, files: &[(&str, &str, u32)], input: &str) -> Output {
    run_in(name, yaml, files, input, &[])
}

fn run_in(
    name: &str,
    yaml: &str,
    files: &[(&str, &str, u32)],
    input: &str,
    env: &[(&str, &str)],
) -> Output {
    use std::os::unix::fs::PermissionsExt;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("weft-conformance-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (file, text, mode) in files {
        let path = dir.join(file);
        std::fs::write(&path, text).expect("script written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).expect("mode set");
    }
    let graph = dir.join("graph.yaml");
    std::fs::write(&graph, yaml).expect("graph written");
    let mut weft = Command::new(binary("weft"));
    weft
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .args([
            "run",
            graph.to_str().expect("utf-8 path"),
            "--json",
            "--input",
            input,
        ])
        .stdin(Stdio::null())
        .env_remove("WEFT_COORDINATOR")
        .envs(env.iter().copied());
    // Under the test's own timeout, so that a hang shows where it waits.
    let out = weft_tests::output_within(&mut weft, std::time::Duration::from_secs(90));
    std::fs::remove_dir_all(&dir).ok();
    out
}

/// The run's `--json` object, after checking it completed.
fn completed(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(result["status"], "completed", "{result}");
    result
}

#[test]
fn a_router_outranks_the_nodes_plain_edges() {
    let out = run_graph(
        "routes",
        r#"
nodes:
  triage:
    kind: script
    run: [sh, -c, 'echo "{\"kind\": \"bug\"}"']
    start: true
    next: audit
    routes:
      router: state.kind
      map: { bug: fix, docs: END }
  fix:   { kind: script, run: [sh, -c, 'echo "{\"fixed\": true}"'] }
  audit: { kind: script, run: [sh, -c, 'echo "{\"audited\": true}"'] }
"#,
    );
    let result = completed(&out);
    assert_eq!(result["state"]["fixed"], json!(true));
    assert!(
        result["state"].get("audited").is_none(),
        "the plain edge to audit is not taken: {result}"
    );
}

#[test]
fn fallback_end_ends_the_path_as_a_success() {
    let out = run_graph(
        "fallback-end",
        r#"
nodes:
  fetch:  { kind: script, run: [sh, -c, 'echo down >&2; exit 1'], start: true, fallback: END, next: use_it }
  use_it: { kind: script, run: [sh, -c, 'echo "{\"used\": true}"'] }
  side:   { kind: script, run: [sh, -c, 'echo "{\"side\": 1}"'], start: true }
"#,
    );
    let result = completed(&out);
    assert_eq!(result["state"], json!({"side": 1}), "{result}");
}

#[test]
fn next_end_from_a_script_ends_its_path() {
    let out = run_graph(
        "next-end",
        r#"
nodes:
  gate:  { kind: script, run: [sh, -c, 'echo "{\"gated\": true, \"_next\": \"END\"}"'], start: true, next: after }
  after: { kind: script, run: [sh, -c, 'echo "{\"after\": true}"'] }
"#,
    );
    let result = completed(&out);
    assert_eq!(result["state"], json!({"gated": true}), "{result}");
}

#[test]
fn cel_macros_work_in_conditions() {
    let out = run_graph(
        "cel-macros",
        r#"
nodes:
  score: { kind: script, run: [sh, -c, 'echo "{\"scores\": [0.9, 0.3]}"'], start: true }
  redo:  { kind: script, run: [sh, -c, 'echo "{\"redone\": true}"'] }
  ship:  { kind: script, run: [sh, -c, 'echo "{\"shipped\": true}"'] }
edges:
  - { from: score, to: redo, when: "state.scores.exists(s, s < 0.5)" }
  - { from: score, to: ship, when: "state.scores.all(s, s >= 0.5)" }
"#,
    );
    let result = completed(&out);
    assert_eq!(result["state"]["redone"], json!(true), "{result}");
    assert!(result["state"].get("shipped").is_none(), "{result}");
}

#[test]
fn an_undefined_template_name_is_named() {
    let out = run_graph(
        "undefined-name",
        r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ subjects }}"
    as: subject
    branch: look
    output_key: found
    collect_into: results
  look: { kind: script, run: [sh, -c, 'echo "{\"found\": 1}"'] }
"#,
    );
    assert_eq!(out.status.code(), Some(1), "the run fails");
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("undefined name `subjects` in template `{{ subjects }}`"),
        "{result}"
    );
}

#[test]
fn when_on_a_start_edge_reads_the_input() {
    let yaml = r#"
nodes:
  quick:    { kind: script, run: [sh, -c, 'echo "{\"quick\": true}"'] }
  thorough: { kind: script, run: [sh, -c, 'echo "{\"thorough\": true}"'] }
edges:
  - { from: START, to: quick, when: "state.mode == 'quick'" }
  - { from: START, to: thorough, when: "state.mode != 'quick'" }
"#;
    let result = completed(&run_graph_with("start-when", yaml, r#"{"mode": "quick"}"#));
    assert_eq!(
        result["state"],
        json!({"mode": "quick", "quick": true}),
        "{result}"
    );
    let result = completed(&run_graph_with("start-when-2", yaml, r#"{"mode": "deep"}"#));
    assert_eq!(
        result["state"],
        json!({"mode": "deep", "thorough": true}),
        "{result}"
    );
}

#[test]
fn a_router_error_takes_the_nodes_fallback() {
    let out = run_graph(
        "router-fallback",
        r#"
nodes:
  triage:
    kind: script
    run: [sh, -c, 'echo "{\"kind\": \"feature\"}"']
    start: true
    fallback: rescue
    routes:
      router: state.kind
      map: { bug: fix }
  fix:    { kind: script, run: [sh, -c, 'echo "{\"fixed\": true}"'] }
  rescue: { kind: script, run: [sh, -c, 'echo "{\"rescued\": true}"'] }
"#,
    );
    let result = completed(&out);
    assert_eq!(result["state"], json!({"rescued": true}), "{result}");
}

#[test]
fn a_result_of_the_wrong_type_is_retried_like_a_failure() {
    let out = run_graph(
        "wrong-type-retry",
        r#"
state:
  score: { type: number }
nodes:
  grade:
    kind: script
    start: true
    retry: { max_attempts: 2 }
    run: [sh, -c, 'if [ "$WEFT_ATTEMPT" = 1 ]; then echo "{\"score\": \"high\"}"; else echo "{\"score\": 0.9}"; fi']
"#,
    );
    let result = completed(&out);
    assert_eq!(result["state"]["score"], json!(0.9), "{result}");
}

#[test]
fn collect_into_is_type_checked() {
    let out = run_graph_with(
        "collect-type",
        r#"
state:
  results: { type: string }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: echo
    output_key: out
    collect_into: results
  echo: { kind: script, run: [sh, -c, 'echo "{\"out\": 1}"'] }
"#,
        r#"{"items": [1, 2]}"#,
    );
    assert_eq!(out.status.code(), Some(1), "the run fails");
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("wrote field 'results' as array, but it is declared string"),
        "{result}"
    );
}

#[test]
fn the_embedded_cluster_refuses_work_it_cannot_host() {
    let out = run_graph(
        "embedded-unhosted",
        r#"
nodes:
  draft: { kind: task, handler: draft, start: true, next: check }
  check: { kind: script, run: [sh, -c, 'echo "{}"'] }
edges:
  - { from: check, to: END, when: "fn:good_enough" }
"#,
    );
    assert_eq!(out.status.code(), Some(2), "refused as unrunnable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("node 'draft' needs handler 'draft'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("fn:good_enough (condition on an edge from 'check')"),
        "{stderr}"
    );
}

#[test]
fn bare_script_names_run_the_bundled_files() {
    let out = run_with_files(
        "bare-names",
        r#"
nodes:
  gate:  { kind: script, script: gate.sh, start: true, next: check }
  check: { kind: script, run: [check.sh, extra] }
"#,
        &[
            ("gate.sh", "#!/bin/sh\necho '{\"gated\": true}'\n", 0o755),
            // No execute bit: its #! line runs it.
            (
                "check.sh",
                "#!/bin/sh\necho \"{\\\"checked\\\": \\\"$1\\\"}\"\n",
                0o644,
            ),
        ],
        "{}",
    );
    let result = completed(&out);
    assert_eq!(
        result["state"],
        json!({"gated": true, "checked": "extra"}),
        "{result}"
    );
}

#[test]
fn a_bundled_script_that_cannot_run_says_how_to_fix_it() {
    let out = run_with_files(
        "not-executable",
        r#"
nodes:
  gate: { kind: script, script: gate.txt, start: true }
"#,
        &[("gate.txt", "echo '{}'\n", 0o644)],
        "{}",
    );
    assert_eq!(out.status.code(), Some(1), "the run fails");
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("bundled script 'gate.txt' is not executable and has no #! line"),
        "{result}"
    );
}

#[test]
fn a_map_writes_state_updates_and_checks_its_output_schema_after_collecting() {
    let map = |schema: &str| {
        format!(
            r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{{{ items }}}}"
    as: item
    branch: echo
    output_key: out
    collect_into: results
    state_updates:
      count: "{{{{ results | length }}}}"
      first: "{{{{ output[0] }}}}"
    output_schema: {schema}
  echo: {{ kind: script, run: [sh, -c, 'echo "{{\"out\": 7}}"'] }}
"#
        )
    };
    let fits = r#"{ type: object, required: [results], properties: { results: { type: array } } }"#;
    let result = completed(&run_graph_with(
        "map-updates",
        &map(fits),
        r#"{"items": [1, 2, 3]}"#,
    ));
    assert_eq!(result["state"]["results"], json!([7, 7, 7]), "{result}");
    assert_eq!(result["state"]["count"], json!(3), "{result}");
    assert_eq!(result["state"]["first"], json!(7), "{result}");

    let refuses = r#"{ type: object, properties: { results: { maxItems: 2 } } }"#;
    let out = run_graph_with("map-schema", &map(refuses), r#"{"items": [1, 2, 3]}"#);
    assert_eq!(out.status.code(), Some(1), "the run fails");
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("(output_schema)"), "{result}");
}

#[test]
fn an_end_node_writes_its_state_updates() {
    let result = completed(&run_graph(
        "end-updates",
        r#"
nodes:
  work: { kind: script, run: [sh, -c, 'echo "{\"n\": 2}"'], start: true, next: done }
  done:
    kind: end
    state_updates: { summary: "finished with {{ n }}" }
"#,
    ));
    assert_eq!(
        result["state"],
        json!({"n": 2, "summary": "finished with 2"}),
        "{result}"
    );
}

#[test]
fn run_fields_a_kind_cannot_honour_are_refused_up_front() {
    let out = run_graph(
        "map-retry",
        r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: echo
    output_key: out
    collect_into: results
    retry: 3
  echo: { kind: script, run: [sh, -c, 'echo "{}"'] }
"#,
    );
    assert_eq!(out.status.code(), Some(2), "refused by validation");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("node 'fan': 'retry' is a field the kind 'map' does not take"),
        "{stderr}"
    );
}

#[test]
fn secrets_are_substituted_on_the_worker_and_masked_in_errors() {
    let secret = "tok-5f1a9c";
    let yaml = r#"
nodes:
  call:
    kind: script
    start: true
    run: [sh, -c, 'echo "{\"sent\": \"$1\"}"', call, "${WEFT_TEST_TOKEN}"]
    next: check
  check:
    kind: script
    run: [sh, -c, 'echo "server refused $TOKEN" >&2; exit 1']
    env: { TOKEN: "Bearer ${WEFT_TEST_TOKEN}" }
"#;
    let out = run_graph_env("secrets", yaml, &[("WEFT_TEST_TOKEN", secret)]);
    assert_eq!(out.status.code(), Some(1), "the second node fails");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(&stdout).expect("one JSON object");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("server refused Bearer ***"), "{result}");
    // The script wrote the secret into the state itself; nothing else shows it.
    assert_eq!(result["state"]["sent"], secret, "{result}");
    let shown = stdout.replace(&format!("\"sent\":\"{secret}\""), "");
    assert!(!shown.contains(secret), "{stdout}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));

    let out = run_graph_env("secrets-unset", yaml, &[]);
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("argv[4]: secret ${WEFT_TEST_TOKEN} is not set on this worker"),
        "{result}"
    );

    // A secrets file, as `worker --secrets-file` reads it.
    let file = std::env::temp_dir().join(format!("weft-secrets-{}", std::process::id()));
    std::fs::write(&file, "# test\nWEFT_TEST_TOKEN=from-file\n").expect("secrets file");
    let path = file.to_str().expect("utf-8 path");
    let out = run_graph_env("secrets-file", yaml, &[("WEFT_SECRETS_FILE", path)]);
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(result["state"]["sent"], "from-file", "{result}");
    std::fs::remove_file(&file).ok();
}
