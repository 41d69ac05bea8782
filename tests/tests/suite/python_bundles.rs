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

#[test]
fn python_bundles_the_same_files_as_rust_for_every_example() {
    let python = sdk_python();
    let graphs = example_graphs();
    assert!(graphs.len() >= 10, "{graphs:?}");
    let script = "import json, sys, weft\n\
                  for path in sys.argv[1:]:\n\
                  \x20   files = weft.GraphBundle.from_file(path).files\n\
                  \x20   print(json.dumps(sorted([p, m] for p, _, m in files)))";
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(&graphs)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let from_python: Vec<Vec<(String, u32)>> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    for (graph, python_files) in graphs.iter().zip(from_python) {
        let bundle = GraphBundle::from_file(graph).unwrap_or_else(|e| panic!("{graph:?}: {e}"));
        let mut rust_files: Vec<(String, u32)> =
            bundle.files.into_iter().map(|(p, _, m)| (p, m)).collect();
        rust_files.sort();
        assert_eq!(python_files, rust_files, "{}", graph.display());
    }
}
