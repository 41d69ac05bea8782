//! `docs/graph.schema.json`, the JSON Schema editors check graph files
//! with: it knows exactly the keys and kinds the loader takes, every example
//! and test graph satisfies it, and it refuses what the loader refuses by
//! key (a misspelt field, an unknown kind).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_graph as graph;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn schema() -> Value {
    let text = std::fs::read_to_string(repo().join("docs/graph.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn keys(object: &Value) -> BTreeSet<String> {
    object
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// A YAML graph file as the JSON the schema sees.
fn as_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn graph_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            graph_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            found.push(path);
        }
    }
}

#[test]
fn the_schema_knows_exactly_the_keys_and_fields_the_loader_takes() {
    let schema = schema();
    let top: BTreeSet<String> = graph::TOP_LEVEL_KEYS
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(keys(&schema["properties"]), top);
    for kind in graph::KINDS {
        let fields: BTreeSet<String> = graph::node_fields(kind)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let described = keys(&schema["$defs"][kind]["properties"]);
        assert_eq!(
            described, fields,
            "kind '{kind}' (regenerate with python3 docs/tools/graph_schema.py)"
        );
    }
    let listed: Vec<&str> = schema["$defs"]["node"]["properties"]["kind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(listed, graph::KINDS);
}

#[test]
fn every_example_and_test_graph_satisfies_the_schema() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let mut files = Vec::new();
    graph_files(&repo().join("examples"), &mut files);
    assert!(files.len() > 10, "{files:?}");
    for path in files {
        let graph = as_json(&path);
        let errors: Vec<String> = validator
            .iter_errors(&graph)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
    }
}

#[test]
fn the_schema_refuses_a_misspelt_field_and_an_unknown_kind() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let good: Value =
        serde_saphyr::from_str("nodes:\n  a: { kind: task, handler: h, start: true, retry: 3 }\n")
            .unwrap();
    assert!(validator.is_valid(&good));
    for bad in [
        "nodes:\n  a: { kind: task, handler: h, start: true, retries: 3 }\n",
        "nodes:\n  a: { kind: scirpt, run: [true] }\n",
        "nodes:\n  a: { kind: map, over: x, as: i, branch: b }\n",
        "nodes:\n  a: { kind: approval, timeout: 5s }\n",
        "nodez: {}\n",
        "settings: { durability: later }\n",
    ] {
        let graph: Value = serde_saphyr::from_str(bad).unwrap();
        assert!(!validator.is_valid(&graph), "accepted: {bad}");
    }
}
