//! A worker serving every coordinator of a partitioned group (issue 43):
//! it finds the members in etcd, joins each, and shares its slots between
//! them by their demand. Two real coordinators, each listed in a real etcd
//! as the group's membership lists its members, and one real worker with
//! two slots.

use serde_json::json;
use weft_client::RunStatus;
use weft_store::{EtcdStore, GROUP_COUNT_KEY, GROUP_MEMBERS, Store};
use weft_tests::etcd::TestEtcd;
use weft_tests::{PATIENCE, TestCluster, doubling_map, gauge, wait_until};

/// A coordinator's `weft_free_slots`: the shares the worker gave it that
/// its tasks do not fill.
fn free_slots(cluster: &TestCluster) -> Option<f64> {
    gauge(&cluster.metrics().ok()?, "weft_free_slots")
}

/// Waits until the two coordinators' free slots are `a` and `b`.
async fn free_slots_come_to(
    a: &TestCluster,
    b: &TestCluster,
    (want_a, want_b): (f64, f64),
) -> anyhow::Result<()> {
    wait_until(PATIENCE, || {
        free_slots(a) == Some(want_a) && free_slots(b) == Some(want_b)
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}: free slots {:?} and {:?}, not {want_a} and {want_b}",
            free_slots(a),
            free_slots(b)
        )
    })
}

#[tokio::test]
async fn a_worker_shares_its_slots_between_every_member_by_their_demand() -> anyhow::Result<()> {
    let etcd = TestEtcd::start().await?;
    let mut a = TestCluster::start()?;
    let b = TestCluster::start()?;
    // The group as its members list themselves: a partition count, and
    // each member's URL under its own key.
    let store = EtcdStore::connect(std::slice::from_ref(&etcd.url))?;
    store.put(GROUP_COUNT_KEY, b"2".to_vec(), None).await?;
    store
        .put(
            &format!("{GROUP_MEMBERS}1"),
            a.url().as_bytes().to_vec(),
            None,
        )
        .await?;
    store
        .put(
            &format!("{GROUP_MEMBERS}2"),
            b.url().as_bytes().to_vec(),
            None,
        )
        .await?;
    a.add_test_worker_with("shared", 2, &["--etcd".to_owned(), etcd.url.clone()])?;
    a.wait_for_log_count("shared", "joined the coordinator", 2)
        .await?;
    // Idle, its slots are split evenly.
    free_slots_come_to(&a, &b, (1.0, 1.0)).await?;

    // One coordinator busy: it gets both slots, the idle one none.
    let (client_a, client_b) = (a.client().await?, b.client().await?);
    let busy = client_a
        .submit_graph(&doubling_map(12, 500, 12), &json!({}))
        .await?;
    free_slots_come_to(&a, &b, (0.0, 0.0)).await?;
    let done = tokio::time::timeout(PATIENCE, client_a.wait(&busy.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);

    // Both busy: each runs on its share, and nothing is sent past the
    // worker's two slots (a task sent past them would wait for one).
    let on_a = client_a
        .submit_graph(&doubling_map(6, 200, 6), &json!({}))
        .await?;
    let on_b = client_b
        .submit_graph(&doubling_map(6, 200, 6), &json!({}))
        .await?;
    for (client, run) in [(&client_a, &on_a), (&client_b, &on_b)] {
        let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        let results = done.state["results"].as_array().expect("results");
        assert_eq!(results.len(), 6);
        for (i, result) in results.iter().enumerate() {
            assert_eq!(result["doubled"], json!(i * 2), "item {i}");
            assert_eq!(result["worker"], json!("shared"));
        }
    }
    let log = a.log("shared");
    assert!(
        !log.contains("a task waits for a free slot"),
        "the coordinators sent more than the worker's slots:\n{log}"
    );
    // Idle again: even.
    free_slots_come_to(&a, &b, (1.0, 1.0)).await?;

    // A member that leaves the list is left, and its share goes back.
    store
        .delete_prefix(&format!("{GROUP_MEMBERS}2"), None)
        .await?;
    a.wait_for_log("shared", "a coordinator left the group")
        .await?;
    free_slots_come_to(&a, &b, (2.0, 0.0)).await?;
    Ok(())
}
