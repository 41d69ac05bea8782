//! The typed client over the run service.

use std::path::Path;
pub use weft_proto::RunId;

use serde::Serialize;
use serde_json::Value;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::Channel;
use weft_proto::events::HistoryPoint;
pub use weft_proto::transport::ClientTls;
use weft_proto::transport::{Authorized, Bearer};
use weft_proto::v1 as pb;
use weft_proto::v1::run_service_client::RunServiceClient;

use crate::builder::GraphBuilder;
use crate::bundle::GraphBundle;
pub use crate::error::ClientError;
use crate::kept::{self, KeptInputs};
pub use crate::runs::{
    Answer, ChildRun, Delta, Event, Finding, RunInfo, UnhostedWait, WaitingNode,
};
use crate::runs::{ENDS_OR_PAUSES, ends_or_pauses_on_wire, run_info};
use crate::sent::{self, SentValues};

/// A run's status (the coordinator's own vocabulary).
pub use weft_proto::types::RunStatus;

/// How a run failed: its kind, the node involved and the message.
pub use weft_proto::events::ErrorInfo as RunErrorInfo;
/// What happened in a run, typed (one variant per kind of event).
pub use weft_proto::events::RunEvent;

/// A submitted run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// Its id.
    pub run_id: RunId,
    /// Validation warnings, and what no connected worker hosts yet.
    pub warnings: Vec<String>,
}

/// How a run is submitted, beyond its graph and input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// Its priority in its namespace's queue, over the graph's
    /// `settings.priority`.
    pub priority: Option<weft_graph::Priority>,
    /// Its steps neither take nor keep node cache entries (`weft run
    /// --no-cache`); its child runs inherit it.
    pub no_cache: bool,
}

/// How long a read ([`Client::get`], [`Client::status`], listing) waits
/// out a coordinator that cannot serve it now — a standby while its group
/// elects a leader, a coordinator restarting — before it gives up.
pub const READ_PATIENCE: std::time::Duration = std::time::Duration::from_secs(15);

/// Runs an idempotent call again while it fails as unreachable, for up to
/// [`READ_PATIENCE`].
async fn patiently<T, F, Fut>(mut call: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(50);
    loop {
        match call().await {
            Err(ClientError::Unreachable { .. } | ClientError::Unavailable(_))
                if started.elapsed() < READ_PATIENCE =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// How long [`Client::wait`] keeps trying a coordinator that does not
/// answer before it gives up.
pub const RECONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// A connection to a coordinator.
#[derive(Debug, Clone)]
pub struct Client {
    runs: RunServiceClient<Authorized>,
    channel: Channel,
    /// The large strings of the inputs it submitted, until it reads each
    /// run's end (`kept`).
    kept: std::sync::Arc<KeptInputs>,
    /// The large strings it sent that the coordinator keeps, to name
    /// rather than send again (`sent`).
    sent: std::sync::Arc<SentValues>,
}

impl Client {
    /// Connects to the coordinator at `url` (e.g. `http://127.0.0.1:7700`;
    /// an `https://` URL trusts the system's roots).
    pub async fn connect(url: impl Into<String>) -> Result<Self, ClientError> {
        Self::connect_with(url, &ClientTls::default()).await
    }

    /// Connects to the coordinator at `url`, with `tls` for an `https://`
    /// URL: the CA that signed the coordinator's certificate, and a client
    /// certificate for mutual TLS.
    pub async fn connect_with(
        url: impl Into<String>,
        tls: &ClientTls,
    ) -> Result<Self, ClientError> {
        let url = url.into();
        let unreachable = |reason: String| ClientError::Unreachable {
            url: url.clone(),
            reason,
        };
        let endpoint = weft_proto::transport::endpoint(&url, tls)
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        let channel = endpoint.connect().await.map_err(|e| {
            let chain = weft_proto::transport::source_chain(&e);
            unreachable(weft_proto::transport::explain_tls_failure(&url, &chain).unwrap_or(chain))
        })?;
        Ok(Self::over(channel, Bearer::default(), Default::default()))
    }

    /// A client of the coordinator at `url` that connects on its first
    /// call rather than now, and again on a later call when the
    /// coordinator was away: for a program that makes its client before
    /// the coordinator is up, or keeps it across a coordinator's restart.
    /// Only a URL or a TLS file that is wrong fails here; an unreachable
    /// coordinator fails each call as [`ClientError::Unreachable`]. Called
    /// within a tokio runtime, whose task the connection runs on.
    pub fn connect_lazy(url: &str, tls: &ClientTls) -> Result<Self, ClientError> {
        let endpoint = weft_proto::transport::endpoint(url, tls)
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        Ok(Self::over(
            endpoint.connect_lazy(),
            Bearer::default(),
            Default::default(),
        ))
    }

    fn over(channel: Channel, bearer: Bearer, kept: std::sync::Arc<KeptInputs>) -> Self {
        let runs = RunServiceClient::with_interceptor(channel.clone(), bearer)
            .max_decoding_message_size(weft_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(weft_proto::MAX_MESSAGE_BYTES);
        Self {
            runs,
            channel,
            kept,
            // Another identity may be another namespace, where the values
            // this one sent are not found.
            sent: Default::default(),
        }
    }

    /// The same connection, sending `token` as `authorization: Bearer
    /// TOKEN` with every request (a coordinator with `[[tokens]]` wants
    /// one; SPEC 11).
    pub fn with_token(self, token: &str) -> Result<Self, ClientError> {
        let bearer = Bearer::new(Some(token)).map_err(|e| ClientError::Invalid(e.to_string()))?;
        Ok(Self::over(self.channel, bearer, self.kept))
    }

    /// Submits the graph in a file, bundled with the files it names.
    pub async fn submit_file(
        &self,
        path: &Path,
        input: &impl Serialize,
    ) -> Result<Submitted, ClientError> {
        self.submit_bundle(GraphBundle::from_file(path)?, input)
            .await
    }

    /// Submits a graph built in code.
    pub async fn submit_graph(
        &self,
        graph: &GraphBuilder,
        input: &impl Serialize,
    ) -> Result<Submitted, ClientError> {
        self.submit_bundle(graph.bundle(), input).await
    }

    /// Submits a bundle.
    pub async fn submit_bundle(
        &self,
        bundle: GraphBundle,
        input: &impl Serialize,
    ) -> Result<Submitted, ClientError> {
        self.submit_bundle_with(bundle, input, SubmitOptions::default())
            .await
    }

    /// Submits a bundle with `options` (its priority, the node cache).
    pub async fn submit_bundle_with(
        &self,
        bundle: GraphBundle,
        input: &impl Serialize,
        options: SubmitOptions,
    ) -> Result<Submitted, ClientError> {
        // Through a value, so long strings are written by the fast writer;
        // its large strings are kept rather than sent back (`kept`), and
        // those sent before are named rather than sent again (`sent`).
        let mut input = serde_json::to_value(input)
            .map_err(|e| ClientError::Invalid(format!("the input does not serialize: {e}")))?;
        if let Some(too_large) = bundle.too_large(weft_proto::MAX_MESSAGE_BYTES) {
            return Err(ClientError::Invalid(too_large));
        }
        // What a refusal for size would not say: which files make it big.
        let contents = bundle.size_and_largest();
        let mut bundle = Some(to_proto(bundle));
        let priority = options
            .priority
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default();
        let mut named = match &input {
            Value::Object(fields) => self.sent.references(fields),
            _ => Vec::new(),
        };
        let response = loop {
            let input_json = match &mut input {
                Value::Object(fields) => sent::write_without(fields, &named),
                other => weft_proto::json::to_string(other),
            };
            let request = pb::SubmitRequest {
                // Copied only when a refusal may ask for it again.
                bundle: match named.is_empty() {
                    true => bundle.take(),
                    false => bundle.clone(),
                },
                input_json,
                priority: priority.clone(),
                no_cache: options.no_cache,
                input_refs: named
                    .iter()
                    .map(|(field, run, from_field)| pb::InputReference {
                        field: field.clone(),
                        run_id: run.clone(),
                        from_field: from_field.clone(),
                    })
                    .collect(),
            };
            match self.runs.clone().submit(request).await {
                // A value it named is no longer kept there: sent whole.
                Err(status)
                    if status.code() == tonic::Code::FailedPrecondition
                        && status.message().starts_with(sent::NOT_HELD)
                        && !named.is_empty() =>
                {
                    self.sent.forget();
                    named.clear();
                }
                answer => break answer,
            }
        };
        let response = match response {
            Ok(response) => response.into_inner(),
            Err(status) if status.code() == tonic::Code::OutOfRange => {
                return Err(ClientError::Refused(format!(
                    "the coordinator refused the submission as too large ({}): {contents} (it takes at most its max_bundle_bytes)",
                    status.message()
                )));
            }
            Err(status) if status.message().contains("(max_bundle_bytes)") => {
                return Err(ClientError::Refused(format!(
                    "{}: {contents}",
                    status.message()
                )));
            }
            Err(status) => return Err(status.into()),
        };
        if let Value::Object(fields) = &input {
            self.sent
                .remember(&response.run_id, fields, &response.referable);
        }
        let large = kept::take_large(&mut input);
        self.kept.keep(&response.run_id, large);
        Ok(Submitted {
            run_id: response.run_id.into(),
            warnings: response.warnings,
        })
    }

    /// What the coordinator finds wrong with a graph, without running it:
    /// its errors and warnings (none: it is valid), each naming the nodes
    /// it is about.
    pub async fn validate(&self, bundle: GraphBundle) -> Result<Vec<Finding>, ClientError> {
        if let Some(too_large) = bundle.too_large(weft_proto::MAX_MESSAGE_BYTES) {
            return Err(ClientError::Invalid(too_large));
        }
        let request = pb::ValidateRequest {
            bundle: Some(to_proto(bundle)),
        };
        let response = self.runs.clone().validate(request).await?.into_inner();
        Ok(response
            .findings
            .into_iter()
            .map(Finding::from_wire)
            .collect())
    }

    /// A run's current status and state.
    pub async fn get(&self, run_id: &str) -> Result<RunInfo, ClientError> {
        self.fetch(run_id, false).await
    }

    /// A run's status without its state (`state` is `null`): cheap to poll
    /// however large the state is.
    pub async fn status(&self, run_id: &str) -> Result<RunInfo, ClientError> {
        self.fetch(run_id, true).await
    }

    async fn fetch(&self, run_id: &str, omit_state: bool) -> Result<RunInfo, ClientError> {
        let kept_input = match omit_state {
            true => Vec::new(),
            false => self.kept.names(run_id),
        };
        let (mut info, input_fields) = self
            .fetch_leaving_out(run_id, omit_state, &kept_input)
            .await?;
        if omit_state {
            return Ok(info);
        }
        let ended = info.status.is_terminal();
        if input_fields.is_empty() {
            if ended {
                self.kept.forget(run_id);
            }
            return Ok(info);
        }
        if self
            .kept
            .fill(run_id, &mut info.state, &input_fields, ended)
        {
            return Ok(info);
        }
        // Let go meanwhile (another thread's submissions): read it whole.
        Ok(self.fetch_leaving_out(run_id, false, &[]).await?.0)
    }

    /// Run `run_id`, its state leaving out those of the input's fields
    /// `kept_input` that are still as it gave them; and their names.
    async fn fetch_leaving_out(
        &self,
        run_id: &str,
        omit_state: bool,
        kept_input: &[String],
    ) -> Result<(RunInfo, Vec<String>), ClientError> {
        patiently(|| async {
            let request = pb::GetRunRequest {
                run_id: run_id.to_owned(),
                omit_state,
                with_diagram: false,
                kept_input: kept_input.to_vec(),
            };
            let mut info = self.runs.clone().get_run(request).await?.into_inner();
            let input_fields = std::mem::take(&mut info.input_fields);
            Ok((run_info(info)?, input_fields))
        })
        .await
    }

    /// Every run, newest first, without their states.
    pub async fn list(&self) -> Result<Vec<RunInfo>, ClientError> {
        Ok(self.list_page(0, None).await?.0)
    }

    /// Up to `limit` runs (0: the coordinator's default page, 100), newest
    /// first, after run `after`; and the id to pass as `after` for the next
    /// page, when there is one.
    pub async fn list_page(
        &self,
        limit: u32,
        after: Option<&str>,
    ) -> Result<(Vec<RunInfo>, Option<String>), ClientError> {
        let page = patiently(|| async {
            let request = pb::ListRunsRequest {
                limit,
                after: after.unwrap_or_default().to_owned(),
            };
            Ok(self.runs.clone().list_runs(request).await?.into_inner())
        })
        .await?;
        let runs = page
            .runs
            .into_iter()
            .map(run_info)
            .collect::<Result<_, _>>()?;
        Ok((runs, (!page.next.is_empty()).then_some(page.next)))
    }

    /// The knowledge indexes the coordinator keeps for the namespaces
    /// this client may read (only `namespace`'s, when given), most
    /// recently used first.
    pub async fn indexes(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<crate::KnowledgeIndex>, ClientError> {
        let listed = patiently(|| async {
            let request = pb::ListIndexesRequest {
                namespace: namespace.unwrap_or_default().to_owned(),
            };
            Ok(self.runs.clone().list_indexes(request).await?.into_inner())
        })
        .await?;
        Ok(listed.indexes.into_iter().map(Into::into).collect())
    }

    /// The group of coordinators as the one this client talks to sees it:
    /// the partition count and, in a partitioned group, who leads each
    /// partition and the runs each holds (counted for a caller who sees
    /// every namespace).
    pub async fn group(&self) -> Result<crate::GroupInfo, ClientError> {
        let described = patiently(|| async {
            let request = pb::DescribeGroupRequest {};
            Ok(self
                .runs
                .clone()
                .describe_group(request)
                .await?
                .into_inner())
        })
        .await?;
        Ok(described.into())
    }

    /// The knowledge index `key` the coordinator keeps for `namespace`
    /// (`None`: the caller's), packed.
    pub async fn fetch_index(
        &self,
        namespace: Option<&str>,
        key: &str,
    ) -> Result<Vec<u8>, ClientError> {
        let fetched = patiently(|| async {
            let request = pb::FetchIndexRequest {
                namespace: namespace.unwrap_or_default().to_owned(),
                key: key.to_owned(),
            };
            Ok(self.runs.clone().fetch_index(request).await?.into_inner())
        })
        .await?;
        Ok(fetched.content)
    }

    /// A run's events from position `from`, live until the run ends.
    pub async fn watch(
        &self,
        run_id: &str,
        from: u64,
    ) -> Result<impl Stream<Item = Result<Event, ClientError>> + use<>, ClientError> {
        let stream = self.watch_wire(run_id, from, Vec::new()).await?;
        // Events of kinds this version does not know are skipped.
        Ok(stream.filter_map(|item| match item {
            Ok(event) => Event::from_wire(event).map(Ok),
            Err(status) => Some(Err(ClientError::from(status))),
        }))
    }

    /// A run's model output as its steps stream it (SPEC 19), from offset
    /// `from`, live until the run ends. A watcher that loses the stream
    /// watches again from the offset after the last piece it read.
    pub async fn stream(
        &self,
        run_id: &str,
        from: u64,
    ) -> Result<impl Stream<Item = Result<Delta, ClientError>> + use<>, ClientError> {
        let request = pb::StreamRunRequest {
            run_id: run_id.to_owned(),
            from,
        };
        let stream = self.runs.clone().stream_run(request).await?.into_inner();
        Ok(stream.map(|item| match item {
            Ok(delta) => Ok(Delta::from_wire(delta)),
            Err(status) => Err(ClientError::from(status)),
        }))
    }

    /// Starts a new run from run `run_id`'s state at place `at` of its
    /// history — after a wave (`2.into()`), or at a point within the next
    /// one (`"2.57".parse()`) — (the last kept when `None`), with `set`
    /// replacing fields of that state, on the same bundle (SPEC 20); the
    /// new run's id. The original is untouched; the fork's `forked_from`
    /// names it. A child run's fork forks its parents too: the id is the
    /// outermost fork's.
    pub async fn fork(
        &self,
        run_id: &str,
        at: Option<HistoryPoint>,
        set: &serde_json::Map<String, Value>,
    ) -> Result<Submitted, ClientError> {
        let request = pb::ForkRequest {
            run_id: run_id.to_owned(),
            at: at.map(|at| at.step),
            point: at.map_or(0, |at| at.point),
            set_json: set
                .iter()
                .map(|(field, value)| (field.clone(), value.to_string()))
                .collect(),
        };
        let response = self.runs.clone().fork(request).await?.into_inner();
        Ok(Submitted {
            run_id: response.run_id.into(),
            warnings: response.warnings,
        })
    }

    /// The places run `run_id`'s history keeps, and its state at place
    /// `at` (wave 0: the input; `None`: the last kept) (SPEC 20).
    pub async fn history(
        &self,
        run_id: &str,
        at: Option<HistoryPoint>,
    ) -> Result<crate::runs::RunHistory, ClientError> {
        let history = patiently(|| async {
            let request = pb::GetHistoryRequest {
                run_id: run_id.to_owned(),
                at: at.map(|at| at.step),
                point: at.map_or(0, |at| at.point),
            };
            Ok(self.runs.clone().get_history(request).await?.into_inner())
        })
        .await?;
        crate::runs::RunHistory::from_wire(history)
    }

    /// The run's events from `from` on, as they come off the wire: those
    /// of `types` (none: all).
    async fn watch_wire(
        &self,
        run_id: &str,
        from: u64,
        types: Vec<String>,
    ) -> Result<tonic::Streaming<pb::RunEvent>, ClientError> {
        let request = pb::WatchRunRequest {
            run_id: run_id.to_owned(),
            from,
            types,
        };
        Ok(self.runs.clone().watch_run(request).await?.into_inner())
    }

    /// Waits until the run has ended or waits for a human. A coordinator
    /// that goes away meanwhile (a restart, a failover) is waited for, up to
    /// [`RECONNECT_PATIENCE`] without an answer; runs survive restarts.
    pub async fn wait(&self, run_id: &str) -> Result<RunInfo, ClientError> {
        let mut outage: Option<std::time::Instant> = None;
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            match self.wait_once(run_id).await {
                Err(error @ (ClientError::Unreachable { .. } | ClientError::Unavailable(_))) => {
                    let since = *outage.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > RECONNECT_PATIENCE {
                        return Err(error);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// A status, then (if the run goes on) a watch that ends at the run's
    /// end or pause, then the run whole: three calls, or two for a run
    /// that has already ended. The run read after the watch is returned
    /// if it has ended or waits, and its position starts the next watch
    /// otherwise (an older coordinator's pause that was answered meanwhile).
    async fn wait_once(&self, run_id: &str) -> Result<RunInfo, ClientError> {
        let (mut info, mut whole) = (self.status(run_id).await?, false);
        loop {
            if info.status.is_terminal() || info.status == RunStatus::Waiting {
                return match whole {
                    true => Ok(info),
                    false => self.get(run_id).await,
                };
            }
            // Only where the log ends or pauses matters here: the
            // coordinator sends only the events that end or pause a run (a
            // map's thousands of item events stay where they are), and
            // their kinds are checked again in case it is older and sends
            // all.
            let ends = ENDS_OR_PAUSES.map(String::from).into();
            let mut events = self.watch_wire(run_id, info.event_count, ends).await?;
            loop {
                match events.message().await {
                    Ok(Some(event)) if ends_or_pauses_on_wire(&event) => break,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    // The stream broke off (the coordinator went away):
                    // the caller asks again once it is back.
                    Err(status) => {
                        return Err(ClientError::Unreachable {
                            url: String::new(),
                            reason: ClientError::from(status).to_string(),
                        });
                    }
                }
            }
            (info, whole) = (self.get(run_id).await?, true);
        }
    }

    /// Answers a waiting `approval` (`"approve"`/`"reject"`) or `input` node.
    pub async fn resume(
        &self,
        run_id: &str,
        node: &str,
        value: &Value,
        comment: Option<&str>,
    ) -> Result<RunInfo, ClientError> {
        let request = pb::ResumeRequest {
            run_id: run_id.to_owned(),
            node: node.to_owned(),
            value_json: value.to_string(),
            comment: comment.unwrap_or_default().to_owned(),
        };
        run_info(self.runs.clone().resume(request).await?.into_inner())
    }

    /// Cancels a run.
    pub async fn cancel(&self, run_id: &str) -> Result<RunInfo, ClientError> {
        run_info(
            self.runs
                .clone()
                .cancel(pb::CancelRequest {
                    run_id: run_id.to_owned(),
                })
                .await?
                .into_inner(),
        )
    }

    /// Re-runs a failed run from the wave that failed.
    pub async fn retry(&self, run_id: &str) -> Result<RunInfo, ClientError> {
        run_info(
            self.runs
                .clone()
                .retry(pb::RetryRequest {
                    run_id: run_id.to_owned(),
                })
                .await?
                .into_inner(),
        )
    }

    /// Removes an ended run and its records (needs the admin role when the
    /// coordinator has identities).
    pub async fn delete(&self, run_id: &str) -> Result<(), ClientError> {
        self.runs
            .clone()
            .delete_run(pb::DeleteRunRequest {
                run_id: run_id.to_owned(),
            })
            .await?;
        Ok(())
    }
}

fn to_proto(bundle: GraphBundle) -> pb::GraphBundle {
    pb::GraphBundle {
        graph_path: bundle.graph_path,
        files: bundle
            .files
            .into_iter()
            .map(|(path, content, mode)| pb::BundleFile {
                path,
                content,
                mode,
            })
            .collect(),
    }
}
