//! Resolving the names a graph gives where code is allowed (SPEC 4.3):
//! `fn:NAME` is a Rust worker's function; `module.sub:function` is an
//! import path (checked against `module/sub.py` when the graph has that
//! file beside it, else left to the worker's installed packages); a bare
//! name is looked up in the `functions:` sidecar. A name is never both a
//! Rust worker's and the sidecar's.

use super::document::did_you_mean;
use super::python::{
    Code, PyDef, PyFunction, PyModule, PythonFiles, SourceFiles, import_path, is_identifier,
    module_files,
};

/// The Python files of one graph and the names they define.
pub(crate) struct PythonNames<'a> {
    files: SourceFiles<'a>,
    /// `functions:` as written, once read.
    sidecar: Option<String>,
    read: PythonFiles,
    /// Files beside the graph that its Python names live in.
    pub(crate) bundled: Vec<String>,
}

/// Why a name where code is allowed does not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    /// `fn:NAME` names a function of the sidecar too.
    #[error(
        "'{name}' is both fn:{name} (a Rust worker's function) and a function of {sidecar}; a name may not mean both: rename one"
    )]
    Ambiguous { name: String, sidecar: String },
    /// `module:function` names a function its bundled module lacks.
    #[error("'{module}:{function}': {path} defines no '{function}'{hint}")]
    Undefined {
        module: String,
        function: String,
        path: String,
        hint: String,
    },
    /// A `function` node without `callable:` whose id is no file name.
    #[error(
        "function node '{0}': give `callable: NAME`; without it the node runs nodes/<id>.py, and '{0}' is not a file name"
    )]
    NotAFileName(String),
    /// A `function` node without `callable:` or its `nodes/<id>.py`.
    #[error(
        "function node '{id}': give `callable: NAME` (a function of the `functions:` sidecar, or module:function), or put a file {path} defining run beside the graph"
    )]
    NoNodeFile { id: String, path: String },
    /// `nodes/<id>.py` without `run`.
    #[error("function node '{id}': {path} defines no `run`")]
    NoRun { id: String, path: String },
}

/// What a name where code is allowed turned out to be.
pub(crate) enum Resolved {
    /// Code to call.
    Code(Code),
    /// Not a name of code (a sentence, an expression, or a bare name no
    /// file defines).
    NotCode,
}

impl<'a> PythonNames<'a> {
    /// Reads `functions:` (a `.py` file beside the graph), if declared.
    pub(crate) fn new(files: SourceFiles<'a>, sidecar: Option<&str>) -> (Self, Option<String>) {
        let mut names = Self {
            files,
            sidecar: None,
            read: PythonFiles::default(),
            bundled: Vec::new(),
        };
        let Some(path) = sidecar else {
            return (names, None);
        };
        let inside = weft_bundle::stays_inside(path);
        let problem = if !path.ends_with(".py") || !inside {
            Some(format!(
                "functions: '{path}' must be a .py file beside the graph (a relative path inside its directory)"
            ))
        } else if names.read.module(files, path).is_none() {
            Some(format!(
                "functions: '{path}' is not a file beside the graph (it is resolved relative to the graph file)"
            ))
        } else {
            names.bundled.push(path.to_owned());
            None
        };
        names.sidecar = Some(path.to_owned());
        (names, problem)
    }

    /// The sidecar's path, when the graph declares one.
    pub(crate) fn sidecar(&self) -> Option<&str> {
        self.sidecar.as_deref()
    }

    /// The sidecar's top-level names.
    pub(crate) fn sidecar_names(&mut self) -> Vec<String> {
        let Some(path) = self.sidecar.clone() else {
            return Vec::new();
        };
        self.read
            .module(self.files, &path)
            .map(|m| m.names().into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    fn sidecar_defines(&mut self, name: &str) -> bool {
        let Some(path) = self.sidecar.clone() else {
            return false;
        };
        self.read
            .module(self.files, &path)
            .is_some_and(|m| m.get(name).is_some())
    }

    /// Resolves `text` where code is allowed; an error names what is
    /// wrong (a name both Rust's and the sidecar's, a function its
    /// bundled module lacks).
    pub(crate) fn resolve(&mut self, text: &str) -> Result<Resolved, NameError> {
        let text = text.trim();
        if let Some(name) = text.strip_prefix("fn:") {
            let name = name.trim();
            if self.sidecar_defines(name) {
                return Err(NameError::Ambiguous {
                    name: name.to_owned(),
                    sidecar: self.sidecar.clone().unwrap_or_default(),
                });
            }
            return Ok(Resolved::Code(Code::Rust(name.to_owned())));
        }
        if let Some((module, function)) = import_path(text) {
            return self.import(module, function).map(Resolved::Code);
        }
        if is_identifier(text)
            && self.sidecar_defines(text)
            && let Some(path) = self.sidecar.clone()
        {
            return Ok(Resolved::Code(Code::Python(PyFunction {
                module: path,
                function: text.to_owned(),
            })));
        }
        Ok(Resolved::NotCode)
    }

    /// `module:function`: checked in `module/sub.py` when the graph has
    /// it, else an installed package's (checked by the worker).
    fn import(&mut self, module: &str, function: &str) -> Result<Code, NameError> {
        let found = module_files(module)
            .into_iter()
            .find(|path| self.read.module(self.files, path).is_some());
        if let Some(path) = found {
            let module_text = self.read.module(self.files, &path);
            if module_text.is_none_or(|m| m.get(function).is_none()) {
                let known = module_text.map(PyModule::names).unwrap_or_default();
                let hint = did_you_mean(function, &known)
                    .map(|k| format!(" (did you mean '{k}'?)"))
                    .unwrap_or_default();
                return Err(NameError::Undefined {
                    module: module.to_owned(),
                    function: function.to_owned(),
                    path,
                    hint,
                });
            }
            self.bundle(&path);
            // Its package's __init__.py files go along, for the import.
            let parts: Vec<&str> = module.split('.').collect();
            for depth in 1..parts.len() {
                let init = format!("{}/__init__.py", parts[..depth].join("/"));
                if self.read.module(self.files, &init).is_some() {
                    self.bundle(&init);
                }
            }
        }
        Ok(Code::Python(PyFunction {
            module: module.to_owned(),
            function: function.to_owned(),
        }))
    }

    /// A `function` node's own file, `nodes/<id>.py`, defining `run`.
    pub(crate) fn node_file(&mut self, id: &str) -> Result<PyFunction, NameError> {
        if id.contains(['/', '\\']) || id.starts_with('.') {
            return Err(NameError::NotAFileName(id.to_owned()));
        }
        let path = format!("nodes/{id}.py");
        let Some(module) = self.read.module(self.files, &path) else {
            return Err(NameError::NoNodeFile {
                id: id.to_owned(),
                path,
            });
        };
        if module.get("run").is_none() {
            return Err(NameError::NoRun {
                id: id.to_owned(),
                path,
            });
        }
        self.bundle(&path);
        Ok(PyFunction {
            module: path,
            function: "run".into(),
        })
    }

    /// What the text shows of a function's definition, when its file is
    /// beside the graph.
    pub(crate) fn definition(&mut self, function: &PyFunction) -> Option<PyDef> {
        let path = if function.module.ends_with(".py") {
            function.module.clone()
        } else {
            module_files(&function.module)
                .into_iter()
                .find(|path| self.read.module(self.files, path).is_some())?
        };
        self.read
            .module(self.files, &path)?
            .get(&function.function)
            .cloned()
    }

    /// "Did you mean" among `extra` names and the sidecar's.
    pub(crate) fn hint(&mut self, name: &str, extra: &[&str]) -> String {
        let sidecar = self.sidecar_names();
        let mut known: Vec<&str> = extra.to_vec();
        known.extend(sidecar.iter().map(String::as_str));
        did_you_mean(name, &known)
            .map(|k| format!(" (did you mean '{k}'?)"))
            .unwrap_or_default()
    }

    fn bundle(&mut self, path: &str) {
        if !self.bundled.iter().any(|p| p == path) {
            self.bundled.push(path.to_owned());
        }
    }
}
