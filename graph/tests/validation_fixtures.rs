//! Every file in `tests/fixtures/invalid/` names the findings it must
//! produce in `# expect: …` lines; every example graph must validate clean.

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
