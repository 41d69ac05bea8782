//! TLS on the coordinator's listeners (SPEC 11, issue #21), with real
//! certificates made for each test (rcgen): a run over TLS end to end,
//! plaintext and untrusted clients told what is wrong, mutual TLS refusing
//! a certificate of another CA, the certificate reloaded on SIGHUP, and
//! `[tls]` checked at start.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::json;
use weft_client::{Client, ClientTls, GraphBuilder, NodeBuilder, RunStatus};
use weft_tests::{TestCluster, binary, repo};

/// A CA, a server certificate it signed for 127.0.0.1 and localhost, and
/// a client certificate it signed, as PEM files in `dir`.
pub(crate) struct Pki {
    pub(crate) ca: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
    /// A person's client certificate (subject `alice`).
    pub(crate) alice_cert: PathBuf,
    pub(crate) alice_key: PathBuf,
}

pub(crate) fn pki(dir: &Path, name: &str) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("weft test CA {name}"));
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, format!("worker-{name}"));
    let client = client_params.signed_by(&client_key, &issuer).unwrap();
    let alice_key = KeyPair::generate().unwrap();
    let mut alice_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    alice_params
        .distinguished_name
        .push(DnType::CommonName, "alice");
    let alice = alice_params.signed_by(&alice_key, &issuer).unwrap();

    let write = |file: &str, text: String| {
        let path = dir.join(format!("{name}-{file}"));
        std::fs::write(&path, text).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", ca_cert.pem()),
        server_cert: write("server.pem", server.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
        alice_cert: write("alice.pem", alice.pem()),
        alice_key: write("alice.key", alice_key.serialize_pem()),
    }
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-tls-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A cluster whose coordinator speaks TLS with `pki`'s server certificate
/// (and requires nothing of clients unless `client_ca`), its workers
/// trusting `pki`'s CA.
fn tls_cluster(pki: &Pki, client_ca: bool) -> anyhow::Result<TestCluster> {
    // With client certificates, `alice`'s is an operator's.
    let config = pki.ca.with_file_name("coordinator.toml");
    std::fs::write(
        &config,
        "[[certificates]]\nsubject = \"alice\"\nrole = \"operator\"\n",
    )?;
    let mut env = vec![
        ("WEFT_TLS_CERT", pki.server_cert.to_str().unwrap()),
        ("WEFT_TLS_KEY", pki.server_key.to_str().unwrap()),
        ("WEFT_CA", pki.ca.to_str().unwrap()),
    ];
    if client_ca {
        env.push(("WEFT_CONFIG", config.to_str().unwrap()));
        env.push(("WEFT_TLS_CLIENT_CA", pki.ca.to_str().unwrap()));
        env.push(("WEFT_CERT", pki.client_cert.to_str().unwrap()));
        env.push(("WEFT_KEY", pki.client_key.to_str().unwrap()));
    }
    TestCluster::start_with_env(&env)
}

fn weft(args: &[&str]) -> Output {
    Command::new(binary("weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .args(args)
        .current_dir(repo())
        .env_remove("WEFT_CA")
        .env_remove("WEFT_CERT")
        .env_remove("WEFT_KEY")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn counter_graph() -> GraphBuilder {
    GraphBuilder::new("count").field("n", "integer", 1).node(
        "inc",
        NodeBuilder::script(&["sh", "-c", r#"echo "{\"n\": 2}""#]).start(),
    )
}

#[tokio::test]
async fn a_run_over_tls_completes_and_wrong_clients_are_told_why() -> anyhow::Result<()> {
    let dir = scratch("run");
    let (good, other) = (pki(&dir, "good"), pki(&dir, "other"));
    let mut cluster = tls_cluster(&good, false)?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let url = cluster.url().to_owned();
    assert!(url.starts_with("https://"), "{url}");

    // `weft` with the CA runs an example end to end over TLS.
    let ca = good.ca.to_str().unwrap();
    let out = weft(&[
        "--coordinator",
        &url,
        "--ca",
        ca,
        "run",
        "examples/critique-loop.yaml",
        "--input",
        r#"{"topic": "TLS"}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("completed"), "{}", stderr(&out));

    // The client library, with the same CA.
    let tls = ClientTls {
        ca: Some(good.ca.clone()),
        identity: None,
        server_name: None,
    };
    let client = Client::connect_with(&url, &tls).await?;
    let run = client.submit_graph(&counter_graph(), &json!({})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["n"], 2);

    // Plaintext at the TLS port.
    let plain = url.replace("https://", "http://");
    let out = weft(&["--coordinator", &plain, "runs"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("https://"), "{}", stderr(&out));
    // TLS without our CA (the system's roots), and with another CA.
    let out = weft(&["--coordinator", &url, "runs"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--ca"), "{}", stderr(&out));
    let out = weft(&[
        "--coordinator",
        &url,
        "--ca",
        other.ca.to_str().unwrap(),
        "runs",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not signed by a CA this client trusts"),
        "{}",
        stderr(&out)
    );
    // TLS at a plaintext port.
    let plain_cluster = TestCluster::start()?;
    let tls_at_plain = plain_cluster.url().replace("http://", "https://");
    let out = weft(&["--coordinator", &tls_at_plain, "--ca", ca, "runs"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("does not speak TLS"),
        "{}",
        stderr(&out)
    );

    // The HTTP listener speaks TLS too.
    let metrics_port = cluster_metrics_port(&cluster);
    let health = Command::new("curl")
        .args(["-sS", "--cacert", ca])
        .arg(format!("https://127.0.0.1:{metrics_port}/healthz"))
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&health.stdout),
        "ok\n",
        "{}",
        stderr(&health)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The port of the cluster's metrics listener, from its coordinator's
/// second line (`metrics on https://ADDR/metrics`).
fn cluster_metrics_port(cluster: &TestCluster) -> String {
    let url = cluster.metrics_url().to_owned();
    let rest = url.rsplit_once(':').map(|(_, r)| r).unwrap_or_default();
    rest.split('/').next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn with_a_client_ca_a_certificate_of_another_ca_is_refused() -> anyhow::Result<()> {
    let dir = scratch("mutual");
    let (good, other) = (pki(&dir, "good"), pki(&dir, "other"));
    // Workers present the good client certificate (WEFT_CERT/WEFT_KEY).
    let mut cluster = tls_cluster(&good, true)?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let url = cluster.url().to_owned();
    let ca = good.ca.to_str().unwrap();

    let with = |cert: &Path, key: &Path| {
        weft(&[
            "--coordinator",
            &url,
            "--ca",
            ca,
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "runs",
        ])
    };
    // The worker joined with its certificate alone. A certificate no
    // [[certificates]] entry names is a worker's: it cannot list runs.
    let as_worker = with(&good.client_cert, &good.client_key);
    assert_eq!(as_worker.status.code(), Some(5), "{}", stderr(&as_worker));
    assert!(
        stderr(&as_worker).contains("'worker-good' has the role worker; ListRuns needs"),
        "{}",
        stderr(&as_worker)
    );
    // alice's certificate is an operator's: she runs a graph.
    let (alice_cert, alice_key) = (
        good.alice_cert.to_str().unwrap(),
        good.alice_key.to_str().unwrap(),
    );
    let run = weft(&[
        "--coordinator",
        &url,
        "--ca",
        ca,
        "--cert",
        alice_cert,
        "--key",
        alice_key,
        "run",
        "examples/critique-loop.yaml",
        "--input",
        r#"{"topic": "mTLS"}"#,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let refused = with(&other.client_cert, &other.client_key);
    // Refused in the handshake: the connection is closed, which `weft`
    // says (exit 4), never "operation was canceled" with exit 1.
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));
    assert!(
        stderr(&refused).starts_with("error: cannot reach the coordinator"),
        "{}",
        stderr(&refused)
    );
    assert!(
        !stderr(&refused).starts_with("error: operation was canceled"),
        "{}",
        stderr(&refused)
    );
    // Without a certificate or a token, nothing is let through.
    let out = weft(&["--coordinator", &url, "--ca", ca, "runs"]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(stderr(&out).contains("unauthenticated"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn sighup_reloads_the_certificate_without_dropping_runs() -> anyhow::Result<()> {
    let dir = scratch("reload");
    let (first, second) = (pki(&dir, "first"), pki(&dir, "second"));
    // The coordinator reads its files from these paths, replaced below.
    let cert = dir.join("live-server.pem");
    let key = dir.join("live-server.key");
    std::fs::copy(&first.server_cert, &cert)?;
    std::fs::copy(&first.server_key, &key)?;
    let env = [
        ("WEFT_TLS_CERT", cert.to_str().unwrap()),
        ("WEFT_TLS_KEY", key.to_str().unwrap()),
        ("WEFT_CA", first.ca.to_str().unwrap()),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let url = cluster.url().to_owned();
    let trusting = |pki: &Pki| ClientTls {
        ca: Some(pki.ca.clone()),
        identity: None,
        server_name: None,
    };
    let client = Client::connect_with(&url, &trusting(&first)).await?;
    let slow = GraphBuilder::new("slow").node(
        "nap",
        NodeBuilder::script(&["sh", "-c", r#"sleep 1; echo "{\"slept\": true}""#]).start(),
    );
    let run = client.submit_graph(&slow, &json!({})).await?;

    std::fs::copy(&second.server_cert, &cert)?;
    std::fs::copy(&second.server_key, &key)?;
    cluster.signal_coordinator("HUP")?;
    cluster
        .wait_for_log("coordinator", "TLS certificate and key reloaded")
        .await?;

    // New connections get the second certificate; the open ones (this
    // client's, the worker's) go on, and the run completes.
    let renewed = Client::connect_with(&url, &trusting(&second)).await?;
    renewed.list().await?;
    assert!(
        Client::connect_with(&url, &trusting(&first)).await.is_err(),
        "the first certificate is still served"
    );
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);

    // A reload that cannot read its files keeps the certificate in use.
    std::fs::write(&key, "not a key")?;
    cluster.signal_coordinator("HUP")?;
    cluster
        .wait_for_log("coordinator", "TLS reload failed")
        .await?;
    Client::connect_with(&url, &trusting(&second))
        .await?
        .list()
        .await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn tls_settings_are_checked_when_the_coordinator_starts() {
    let dir = scratch("config");
    let good = pki(&dir, "good");
    let check = |env: &[(&str, &str)]| {
        Command::new(binary("coordinator"))
            .arg("--check-config")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = check(&[("WEFT_TLS_CERT", good.server_cert.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("'tls.key': must be set with tls.cert"),
        "{}",
        stderr(&out)
    );

    // A key that is not one refuses the start, naming the file.
    let bad_key = dir.join("bad.key");
    std::fs::write(&bad_key, "-----BEGIN NOTHING-----\n").unwrap();
    let out = Command::new(binary("coordinator"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.join("data"))
        .env("WEFT_TLS_CERT", &good.server_cert)
        .env("WEFT_TLS_KEY", &bad_key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refusing to start: TLS key") && stderr(&out).contains("bad.key"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
