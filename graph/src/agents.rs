//! Named agents (SPEC 2, seed 003): an agent defined once and used by name.
//!
//! `agents: {NAME: {instructions, tools, model, provider, max_turns,
//! teammates}}` at the top level defines one; so does a file
//! `agents/NAME.md` beside the graph, its YAML front matter holding the same
//! fields and its body the instructions. An `agent` node's `agent: NAME`
//! takes the definition, and the node's own fields override it. This is done
//! on the document, before nodes are built, so a definition's fields are
//! checked exactly as if the node had written them; a name that nothing
//! defines is an error with a "did you mean".

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::document::{Format, did_you_mean, parse_text};
use super::lines::{Lines, Step::Key};
use super::python::SourceFiles;
use super::{Finding, json_type_name};

/// The fields a definition may give, as an `agent` node takes them.
const FIELDS: [&str; 6] = [
    "instructions",
    "tools",
    "model",
    "provider",
    "max_turns",
    "teammates",
];

/// What a definition may hold besides [`FIELDS`]: a note for readers, and
/// (in a file) the name it is known by, which must be the file's.
const DOCUMENTATION: [&str; 2] = ["description", "name"];

/// The agents a graph defines, and the files it read them from.
#[derive(Default)]
pub(crate) struct NamedAgents {
    /// The `agents:` entries, checked.
    defined: BTreeMap<String, Map<String, Value>>,
    /// Definitions read from `agents/NAME.md` (`None`: no such file).
    from_files: BTreeMap<String, Option<Map<String, Value>>>,
    /// The files read, relative to the graph's directory, for the bundle.
    pub(crate) files: Vec<String>,
}

impl NamedAgents {
    /// Reads `agents:`.
    pub(crate) fn read(value: Option<&Value>, lines: &Lines, findings: &mut Vec<Finding>) -> Self {
        let mut agents = Self::default();
        let Some(value) = value else { return agents };
        let Some(map) = value.as_object() else {
            findings.push(
                Finding::error(
                    format!(
                        "agents: expected a map of agent names to definitions, found {}",
                        json_type_name(value)
                    ),
                    &[],
                )
                .at_line(lines.line(&[Key("agents")])),
            );
            return agents;
        };
        for (name, definition) in map {
            let line = lines.line(&[Key("agents"), Key(name)]);
            let before = findings.len();
            let field_line = |key: &str| lines.line(&[Key("agents"), Key(name), Key(key)]);
            let fields = definition_fields(
                &format!("agents.{name}"),
                name,
                definition,
                &field_line,
                findings,
            );
            for finding in &mut findings[before..] {
                finding.line = finding.line.or(line);
            }
            agents
                .defined
                .insert(name.clone(), fields.unwrap_or_default());
        }
        agents
    }

    /// Lays each `agent` node's named definition under the node's own
    /// fields. `files` reads `agents/NAME.md` beside the graph.
    pub(crate) fn apply(
        &mut self,
        entries: &mut [(String, Value)],
        files: SourceFiles<'_>,
        findings: &mut Vec<Finding>,
    ) {
        for (id, node) in entries.iter_mut() {
            let Some(fields) = node.as_object_mut() else {
                continue;
            };
            if fields.get("kind").and_then(Value::as_str) != Some("agent") {
                // Another kind's `agent:` is reported with its fields.
                continue;
            }
            let name = match fields.remove("agent") {
                None => continue,
                Some(Value::String(name)) => name,
                Some(other) => {
                    findings.push(Finding::error(
                        format!(
                            "node '{id}': agent must be the name of a defined agent, found {}",
                            json_type_name(&other)
                        ),
                        &[id],
                    ));
                    continue;
                }
            };
            let Some(definition) = self.definition(&name, files, findings) else {
                let known: Vec<&str> = self.defined.keys().map(String::as_str).collect();
                let hint = did_you_mean(&name, &known)
                    .map(|k| format!(" (did you mean '{k}'?)"))
                    .unwrap_or_default();
                findings.push(Finding::error(
                    format!(
                        "node '{id}': unknown agent '{name}'{hint}; define it under `agents:` or in agents/{name}.md beside the graph"
                    ),
                    &[id],
                ));
                continue;
            };
            for (key, value) in definition {
                fields.entry(key).or_insert(value);
            }
        }
    }

    /// `name`'s definition: an `agents:` entry, else `agents/NAME.md`.
    fn definition(
        &mut self,
        name: &str,
        files: SourceFiles<'_>,
        findings: &mut Vec<Finding>,
    ) -> Option<Map<String, Value>> {
        if let Some(defined) = self.defined.get(name) {
            return Some(defined.clone());
        }
        if let Some(read) = self.from_files.get(name) {
            return read.clone();
        }
        // A name that is no plain file name never reads a file.
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !name.starts_with('.');
        let path = format!("agents/{name}.md");
        let read = plain.then(|| files(&path)).flatten().map(|text| {
            self.files.push(path.clone());
            agent_file(&path, name, &text, findings).unwrap_or_default()
        });
        self.from_files.insert(name.to_owned(), read.clone());
        read
    }
}

/// A definition's fields, checked: only [`FIELDS`] (and
/// [`DOCUMENTATION`], dropped after `name` is checked). `line_of` finds a
/// field's line, where there is one to find.
fn definition_fields(
    at: &str,
    name: &str,
    definition: &Value,
    line_of: &dyn Fn(&str) -> Option<u32>,
    findings: &mut Vec<Finding>,
) -> Option<Map<String, Value>> {
    let Some(map) = definition.as_object() else {
        findings.push(Finding::error(
            format!(
                "{at}: expected a map of agent fields ({}), found {}",
                FIELDS.join(", "),
                json_type_name(definition)
            ),
            &[],
        ));
        return None;
    };
    let mut fields = Map::new();
    for (key, value) in map {
        if FIELDS.contains(&key.as_str()) {
            fields.insert(key.clone(), value.clone());
        } else if key == "name" {
            if value.as_str() != Some(name) {
                findings.push(
                    Finding::error(
                        format!("{at}: name is {value}, but the agent is '{name}'"),
                        &[],
                    )
                    .at_line(line_of(key)),
                );
            }
        } else if !DOCUMENTATION.contains(&key.as_str()) {
            let hint = did_you_mean(key, &FIELDS)
                .map(|k| format!(" (did you mean '{k}'?)"))
                .unwrap_or_default();
            findings.push(
                Finding::error(
                    format!(
                        "{at}: unknown field '{key}'{hint} (an agent's fields: {}, description)",
                        FIELDS.join(", ")
                    ),
                    &[],
                )
                .at_line(line_of(key)),
            );
        }
    }
    Some(fields)
}

/// `agents/NAME.md`: YAML front matter between `---` lines (optional), then
/// the instructions.
fn agent_file(
    path: &str,
    name: &str,
    text: &str,
    findings: &mut Vec<Finding>,
) -> Option<Map<String, Value>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = match front_matter(text) {
        Some(split) => split,
        None if text.trim_start().starts_with("---") => {
            findings.push(Finding::error(
                format!("{path}: its front matter has no closing `---` line"),
                &[],
            ));
            return None;
        }
        None => ("", text),
    };
    let mut fields = if front.trim().is_empty() {
        Map::new()
    } else {
        let value = match parse_text(front, Format::Yaml) {
            Ok(value) => value,
            Err(finding) => {
                findings.push(Finding::error(
                    format!("{path}: front matter: {}", finding.message),
                    &[],
                ));
                return None;
            }
        };
        definition_fields(path, name, &value, &|_| None, findings)?
    };
    let body = body.trim();
    if fields.contains_key("instructions") {
        if !body.is_empty() {
            findings.push(Finding::error(
                format!("{path}: instructions are given twice, in the front matter and as the body; keep one"),
                &[],
            ));
        }
    } else if !body.is_empty() {
        fields.insert("instructions".into(), Value::from(body));
    }
    Some(fields)
}

/// `(front matter, body)` when `text` opens with a `---` line and a later
/// `---` line closes it.
fn front_matter(text: &str) -> Option<(&str, &str)> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..at], &rest[at + line.len()..]));
        }
        at += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentConfig, Graph, NodeKind, parse_graph_with};

    fn load(yaml: &str, files: &[(&str, &str)]) -> (Graph, Vec<String>) {
        let read = |path: &str| {
            files
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, text)| (*text).to_owned())
        };
        let (graph, findings) = parse_graph_with(yaml, Format::Yaml, "g", &read);
        (graph, findings.iter().map(ToString::to_string).collect())
    }

    fn agent<'g>(graph: &'g Graph, id: &str) -> &'g AgentConfig {
        match &graph.node(graph.node_index(id).unwrap()).kind {
            NodeKind::Agent(config) => config,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_defines_an_agent_and_the_node_overrides_it() {
        let yaml =
            "nodes:\n  a: { kind: agent, agent: critic, prompt: Go, model: big, start: true }\n";
        let file = "---\nmodel: small\ntools: [search]\nmax_turns: 2\n---\nBe fair.\n";
        let (graph, findings) = load(yaml, &[("agents/critic.md", file)]);
        assert!(findings.is_empty(), "{findings:?}");
        let config = agent(&graph, "a");
        assert_eq!(config.instructions.as_ref().unwrap().source(), "Be fair.");
        assert_eq!(
            config.model.as_deref(),
            Some("big"),
            "the node's own field wins"
        );
        assert_eq!(config.tools, ["search"]);
        assert_eq!(config.max_turns, Some(2));
        assert_eq!(graph.agent_files, ["agents/critic.md"]);
        // Without front matter the whole file is the instructions.
        let (graph, findings) = load(yaml, &[("agents/critic.md", "Just be fair.")]);
        assert!(findings.is_empty(), "{findings:?}");
        let instructions = agent(&graph, "a")
            .instructions
            .as_ref()
            .unwrap()
            .source()
            .to_owned();
        assert_eq!(instructions, "Just be fair.");
    }

    #[test]
    fn an_agents_entry_wins_over_a_file_and_bad_files_are_named() {
        let yaml = "agents:\n  critic: { instructions: Inline. }\nnodes:\n  a: { kind: agent, agent: critic, prompt: Go, start: true }\n";
        let (graph, findings) = load(yaml, &[("agents/critic.md", "From the file.")]);
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(
            agent(&graph, "a").instructions.as_ref().unwrap().source(),
            "Inline."
        );
        assert!(graph.agent_files.is_empty(), "the file was not read");
        let yaml = "nodes:\n  a: { kind: agent, agent: critic, prompt: Go, start: true }\n";
        for (file, want) in [
            (
                "---\ninstructions: A\n---\nB\n",
                "agents/critic.md: instructions are given twice",
            ),
            (
                "---\nname: judge\n---\nB\n",
                "agents/critic.md: name is \"judge\", but the agent is 'critic'",
            ),
            (
                "---\nmodle: m\n---\nB\n",
                "agents/critic.md: unknown field 'modle' (did you mean 'model'?)",
            ),
            (
                "---\nmodel: m\nB\n",
                "agents/critic.md: its front matter has no closing `---` line",
            ),
            ("---\nmodel: [\n---\nB\n", "agents/critic.md: front matter:"),
            ("---\nmax_turns: many\n---\nB\n", "node 'a'"),
        ] {
            let (_, findings) = load(yaml, &[("agents/critic.md", file)]);
            assert!(
                findings.iter().any(|f| f.contains(want)),
                "{want}: {findings:?}"
            );
        }
        // A name that is not a plain file name reads no file.
        let yaml = "nodes:\n  a: { kind: agent, agent: ../secret, prompt: Go, start: true }\n";
        let (_, findings) = load(yaml, &[("agents/../secret.md", "x")]);
        assert!(
            findings
                .iter()
                .any(|f| f.contains("unknown agent '../secret'")),
            "{findings:?}"
        );
    }

    #[test]
    fn front_matter_is_split_from_the_body() {
        assert_eq!(
            front_matter("---\nmodel: m\n---\nBe brief.\n"),
            Some(("model: m\n", "Be brief.\n"))
        );
        assert_eq!(front_matter("---\n---\n"), Some(("", "")));
        assert_eq!(front_matter("Just instructions."), None);
        assert_eq!(front_matter("---\nmodel: m\n"), None);
    }
}
