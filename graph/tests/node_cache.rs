//! A node's `cache:` (SPEC 20) as the graph reads it: its entry key hashes
//! what the node does, not how it is wired or described.

use weft_graph::{Format, load_str};

fn definition(node: &str) -> String {
    let yaml = format!(
        "state:\n  q: {{ type: string }}\nnodes:\n  ask: {node}\n  other: {{ kind: task, handler: h, start: true }}\n"
    );
    let (graph, _) = load_str(&yaml, Format::Yaml, "g").unwrap_or_else(|e| panic!("{e}"));
    let idx = graph.node_index("ask").expect("ask");
    graph
        .node(idx)
        .cache
        .as_ref()
        .expect("a cache")
        .definition
        .clone()
}

#[test]
fn the_definition_hash_follows_what_the_node_does_not_its_wiring() {
    let base = definition(
        r#"{ kind: llm, start: true, prompt: "Q: {{ q }}", cache: { key: "{{ q }}", ttl: 1h } }"#,
    );
    // Rewired, described, reordered, another ttl: the same definition.
    for same in [
        r#"{ kind: llm, start: true, next: other, prompt: "Q: {{ q }}", cache: { key: "{{ q }}", ttl: 1h } }"#,
        r#"{ kind: llm, start: true, description: "asks", prompt: "Q: {{ q }}", cache: { key: "{{ q }}", ttl: 1h } }"#,
        r#"{ cache: { ttl: 1h, key: "{{ q }}" }, prompt: "Q: {{ q }}", kind: llm, start: true }"#,
        r#"{ kind: llm, start: true, prompt: "Q: {{ q }}", cache: { key: "{{ q }}", ttl: 5m } }"#,
    ] {
        assert_eq!(definition(same), base, "{same}");
    }
    // What it runs with changed: another definition.
    for other in [
        r#"{ kind: llm, start: true, prompt: "Question: {{ q }}", cache: { key: "{{ q }}", ttl: 1h } }"#,
        r#"{ kind: llm, start: true, prompt: "Q: {{ q }}", max_tokens: 9, cache: { key: "{{ q }}", ttl: 1h } }"#,
        r#"{ kind: llm, start: true, prompt: "Q: {{ q }}", cache: { key: "v2 {{ q }}", ttl: 1h } }"#,
    ] {
        assert_ne!(definition(other), base, "{other}");
    }
}

#[test]
fn entry_keys_differ_by_graph_node_and_rendered_key() {
    let yaml = "state:\n  q: { type: string }\nnodes:\n  ask: { kind: llm, start: true, prompt: p, cache: { key: \"{{ q }}\", ttl: 90s } }\n";
    let (graph, _) = load_str(yaml, Format::Yaml, "g").unwrap();
    let cache = graph.node(0).cache.clone().unwrap();
    assert_eq!(cache.ttl.as_secs(), 90);
    let key = cache.entry_key("g", "ask", "tides");
    assert_eq!(key.len(), 64, "SHA-256 in hex");
    assert_eq!(key, cache.entry_key("g", "ask", "tides"), "stable");
    assert_ne!(key, cache.entry_key("h", "ask", "tides"));
    assert_ne!(key, cache.entry_key("g", "ask2", "tides"));
    assert_ne!(key, cache.entry_key("g", "ask", "tide"));
    // Length-prefixed: moving a character between parts is another key.
    assert_ne!(
        cache.entry_key("g", "askt", "ides"),
        cache.entry_key("g", "ask", "tides")
    );
}

#[test]
fn settings_cache_false_is_read_and_true_by_default() {
    let on = "nodes:\n  a: { kind: task, handler: h, start: true }\n";
    let (graph, _) = load_str(on, Format::Yaml, "g").unwrap();
    assert!(graph.settings.cache);
    let off = "settings: { cache: false }\nnodes:\n  a: { kind: task, handler: h, start: true }\n";
    let (graph, _) = load_str(off, Format::Yaml, "g").unwrap();
    assert!(!graph.settings.cache);
}
