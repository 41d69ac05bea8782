//! Script files a graph names that are not there (SPEC 6): a `script`
//! node's `run:` (or `script:`) argument that reads as a path relative to
//! the graph, which the bundle would carry if it existed. Workers share no
//! file system with the client, so a missing one fails every run, with a
//! path under the worker's scratch directory; validation says so first,
//! naming the node and the path as written.
//!
//! An argument reads as such a path when it is one word (no spaces, no
//! template or secret), not a flag or an absolute path or a URL, and
//! either has a directory part or ends in a script extension (`.py`,
//! `.sh`, …). `python3 -c "print(1)"` names no file; `scripts/x.py`,
//! `./run` and `main.py` do.

use super::finding::Finding;
use super::model::Graph;
use super::model::kinds::NodeKind;

/// Extensions that make a bare word a script file.
const SCRIPT_EXTENSIONS: [&str; 12] = [
    "py", "sh", "bash", "zsh", "js", "mjs", "cjs", "ts", "rb", "pl", "lua", "php",
];

/// The path `arg` names relative to the graph, when it reads as one.
fn relative_path(arg: &str) -> Option<&str> {
    let plain = !arg.is_empty()
        && !arg.starts_with('-')
        && !arg.starts_with('/')
        && !arg.starts_with('~')
        && !arg.contains(char::is_whitespace)
        && !arg.contains([
            '{', '}', '$', '=', '*', '?', '"', '\'', '(', ')', ';', '|', '&', '<', '>',
        ])
        && !arg.contains("://");
    if !plain {
        return None;
    }
    let path = arg.strip_prefix("./").unwrap_or(arg);
    let name = path.rsplit('/').next().unwrap_or(path);
    let extension = name.rsplit_once('.').map(|(_, e)| e);
    let scripted = extension.is_some_and(|e| SCRIPT_EXTENSIONS.contains(&e));
    let in_a_dir = arg.starts_with("./") || (path.contains('/') && !name.is_empty());
    (scripted || in_a_dir).then_some(path)
}

/// An error for each script file a node's arguments name that `exists`
/// (a path relative to the graph's directory) says is not there.
pub fn missing_script_files(graph: &Graph, exists: &dyn Fn(&str) -> bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    for node in &graph.nodes {
        let NodeKind::Script { argv, .. } = &node.kind else {
            continue;
        };
        for arg in argv {
            let Some(path) = relative_path(arg) else {
                continue;
            };
            if !exists(path) {
                findings.push(Finding::error(
                    format!(
                        "node '{}': `run` names the file '{arg}', which is not beside the graph (a script's files are bundled from the graph's directory; workers have no other copy)",
                        node.id
                    ),
                    &[&node.id],
                ).at_line(node.line));
            }
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::relative_path;

    #[test]
    fn only_words_that_read_as_relative_paths_are_files() {
        for arg in ["scripts/hello.py", "./run", "main.py", "tools/lint.sh"] {
            assert!(relative_path(arg).is_some(), "{arg}");
        }
        for arg in [
            "python3",
            "-c",
            "print(1)",
            "echo {}",
            "/usr/bin/env",
            "${TOOL}",
            "{{ path }}",
            "https://x/y.py",
            "a=b/c",
            "json",
            "1.5",
            "v1.2",
            "README",
        ] {
            assert!(relative_path(arg).is_none(), "{arg}");
        }
        assert_eq!(relative_path("./scripts/x.sh"), Some("scripts/x.sh"));
    }
}
