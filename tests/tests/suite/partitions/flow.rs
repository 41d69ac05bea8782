//! The group's flow control through the binaries (SPEC 18 and 21): three
//! `coordinator` processes with `WEFT_PARTITIONS=4` on one real etcd and a
//! `[[limits]]` entry, one `worker` serving them all. Runs made through
//! every coordinator — so in partitions led by different ones — share a
//! concurrency key and a limit's places in flight as if one coordinator
//! led them all: partition 0's leader holds both for the group. When that
//! leader leaves, the next one takes over, the members declare what they
//! hold, and nothing waits for good. Every figure is counted from what the
//! steps recorded (their start and end times), never timed.

use std::collections::BTreeSet;

use super::*;
use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunStatus};
use weft_store::EtcdTls;
use weft_tests::group::TestGroup;

/// The coordinators' configuration: scripts, two at a time in the group
/// (and a rate that holds nothing back here, but has a window to keep).
const LIMITS: &str = "[[limits]]\nname = \"scripts\"\nmatch = { kind = \"script\" }\nconcurrency = 2\nrequests_per_minute = 60000\n";

/// One script step that sleeps a quarter of a second and records when it
/// ran; with `keyed`, under the key `{{ customer }}`, one at a time.
fn span_graph(keyed: bool) -> GraphBundle {
    let key = if keyed {
        "\n    concurrency: { key: \"{{ customer }}\", max: 1 }"
    } else {
        ""
    };
    GraphBundle::from_text(
        "span.yaml",
        &format!(
            r#"
state:
  customer: {{ type: string, default: "" }}
  span: {{ type: array, default: [] }}
nodes:
  work:
    kind: script
    start: true
    end: true
    run: [sh, -c, 'start=$(date +%s.%N); sleep 0.25; echo "{{\"span\": [$start, $(date +%s.%N)]}}"']{key}
"#
        ),
    )
}

/// Three coordinators of four partitions configured with `config`, each
/// connected to the group's flow authority, and a worker of eight slots
/// serving them all (`llm`: a test worker calling that model endpoint
/// with that key).
async fn flow_group(
    config: &str,
    llm: Option<(&str, &str)>,
) -> anyhow::Result<(TestGroup, Vec<Client>)> {
    let etcd = TestEtcd::start().await?;
    let dir = std::env::temp_dir().join(format!(
        "weft-group-flow-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("coordinator.toml");
    std::fs::write(&file, config)?;
    let file = file.display().to_string();
    let env = [("WEFT_PARTITIONS", "4"), ("WEFT_CONFIG", file.as_str())];
    let mut group = TestGroup::start_on(etcd, 3, 3, &env, EtcdTls::default()).await?;
    for index in 0..3 {
        group
            .wait_for_log(
                &format!("coordinator-{index}"),
                "connected to the group's flow authority",
                1,
            )
            .await?;
    }
    match llm {
        Some((url, key)) => group.add_llm_worker("w", 8, url, key)?,
        None => group.add_worker("w", 8)?,
    }
    group.wait_for_log("w", "joined the coordinator", 3).await?;
    let mut clients = Vec::new();
    for index in 0..3 {
        clients.push(group.client(index).await?);
    }
    Ok((group, clients))
}

/// [`flow_group`] with [`LIMITS`].
async fn limited_group() -> anyhow::Result<(TestGroup, Vec<Client>)> {
    flow_group(LIMITS, None).await
}

/// The run's partition, by the API of coordinator 0.
async fn partition_of(group: &TestGroup, id: &str) -> anyhow::Result<u64> {
    let run: Value = reqwest::get(format!("{}/api/v1/runs/{id}", group.http_base(0)))
        .await?
        .json()
        .await?;
    run["partition"]
        .as_u64()
        .ok_or_else(|| anyhow::anyhow!("no partition: {run}"))
}

/// The index of the coordinator that leads partition 0, by the group's
/// description through coordinator `through`.
async fn leader_of_zero(group: &TestGroup, through: usize) -> anyhow::Result<usize> {
    let described: Value = reqwest::get(format!("{}/api/v1/group", group.http_base(through)))
        .await?
        .json()
        .await?;
    let url = described["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|member| {
            member["partitions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|led| led["partition"] == 0)
        })
        .and_then(|member| member["url"].as_str())
        .ok_or_else(|| anyhow::anyhow!("nobody leads partition 0: {described}"))?
        .to_owned();
    (0..3)
        .find(|&index| group.url(index) == url)
        .ok_or_else(|| anyhow::anyhow!("{url} is none of the group's"))
}

/// Submits `count` runs of `graph` in turn through `through`, and waits
/// for each through the next; the spans they recorded, and their ids.
async fn run_all(
    clients: &[Client],
    through: &[usize],
    graph: &GraphBundle,
    input: &Value,
    count: usize,
) -> anyhow::Result<(Vec<(f64, f64)>, Vec<String>)> {
    let mut made = Vec::new();
    for n in 0..count {
        let index = through[n % through.len()];
        let run = clients[index].submit_bundle(graph.clone(), input).await?;
        made.push((run.run_id.to_string(), through[(n + 1) % through.len()]));
    }
    let mut spans = Vec::new();
    for (id, other) in &made {
        let done =
            tokio::time::timeout(Duration::from_secs(90), clients[*other].wait(id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{id}: {:?}", done.error);
        let span = done.state["span"].as_array().expect("a span");
        spans.push((span[0].as_f64().unwrap(), span[1].as_f64().unwrap()));
    }
    Ok((spans, made.into_iter().map(|(id, _)| id).collect()))
}

/// How many of `ids` were told they waited for `limit`.
async fn told(clients: &[Client], ids: &[String], limit: &str) -> anyhow::Result<usize> {
    let mut told = 0;
    for id in ids {
        told += weft_tests::events_of(&clients[0], id, "task_throttled")
            .await?
            .iter()
            .filter(|event| event.body["limit"] == limit)
            .count();
    }
    Ok(told)
}

#[tokio::test]
async fn a_key_and_a_limit_hold_across_the_partitions_of_three_coordinators() -> anyhow::Result<()>
{
    let (group, clients) = limited_group().await?;
    // Nine runs under one key, three made through each coordinator: one
    // step at a time in the whole group.
    let keyed = span_graph(true);
    let (spans, ids) = run_all(
        &clients,
        &[0, 1, 2],
        &keyed,
        &json!({"customer": "acme"}),
        9,
    )
    .await?;
    let mut partitions = BTreeSet::new();
    for id in &ids {
        partitions.insert(partition_of(&group, id).await?);
    }
    assert!(
        partitions.len() >= 3,
        "the runs were in partitions {partitions:?}"
    );
    assert_eq!(
        weft_tests::peak_overlap(&spans),
        1,
        "the key allows one at a time: {spans:?}"
    );
    assert!(
        told(&clients, &ids, "concurrency key 'acme' (max 1)").await? >= 1,
        "no step was told it waited for its key"
    );
    // Twelve runs without a key: the limit's two places, group-wide (each
    // coordinator counting alone would let six run on the worker's eight
    // slots).
    let free = span_graph(false);
    let (spans, ids) = run_all(&clients, &[0, 1, 2], &free, &json!({}), 12).await?;
    let most = weft_tests::peak_overlap(&spans);
    assert!(
        most <= 2,
        "{most} scripts ran at once, the limit allows 2: {spans:?}"
    );
    assert_eq!(most, 2, "the limit never filled: {spans:?}");
    assert!(
        told(&clients, &ids, "scripts").await? >= 1,
        "no step was told it waited for the limit"
    );
    // One authority served them: partition 0's leader.
    let zero = leader_of_zero(&group, 0).await?;
    assert!(
        group
            .log(zero)
            .contains("the group's flow authority runs here"),
        "{}",
        group.log(zero)
    );
    // Nobody but a member opens the authority's stream: no key, or a
    // wrong one, is refused.
    for key in [None, Some("not-the-group-key")] {
        let mut client = weft_proto::v1::group_service_client::GroupServiceClient::connect(
            group.url(zero).to_owned(),
        )
        .await?;
        let mut request =
            tonic::Request::new(tokio_stream::iter(Vec::<weft_proto::v1::FlowRequest>::new()));
        if let Some(key) = key {
            request
                .metadata_mut()
                .insert("x-weft-group-key", key.parse()?);
        }
        let refused = client.flow(request).await.expect_err("not a member");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        assert!(
            refused.message().contains("only members of the group"),
            "{refused:?}"
        );
    }
    // It keeps the limit's window in the group's store.
    let store = weft_store::EtcdStore::connect(std::slice::from_ref(&group.etcd.url))?;
    let kept = || async {
        let entry = store.get("flow/state").await.ok()??;
        let state: Value = serde_json::from_slice(&entry.value).ok()?;
        state["limits"]["scripts"]["requests"]["level"].as_f64()
    };
    let deadline = std::time::Instant::now() + weft_tests::PATIENCE;
    while kept().await.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no window kept: {:?}",
            store
                .get("flow/state")
                .await
                .map(|e| e.map(|e| String::from_utf8_lossy(&e.value).into_owned()))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test]
async fn the_flow_authority_moves_with_partition_0_and_nothing_waits_for_good() -> anyhow::Result<()>
{
    let (group, clients) = limited_group().await?;
    let zero = leader_of_zero(&group, 0).await?;
    let others: Vec<usize> = (0..3).filter(|&index| index != zero).collect();
    // Runs under one key made through the two others, so they stay where
    // they are; partition 0's leader leaves while they queue for the key.
    let keyed = span_graph(true);
    let input = json!({"customer": "acme"});
    let mut made = Vec::new();
    for n in 0..8 {
        let index = others[n % 2];
        made.push((
            clients[index]
                .submit_bundle(keyed.clone(), &input)
                .await?
                .run_id,
            index,
        ));
    }
    group.signal(zero, "TERM")?;
    group
        .wait_for_log(
            &format!("coordinator-{zero}"),
            "left the group, every partition handed over",
            1,
        )
        .await?;
    let mut spans = Vec::new();
    for (id, index) in &made {
        let done =
            tokio::time::timeout(Duration::from_secs(90), clients[*index].wait(id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{id}: {:?}", done.error);
        let span = done.state["span"].as_array().expect("a span");
        spans.push((span[0].as_f64().unwrap(), span[1].as_f64().unwrap()));
    }
    assert_eq!(
        weft_tests::peak_overlap(&spans),
        1,
        "the key allows one at a time: {spans:?}"
    );
    // The authority runs on the new leader of partition 0, and each member
    // left connected to it again.
    let next = leader_of_zero(&group, others[0]).await?;
    assert_ne!(next, zero);
    assert!(
        group
            .log(next)
            .contains("the group's flow authority runs here"),
        "{}",
        group.log(next)
    );
    for &index in &others {
        group
            .wait_for_log(
                &format!("coordinator-{index}"),
                "connected to the group's flow authority",
                2,
            )
            .await?;
    }
    assert!(
        group
            .log(next)
            .contains("the group's limits start from the windows the last authority kept"),
        "{}",
        group.log(next)
    );
    // After the move, the key still holds: more runs, one at a time.
    let (spans, _) = run_all(&clients, &others, &keyed, &input, 4).await?;
    assert_eq!(
        weft_tests::peak_overlap(&spans),
        1,
        "after the move: {spans:?}"
    );
    Ok(())
}

/// A script step that sleeps `seconds`.
fn sleeping(seconds: &str) -> GraphBundle {
    GraphBundle::from_text(
        "sleep.yaml",
        &format!(
            "nodes:\n  nap: {{ kind: script, start: true, end: true, run: [sh, -c, 'sleep {seconds}; echo {{}}'] }}\n"
        ),
    )
}

#[tokio::test]
async fn a_namespaces_running_cap_and_day_budget_hold_across_partitions() -> anyhow::Result<()> {
    use weft_tests::llm_server::{Reply, TestLlm};
    const KEY: &str = "sk-group-days";
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    let config = "[[namespaces]]\nname = \"default\"\nmax_running_runs = 2\ntokens_per_day = 20\n";
    let (group, clients) = flow_group(config, Some((&llm.url, KEY))).await?;
    // Two runs going, made through two coordinators (so in partitions two
    // different coordinators lead): a third, through the third, is
    // refused with the group's count.
    let nap = sleeping("3");
    let first = clients[0]
        .submit_bundle(nap.clone(), &json!({}))
        .await?
        .run_id;
    let second = clients[1]
        .submit_bundle(nap.clone(), &json!({}))
        .await?
        .run_id;
    assert_ne!(
        partition_of(&group, &first).await?,
        partition_of(&group, &second).await?
    );
    let refused = clients[2]
        .submit_bundle(nap.clone(), &json!({}))
        .await
        .expect_err("two runs are going in the group");
    assert!(
        refused.to_string().contains(
            "namespace 'default' has 2 runs going, its max_running_runs is 2: submit again once one has ended"
        ),
        "{refused}"
    );
    for id in [&first, &second] {
        let done = clients[2].wait(id).await?;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    }
    // Once they ended (and their partitions reported it), runs are taken
    // again.
    let ask = GraphBundle::from_text(
        "ask.yaml",
        "nodes:\n  ask: { kind: llm, start: true, prompt: \"Say something long enough.\" }\n",
    );
    let deadline = std::time::Instant::now() + weft_tests::PATIENCE;
    let asked = loop {
        match clients[2].submit_bundle(ask.clone(), &json!({})).await {
            Ok(run) => break run.run_id,
            Err(error) => {
                assert!(error.to_string().contains("max_running_runs"), "{error}");
                assert!(
                    std::time::Instant::now() < deadline,
                    "still refused: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // That run's call spends the namespace's day (20 tokens), counted by
    // the group: a run through another coordinator is refused for it.
    let done = clients[2].wait(&asked).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let spent = done.usage.prompt_tokens + done.usage.completion_tokens;
    assert!(spent >= 20, "the run spent only {spent} tokens");
    let mut accepted = 0;
    let deadline = std::time::Instant::now() + weft_tests::PATIENCE;
    let refused = loop {
        match clients[0].submit_bundle(ask.clone(), &json!({})).await {
            // The runs just ended are reported within 250 ms: until then
            // the cap still counts them.
            Err(error) if error.to_string().contains("max_running_runs") => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "still refused: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => break error,
            Ok(run) => {
                // The spend had not reached the group yet: this run spends
                // more, and the next is refused.
                accepted += 1;
                assert!(accepted < 3, "runs are still taken after the day was spent");
                clients[0].wait(&run.run_id).await?;
            }
        }
    };
    assert!(
        refused
            .to_string()
            .contains("namespace 'default' has spent")
            && refused
                .to_string()
                .contains("tokens today, its tokens_per_day is 20"),
        "{refused}"
    );
    Ok(())
}
