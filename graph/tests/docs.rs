//! The documentation in the repository stands on its own: every link and
//! anchor in the README, `docs/` and the examples' tour resolves inside the
//! repository, nothing names a file outside it, every whole graph the pages
//! show loads without errors, and every node they show fits the schema.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_graph as graph;

fn repo() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut pages = vec![
        root.join("README.md"),
        root.join("examples/README.md"),
        root.join("deploy/README.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

/// The anchors GitHub makes of a page's headings.
fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut fence = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if !fence && line.starts_with('#') {
            let heading = line.trim_start_matches('#').trim().to_lowercase();
            let slug: String = heading
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            found.insert(slug);
        }
    }
    found
}

/// `](target)` links of a page, outside code.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_owned());
        }
    }
    found
}

#[test]
fn every_link_resolves_inside_the_repository() {
    let root = repo();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        assert!(
            !text.contains("SPEC") && !text.contains("../shared"),
            "{} names something outside the repository",
            page.display()
        );
        for link in links(&text) {
            assert!(
                !link.starts_with("http"),
                "{}: {link} leaves the repository",
                page.display()
            );
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let target = std::fs::canonicalize(&target)
                .unwrap_or_else(|_| panic!("{}: {link} does not exist", page.display()));
            assert!(target.starts_with(&root), "{}: {link}", page.display());
            if !anchor.is_empty() {
                assert!(
                    anchors(&target).contains(anchor),
                    "{}: no heading for #{anchor} in {}",
                    page.display(),
                    target.display()
                );
            }
        }
    }
}

/// The ```yaml blocks of a page.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_start() == "```yaml" => current = Some(String::new()),
            Some(block) if line.trim_start() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn the_graphs_and_nodes_the_pages_show_are_valid() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/graph.schema.json")).unwrap(),
    )
    .unwrap();
    let node_schema = {
        let mut node = schema["$defs"]["node"].clone();
        node["$defs"] = schema["$defs"].clone();
        node
    };
    let nodes = jsonschema::validator_for(&node_schema).expect("the node schema compiles");
    let mut graphs = 0;
    let mut shown_nodes = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for block in yaml_blocks(&text) {
            let Ok(value) = serde_saphyr::from_str::<Value>(&block) else {
                continue;
            };
            let Some(object) = value.as_object() else {
                continue;
            };
            // A whole graph without Python (whose files a page cannot hold).
            if object.contains_key("nodes") && !object.contains_key("functions") {
                let loaded = graph::load_str(&block, graph::Format::Yaml, "page");
                assert!(loaded.is_ok(), "{}:\n{block}\n{loaded:?}", page.display());
                graphs += 1;
            }
            let mut check = |id: &str, node: &Value| {
                if node.get("kind").is_some() {
                    let errors: Vec<String> =
                        nodes.iter_errors(node).map(|e| e.to_string()).collect();
                    assert!(
                        errors.is_empty(),
                        "{}: node {id}: {errors:?}",
                        page.display()
                    );
                    shown_nodes += 1;
                }
            };
            let listed = object
                .get("nodes")
                .and_then(Value::as_object)
                .unwrap_or(object);
            for (id, node) in listed {
                check(id, node);
            }
        }
    }
    assert!(
        graphs >= 1 && shown_nodes >= 20,
        "{graphs} graphs, {shown_nodes} nodes"
    );
}
