//! Every file in `tests/fixtures/invalid/` names the findings it must
//! produce in `# expect: …` lines (and, in `# never: …` lines, what no
//! finding may say); every example graph must validate clean.

use std::path::{Path, PathBuf};

use weft_graph::{self as graph, GraphError, Severity};

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

#[test]
fn invalid_fixtures_report_every_expected_finding() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    let fixtures = files(&dir, "yaml");
    assert!(fixtures.len() >= 15, "fixtures went missing: {fixtures:?}");
    for path in fixtures {
        let text = std::fs::read_to_string(&path).unwrap();
        let expected: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(
            !expected.is_empty(),
            "{} has no `# expect:` line",
            path.display()
        );
        let findings = match graph::load_file(&path) {
            Err(GraphError::Invalid(findings)) => findings,
            other => panic!("{} should be invalid, got {other:?}", path.display()),
        };
        let shown: Vec<String> = findings.iter().map(ToString::to_string).collect();
        for want in &expected {
            assert!(
                shown
                    .iter()
                    .any(|line| line.starts_with(want) || line.contains(want)),
                "{}: missing finding\n  want: {want}\n  got:\n    {}",
                path.display(),
                shown.join("\n    ")
            );
        }
        // `# never: …` names what a cascade would add.
        for never in text.lines().filter_map(|l| l.strip_prefix("# never: ")) {
            assert!(
                !shown.iter().any(|line| line.contains(never)),
                "{}: a finding says {never:?}:\n    {}",
                path.display(),
                shown.join("\n    ")
            );
        }
        // Errors come before warnings.
        let first_warning = findings
            .iter()
            .position(|f| f.severity == Severity::Warning)
            .unwrap_or(findings.len());
        assert!(
            findings[first_warning..]
                .iter()
                .all(|f| f.severity == Severity::Warning)
        );
    }
}

#[test]
fn example_graphs_validate_without_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let examples = files(&dir, "yaml");
    assert!(examples.len() >= 4, "examples went missing: {examples:?}");
    for path in examples {
        match graph::load_file(&path) {
            Ok((_, warnings)) => assert!(warnings.is_empty(), "{}: {warnings:?}", path.display()),
            Err(error) => panic!("{}: {error}", path.display()),
        }
    }
}

#[test]
fn json_graphs_load_like_yaml() {
    let json = r#"{"nodes": {"a": {"kind": "task", "handler": "a", "start": true, "next": "b"}, "b": {"kind": "end"}}}"#;
    let (graph, findings) = graph::load_str(json, graph::Format::Json, "j").unwrap();
    assert!(findings.is_empty());
    assert_eq!(graph.nodes.len(), 2);
    assert!(graph.is_start(0));
    assert!(graph.is_end(1));
}

#[test]
fn a_broken_edge_condition_does_not_cascade_into_unreachable_nodes() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true }
  b: { kind: task, handler: b }
edges:
  - { from: a, to: b, when: "state.x >" }
"#;
    let shown = findings_of(yaml, "cascade");
    assert_eq!(shown.len(), 1, "one finding, no cascade: {shown:?}");
    assert!(shown[0].contains("does not parse"), "{shown:?}");
}

#[test]
fn start_and_end_in_the_wrong_place_get_their_own_message() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true }
edges:
  - { from: a, to: START }
  - { from: END, to: a }
"#;
    let shown = findings_of(yaml, "ends");
    assert_eq!(
        shown,
        [
            "error: edge a → START: START can only be a source and END only a target (line 5)",
            "error: edge END → a: START can only be a source and END only a target (line 6)",
        ]
    );
}

#[test]
fn a_cycle_inside_a_map_branch_gets_advice_that_works() {
    let yaml = r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: draft
    output_key: out
    collect_into: results
  draft: { kind: script, run: [draft], next: check }
  check: { kind: script, run: [check], next: draft }
"#;
    let shown = findings_of(yaml, "branch-cycle");
    assert!(
        shown
            .iter()
            .any(|f| f.contains("inside map 'fan''s branch")
                && f.contains("through a script's `_next`")),
        "{shown:?}"
    );
    assert!(
        !shown
            .iter()
            .any(|f| f.contains("mark the back-edge `loop: true`")),
        "{shown:?}"
    );
}

#[test]
fn a_hosted_condition_on_a_start_edge_is_refused() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a }
edges:
  - { from: START, to: a, when: "fn:ready" }
"#;
    let shown = findings_of(yaml, "start-fn");
    assert!(
        shown
            .iter()
            .any(|f| f.contains("a START edge's `when` is checked on the input")),
        "{shown:?}"
    );
}

/// The findings of a graph that must be invalid, as `weft validate` prints
/// them.
fn findings_of(yaml: &str, name: &str) -> Vec<String> {
    match graph::load_str(yaml, graph::Format::Yaml, name) {
        Err(GraphError::Invalid(findings)) => findings.iter().map(ToString::to_string).collect(),
        other => panic!("{name} should be invalid, got {other:?}"),
    }
}

#[test]
fn many_cycles_are_found_in_one_pass_and_reported_in_a_bounded_list() {
    use std::fmt::Write;
    // The largest graph allowed, made of two-node cycles behind one start.
    let pairs = graph::limits::MAX_NODES / 2 - 1;
    let mut yaml = String::from("nodes:\n  s: {kind: end, start: true, next: [");
    yaml.push_str(
        &(0..pairs)
            .map(|i| format!("a{i}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    yaml.push_str("]}\n");
    for i in 0..pairs {
        writeln!(
            yaml,
            "  a{i}: {{kind: end, next: b{i}}}\n  b{i}: {{kind: end, next: a{i}}}"
        )
        .unwrap();
    }
    let findings = match graph::load_str(&yaml, graph::Format::Yaml, "cycles") {
        Err(GraphError::Invalid(findings)) => findings,
        other => panic!("should be invalid, got {other:?}"),
    };
    let cycles: Vec<&str> = findings
        .iter()
        .map(|f| f.message.as_str())
        .filter(|m| m.contains("cycle"))
        .collect();
    assert_eq!(cycles.len(), 11, "{cycles:?}");
    assert!(
        cycles.contains(
            &format!(
                "{} more cycles through forward edges beyond the 10 listed",
                pairs - 10
            )
            .as_str()
        )
    );
}

#[test]
fn a_node_that_cannot_be_read_keeps_its_start_flag() {
    let yaml = "nodes:\n  a: { kind: script, run: [true], start: true }\n";
    let findings = match graph::load_str(yaml, graph::Format::Yaml, "broken") {
        Err(GraphError::Invalid(findings)) => findings,
        other => panic!("should be invalid, got {other:?}"),
    };
    let shown: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "error: node 'a': field 'run[0]': invalid type: boolean `true`, expected a string (line 2)"
        ]
    );
}

#[test]
fn a_condition_that_does_not_parse_is_reported_once_with_its_line() {
    let yaml = r#"
state:
  n: { type: integr }
conditions:
  big: "state.n <= "
nodes:
  a: { kind: script, start: true, run: [sh, -c, 'echo {}'] }
edges:
  - { from: a, to: END, when: big }
  - { from: a, to: END, when: nosuch }
"#;
    let shown = findings_of(yaml, "lines");
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(
        shown[0].starts_with("error: state field 'n': unknown type 'integr'")
            && shown[0].ends_with("(line 3)"),
        "{shown:?}"
    );
    assert!(
        shown[1].starts_with("error: condition 'big': CEL expression")
            && shown[1].ends_with("(line 5)"),
        "{shown:?}"
    );
    assert_eq!(
        shown[2],
        "error: edge a → END: `when` names unknown condition 'nosuch' (line 10)"
    );
}

/// The findings of a graph that loads, warnings included.
fn warnings_of(yaml: &str) -> Vec<String> {
    match graph::load_str(yaml, graph::Format::Yaml, "names") {
        Ok((_, warnings)) => warnings.iter().map(ToString::to_string).collect(),
        Err(error) => panic!("should load: {error:?}"),
    }
}

const TYPOS: &str = r#"
state:
  n: { type: integer, default: 0 }
  author: { type: string, default: "" }
  topics: { type: array, default: [] }
  notes: { type: array, default: [] }
conditions:
  big: "state.m <= 10"
nodes:
  each:
    kind: map
    start: true
    over: state.topics
    as: topic
    branch: note
    output_key: note
    collect_into: notes
    next: a
  note: { kind: llm, prompt: "About {{ topic }} for {{ author }}", state_updates: { note: "{{ output }}" } }
  a:
    kind: script
    run: [sh, -c, 'echo "{}"']
    state_updates: { autor: "{{ nn }}" }
    next: b
  b: { kind: llm, prompt: "Hi {{ state.autor }} {{ output }} {{ loop }}", end: true }
edges:
  - { from: b, to: a, loop: true, when: "state.auther == ''" }
"#;

#[test]
fn undeclared_state_names_are_warned_about_where_they_are() {
    let shown = warnings_of(TYPOS);
    assert_eq!(
        shown,
        [
            "warning: condition 'big' reads 'm', which no `state:` entry, node output or scope declares; did you mean 'n'? (line 8)",
            "warning: edge b → a: `when` reads 'auther', which no `state:` entry, node output or scope declares; did you mean 'author'? (line 27)",
            "warning: node 'a': state_updates writes 'autor', which `state:` does not declare; did you mean 'author'? (line 20)",
            "warning: node 'a': state_updates.autor reads 'nn', which no `state:` entry, node output or scope declares; did you mean 'n'? (line 20)",
        ],
        "the map's item, its output key, `output` and `loop` are declared names"
    );
}

#[test]
fn undeclared_state_names_are_errors_under_strict_state() {
    let strict = format!("settings: {{ strict_state: true }}\n{TYPOS}");
    let shown = findings_of(&strict, "strict");
    assert!(
        shown.iter().any(|f| f.starts_with(
            "error: condition 'big' reads 'm', which no `state:` entry, node output or scope declares; did you mean 'n'? (settings.strict_state is on)"
        )),
        "{shown:?}"
    );
}

#[test]
fn a_graph_that_declares_no_state_reads_what_its_steps_return() {
    let yaml = r#"
nodes:
  a: { kind: script, start: true, run: [sh, -c, 'echo "{\"m\": 1}"'], next: b }
  b: { kind: llm, prompt: "{{ m }}", end: true }
"#;
    assert_eq!(warnings_of(yaml), Vec::<String>::new());
}

#[test]
fn findings_about_settings_tools_and_top_level_keys_carry_their_lines() {
    let yaml = r#"
settings:
  max_steps: 0
  durability: later
tools:
  vague: { parameters: { type: object }, run: [true] }
nodez: {}
nodes:
  a: { kind: script, start: true, run: [sh, -c, 'echo {}'] }
"#;
    let shown = findings_of(yaml, "more-lines");
    let line_of = |start: &str| {
        shown
            .iter()
            .find(|f| f.starts_with(start))
            .unwrap_or_else(|| panic!("no {start}: {shown:?}"))
            .rsplit("(line ")
            .next()
            .unwrap()
            .trim_end_matches(')')
            .to_owned()
    };
    assert_eq!(line_of("error: settings.max_steps"), "3");
    assert_eq!(line_of("error: settings.durability"), "4");
    assert_eq!(line_of("error: tool 'vague'"), "6");
    assert_eq!(line_of("error: unknown top-level key 'nodez'"), "7");
}
