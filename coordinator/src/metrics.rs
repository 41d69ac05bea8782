//! Prometheus metrics (SPEC section 10): runs by status, tasks dispatched,
//! task latency, queue depth, tasks waiting for a worker that hosts them,
//! workers connected, free slots and bundle bytes held.
//!
//! The code records through the `metrics` facade, which costs nothing when
//! no recorder is installed (as in embedded clusters); the `coordinator`
//! binary installs the Prometheus recorder, and its HTTP listener
//! (`crate::http`) serves the text format at `/metrics`.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Runs by status (gauge, label `status`).
pub const RUNS: &str = "weft_runs";
/// Runs submitted (counter).
pub const RUNS_SUBMITTED: &str = "weft_runs_submitted_total";
/// Task attempts sent to workers, re-dispatches included (counter).
pub const TASKS_DISPATCHED: &str = "weft_tasks_dispatched_total";
/// Task attempts that carried their node's definition (its kind and
/// configuration) to a worker (counter). A worker keeps each for its
/// session, so a node's later tasks name it by number: this grows with
/// nodes and workers, not with tasks.
pub const NODE_DEFINITIONS_SENT: &str = "weft_node_definitions_sent_total";
/// Task attempts that carried their run's bundle list (the files a worker
/// may fetch) to a worker (counter). A worker keeps each for its session,
/// so this grows with runs and workers, not with tasks.
pub const BUNDLE_LISTS_SENT: &str = "weft_bundle_lists_sent_total";
/// Bytes of state field values (their JSON) that tasks carried to workers
/// (counter). A worker keeps each field's version for its session, and a
/// task carries only the fields its step reads there (`step_reads`), so
/// this grows with what changed and what is read, not with the state's
/// size.
pub const STATE_BYTES_SENT: &str = "weft_state_bytes_sent_total";
/// Bytes of run input the coordinator held as their JSON text rather than
/// parse: large strings that none of the graph's conditions, routers,
/// templates, reducers or subgraph nodes read (`weft_machine::held`).
pub const INPUT_BYTES_HELD: &str = "weft_input_bytes_held_total";
/// Bytes of run input given by reference to an earlier run's input
/// (`SubmitRequest.input_refs`) rather than sent again (counter).
pub const INPUT_BYTES_REFERENCED: &str = "weft_input_bytes_referenced_total";
/// Bytes of steps' writes the coordinator held as their JSON text rather
/// than parse: large strings a task returned for fields the coordinator
/// never reads (`weft_machine::held`).
pub const OUTPUT_BYTES_HELD: &str = "weft_output_bytes_held_total";
/// Times a task or a running step's model call started waiting for a
/// rate limit, by limit.
pub const TASKS_THROTTLED: &str = "weft_tasks_throttled_total";
/// Seconds from dispatch to result (histogram).
pub const TASK_SECONDS: &str = "weft_task_seconds";
/// Tasks waiting for a free slot or a hosting worker (gauge).
pub const QUEUE_DEPTH: &str = "weft_queue_depth";
/// Queued tasks that no connected worker hosts (gauge).
pub const TASKS_UNHOSTED: &str = "weft_tasks_unhosted";
/// Workers connected (gauge).
pub const WORKERS: &str = "weft_workers_connected";
/// Free slots over all connected, non-draining workers (gauge).
pub const FREE_SLOTS: &str = "weft_free_slots";
/// 1 while this coordinator leads its group (a lone coordinator always
/// does), 0 while it stands by (gauge).
pub const LEADER: &str = "weft_leader";
/// How long taking a checkpoint took the run (histogram; with `async`
/// durability, the hand-off to the writer).
pub const CHECKPOINT_SECONDS: &str = "weft_checkpoint_seconds";
/// Bytes that checkpoints wrote, by what (`of`: a state `field` or the
/// `progress`) and how (`form`: `whole`, or a `delta` of what changed;
/// counter).
pub const CHECKPOINT_BYTES: &str = "weft_checkpoint_bytes_total";
/// Tokens of model calls, by `namespace`, `provider`, `model` and `type`
/// (`prompt`, `completion`, `cached`), as providers count them (counter).
pub const LLM_TOKENS: &str = "weft_llm_tokens_total";
/// What model calls cost by `[prices]`, by `namespace`, `provider` and
/// `model` (counter; only priced models).
pub const LLM_COST: &str = "weft_llm_cost_total";
/// Teammate messages accepted into map items' inboxes (counter).
pub const INBOX_MESSAGES: &str = "weft_inbox_messages_total";
/// Bytes of bundle files held for the runs that use them (gauge).
pub const BUNDLE_BYTES: &str = "weft_bundle_bytes";
/// Knowledge indexes kept for the workers, and their bytes (gauges).
pub const INDEXES_KEPT: &str = "weft_knowledge_indexes";
/// Bytes of the knowledge indexes kept (gauge).
pub const INDEX_BYTES: &str = "weft_knowledge_index_bytes";
/// Node cache entries kept (gauge, SPEC 20).
pub const CACHE_ENTRIES: &str = "weft_node_cache_entries";
/// Bytes of the node cache entries kept (gauge).
pub const CACHE_BYTES: &str = "weft_node_cache_bytes";
/// Cached steps' lookups, by `result`: `hit`, `miss` or `expired`
/// (counter).
pub const CACHE_LOOKUPS: &str = "weft_node_cache_lookups_total";
/// Node cache entries dropped to make room (counter).
pub const CACHE_EVICTED: &str = "weft_node_cache_evicted_total";
/// Workers' claims of a knowledge index, by what they got: `fetched`,
/// `build` or `wait` (counter).
pub const INDEX_CLAIMS: &str = "weft_knowledge_index_claims_total";
/// Writes the store refused because another coordinator leads now: the
/// deposed leader's, fenced on the leader key (counter).
pub const WRITES_FENCED: &str = "weft_store_writes_fenced_total";
/// Partitions this coordinator leads, in a partitioned group (gauge).
pub const PARTITIONS_LED: &str = "weft_partitions_led";
/// Partitions this coordinator handed over: drained and released
/// (counter).
pub const HAND_OVERS: &str = "weft_partition_hand_overs_total";
/// How long a hand-over took this coordinator, from the partition's drain
/// to its lease's release being sent (histogram).
pub const HAND_OVER_SECONDS: &str = "weft_partition_hand_over_seconds";
/// Partitions this coordinator dropped without a hand-over: it found
/// another leading them, or lost its session (counter).
pub const PARTITIONS_ABANDONED: &str = "weft_partitions_abandoned_total";
/// Runs each partition this coordinator leads holds, labelled
/// `partition` (gauge; 0 once it is led elsewhere).
pub const PARTITION_RUNS: &str = "weft_partition_runs";
// The embedded store's writes, log syncs and database commits are counted
// by the store itself: weft_store::{WRITES_METRIC, LOG_SYNCS_METRIC,
// COMMITS_METRIC}.

/// Task results not merged: late (the attempt was given to another worker
/// after its worker was lost) or duplicate (counter).
pub const RESULTS_DISCARDED: &str = "weft_results_discarded_total";
/// Requests refused, by `reason`: `no_identity`, `unknown_identity`,
/// `role` (too weak), `namespace` (a run of another namespace, answered
/// as unknown) and `approver` (not among a node's `approvers:`) (counter).
pub const REQUESTS_REFUSED: &str = "weft_requests_refused_total";
/// Connections closed at once: a listener or one address held as many as
/// it may (`listener`, `reason`: `listener` or `peer`).
pub const CONNECTIONS_REFUSED: &str = "weft_connections_refused_total";

/// Bucket bounds of the task latency histogram, in seconds: from a fast
/// handler to a long model call.
const TASK_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Bucket bounds of the checkpoint histogram, in seconds.
const CHECKPOINT_BUCKETS: [f64; 11] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Installs the Prometheus recorder for this process; fails when one is
/// installed already. Histograms are exported with buckets (`_bucket`
/// series), so dashboards take any quantile with `histogram_quantile`.
pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(TASK_SECONDS.to_owned()), &TASK_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(CHECKPOINT_SECONDS.to_owned()),
            &CHECKPOINT_BUCKETS,
        )?
        .install_recorder()?;
    metrics::describe_gauge!(RUNS, "runs by status");
    metrics::describe_counter!(RUNS_SUBMITTED, "runs submitted");
    metrics::describe_counter!(REQUESTS_REFUSED, "requests refused, by reason");
    metrics::describe_counter!(
        CONNECTIONS_REFUSED,
        "connections closed at once, a cap being reached, by listener and reason"
    );
    metrics::describe_counter!(TASKS_DISPATCHED, "task attempts sent to workers");
    metrics::describe_counter!(
        NODE_DEFINITIONS_SENT,
        "task attempts that carried their node's definition to a worker"
    );
    metrics::describe_counter!(
        BUNDLE_LISTS_SENT,
        "task attempts that carried their run's bundle list to a worker"
    );
    metrics::describe_counter!(
        INPUT_BYTES_REFERENCED,
        metrics::Unit::Bytes,
        "bytes of run input named by reference to an earlier run's, not sent again"
    );
    metrics::describe_counter!(
        OUTPUT_BYTES_HELD,
        metrics::Unit::Bytes,
        "bytes of steps' writes held as JSON text, never parsed by the coordinator"
    );
    metrics::describe_counter!(
        INPUT_BYTES_HELD,
        metrics::Unit::Bytes,
        "bytes of run input held as JSON text, never parsed by the coordinator"
    );
    metrics::describe_counter!(
        STATE_BYTES_SENT,
        metrics::Unit::Bytes,
        "bytes of state field values tasks carried to workers"
    );
    metrics::describe_counter!(
        TASKS_THROTTLED,
        "times a task or model call started waiting for a rate limit ([[limits]])"
    );
    metrics::describe_histogram!(TASK_SECONDS, metrics::Unit::Seconds, "dispatch to result");
    metrics::describe_gauge!(QUEUE_DEPTH, "tasks waiting for a slot or a hosting worker");
    metrics::describe_gauge!(TASKS_UNHOSTED, "queued tasks no connected worker hosts");
    metrics::describe_gauge!(
        BUNDLE_BYTES,
        metrics::Unit::Bytes,
        "bundle files held for runs"
    );
    metrics::describe_gauge!(INDEXES_KEPT, "knowledge indexes kept for the workers");
    metrics::describe_gauge!(
        INDEX_BYTES,
        metrics::Unit::Bytes,
        "bytes of the knowledge indexes kept"
    );
    metrics::describe_gauge!(CACHE_ENTRIES, "node cache entries kept");
    metrics::describe_gauge!(
        CACHE_BYTES,
        metrics::Unit::Bytes,
        "bytes of the node cache entries kept"
    );
    metrics::describe_counter!(
        CACHE_LOOKUPS,
        "cached steps' lookups, by result (hit, miss, expired)"
    );
    metrics::describe_counter!(CACHE_EVICTED, "node cache entries dropped to make room");
    metrics::describe_counter!(
        INDEX_CLAIMS,
        "workers' claims of a knowledge index, by outcome (fetched, build, wait)"
    );
    metrics::describe_gauge!(WORKERS, "workers connected");
    metrics::describe_gauge!(
        LEADER,
        "1 while this coordinator leads, 0 while it stands by"
    );
    metrics::describe_gauge!(FREE_SLOTS, "free slots of connected workers");
    metrics::describe_counter!(INBOX_MESSAGES, "teammate messages sent between map items");
    metrics::describe_histogram!(
        CHECKPOINT_SECONDS,
        metrics::Unit::Seconds,
        "taking a run's checkpoint"
    );
    metrics::describe_counter!(
        CHECKPOINT_BYTES,
        metrics::Unit::Bytes,
        "bytes checkpoints wrote: of fields or the progress, whole or as deltas"
    );
    metrics::describe_counter!(
        LLM_TOKENS,
        "tokens of model calls, by namespace, provider, model and type"
    );
    metrics::describe_gauge!(
        LLM_COST,
        "cost of model calls by [prices], by namespace, provider and model"
    );
    metrics::describe_counter!(
        WRITES_FENCED,
        "writes refused because another coordinator leads"
    );
    metrics::describe_gauge!(PARTITIONS_LED, "partitions this coordinator leads");
    metrics::describe_counter!(HAND_OVERS, "partitions handed over: drained and released");
    metrics::describe_histogram!(
        HAND_OVER_SECONDS,
        "time from a partition's drain to its lease's release being sent"
    );
    metrics::describe_counter!(
        PARTITIONS_ABANDONED,
        "partitions dropped without a hand-over (led elsewhere, or the session lost)"
    );
    metrics::describe_gauge!(
        PARTITION_RUNS,
        "runs held by each partition this coordinator leads"
    );
    metrics::describe_counter!(
        weft_store::WRITES_METRIC,
        "writes the embedded store made (each appended to its log)"
    );
    metrics::describe_counter!(
        weft_store::LOG_SYNCS_METRIC,
        "syncs of the embedded store's log to disk, each covering every write before it"
    );
    metrics::describe_counter!(
        weft_store::COMMITS_METRIC,
        "durable commits of the embedded store's batches of writes to its database"
    );
    metrics::describe_counter!(
        RESULTS_DISCARDED,
        "task results not merged: late or duplicate"
    );
    Ok(handle)
}

/// Whether the coordinator serves its API (runs restored, or standing by
/// and forwarding): what `/readyz` reports.
pub static READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Counts one model call's tokens and cost.
pub fn model_called(
    namespace: &str,
    provider: &str,
    model: &str,
    usage: &weft_proto::types::Usage,
    cost: Option<f64>,
) {
    let labels = |kind: &'static str| {
        [
            ("namespace", namespace.to_owned()),
            ("provider", provider.to_owned()),
            ("model", model.to_owned()),
            ("type", kind.to_owned()),
        ]
    };
    for (kind, tokens) in [
        ("prompt", usage.prompt_tokens),
        ("completion", usage.completion_tokens),
        ("cached", usage.cached_tokens),
    ] {
        metrics::counter!(LLM_TOKENS, &labels(kind)).increment(tokens);
    }
    if let Some(cost) = cost {
        let labels = [
            ("namespace", namespace.to_owned()),
            ("provider", provider.to_owned()),
            ("model", model.to_owned()),
        ];
        // A float counter: the exporter's counters are whole numbers, so
        // the cost is kept as a gauge that only grows.
        metrics::gauge!(LLM_COST, &labels).increment(cost);
    }
}
