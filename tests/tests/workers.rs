//! Workers joining, refused and leaving.

use std::process::Command;

use serde_json::json;
use tokio_stream::StreamExt;
use weft_client::{GraphBuilder, NodeBuilder, RunStatus};
use weft_proto::v1 as pb;
use weft_tests::{PATIENCE, TestCluster};

#[tokio::test]
async fn a_worker_with_another_protocol_version_is_refused_clearly() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let mut client =
        pb::worker_service_client::WorkerServiceClient::connect(cluster.url().to_owned()).await?;
    let hello = pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(pb::Hello {
            protocol_version: 99,
            name: "from-the-future".into(),
            slots: 1,
            ..Default::default()
        })),
    };
    let status = client
        .join(tokio_stream::iter(vec![hello]))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(
        status
            .message()
            .contains("worker 'from-the-future' speaks protocol version 99"),
        "{}",
        status.message()
    );
    assert!(
        status
            .message()
            .contains("this coordinator speaks version 1"),
        "{}",
        status.message()
    );
    Ok(())
}

#[tokio::test]
async fn sigterm_drains_a_worker_its_task_finishes_and_it_exits_cleanly() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("drainer", 2, None)?;
    cluster.wait_for_workers(&["drainer"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("nap")
        .field("delay_ms", "integer", 1500)
        .node("nap", NodeBuilder::task("sleep").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    let mut events = client.watch(&run.run_id, 0).await?;
    loop {
        let event = tokio::time::timeout(PATIENCE, events.next())
            .await?
            .expect("events continue")?;
        if event.kind == "node_started" {
            break;
        }
    }
    let pid = cluster.worker_pid("drainer").expect("running");
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?
            .success()
    );
    cluster
        .wait_for_log("coordinator", "worker draining")
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(
        done.status,
        RunStatus::Completed,
        "the task in flight finished: {:?}",
        done.error
    );
    assert_eq!(done.state["slept"], json!(1500));
    assert_eq!(cluster.wait_for_exit("drainer").await?, Some(0));
    Ok(())
}
