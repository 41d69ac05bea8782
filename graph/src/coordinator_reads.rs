//! The state fields the coordinator itself reads while it runs a graph:
//! what its conditions, routers, templates, reducers and subgraph nodes
//! look at, as opposed to what steps read on their workers.
//!
//! A field outside this set is only ever moved by the coordinator — into
//! the store, to the workers whose steps read it, back to the client — so
//! it may keep the field as the JSON text it was given and never parse it
//! (issue 38: a 10 MB document beside a counter costs its bytes, not a
//! parse and a rewrite). The answer must never leave out a field that is
//! read, so anything unsure reads everything: a template or expression that
//! reads `state` whole, a condition or `until` hosted on a worker (it is
//! given the state; a hosted reducer is given its field's values, so its
//! field counts as read, as any reducer's), an `until` sentence (a model judges the state), a
//! subgraph node (its child's input is built from the state's values).
//! Every kind and variant is matched by name, with no catch-all, so a new
//! one has to say what it reads.

use std::collections::BTreeSet;

use crate::{
    ConcurrencyLimit, Condition, Graph, Guard, ListSource, NodeKind, Template, Until, UpdateValue,
};

/// The fields the coordinator reads while running `graph`, or `None` when
/// it may read any of them.
pub fn coordinator_reads(graph: &Graph) -> Option<BTreeSet<String>> {
    let mut reads = Reads::default();
    for (_, expr) in &graph.conditions {
        reads.fields(expr.state_reads().cloned());
    }
    for edge in &graph.edges {
        match &edge.guard {
            Guard::When(condition) => reads.condition(condition),
            // A router's key: its node's router is read below.
            Guard::Always | Guard::Fallback | Guard::Route(_) => {}
        }
    }
    for field in &graph.fields {
        // A reducer reads the field's old value when two steps write it.
        if field.reducer.is_some() {
            reads.field(&field.name);
        }
    }
    for node in &graph.nodes {
        for (_, update) in &node.state_updates {
            match update {
                UpdateValue::Template(template) => reads.template(template),
                UpdateValue::Literal(_) => {}
            }
        }
        if let Some(concurrency) = &node.concurrency {
            reads.template(&concurrency.key);
        }
        if let Some(router) = &node.router {
            reads.condition(&router.expr);
        }
        reads.kind(&node.kind);
    }
    reads.fields
}

/// What has been found so far: `None` once something reads everything.
struct Reads {
    fields: Option<BTreeSet<String>>,
}

impl Default for Reads {
    fn default() -> Self {
        Self {
            fields: Some(BTreeSet::new()),
        }
    }
}

impl Reads {
    fn all(&mut self) {
        self.fields = None;
    }

    fn field(&mut self, name: &str) {
        if let Some(fields) = &mut self.fields {
            fields.insert(name.to_owned());
        }
    }

    /// Adds `names`; `None` (reads `state` whole) reads everything.
    fn fields(&mut self, names: Option<BTreeSet<String>>) {
        match (names, &mut self.fields) {
            (Some(names), Some(fields)) => fields.extend(names),
            (None, _) => self.all(),
            (Some(_), None) => {}
        }
    }

    fn template(&mut self, template: &Template) {
        self.fields(template.state_reads());
    }

    fn condition(&mut self, condition: &Condition) {
        // A hosted one reads all: a worker evaluates it over the state.
        self.fields(condition.state_reads());
    }

    fn kind(&mut self, kind: &NodeKind) {
        match kind {
            // Their steps read the state on a worker, which is sent the
            // fields' text.
            NodeKind::Task { .. } | NodeKind::Script { .. } | NodeKind::Function(_) => {}
            NodeKind::End(_) | NodeKind::Broken => {}
            NodeKind::Approval { prompt, .. } | NodeKind::Input { prompt, .. } => {
                if let Some(prompt) = prompt {
                    self.template(prompt);
                }
            }
            NodeKind::Llm(llm) => {
                self.template(&llm.prompt);
                if let Some(system) = &llm.system {
                    self.template(system);
                }
            }
            NodeKind::Agent(agent) => {
                self.template(&agent.prompt);
                if let Some(instructions) = &agent.instructions {
                    self.template(instructions);
                }
            }
            NodeKind::Rag(rag) => {
                for template in [&rag.query, &rag.prompt, &rag.system].into_iter().flatten() {
                    self.template(template);
                }
            }
            NodeKind::Map(map) => {
                match &map.over {
                    ListSource::Template(template) => self.template(template),
                    ListSource::Cel(expr) => self.fields(expr.state_reads().cloned()),
                }
                match &map.max_concurrency {
                    Some(ConcurrencyLimit::Template(template)) => self.template(template),
                    Some(ConcurrencyLimit::Fixed(_)) | None => {}
                }
                // Collected into: written whole, but kept parsed.
                self.field(&map.collect_into);
            }
            NodeKind::Loop(config) => match &config.until {
                Until::Condition(_, expr) => self.fields(expr.state_reads().cloned()),
                // A worker's function or a model judges the state.
                Until::Hosted(_) | Until::Sentence(_) => self.all(),
            },
            // A child's input is built from the parent's values.
            NodeKind::Subgraph(_) => self.all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    fn reads(yaml: &str) -> Option<Vec<String>> {
        let (graph, _) = crate::load_str(yaml, Format::Yaml, "g").expect("the graph loads");
        coordinator_reads(&graph).map(|fields| fields.into_iter().collect())
    }

    const TWO: &str = "version: 1\nname: g\nnodes:\n  a: {kind: task, handler: inc, start: true}\n  b: {kind: task, handler: inc, end: true}\n";

    #[test]
    fn a_chain_of_handlers_reads_nothing_on_the_coordinator() {
        let graph = format!("{TWO}edges:\n  - {{from: a, to: b}}\n");
        assert_eq!(reads(&graph), Some(vec![]));
    }

    #[test]
    fn conditions_templates_and_reducers_read_what_they_name() {
        let graph = r#"
version: 1
name: g
state:
  items: {type: array, default: [], reducer: concat}
  doc: {type: string, default: ""}
  count: {type: integer, default: 0}
nodes:
  a:
    kind: task
    handler: inc
    start: true
    state_updates: {note: "{{ state.topic }} by {{ author }}"}
  b: {kind: task, handler: inc, end: true}
edges:
  - {from: a, to: b}
  - {from: b, to: a, loop: true, when: "state.count < 3"}
"#;
        assert_eq!(
            reads(graph),
            Some(vec![
                "author".into(),
                "count".into(),
                "items".into(),
                "topic".into()
            ])
        );
    }

    #[test]
    fn reading_the_state_whole_or_on_a_worker_reads_everything() {
        let template = TWO.replace(
            "handler: inc, start: true}",
            "handler: inc, start: true, state_updates: {n: \"{{ state | length }}\"}}",
        );
        let whole = format!("{template}edges:\n  - {{from: a, to: b}}\n");
        assert_eq!(reads(&whole), None);
        let cel = format!("{TWO}edges:\n  - {{from: a, to: b, when: \"size(state) > 2\"}}\n");
        assert_eq!(reads(&cel), None);
        let llm = "version: 1\nname: g\nnodes:\n  a: {kind: llm, start: true, end: true, prompt: \"{{ state }}\"}\n";
        assert_eq!(reads(llm), None);
        let llm = "version: 1\nname: g\nnodes:\n  a: {kind: llm, start: true, end: true, prompt: \"about {{ topic }}\"}\n";
        assert_eq!(reads(llm), Some(vec!["topic".into()]));
    }
}
