//! Python code a graph names (SPEC 4.3, seed 002's "Python in a Graph").
//!
//! A graph is data and cannot hold a function, so it names one: a bare
//! name defined in the `functions:` sidecar, an import path
//! `module.sub:function` (the file `module/sub.py` beside the graph, else
//! an installed package), or a `function` node's own file `nodes/<id>.py`.
//! Telling a name from a sentence is a lookup, so the loader reads the
//! Python files the graph names: each top-level `def` (with its
//! parameters, for the "parameter that receives nothing" warning), class,
//! assignment and import. The read is textual — no interpreter runs at
//! validation — which is enough to name what a file defines; a worker's
//! Python host does the real import.

use std::collections::HashMap;

/// Code a graph names where code is allowed: a Rust worker's registered
/// function (`fn:NAME`), or a Python function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Code {
    /// A function a Rust worker registered under this name.
    Rust(String),
    /// A Python function, run by a worker's Python host.
    Python(PyFunction),
}

impl Code {
    /// The code as one string, for records and calls: a Rust function's
    /// name, or `module:function` for Python (which always holds a `:`,
    /// and a Rust name never does).
    pub fn key(&self) -> String {
        match self {
            Self::Rust(name) => name.clone(),
            Self::Python(function) => function.key(),
        }
    }

    /// The code a [`Code::key`] stands for.
    pub fn from_key(key: &str) -> Self {
        match key.rsplit_once(':') {
            Some((module, function)) => Self::Python(PyFunction {
                module: module.to_owned(),
                function: function.to_owned(),
            }),
            None => Self::Rust(key.to_owned()),
        }
    }

    /// How diagrams and messages show it: `fn:NAME`, or the Python name
    /// with where it lives.
    pub fn label(&self) -> String {
        match self {
            Self::Rust(name) => format!("fn:{name}"),
            Self::Python(function) => function.label(),
        }
    }
}

/// A Python function: its module and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyFunction {
    /// A `.py` path relative to the graph's directory, imported by path
    /// under a private module name (the sidecar, `nodes/<id>.py`), or a
    /// dotted module name imported from the graph's directory, then from
    /// installed packages.
    pub module: String,
    /// The function's name in the module.
    pub function: String,
}

impl PyFunction {
    /// `module:function`.
    pub fn key(&self) -> String {
        format!("{}:{}", self.module, self.function)
    }

    /// `function (helpers.py)` for a file, `module:function` for an import.
    pub fn label(&self) -> String {
        if self.module.ends_with(".py") {
            format!("{} ({})", self.function, self.module)
        } else {
            self.key()
        }
    }
}

/// One parameter of a Python function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyParam {
    /// Its name.
    pub name: String,
    /// It has no default: a call without it fails.
    pub required: bool,
}

/// A name a Python file defines at its top level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyDef {
    /// The name.
    pub name: String,
    /// A `def`'s parameters (not `*args`/`**kwargs`); `None` for a name
    /// whose signature the text does not show (a class, an assignment,
    /// an import).
    pub params: Option<Vec<PyParam>>,
    /// The `def` takes `**kwargs`.
    pub var_keyword: bool,
}

/// What a Python file defines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PyModule {
    /// Top-level names, in file order.
    pub defs: Vec<PyDef>,
}

impl PyModule {
    /// Reads a file's text.
    pub fn scan(text: &str) -> Self {
        Self { defs: scan(text) }
    }

    /// The definition of `name`.
    pub fn get(&self, name: &str) -> Option<&PyDef> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// Every name, for "did you mean".
    pub fn names(&self) -> Vec<&str> {
        self.defs.iter().map(|d| d.name.as_str()).collect()
    }
}

/// Reads the files a graph names beside it, by path relative to the
/// graph's directory; `None` when there is no such file.
pub type SourceFiles<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A reader that finds no file (a graph read from text alone).
pub fn no_files(_: &str) -> Option<String> {
    None
}

/// The Python files a graph names, read once each.
#[derive(Default)]
pub(crate) struct PythonFiles {
    modules: HashMap<String, Option<PyModule>>,
}

impl PythonFiles {
    /// The module at `path`, read through `files`; `None` when absent.
    pub(crate) fn module(&mut self, files: SourceFiles<'_>, path: &str) -> Option<&PyModule> {
        self.modules
            .entry(path.to_owned())
            .or_insert_with(|| files(path).map(|text| PyModule::scan(&text)))
            .as_ref()
    }
}

/// Whether `text` reads as one Python identifier.
pub fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// `module.sub:function` split, when `text` is an import path.
pub fn import_path(text: &str) -> Option<(&str, &str)> {
    let (module, function) = text.split_once(':')?;
    (module.split('.').all(is_identifier) && is_identifier(function)).then_some((module, function))
}

/// The file an import path's module would be beside the graph.
pub fn module_files(module: &str) -> [String; 2] {
    let path = module.replace('.', "/");
    [format!("{path}.py"), format!("{path}/__init__.py")]
}

/// The top-level names of a Python text.
/// The identifier `rest` starts with, if any, as a name without a
/// signature the text shows.
fn add_opaque_name(rest: &str, add: &mut impl FnMut(PyDef)) {
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if is_identifier(&name) {
        add(opaque(name));
    }
}

fn scan(text: &str) -> Vec<PyDef> {
    let lines: Vec<&str> = text.lines().collect();
    let mut defs: Vec<PyDef> = Vec::new();
    let mut add = |def: PyDef| {
        defs.retain(|d| d.name != def.name);
        defs.push(def);
    };
    let mut in_string: Option<&str> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if let Some(quote) = in_string {
            if line.matches(quote).count() % 2 == 1 {
                in_string = None;
            }
            continue;
        }
        if let Some(quote) = ["\"\"\"", "'''"]
            .into_iter()
            .find(|q| line.matches(q).count() % 2 == 1)
        {
            in_string = Some(quote);
        }
        if line.starts_with([' ', '\t', '#', '@']) || line.trim().is_empty() {
            continue;
        }
        let head = line.strip_prefix("async ").unwrap_or(line);
        if let Some(rest) = head.strip_prefix("def ") {
            // The parameters may run over several lines.
            // A line that starts a statement of its own ends a signature
            // left open, so a syntax error (reported by the compile check)
            // does not hide the names after it or this one.
            let mut signature = without_comment(rest).to_owned();
            while !balanced(&signature)
                && i < lines.len()
                && !lines[i].starts_with(|c: char| c.is_alphabetic() || c == '@')
            {
                signature.push(' ');
                signature.push_str(without_comment(lines[i]));
                i += 1;
            }
            match parse_def(&signature) {
                Some(def) => add(def),
                None => add_opaque_name(rest, &mut add),
            }
        } else if let Some(rest) = head.strip_prefix("class ") {
            add_opaque_name(rest, &mut add);
        } else if line.starts_with("from ") || line.starts_with("import ") {
            let mut statement = line.to_owned();
            while statement.contains('(') && !statement.contains(')') && i < lines.len() {
                statement.push(' ');
                statement.push_str(lines[i]);
                i += 1;
            }
            for name in imported_names(&statement) {
                add(opaque(name));
            }
        } else if let Some(name) = assigned_name(line) {
            add(opaque(name));
        }
    }
    defs
}

fn opaque(name: String) -> PyDef {
    PyDef {
        name,
        params: None,
        var_keyword: true,
    }
}

/// A line without its `#` comment (a `#` inside a string stays).
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => return &line[..at],
            _ => {}
        }
    }
    line
}

/// Whether the brackets opened in `text` are all closed.
fn balanced(text: &str) -> bool {
    let mut depth = 0i32;
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    depth <= 0 && text.contains(')')
}

/// `name(params) -> ret:` into a definition.
fn parse_def(signature: &str) -> Option<PyDef> {
    let open = signature.find('(')?;
    let name = signature[..open].trim().to_owned();
    if !is_identifier(&name) {
        return None;
    }
    let mut depth = 0i32;
    let mut close = None;
    for (at, c) in signature.char_indices().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(at);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &signature[open + 1..close?];
    let mut params = Vec::new();
    let mut var_keyword = false;
    for part in split_top_level(inner) {
        let part = part.trim();
        if part.is_empty() || part == "/" || part == "*" || part == "self" {
            continue;
        }
        if part.starts_with("**") {
            var_keyword = true;
            continue;
        }
        if part.starts_with('*') {
            continue;
        }
        let required = !part.contains('=');
        let name: String = part
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if is_identifier(&name) {
            params.push(PyParam { name, required });
        }
    }
    Some(PyDef {
        name,
        params: Some(params),
        var_keyword,
    })
}

/// Splits on commas outside brackets and strings.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut quote) = (0i32, 0, None);
    for (at, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The names an import statement binds.
fn imported_names(statement: &str) -> Vec<String> {
    let list = match statement.strip_prefix("from ") {
        Some(rest) => match rest.split_once(" import ") {
            Some((_, names)) => names,
            None => return Vec::new(),
        },
        None => statement.trim_start_matches("import "),
    };
    list.split('#')
        .next()
        .unwrap_or_default()
        .trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace())
        .split(',')
        .filter_map(|item| {
            let item = item.trim().trim_matches(|c| c == '(' || c == ')').trim();
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item.split('.').next().unwrap_or_default(),
            };
            is_identifier(name).then(|| name.to_owned())
        })
        .collect()
}

/// `NAME = …` or `NAME: T = …` at the top level.
fn assigned_name(line: &str) -> Option<String> {
    let name: String = line
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let rest = line[name.len()..].trim_start();
    let assigns = (rest.starts_with('=') && !rest.starts_with("=="))
        || (rest.starts_with(':') && rest.contains('='));
    (is_identifier(&name) && assigns).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_that_does_not_close_still_names_itself_and_hides_nothing() {
        let module = PyModule::scan("def go(state:\n  return {}\n\ndef after(x):\n  return x\n");
        assert_eq!(module.names(), ["go", "after"]);
        assert_eq!(module.get("go").unwrap().params, None);
        assert!(module.get("after").unwrap().params.is_some());
    }

    #[test]
    fn top_level_definitions_are_read_with_their_parameters() {
        let module = PyModule::scan(
            r##""""Helpers.

def not_this(x):
    pass
"""
import json, os.path as p
from collections import (OrderedDict,
    Counter as C)

LIMIT = 6

def tagline_is_short(it):
    def inner(y):
        return y
    return True

async def fetch(url: str, *, retries: int = 3, **kwargs) -> dict:
    pass

def drop_duplicates(
    gather,
    sep="\n",  # a comment, with a comma
    *args,
):
    pass

class Scorer:
    pass
"##,
        );
        assert_eq!(
            module.names(),
            [
                "json",
                "p",
                "OrderedDict",
                "C",
                "LIMIT",
                "tagline_is_short",
                "fetch",
                "drop_duplicates",
                "Scorer"
            ]
        );
        let fetch = module.get("fetch").unwrap();
        assert!(fetch.var_keyword);
        let params = fetch.params.as_ref().unwrap();
        assert_eq!(params.len(), 2);
        assert!(params[0].required && !params[1].required);
        let dedupe = module.get("drop_duplicates").unwrap();
        assert!(!dedupe.var_keyword);
        assert_eq!(
            dedupe.params.as_ref().unwrap(),
            &[
                PyParam {
                    name: "gather".into(),
                    required: true
                },
                PyParam {
                    name: "sep".into(),
                    required: false
                }
            ]
        );
        assert!(module.get("not_this").is_none(), "inside a docstring");
        assert!(module.get("inner").is_none(), "not top level");
    }

    #[test]
    fn keys_round_trip_and_tell_rust_from_python() {
        for code in [
            Code::Rust("score".into()),
            Code::Python(PyFunction {
                module: "helpers.py".into(),
                function: "short".into(),
            }),
            Code::Python(PyFunction {
                module: "nodes.checks".into(),
                function: "ok".into(),
            }),
        ] {
            assert_eq!(Code::from_key(&code.key()), code);
        }
        assert_eq!(import_path("nodes.checks:ok"), Some(("nodes.checks", "ok")));
        assert_eq!(import_path("a sentence: with a colon"), None);
        assert_eq!(import_path("fn:x"), Some(("fn", "x")));
    }
}
