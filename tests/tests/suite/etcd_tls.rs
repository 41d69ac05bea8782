//! etcd over TLS (SPEC 11, `[store.tls]`): a real etcd serving TLS and
//! asking for client certificates; the store, a coordinator keeping its
//! runs there, and a worker finding the leader through it, each with the
//! CA and a client certificate; and what happens without them.

use serde_json::json;
use weft_client::{GraphBuilder, NodeBuilder, RunStatus};
use weft_store::{EtcdStore, EtcdTls, Store};
use weft_tests::etcd::{EtcdTlsFiles, TestEtcd};
use weft_tests::group::TestGroup;

use super::tls::pki;

fn scratch(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-etcd-tls-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn runs_are_kept_in_an_etcd_that_speaks_tls_and_wants_certificates() -> anyhow::Result<()> {
    let dir = scratch("store");
    let pki = pki(&dir, "etcd");
    let etcd = TestEtcd::start_tls(EtcdTlsFiles {
        ca: pki.ca.clone(),
        cert: pki.server_cert.clone(),
        key: pki.server_key.clone(),
        client_cert: pki.client_cert.clone(),
        client_key: pki.client_key.clone(),
    })
    .await?;
    let endpoints = [etcd.url.clone()];
    assert!(etcd.url.starts_with("https://"));

    // The store with the CA and a client certificate reads and writes.
    let tls = EtcdTls {
        ca: Some(pki.ca.clone()),
        identity: Some((pki.client_cert.clone(), pki.client_key.clone())),
    };
    let store = EtcdStore::connect_with(&endpoints, &tls)?;
    store.put("weft-test/probe", b"1".to_vec(), None).await?;
    // Without a client certificate etcd refuses the handshake.
    let anonymous = EtcdStore::connect_with(
        &endpoints,
        &EtcdTls {
            ca: Some(pki.ca.clone()),
            identity: None,
        },
    )?;
    assert!(anonymous.get("weft-test/probe").await.is_err());
    // TLS settings for plaintext endpoints are refused up front.
    let plaintext = [etcd.url.replacen("https://", "http://", 1)];
    let refused = EtcdStore::connect_with(&plaintext, &tls)
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("https://"), "{refused}");

    // Two coordinators keep their runs there (WEFT_ETCD_CA, _CERT, _KEY),
    // and a worker finds the leader through it with the same variables.
    let (ca, cert, key) = (
        pki.ca.to_str().unwrap().to_owned(),
        pki.client_cert.to_str().unwrap().to_owned(),
        pki.client_key.to_str().unwrap().to_owned(),
    );
    let env = [
        ("WEFT_ETCD_CA", ca.as_str()),
        ("WEFT_ETCD_CERT", cert.as_str()),
        ("WEFT_ETCD_KEY", key.as_str()),
    ];
    let mut group = TestGroup::start_on(etcd, 2, 3, &env, tls.clone()).await?;
    let leader = group.wait_for_leader(None).await?;
    group.add_worker("w", 1)?;
    group.wait_for_log("w", "joined the coordinator", 1).await?;
    // Through the standby, which forwards to the leader.
    let client = group.client(1 - leader).await?;
    let graph = GraphBuilder::new("tls-store")
        .field("n", "integer", 1)
        .node(
            "inc",
            NodeBuilder::script(&["sh", "-c", r#"echo "{\"n\": 2}""#]).start(),
        );
    let run = client.submit_graph(&graph, &json!({})).await?;
    assert_eq!(client.wait(&run.run_id).await?.status, RunStatus::Completed);
    let stored = store.scan(&format!("runs/{}", run.run_id)).await?;
    assert!(!stored.is_empty(), "the run is not in etcd");

    // The old leader killed, the other takes over from the same etcd and
    // still serves the run.
    group.kill(leader)?;
    let next = group.wait_for_leader(Some(leader)).await?;
    let info = group.client(next).await?.get(&run.run_id).await?;
    assert_eq!(info.status, RunStatus::Completed);
    assert_eq!(info.state["n"], 2);
    drop(group);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn store_tls_is_checked_when_the_coordinator_starts() {
    let check = |env: &[(&str, &str)]| {
        let out = std::process::Command::new(weft_tests::binary("coordinator"))
            .arg("--check-config")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        )
    };
    let (code, said) = check(&[
        ("WEFT_ETCD", "http://127.0.0.1:2379"),
        ("WEFT_ETCD_CA", "/tmp/ca.pem"),
    ]);
    assert_eq!(code, Some(2));
    assert_eq!(
        said,
        "coordinator: refusing to start: config key 'store.tls': is for https:// etcd endpoints; store.etcd names none"
    );
    let (code, said) = check(&[
        ("WEFT_ETCD", "https://127.0.0.1:2379"),
        ("WEFT_ETCD_CERT", "/tmp/c.pem"),
    ]);
    assert_eq!(code, Some(2));
    assert!(said.contains("store.tls.key"), "{said}");
}
