//! The compose file as a user brings it up, secured: a run submitted with
//! `weft --coordinator` (its CA and token) through a published port
//! completes, either coordinator lists it (the standby forwarding over TLS
//! with the token), and a client without the token or without TLS is
//! refused.

use weft_tests::compose::Compose;

fn weft(cluster: &Compose, url: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = cluster
        .weft()
        .arg("--coordinator")
        .arg(url)
        .args(args)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "weft {args:?} exited {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The run's status line is on stderr, its state on stdout.
    Ok(String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_the_published_port_completes_and_both_coordinators_list_it()
-> anyhow::Result<()> {
    let cluster = Compose::up("published", 3).await?;
    let (a, b) = (
        cluster.published("coordinator-a", 7700)?,
        cluster.published("coordinator-b", 7700)?,
    );

    let out = weft(
        &cluster,
        &a,
        &[
            "run",
            "examples/critique-loop.yaml",
            "--input",
            r#"{"topic": "Weft"}"#,
        ],
    )?;
    let run_id = out
        .lines()
        .find_map(|line| line.strip_prefix("run ")?.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no run id in: {out}"))?
        .to_owned();
    assert!(out.contains("completed"), "{out}");
    assert!(out.contains("\"drafts\": 3"), "the example's state: {out}");

    for url in [&a, &b] {
        let listed = weft(&cluster, url, &["runs"])?;
        let line = listed
            .lines()
            .find(|line| line.starts_with(&run_id))
            .unwrap_or_else(|| panic!("{url} does not list {run_id}: {listed}"));
        assert!(line.contains("completed"), "{line}");
    }
    // The cluster is secured end to end: without the token, or in
    // plaintext, nothing is let in, and each is told why.
    let anonymous = cluster
        .weft()
        .env_remove("WEFT_TOKEN")
        .args(["--coordinator", &a, "runs"])
        .output()?;
    assert_eq!(anonymous.status.code(), Some(5));
    assert!(
        String::from_utf8_lossy(&anonymous.stderr).contains("unauthenticated"),
        "{}",
        String::from_utf8_lossy(&anonymous.stderr)
    );
    let plaintext = a.replacen("https://", "http://", 1);
    let plain = cluster
        .weft()
        .env_remove("WEFT_CA")
        .args(["--coordinator", &plaintext, "runs"])
        .output()?;
    assert!(!plain.status.success());
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains("TLS"),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    // The scripts ran in the workers' containers, which hold python3.
    let logs = cluster.logs("worker");
    assert!(logs.contains("joined the coordinator"), "{logs}");
    Ok(())
}
