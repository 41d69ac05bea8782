//! `weft validate`'s compile check of the Python files a graph names (its
//! `functions:` sidecar, `nodes/<id>.py`, bundled `module:function`
//! modules): a syntax error is found here, with its file and line, rather
//! than when a worker first loads the file. It uses the `python3` on this
//! machine's `PATH`; without one it says that the files were not compiled.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::Deserialize;

/// Compiles each file (a path relative to `dir`) and reports what does
/// not, one line each; reads no module and runs nothing of them.
const CHECK: &str = r#"
import json, sys
found = []
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as source:
            compile(source.read(), path, "exec", dont_inherit=True)
    except SyntaxError as error:
        found.append({"file": path, "line": error.lineno, "message": error.msg,
                      "text": (error.text or "").strip()})
    except (OSError, ValueError) as error:
        found.append({"file": path, "line": None, "message": str(error), "text": ""})
print(json.dumps(found))
"#;

#[derive(Deserialize)]
struct SyntaxProblem {
    file: String,
    line: Option<u32>,
    message: String,
    text: String,
}

/// What the check found.
pub enum Compiled {
    /// Every file compiles (or there were none).
    Clean,
    /// These do not, one finding line each.
    Errors(Vec<String>),
    /// There is no `python3` here to compile them with.
    NoPython,
}

/// Compiles `files` (relative to `dir`).
pub fn compile(dir: &Path, files: &[String]) -> Compiled {
    if files.is_empty() {
        return Compiled::Clean;
    }
    let child = Command::new("python3")
        .args(["-I", "-"])
        .args(files)
        .current_dir(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Compiled::NoPython;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(CHECK.as_bytes());
    }
    let Ok(output) = child.wait_with_output() else {
        return Compiled::NoPython;
    };
    let Ok(problems) = serde_json::from_slice::<Vec<SyntaxProblem>>(&output.stdout) else {
        return Compiled::NoPython;
    };
    if problems.is_empty() {
        return Compiled::Clean;
    }
    Compiled::Errors(
        problems
            .into_iter()
            .map(|p| {
                let at = p.line.map(|l| format!(", line {l}")).unwrap_or_default();
                let text = if p.text.is_empty() {
                    String::new()
                } else {
                    format!(": {}", p.text)
                };
                format!(
                    "error: {}{at}: the Python file does not compile: {}{text}",
                    p.file, p.message
                )
            })
            .collect(),
    )
}
