//! Bundling a graph file with the files it names, so workers need no
//! shared file system: script paths (`script:` and argv elements that name
//! files beside the graph) and Python files (the `functions:` sidecar,
//! import-path modules found beside the graph, `nodes/<id>.py`) and the
//! files knowledge bases read (their `sources` globs) travel with the run.

use std::path::{Path, PathBuf};

use weft_graph::{self as graph, GraphError, NodeKind};

/// A graph and its files, ready to submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphBundle {
    /// Path of the graph file among `files`.
    pub graph_path: String,
    /// `(relative path, content, unix mode)`.
    pub files: Vec<(String, Vec<u8>, u32)>,
}

/// Why a graph could not be bundled.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The graph is invalid or unreadable.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A graph it embeds (a `subgraph` node's `graph:`) is invalid or
    /// unreadable.
    #[error("embedded graph '{path}': {source}")]
    Embedded {
        /// The embedded graph, relative to the top graph's directory.
        path: String,
        /// What is wrong with it.
        source: GraphError,
    },
    /// A file it names could not be read.
    #[error("cannot read '{path}': {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file it names resolves (through a symbolic link) outside the
    /// graph's directory.
    #[error(
        "'{path}' resolves to {resolved}, outside the graph's directory; it is not sent to the cluster (pass --allow-outside-links to send it anyway)"
    )]
    Outside {
        /// The path as the graph names it.
        path: String,
        /// Where it leads.
        resolved: String,
    },
}

/// The most permission bits a bundled file keeps: no setuid, setgid or
/// sticky bit, nothing writable by others.
pub const MODE_MASK: u32 = 0o755;

/// How a graph's files are gathered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BundleOptions {
    /// Send files whose symbolic links lead outside the graph's directory.
    pub allow_outside_links: bool,
}

impl GraphBundle {
    /// Reads a graph file, validates it, and gathers the files it names.
    pub fn from_file(path: &Path) -> Result<Self, BundleError> {
        Self::from_file_with(path, BundleOptions::default())
    }

    /// As [`GraphBundle::from_file`], with options. A named file whose real
    /// path is outside the graph's directory is refused unless allowed, so
    /// a link such as `scripts/x.py -> ~/.aws/credentials` never uploads
    /// what it points at; modes are masked to [`MODE_MASK`].
    pub fn from_file_with(path: &Path, options: BundleOptions) -> Result<Self, BundleError> {
        let (graph, _) = graph::load_file(path)?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let graph_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("graph.yaml")
            .to_owned();
        let mut files = vec![(graph_name.clone(), read(path)?, 0o644)];
        let named = named_files(&dir, &graph_name, graph)?;
        let real_dir = std::fs::canonicalize(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &dir
        })
        .map_err(|source| BundleError::Read {
            path: dir.display().to_string(),
            source,
        })?;
        for relative in named {
            let full: PathBuf = dir.join(&relative);
            let real = std::fs::canonicalize(&full).map_err(|source| BundleError::Read {
                path: full.display().to_string(),
                source,
            })?;
            if !real.starts_with(&real_dir) && !options.allow_outside_links {
                return Err(BundleError::Outside {
                    path: relative,
                    resolved: real.display().to_string(),
                });
            }
            let mode = mode_of(&full);
            files.push((relative, read(&full)?, mode));
        }
        Ok(Self {
            graph_path: graph_name,
            files,
        })
    }

    /// A bundle of one in-memory graph (YAML or JSON by `graph_path`).
    pub fn from_text(graph_path: &str, text: &str) -> Self {
        Self {
            graph_path: graph_path.to_owned(),
            files: vec![(graph_path.to_owned(), text.as_bytes().to_vec(), 0o644)],
        }
    }

    /// Why the bundle cannot be sent, if its files hold more than `max`
    /// bytes (what one request may carry): its size and its largest files,
    /// so the one to leave out is named.
    pub fn too_large(&self, max: usize) -> Option<String> {
        (self.bytes() > max).then(|| {
            format!(
                "{}, more than the {} one submission can carry (a coordinator takes at most its max_bundle_bytes, 64 MiB unless configured)",
                self.size_and_largest(),
                megabytes(max)
            )
        })
    }

    /// The bytes of its files.
    pub fn bytes(&self) -> usize {
        self.files.iter().map(|(_, content, _)| content.len()).sum()
    }

    /// `the graph's bundle holds N MiB; its largest files: …`.
    pub fn size_and_largest(&self) -> String {
        let mut sizes: Vec<(&str, usize)> = self
            .files
            .iter()
            .map(|(path, content, _)| (path.as_str(), content.len()))
            .collect();
        sizes.sort_by_key(|(_, size)| std::cmp::Reverse(*size));
        let largest: Vec<String> = sizes
            .iter()
            .take(3)
            .map(|(path, size)| format!("{path} ({})", megabytes(*size)))
            .collect();
        format!(
            "the graph's bundle holds {}; its largest files: {}",
            megabytes(self.bytes()),
            largest.join(", ")
        )
    }

    /// Adds a file the graph names (a script), at `path` relative to the
    /// graph, with permission bits `mode` (masked with [`MODE_MASK`]).
    pub fn with_file(mut self, path: &str, content: &[u8], mode: u32) -> Self {
        self.files
            .push((path.to_owned(), content.to_vec(), mode & MODE_MASK));
        self
    }
}

/// The files the graph names, and the graphs its subgraph nodes embed
/// (named relative to the graph that embeds them) with the files they
/// name, transitively; paths relative to `dir` (the top graph's
/// directory, the bundle's root), each once.
/// Adds the files of `dir` an argv names (relative paths inside it).
fn name_argv_files(dir: &Path, argv: &[String], named: &mut Vec<String>) {
    for arg in argv.iter().filter(|arg| weft_bundle::stays_inside(arg)) {
        let Some(relative) = weft_bundle::join("", arg) else {
            continue;
        };
        if dir.join(&relative).is_file() && !named.contains(&relative) {
            named.push(relative);
        }
    }
}

fn named_files(dir: &Path, top: &str, graph: graph::Graph) -> Result<Vec<String>, BundleError> {
    let mut named: Vec<String> = Vec::new();
    let mut graphs = vec![(top.to_owned(), graph)];
    while let Some((at, graph)) = graphs.pop() {
        let base = weft_bundle::dir_of(&at);
        // The Python files its names live in, beside it.
        for file in &graph.python_files {
            if let Some(relative) = weft_bundle::join(base, file)
                && !named.contains(&relative)
            {
                named.push(relative);
            }
        }
        // Named agents' files, beside it.
        for file in &graph.agent_files {
            if let Some(relative) = weft_bundle::join(base, file)
                && !named.contains(&relative)
            {
                named.push(relative);
            }
        }
        // Knowledge bases' sources, beside it.
        let graph_dir = dir.join(base);
        for file in graph::knowledge::knowledge_source_files(&graph, &graph_dir) {
            if let Some(relative) = weft_bundle::join(base, &file)
                && !named.contains(&relative)
            {
                named.push(relative);
            }
        }
        // Agents' script tools run from the bundle's root too.
        for tool in &graph.tools {
            if let graph::ToolRun::Script(argv) = &tool.run {
                name_argv_files(dir, argv, &mut named);
            }
        }
        for node in &graph.nodes {
            match &node.kind {
                // Scripts run from the bundle's root, whichever graph of
                // it names them.
                NodeKind::Script { argv, .. } => name_argv_files(dir, argv, &mut named),
                NodeKind::Subgraph(config) => {
                    // A graph outside the directory is left for the
                    // coordinator to refuse by name.
                    let Some(relative) = weft_bundle::join(base, &config.graph) else {
                        continue;
                    };
                    if relative == top || named.contains(&relative) {
                        continue;
                    }
                    let (child, _) = graph::load_file(&dir.join(&relative)).map_err(|source| {
                        BundleError::Embedded {
                            path: relative.clone(),
                            source,
                        }
                    })?;
                    named.push(relative.clone());
                    graphs.push((relative, child));
                }
                _ => {}
            }
        }
    }
    Ok(named)
}

/// `bytes` in MiB, one decimal.
fn megabytes(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn read(path: &Path) -> Result<Vec<u8>, BundleError> {
    std::fs::read(path).map_err(|source| BundleError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & MODE_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_the_scripts_a_graph_names() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/critique-loop.yaml");
        let bundle = GraphBundle::from_file(&examples).unwrap();
        assert_eq!(bundle.graph_path, "critique-loop.yaml");
        let paths: Vec<&str> = bundle.files.iter().map(|(p, _, _)| p.as_str()).collect();
        assert!(paths.contains(&"scripts/critique.py"), "{paths:?}");
        assert!(!paths.contains(&"python3"), "{paths:?}");
    }

    #[test]
    fn links_out_of_the_graph_directory_are_refused_and_modes_masked() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("weft-bundle-links-{}", std::process::id()));
        let dir = root.join("graph");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(root.join("credentials"), "secret").unwrap();
        std::os::unix::fs::symlink(root.join("credentials"), dir.join("scripts/x.py")).unwrap();
        std::fs::write(dir.join("scripts/ok.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            dir.join("scripts/ok.sh"),
            std::fs::Permissions::from_mode(0o4777),
        )
        .unwrap();
        let graph = dir.join("g.yaml");
        std::fs::write(
            &graph,
            "nodes:\n  a: { kind: script, run: [python3, scripts/x.py], start: true, next: b }\n  b: { kind: script, run: [scripts/ok.sh] }\n",
        )
        .unwrap();
        let error = GraphBundle::from_file(&graph).unwrap_err().to_string();
        assert!(error.starts_with("'scripts/x.py' resolves to "), "{error}");
        assert!(error.contains("--allow-outside-links"), "{error}");
        let options = BundleOptions {
            allow_outside_links: true,
        };
        let bundle = GraphBundle::from_file_with(&graph, options).unwrap();
        let ok = bundle
            .files
            .iter()
            .find(|(p, _, _)| p == "scripts/ok.sh")
            .unwrap();
        assert_eq!(ok.2, 0o755, "setuid and world-write are dropped");
        std::fs::remove_dir_all(root).ok();
    }

    #[test]
    fn a_bundle_too_large_to_send_names_its_largest_files() {
        let bundle = GraphBundle::from_text("g.yaml", "nodes: {}")
            .with_file("docs/big.md", &vec![b'a'; 3 << 20], 0o644)
            .with_file("docs/small.md", b"small", 0o644);
        assert_eq!(bundle.too_large(4 << 20), None);
        let message = bundle.too_large(2 << 20).unwrap();
        assert!(
            message.starts_with(
                "the graph's bundle holds 3.0 MiB; its largest files: docs/big.md (3.0 MiB), "
            ) && message.contains("more than the 2.0 MiB one submission can carry"),
            "{message}"
        );
    }

    #[test]
    fn paths_outside_the_graph_directory_are_not_bundled() {
        let root = std::env::temp_dir().join(format!("weft-argv-{}", std::process::id()));
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        std::fs::write(root.join("scripts/a.py"), "").unwrap();
        let argv = [
            "python3",
            "scripts/a.py",
            "../a.py",
            "/usr/bin/env",
            "./scripts/a.py",
        ]
        .map(str::to_owned);
        let mut named = Vec::new();
        name_argv_files(&root.join("scripts/.."), &argv, &mut named);
        assert_eq!(named, ["scripts/a.py"], "once, and nothing outside");
        std::fs::remove_dir_all(root).ok();
    }
}
