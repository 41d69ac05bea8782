//! Building a graph in code, mirroring the YAML: settings, declared state
//! with reducers, named conditions, nodes and edges. The result is the same
//! document a graph file holds, validated by the coordinator on submission.

use serde_json::{Map, Value, json};

use crate::bundle::GraphBundle;

/// A graph under construction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphBuilder {
    name: String,
    settings: Map<String, Value>,
    state: Map<String, Value>,
    initial_state: Map<String, Value>,
    conditions: Map<String, Value>,
    nodes: Map<String, Value>,
    edges: Vec<Value>,
}

impl GraphBuilder {
    /// An empty graph called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Sets a `settings:` entry (`max_steps`, `max_concurrency`, …).
    pub fn setting(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.settings.insert(key.to_owned(), value.into());
        self
    }

    /// Declares a state field with its type and default.
    pub fn field(mut self, name: &str, ty: &str, default: impl Into<Value>) -> Self {
        self.state.insert(
            name.to_owned(),
            json!({"type": ty, "default": default.into()}),
        );
        self
    }

    /// Declares a state field combined by `reducer` on concurrent writes.
    pub fn field_with_reducer(
        mut self,
        name: &str,
        ty: &str,
        default: impl Into<Value>,
        reducer: &str,
    ) -> Self {
        self.state.insert(
            name.to_owned(),
            json!({"type": ty, "default": default.into(), "reducer": reducer}),
        );
        self
    }

    /// Seeds a field before the first wave (`initial_state:`): over its
    /// declared default, under the run's input. A field not declared is
    /// declared by this, of any type.
    pub fn initial(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.initial_state.insert(name.to_owned(), value.into());
        self
    }

    /// Names a CEL condition over `state`.
    pub fn condition(mut self, name: &str, expression: &str) -> Self {
        self.conditions
            .insert(name.to_owned(), Value::from(expression));
        self
    }

    /// Adds a node.
    pub fn node(mut self, id: &str, node: NodeBuilder) -> Self {
        self.nodes.insert(id.to_owned(), Value::Object(node.fields));
        self
    }

    /// Adds an edge `from → to` (`START` and `END` allowed).
    pub fn edge(mut self, from: &str, to: &str) -> Self {
        self.edges.push(json!({"from": from, "to": to}));
        self
    }

    /// Adds an edge taken when `when` holds (a condition name or CEL).
    pub fn edge_when(mut self, from: &str, to: &str, when: &str) -> Self {
        self.edges
            .push(json!({"from": from, "to": to, "when": when}));
        self
    }

    /// Adds a loop back-edge, optionally conditional.
    pub fn loop_edge(mut self, from: &str, to: &str, when: Option<&str>) -> Self {
        let mut edge = json!({"from": from, "to": to, "loop": true});
        if let Some(when) = when {
            edge["when"] = Value::from(when);
        }
        self.edges.push(edge);
        self
    }

    /// The graph document, as a graph file would hold it.
    pub fn to_json(&self) -> Value {
        let mut document = Map::new();
        document.insert("version".into(), Value::from(1));
        document.insert("name".into(), Value::from(self.name.clone()));
        for (key, map) in [
            ("settings", &self.settings),
            ("state", &self.state),
            ("initial_state", &self.initial_state),
            ("conditions", &self.conditions),
        ] {
            if !map.is_empty() {
                document.insert(key.into(), Value::Object(map.clone()));
            }
        }
        document.insert("nodes".into(), Value::Object(self.nodes.clone()));
        document.insert("edges".into(), Value::Array(self.edges.clone()));
        Value::Object(document)
    }

    /// A bundle holding the graph as `graph.json`.
    pub fn bundle(&self) -> GraphBundle {
        GraphBundle::from_text("graph.json", &self.to_json().to_string())
    }
}

/// A node under construction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeBuilder {
    fields: Map<String, Value>,
}

impl NodeBuilder {
    fn kind(kind: &str) -> Self {
        let mut fields = Map::new();
        fields.insert("kind".into(), Value::from(kind));
        Self { fields }
    }

    /// A node that calls a worker-registered handler.
    pub fn task(handler: &str) -> Self {
        Self::kind("task").set("handler", handler)
    }

    /// A node that runs an executable (argv, no shell).
    pub fn script(argv: &[&str]) -> Self {
        Self::kind("script").set("run", argv.to_vec())
    }

    /// A pause for approve/reject.
    pub fn approval(prompt: &str) -> Self {
        Self::kind("approval").set("prompt", prompt)
    }

    /// A pause for a value written to `output_key`.
    pub fn input(prompt: &str, output_key: &str) -> Self {
        Self::kind("input")
            .set("prompt", prompt)
            .set("output_key", output_key)
    }

    /// A map over `over`, each item bound to `item_name`, running the chain
    /// that starts at `branch`, collected into `collect_into`.
    pub fn map(over: &str, item_name: &str, branch: &str, collect_into: &str) -> Self {
        Self::kind("map")
            .set("over", over)
            .set("as", item_name)
            .set("branch", branch)
            .set("collect_into", collect_into)
    }

    /// A node that ends the run.
    pub fn end() -> Self {
        Self::kind("end")
    }

    /// Runs in the first wave.
    pub fn start(self) -> Self {
        self.set("start", true)
    }

    /// Marks a terminal node (for the diagram).
    pub fn terminal(self) -> Self {
        self.set("end", true)
    }

    /// Unconditional edges to the given nodes.
    pub fn next(self, targets: &[&str]) -> Self {
        match targets {
            [one] => self.set("next", *one),
            many => self.set("next", many.to_vec()),
        }
    }

    /// Unconditional edges from the given nodes.
    pub fn depends_on(self, sources: &[&str]) -> Self {
        self.set("depends_on", sources.to_vec())
    }

    /// Any other field, as in the YAML (`retry`, `fallback`, `output_key`, …).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_owned(), value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_graph::{Format, load_str};

    #[test]
    fn built_graph_is_a_valid_document() {
        let graph = GraphBuilder::new("findings")
            .field_with_reducer("findings", "array", json!([]), "concat")
            .condition("enough", "size(state.findings) >= 2")
            .node(
                "plan",
                NodeBuilder::task("plan").start().next(&["web", "papers"]),
            )
            .node("web", NodeBuilder::task("web"))
            .node("papers", NodeBuilder::task("papers"))
            .node(
                "join",
                NodeBuilder::task("join")
                    .depends_on(&["web", "papers"])
                    .terminal(),
            )
            .loop_edge("join", "plan", Some("!(size(state.findings) >= 2)"));
        let text = graph.to_json().to_string();
        let (loaded, warnings) =
            load_str(&text, Format::Json, "built").unwrap_or_else(|e| panic!("{e}"));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(loaded.name, "findings");
        assert_eq!(loaded.nodes.len(), 4);
        assert_eq!(graph.bundle().graph_path, "graph.json");
    }
}
