//! `deploy/` works as written (issue #12): every configuration file passes
//! its binary's `--check-config`, and every flag the compose file, the
//! Kubernetes manifests, the systemd units and the Dockerfile give the
//! `coordinator` and `worker` binaries exists.

use std::path::{Path, PathBuf};
use std::process::Command;

use weft_tests::{binary, repo};

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Which of our binaries a configuration file or command is for.
fn binary_for(name: &str) -> &'static str {
    if name.starts_with("coordinator") {
        "coordinator"
    } else {
        "worker"
    }
}

/// The TOML files a Kubernetes manifest's ConfigMap holds (`name.toml: |`
/// and the block indented under it), written into `into`.
fn config_maps(manifest: &Path, into: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut written = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(name) = line.trim().strip_suffix(": |") else {
            continue;
        };
        if !name.ends_with(".toml") {
            continue;
        }
        let indent = line.len() - line.trim_start().len() + 2;
        let mut body = String::new();
        while let Some(next) = lines.peek() {
            if !next.trim().is_empty() && next.len() - next.trim_start().len() < indent {
                break;
            }
            body.push_str(next.get(indent..).unwrap_or_default());
            body.push('\n');
            lines.next();
        }
        let path = into.join(name);
        std::fs::write(&path, body).unwrap();
        written.push(path);
    }
    written
}

#[test]
fn every_deploy_configuration_passes_check_config() {
    let mut configs: Vec<PathBuf> = files(&repo().join("deploy/config"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    assert!(configs.len() >= 3, "{configs:?}");
    // The Kubernetes ConfigMap's coordinator.toml and worker.toml too.
    let kubernetes = std::env::temp_dir().join(format!("weft-deploy-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&kubernetes).unwrap();
    let mapped = config_maps(
        &repo().join("deploy/kubernetes/coordinator.yaml"),
        &kubernetes,
    );
    assert_eq!(mapped.len(), 2, "the ConfigMap's files: {mapped:?}");
    configs.extend(mapped);
    for config in configs {
        let name = config.file_name().unwrap().to_string_lossy().to_string();
        let mut check = Command::new(binary(binary_for(&name)));
        if config.starts_with(&kubernetes) {
            // The StatefulSet gives each pod its headless name.
            check.env(
                "WEFT_ADVERTISE",
                "https://weft-coordinator-0.weft-coordinator-pods:7700",
            );
        }
        let out = check
            .arg("--check-config")
            .arg("--config")
            .arg(&config)
            .env("OPENAI_API_KEY", "sk-check")
            // The coordinators' [[tokens]] name these (a secrets file
            // would hold them in a real deployment).
            .env("WEFT_ADMIN_TOKEN", "admin-check-5f1e2d3c4b5a6978")
            .env("WEFT_OPERATOR_TOKEN", "operator-check-8a7b6c5d4e3f2a1b")
            .env("WEFT_WORKER_TOKEN", "worker-check-1a2b3c4d5e6f7a8b")
            .env("WEFT_METRICS_TOKEN", "metrics-check-9c8b7a6f5e4d3c2b")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}{}",
            shown,
            String::from_utf8_lossy(&out.stderr)
        );
        // No endpoint by default: nothing points at a collector that may
        // not exist; the file names the service its spans would carry.
        assert!(
            shown.contains("weft-coordinator") || shown.contains("weft-worker"),
            "{name} shows its telemetry: {shown}"
        );
        for secret in ["sk-check", "admin-check", "operator-check", "worker-check"] {
            assert!(!shown.contains(secret), "{name}: a secret was printed");
        }
        // The StatefulSet's three coordinators split the runs between them.
        if config.starts_with(&kubernetes) && name.starts_with("coordinator") {
            assert!(shown.contains("partitions: 12"), "{name}: {shown}");
        }
    }
    std::fs::remove_dir_all(kubernetes).ok();
}

/// The flags of each command line that runs one of our binaries, as
/// `(binary, flags)`: arrays `["coordinator", …]` and `["worker", …]`, and
/// `ExecStart=/usr/local/bin/…` lines.
fn commands(text: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut found = Vec::new();
    for program in ["coordinator", "worker"] {
        for (at, _) in text.match_indices(&format!("[\"{program}\"")) {
            let end = text[at..].find(']').map_or(text.len(), |e| at + e);
            found.push((binary_for(program), flags(&text[at..end])));
        }
        let exec = format!("ExecStart=/usr/local/bin/{program} ");
        for line in text.lines().filter(|l| l.starts_with(&exec)) {
            found.push((binary_for(program), flags(line)));
        }
    }
    found
}

fn flags(command: &str) -> Vec<String> {
    command
        .split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '=')
        .filter(|word| word.starts_with("--"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_flag_the_deploy_files_use_exists() {
    let help = |program: &str| {
        let out = Command::new(binary(program))
            .arg("--help")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let (coordinator, worker) = (help("coordinator"), help("worker"));
    let mut checked = 0;
    for file in files(&repo().join("deploy")) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (program, flags) in commands(&text) {
            let known = if program == "coordinator" {
                &coordinator
            } else {
                &worker
            };
            for flag in flags {
                assert!(
                    known.contains(&format!("{flag} ")) || known.contains(&format!("{flag}\n")),
                    "{}: `{program} {flag}` is not a flag of {program}",
                    file.display()
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 15,
        "only {checked} flags found: the scan lost its way"
    );
}
