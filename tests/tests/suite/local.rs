//! The local cluster (SPEC 12): without `--coordinator`, runs live in the
//! Weft directory, so a run `weft run` leaves waiting is answered later by
//! `weft resume`; a second command while the first runs joins its cluster
//! instead of failing on the store's lock; `--ephemeral` keeps nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use serde_json::Value;
use weft_tests::{binary, repo};

fn home(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-home-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `weft` on the local cluster of `home`.
fn weft(home: &Path) -> Command {
    let mut command = Command::new(binary("weft"));
    command
        .current_dir(repo())
        .env("WEFT_HOME", home)
        .env_remove("WEFT_EPHEMERAL")
        .env_remove("WEFT_COORDINATOR")
        .env_remove("WEFT_TOKEN")
        .stdin(Stdio::null());
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_waiting_run_is_answered_by_a_later_command() {
    let home = home("resume");
    let run = weft(&home)
        .args([
            "run",
            "examples/review-approval.yaml",
            "--json",
            "--input",
            r#"{"title": "Weft"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
    let run_id = serde_json::from_slice::<Value>(&run.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The store is in the Weft directory, which only this user may enter.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(home.join("weft.redb").is_file());

    // Later commands find the run where it was left.
    let listed = weft(&home).args(["runs"]).output().unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains(&run_id) && text.contains("waiting"), "{text}");
    let resumed = weft(&home)
        .args(["resume", &run_id, "approve", "approve"])
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains(&format!("run {run_id} completed")),
        "{}",
        stderr(&resumed)
    );
    let status = weft(&home)
        .args(["status", &run_id, "--json"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let info: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["status"], "completed");
    assert_eq!(info["state"]["approved"], true);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_second_command_joins_the_first_ones_cluster() {
    let home = home("join");
    std::fs::create_dir_all(&home).unwrap();
    let slow = home.join("slow.yaml");
    std::fs::write(
        &slow,
        "name: slow\nnodes:\n  nap: { kind: script, start: true, run: [sh, -c, 'sleep 5; echo {}'] }\n",
    )
    .unwrap();
    let started = Instant::now();
    let mut first = weft(&home)
        .args(["run", slow.to_str().unwrap()])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The first command says the run id once its cluster took the run.
    let (said, heard) = std::sync::mpsc::channel();
    let stream = first.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            if line.ends_with(" accepted") {
                let _ = said.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    heard
        .recv_timeout(weft_tests::PATIENCE)
        .expect("the first command accepted its run");
    // A second command while the first runs the cluster joins it.
    let out = weft(&home)
        .args(["runs", "--graph", "slow"])
        .output()
        .unwrap();
    let joined_after = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        listed.contains("running"),
        "the second command did not see the run running: {listed}"
    );
    let status = first.wait().unwrap();
    let first_done = started.elapsed();
    let said = reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(said.contains("completed"), "{said}");
    // The second command was answered by the first one's cluster while
    // the run was still going, not after it.
    assert!(
        joined_after < first_done,
        "the second command returned at {joined_after:?}, the first at {first_done:?}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn ephemeral_runs_leave_nothing() {
    let home = home("ephemeral");
    let out = weft(&home)
        .args([
            "run",
            "--ephemeral",
            "examples/critique-loop.yaml",
            "--input",
            r#"{"topic": "x"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!home.exists(), "--ephemeral wrote the Weft directory");
    let status = weft(&home).args(["runs", "--ephemeral"]).output().unwrap();
    assert_eq!(status.status.code(), Some(4));
    assert!(
        stderr(&status).contains("with --ephemeral"),
        "{}",
        stderr(&status)
    );
}

/// `initial_state` seeds a graph's fields: a script sees the seeds, the
/// run's input wins over them, and a seeded field is declared.
#[test]
fn initial_state_reaches_a_script_under_the_input() {
    let home = home("initial-state");
    let dir = home.with_extension("graph");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("greet.py"),
        "import json, sys\nstate = json.load(sys.stdin)['state']\n\
         print(json.dumps({'said': state['greeting'] + ', ' + state['name'] + ' x' + str(state['times'])}))\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("greet.yaml"),
        "settings: { strict_state: true }\n\
         state:\n  name: { type: string, default: nobody }\n  said: { type: string }\n\
         initial_state:\n  greeting: Hello\n  name: seed\n  times: 2\n\
         nodes:\n  greet: { kind: script, start: true, run: [python3, greet.py] }\n",
    )
    .unwrap();
    let graph = dir.join("greet.yaml");
    let out = weft(&home)
        .args(["run", "--ephemeral", "--json"])
        .arg(&graph)
        .args(["--input", r#"{"name": "input"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["state"]["said"], "Hello, input x2", "{result}");
    assert_eq!(result["state"]["greeting"], "Hello");
    // A seed of the wrong type is refused before the run, naming it.
    std::fs::write(
        &graph,
        "state:\n  times: { type: integer }\ninitial_state:\n  times: twice\n\
         nodes:\n  greet: { kind: script, start: true, run: [python3, greet.py] }\n",
    )
    .unwrap();
    let out = weft(&home)
        .args(["run", "--ephemeral"])
        .arg(&graph)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "initial_state: 'times' is string, but state field 'times' is declared integer"
        ),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
