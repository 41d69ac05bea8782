//! Python names in graphs (SPEC 4.3): the sidecar, import paths, function
//! nodes and their per-node files, and what validation says of them.

use std::collections::HashMap;

use weft_graph::{self as graph, Code, Finding, Format, NodeKind, Until};

const HELPERS: &str = "\
def tagline_is_short(it):
    return True

def drop_duplicates(gather, **kwargs):
    return gather

def pick(topic, limit=3):
    return topic

def more_items(state_items=None, **kw):
    return True

def longest(s0, branch_values):
    return max(branch_values)
";

fn parse(yaml: &str, files: &[(&str, &str)]) -> (graph::Graph, Vec<Finding>) {
    let files: HashMap<String, String> = files
        .iter()
        .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
        .collect();
    let read = move |path: &str| files.get(path).cloned();
    graph::parse_graph_with(yaml, Format::Yaml, "g", &read)
}

fn errors(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f.is_error())
        .map(|f| f.message.clone())
        .collect()
}

fn warnings(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|f| !f.is_error())
        .map(|f| f.message.clone())
        .collect()
}

const LOOP: &str = "
functions: helpers.py
nodes:
  polish:
    kind: loop
    start: true
    body: write
    until: UNTIL
    max_iterations: 4
    output_key: tagline
  write: { kind: function, callable: drop_duplicates }
";

#[test]
fn a_bare_until_is_the_sidecars_function_and_a_typo_is_refused_with_a_suggestion() {
    let (graph, findings) = parse(
        &LOOP.replace("UNTIL", "tagline_is_short"),
        &[("helpers.py", HELPERS)],
    );
    assert!(errors(&findings).is_empty(), "{findings:?}");
    let NodeKind::Loop(config) = &graph.node(0).kind else {
        panic!("a loop")
    };
    assert!(
        matches!(&config.until, Until::Hosted(Code::Python(f)) if f.module == "helpers.py" && f.function == "tagline_is_short")
    );
    assert_eq!(graph.functions.as_deref(), Some("helpers.py"));
    assert_eq!(graph.python_files, ["helpers.py"]);

    let (_, findings) = parse(
        &LOOP.replace("UNTIL", "tagline_is_shrot"),
        &[("helpers.py", HELPERS)],
    );
    let refused = errors(&findings);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("until 'tagline_is_shrot' is not a function of helpers.py")
            && refused[0].contains("(did you mean 'tagline_is_short'?)"),
        "{refused:?}"
    );

    // A sentence of several words is still a sentence.
    let (graph, findings) = parse(
        &LOOP.replace("UNTIL", "the tagline is short"),
        &[("helpers.py", HELPERS)],
    );
    assert!(errors(&findings).is_empty(), "{findings:?}");
    let NodeKind::Loop(config) = &graph.node(0).kind else {
        panic!("a loop")
    };
    assert!(matches!(&config.until, Until::Sentence(_)));
}

#[test]
fn a_missing_sidecar_and_a_name_both_rust_and_python_are_errors() {
    let (_, findings) = parse(&LOOP.replace("UNTIL", "tagline_is_short"), &[]);
    assert!(
        errors(&findings)
            .iter()
            .any(|e| e.contains("functions: 'helpers.py' is not a file beside the graph")),
        "{findings:?}"
    );
    let (_, findings) = parse(
        &LOOP
            .replace("UNTIL", "tagline_is_short")
            .replace("functions: helpers.py", "functions: ../helpers.py"),
        &[("../helpers.py", HELPERS)],
    );
    assert!(
        errors(&findings).iter().any(|e| e.contains(
            "functions: '../helpers.py' must be a .py file beside the graph (a relative path inside its directory)"
        )),
        "{findings:?}"
    );
    let (_, findings) = parse(
        &LOOP.replace("UNTIL", "fn:tagline_is_short"),
        &[("helpers.py", HELPERS)],
    );
    assert!(
        errors(&findings).iter().any(|e| e.contains(
            "'tagline_is_short' is both fn:tagline_is_short (a Rust worker's function) and a function of helpers.py"
        )),
        "{findings:?}"
    );
}

#[test]
fn import_paths_resolve_in_the_bundle_then_installed_packages() {
    let yaml = "
nodes:
  check: { kind: function, callable: nodes.checks:is_ok, start: true, next: other }
  other: { kind: function, callable: json:dumps }
";
    let (graph, findings) = parse(
        yaml,
        &[
            ("nodes/checks.py", "def is_ok(x, **kw):\n    return x\n"),
            ("nodes/__init__.py", ""),
        ],
    );
    assert!(errors(&findings).is_empty(), "{findings:?}");
    assert_eq!(graph.python_files, ["nodes/checks.py", "nodes/__init__.py"]);
    let (_, findings) = parse(
        &yaml.replace("is_ok,", "is_okay,"),
        &[("nodes/checks.py", "def is_ok(x, **kw):\n    return x\n")],
    );
    assert!(
        errors(&findings).iter().any(|e| e.contains(
            "'nodes.checks:is_okay': nodes/checks.py defines no 'is_okay' (did you mean 'is_ok'?)"
        )),
        "{findings:?}"
    );
}

#[test]
fn a_function_node_without_callable_uses_its_own_file() {
    let yaml = "nodes:\n  dedupe: { kind: function, start: true }\n";
    let (graph, findings) = parse(
        yaml,
        &[("nodes/dedupe.py", "def run(**kw):\n    return 1\n")],
    );
    assert!(errors(&findings).is_empty(), "{findings:?}");
    let NodeKind::Function(config) = &graph.node(0).kind else {
        panic!("a function node")
    };
    assert_eq!(config.callable.module, "nodes/dedupe.py");
    assert_eq!(config.callable.function, "run");
    assert_eq!(config.output_key, "dedupe");
    let (_, findings) = parse(yaml, &[]);
    assert!(
        errors(&findings)[0].contains("or put a file nodes/dedupe.py defining run"),
        "{findings:?}"
    );
    let escaping = "nodes:\n  ../up: { kind: function, start: true }\n";
    let (_, findings) = parse(
        escaping,
        &[("nodes/../up.py", "def run(**kw):\n    return 1\n")],
    );
    assert!(
        errors(&findings)
            .iter()
            .any(|e| e.contains("'../up' is not a file name")),
        "{findings:?}"
    );
}

#[test]
fn conditions_routers_and_reducers_name_python_and_typos_are_refused() {
    let yaml = "
functions: helpers.py
state:
  best: { type: number, reducer: longest }
nodes:
  a:
    kind: function
    callable: pick
    start: true
    routes: { router: pick, map: { x: b } }
  b: { kind: function, callable: drop_duplicates }
edges:
  - { from: b, to: a, when: more_items, loop: true }
";
    let (graph, findings) = parse(yaml, &[("helpers.py", HELPERS)]);
    assert!(errors(&findings).is_empty(), "{findings:?}");
    let python: Vec<String> = graph
        .python_functions()
        .into_iter()
        .map(|(f, used_by)| format!("{} {used_by}", f.function))
        .collect();
    assert_eq!(
        python,
        [
            "longest reducer of field 'best'",
            "pick function node 'a'",
            "drop_duplicates function node 'b'",
            "more_items condition on an edge from 'b'"
        ]
    );
    let (_, findings) = parse(
        &yaml.replace("when: more_items", "when: more_item"),
        &[("helpers.py", HELPERS)],
    );
    assert!(
        errors(&findings).iter().any(|e| e.contains(
            "`when` names no `conditions:` entry or function of helpers.py is named 'more_item' (did you mean 'more_items'?)"
        )),
        "{findings:?}"
    );
    let (_, findings) = parse(
        &yaml.replace("reducer: longest", "reducer: longer"),
        &[("helpers.py", HELPERS)],
    );
    assert!(
        errors(&findings)
            .iter()
            .any(|e| e.contains("unknown reducer 'longer' (did you mean 'longest'?)")),
        "{findings:?}"
    );
}

#[test]
fn a_parameter_that_receives_nothing_is_warned_about() {
    let yaml = "
functions: helpers.py
state:
  subject: { type: string }
nodes:
  gather: { kind: function, callable: drop_duplicates, start: true, next: choose }
  choose: { kind: function, callable: pick, tool_args: { limit: 2 } }
";
    let (_, findings) = parse(yaml, &[("helpers.py", HELPERS)]);
    let warnings = warnings(&findings);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "function node 'choose': parameter 'topic' of pick (helpers.py) names no state field, node, tool_args key or scope variable, so it receives nothing (the call fails without it)"
        ),
        "{warnings:?}"
    );
    let (_, findings) = parse(
        &yaml.replace("subject:", "topic:"),
        &[("helpers.py", HELPERS)],
    );
    assert!(findings.is_empty(), "{findings:?}");
}

#[test]
fn the_diagram_says_which_names_are_python() {
    let (graph, findings) = parse(
        &LOOP.replace("UNTIL", "tagline_is_short"),
        &[("helpers.py", HELPERS)],
    );
    assert!(errors(&findings).is_empty(), "{findings:?}");
    let picture = graph::diagram::diagram(&graph);
    assert!(
        picture.contains("until tagline_is_short (helpers.py)")
            && picture
                .contains("ƒ Python tagline_is_short (helpers.py): until of loop node 'polish'"),
        "{picture}"
    );
}
