//! Any member of a partitioned group answers any request: two members
//! on a real etcd, each serving the run service on its own loopback
//! port by its `Role::Member`, clients of either. A run is made in a
//! partition its member leads, found and answered through the other
//! member (forwarded by its id to its partition's leader), waited for
//! there, and listed — page by page — by either, with every member's
//! runs.

use super::*;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use weft_client::{Client, GraphBundle, RunStatus};
use weft_coordinator::bundle::BlobStore;
use weft_coordinator::config::CoordinatorConfig;
use weft_coordinator::durable::Keeper;
use weft_coordinator::ha::member::Member;
use weft_coordinator::ha::partition_runs::PartitionRuns;
use weft_coordinator::indexes::SharedIndexes;
use weft_coordinator::term::{Role, start_dispatcher};

const P: u32 = 4;

/// A graph that waits for a person.
fn asking() -> GraphBundle {
    GraphBundle::from_text(
        "asking.yaml",
        "state:\n  colour: { type: string, default: \"\" }\nnodes:\n  ask: { kind: input, start: true, output_key: colour, end: true }\n",
    )
}

struct Served {
    url: String,
    partitions: PartitionRuns,
    leave: CancellationToken,
    stop: CancellationToken,
    // Held: a role whose sender is gone reads as changed.
    _role: watch::Sender<Role>,
}

async fn serve(store: &AnyStore) -> Served {
    let config = CoordinatorConfig::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, tracker) = (CancellationToken::new(), TaskTracker::new());
    let partitioning = Partitioning::new(P).unwrap();
    let dispatcher = start_dispatcher(&config, &stop, &tracker);
    let blobs = BlobStore::default();
    let partitions = PartitionRuns::new(
        config.clone(),
        store.clone(),
        partitioning,
        dispatcher.clone(),
        blobs.clone(),
    );
    let (seen, view) = watch::channel(GroupView::default());
    let member = Member {
        partitions: partitions.clone(),
        view,
        url: url.clone(),
        dispatcher,
        blobs,
        indexes: SharedIndexes::new(
            Keeper::new(store.clone(), None, stop.clone()),
            config.max_index_bytes,
        ),
        max_bundle_bytes: config.max_bundle_bytes,
        max_result_bytes: config.max_result_bytes,
        heartbeat: config.heartbeat_interval,
        worker_timeout: config.worker_timeout,
        tracker,
        ended: stop.clone(),
        group_key: "a key of the test's".into(),
        authority: weft_coordinator::ha::flow_authority::AuthoritySlot::new(
            seen.subscribe(),
            Duration::from_secs(3),
        ),
    };
    let (role, watched) = watch::channel(Role::Member(Arc::new(member)));
    tokio::spawn({
        let stop = stop.clone();
        async move { weft_coordinator::server::serve_role(listener, &config, watched, stop).await }
    });
    let leave = CancellationToken::new();
    let settings = GroupSettings {
        partitioning,
        url: url.clone(),
        ttl: Duration::from_secs(10),
    };
    tokio::spawn(membership::take_part(
        store.clone(),
        settings,
        Arc::new(partitions.clone()),
        leave.clone(),
        seen,
    ));
    Served {
        url,
        partitions,
        leave,
        stop,
        _role: role,
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn either_member_answers_for_every_run_of_the_group() {
    let etcd = TestEtcd::start().await.expect("etcd runs");
    let store = AnyStore::Etcd(EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap());
    let a = serve(&store).await;
    until("a leads every partition", || {
        a.partitions.led().len() == P as usize
    })
    .await;
    let b = serve(&store).await;
    until("two partitions each", || {
        a.partitions.led().len() == 2 && b.partitions.led().len() == 2
    })
    .await;
    let (to_a, to_b) = (
        Client::connect(a.url.clone()).await.unwrap(),
        Client::connect(b.url.clone()).await.unwrap(),
    );
    // Each member makes its new runs in the partitions it leads.
    let mut made = Vec::new();
    for (client, member) in [(&to_a, &a), (&to_b, &b), (&to_a, &a), (&to_b, &b)] {
        let run = client.submit_bundle(asking(), &json!({})).await.unwrap();
        let id = run.run_id.to_string();
        assert!(
            member.partitions.route(&id).is_some(),
            "{id} is made where it was submitted"
        );
        made.push(id);
    }
    // Each is found through either member, waiting.
    for id in &made {
        for client in [&to_a, &to_b] {
            let info = client.get(id).await.unwrap();
            assert_eq!(info.status, RunStatus::Waiting, "{id}");
        }
    }
    // A run nobody made is unknown, whichever member its id leads to.
    for client in [&to_a, &to_b] {
        for n in 0..4 {
            let unknown = format!("run-nobody-{n}");
            let error = client.get(&unknown).await.expect_err("unknown");
            assert!(
                error
                    .to_string()
                    .contains(&format!("unknown run '{unknown}'")),
                "{error}"
            );
        }
    }
    // Listed by either member, whole, newest first, page by page.
    let mut newest_first = made.clone();
    newest_first.sort();
    newest_first.reverse();
    for client in [&to_a, &to_b] {
        let mut listed = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, next) = client.list_page(3, after.as_deref()).await.unwrap();
            assert!(page.len() <= 3);
            listed.extend(page.iter().map(|run| run.run_id.to_string()));
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(listed, newest_first);
    }
    // Answered through the member that does not lead it, and waited
    // for there.
    for (id, client) in made.iter().zip([&to_b, &to_a, &to_b, &to_a]) {
        client
            .resume(id, "ask", &json!("teal"), None)
            .await
            .unwrap();
        let done = tokio::time::timeout(Duration::from_secs(30), client.wait(id))
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{id}");
        assert_eq!(done.state["colour"], "teal");
    }
    for member in [&a, &b] {
        member.leave.cancel();
    }
    until("both left", || {
        a.partitions.led().is_empty() && b.partitions.led().is_empty()
    })
    .await;
    for member in [a, b] {
        member.stop.cancel();
    }
}
