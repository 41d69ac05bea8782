//! The Python client bundles a graph file with the same files as the Rust
//! client and `weft` do, on every example graph (`sdk/python`'s
//! `GraphBundle.from_file` against `weft_client::GraphBundle::from_file`).
//! The Python package is the one `.ci/run` installs in
//! `target/python-venv` (or `$WEFT_SDK_PYTHON`).

use std::path::PathBuf;
use std::process::Command;

use weft_client::GraphBundle;
use weft_tests::repo;

fn sdk_python() -> PathBuf {
    let python = std::env::var_os("WEFT_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/python-venv/bin/python"));
    assert!(
        python.exists(),
        "this test needs the Python client installed: python3 -m venv target/python-venv && target/python-venv/bin/pip install ./sdk/python (.ci/run does), or set WEFT_SDK_PYTHON"
    );
    python
}

/// Every example graph file, `examples/` and its subdirectories.
fn example_graphs() -> Vec<PathBuf> {
    let mut graphs = Vec::new();
    let mut dirs = vec![repo().join("examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                graphs.push(path);
            }
        }
    }
    graphs.sort();
    graphs
}

/// The files and modes the Python client bundles with each of `graphs`.
fn python_bundles(graphs: &[PathBuf]) -> Vec<Vec<(String, u32)>> {
    let python = sdk_python();
    let script = "import json, sys, weft\n\
                  for path in sys.argv[1:]:\n\
                  \x20   files = weft.GraphBundle.from_file(path).files\n\
                  \x20   print(json.dumps(sorted([p, m] for p, _, m in files)))";
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(graphs)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The files and modes the Rust client bundles with `graph`.
fn rust_bundle(graph: &std::path::Path) -> Vec<(String, u32)> {
    let bundle = GraphBundle::from_file(graph).unwrap_or_else(|e| panic!("{graph:?}: {e}"));
    let mut files: Vec<(String, u32)> = bundle.files.into_iter().map(|(p, _, m)| (p, m)).collect();
    files.sort();
    files
}

#[test]
fn python_bundles_the_same_files_as_rust_for_every_example() {
    let graphs = example_graphs();
    assert!(graphs.len() >= 10, "{graphs:?}");
    let from_python = python_bundles(&graphs);
    for (graph, python_files) in graphs.iter().zip(from_python) {
        assert_eq!(python_files, rust_bundle(graph), "{}", graph.display());
    }
}

/// Knowledge sources' globs match the same files from Python as from
/// Rust: `*` within a directory, `**` across them, `?`, `[…]`, `{a,b}`,
/// hidden files and directories never, files only.
#[test]
fn knowledge_source_globs_match_the_same_files_in_python_and_rust() {
    let dir = std::env::temp_dir().join(format!("weft-globs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = [
        "docs/a.md",
        "docs/b.markdown",
        "docs/deep/c.md",
        "docs/deep/deeper/d.md",
        "docs/.hidden.md",
        "docs/.git/e.md",
        "notes/n1.txt",
        "notes/n22.txt",
        "notes/x.jsonl",
        "faq.jsonl",
        "top.md",
    ];
    for file in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "text\n").unwrap();
    }
    let cases = [
        r#"["docs/*.md"]"#,
        r#"["docs/**/*.md"]"#,
        r#"["**/*.md", "faq.jsonl"]"#,
        r#"["notes/n?.txt", "notes/*.{jsonl,txt}"]"#,
        r#"["[dn]*/*"]"#,
        r#"["./top.md", "docs/**"]"#,
    ];
    let graphs: Vec<PathBuf> = cases
        .iter()
        .enumerate()
        .map(|(i, sources)| {
            let path = dir.join(format!("g{i}.yaml"));
            std::fs::write(
                &path,
                format!("knowledge:\n  kb: {{ sources: {sources} }}\nnodes:\n  r: {{ kind: rag, start: true, knowledge: kb, query: q }}\n"),
            )
            .unwrap();
            path
        })
        .collect();
    let from_python = python_bundles(&graphs);
    for ((graph, sources), python_files) in graphs.iter().zip(cases).zip(from_python) {
        let rust_files = rust_bundle(graph);
        assert!(rust_files.len() > 1, "{sources}: {rust_files:?}");
        assert!(
            rust_files.iter().all(|(path, _)| !path.contains("/.")),
            "{sources}: {rust_files:?}"
        );
        assert_eq!(python_files, rust_files, "{sources}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
