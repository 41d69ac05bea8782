//! How the rest of the coordinator reaches a run: a [`RunHandle`], which
//! talks to the run's actor while the run is live, and answers from the
//! run's [`FinishedRun`] record once it has ended.
//!
//! An ended run costs its summary (the view with its final state), nothing
//! more: its actor, channels and live feed are gone, and its event log is
//! read back from the store when it is watched ([`EndedLog`]). A failed run
//! also keeps what `weft retry` needs to start its actor again, its log
//! with it.

use std::sync::{Arc, RwLock};
use weft_proto::{NodeId, RunId};

use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use super::RunSetup;
use super::liveness::{Command, Liveness, revive};
pub use weft_proto::events::StoredEvent;

use crate::run_actor::{HumanAnswer, Input, Rejected, RunError, RunEvent, RunStatus, State};

/// A run as clients see it.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The run id.
    pub id: RunId,
    /// What its steps' model calls used, priced (its ended children's
    /// included).
    pub usage: weft_proto::types::Usage,
    /// The same by model, unpriced: what a parent adds to its own.
    pub models: Arc<std::collections::BTreeMap<String, weft_proto::types::Usage>>,
    /// The graph's name.
    pub graph_name: String,
    /// The graph (for its diagram).
    pub graph: Arc<crate::graph::Graph>,
    /// The id of the run's trace.
    pub trace_id: Arc<str>,
    /// Status.
    pub status: RunStatus,
    /// The state as of the last merge.
    pub state: State,
    /// The JSON text of each field of `state`, in its order, as the run
    /// wrote it for its workers and checkpoints: a report of a live run
    /// shows the state from these rather than writing it again. Empty in
    /// an ended run's record, which keeps only the values.
    pub state_texts: Vec<Arc<str>>,
    /// The fields still exactly as the run's input gave them, kept as the
    /// text the client sent (`weft_machine::held`): a client that kept
    /// its input is not sent them back.
    pub as_input: Vec<String>,
    /// The error of a failed or cancelled run.
    pub error: Option<RunError>,
    /// Nodes waiting for a human: (node, kind, prompt).
    pub waiting: Vec<(String, String, String)>,
    /// Events so far.
    pub event_count: u64,
    /// When the run was submitted (Unix milliseconds).
    pub created_unix_ms: i64,
    /// Work no connected worker hosts, which the run waits for.
    pub unhosted: Vec<UnhostedWait>,
    /// The child runs its subgraph nodes started: (node, run id).
    pub children: Vec<(NodeId, RunId)>,
    /// Its namespace and submitter.
    pub owner: crate::run_actor::Owner,
    /// For a fork, the run and wave it was forked from.
    pub forked_from: Option<weft_proto::events::ForkedFrom>,
    /// Who answered its human nodes.
    pub answers: Vec<crate::run_actor::Answered>,
    /// When it ended (Unix milliseconds), once it has.
    pub ended_unix_ms: Option<i64>,
}

impl RunView {
    /// Of the fields `kept`, those still exactly as the run's input gave
    /// them.
    pub fn input_fields(&self, kept: &[String]) -> Vec<String> {
        self.as_input
            .iter()
            .filter(|name| kept.contains(name))
            .cloned()
            .collect()
    }
}

/// Tasks of one node waiting for a worker that hosts what they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnhostedWait {
    /// The node (or the function, for a call).
    pub node: String,
    /// What nobody connected hosts (`handler 'summarize'`, `kind 'llm'`, …).
    pub needs: String,
    /// How many of its tasks wait.
    pub tasks: u32,
}

/// Why a request to a run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunRequestError {
    /// The run refused the request; it is unchanged.
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// The run's actor is gone (the coordinator is shutting down).
    #[error("the coordinator is shutting down")]
    ShuttingDown,
    /// The ended run's events could not be read back from the store.
    #[error("the run's events could not be read from the store: {0}")]
    Store(String),
}

/// An ended run: what clients can still ask of it.
pub struct FinishedRun {
    /// Its last view; its state without the fields `stored` leaves out.
    pub view: RunView,
    /// Its whole event log.
    pub log: EndedLog,
    /// When it ended (Unix milliseconds).
    pub finished_unix_ms: i64,
    /// For a failed run, what starting its actor again takes.
    pub(super) revival: std::sync::Mutex<Option<RunSetup>>,
    /// Its large fields, when the store holds its final state: they are
    /// read back when the state is asked for, not kept in memory.
    pub(super) stored: Option<StoredFields>,
}

/// An ended run's fields of [`KEPT_FIELD_BYTES`] or more, left in the
/// store: a coordinator keeping thousands of ended runs holds their
/// summaries and small fields, not every large state they ended with.
pub(super) struct StoredFields {
    /// The store, which holds the run's final state.
    pub(super) keeper: crate::durable::Keeper,
    /// Every field's name, in the state's order.
    pub(super) order: Vec<String>,
    /// The fields the record's view leaves out.
    pub(super) left_out: Vec<String>,
}

/// The size of JSON text from which an ended run's field is left in the
/// store rather than kept in its record.
pub(super) const KEPT_FIELD_BYTES: usize = 64 * 1024;

/// Takes the fields whose text (as the run wrote it, `view.state_texts`)
/// is [`KEPT_FIELD_BYTES`] or more out of an ended run's `view`, whose
/// final state `keeper`'s store holds; `None` when every field is small.
pub(super) fn leave_out_large_fields(
    view: &mut RunView,
    keeper: &crate::durable::Keeper,
) -> Option<StoredFields> {
    if view.state_texts.len() != view.state.len() {
        return None;
    }
    let names = view.state.keys();
    let left_out: Vec<String> = names
        .zip(&view.state_texts)
        .filter(|(_, text)| text.len() >= KEPT_FIELD_BYTES)
        .map(|(name, _)| name.clone())
        .collect();
    if left_out.is_empty() {
        return None;
    }
    let order = view.state.keys().cloned().collect();
    let kept = view
        .state
        .iter()
        .filter(|(name, _)| !left_out.contains(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    view.state = Arc::new(kept);
    Some(StoredFields {
        keeper: keeper.clone(),
        order,
        left_out,
    })
}

impl FinishedRun {
    /// Whether the record's view leaves out some of the state's fields.
    pub fn leaves_out_fields(&self) -> bool {
        self.stored.is_some()
    }

    /// The record's view with the whole state: the fields it leaves out
    /// read back from the store.
    async fn whole_view(&self) -> Result<RunView, RunRequestError> {
        let Some(stored) = &self.stored else {
            return Ok(self.view.clone());
        };
        let fields = self
            .whole_state(stored, &[], Value::clone, |name, text| {
                serde_json::from_str(&text).map_err(|error| {
                    RunRequestError::Store(format!(
                        "the stored field '{name}' is not JSON: {error}"
                    ))
                })
            })
            .await?;
        let mut view = self.view.clone();
        view.state = Arc::new(
            fields
                .into_iter()
                .filter_map(|(name, value)| Some((name.to_owned(), value?)))
                .collect(),
        );
        Ok(view)
    }

    /// The state's JSON text as `weft_proto::json` writes it: the small
    /// fields written from the record, the large ones as the store holds
    /// them (the text the run wrote), not parsed and written again; the
    /// fields `left_out` as `null`, not read from the store at all.
    pub async fn state_json(&self, left_out: &[String]) -> Result<String, RunRequestError> {
        let Some(stored) = &self.stored else {
            return Ok(weft_proto::json::object_to_string(&self.view.state));
        };
        let fields = self
            .whole_state(stored, left_out, weft_proto::json::to_string, |_, text| {
                Ok(text)
            })
            .await?;
        Ok(weft_proto::json::object_of_texts(fields.iter().map(
            |(name, text)| match text {
                Some(text) => (*name, text.as_str()),
                None => (*name, "null"),
            },
        )))
    }

    /// Every field in the state's order: a kept one through `small`, one
    /// left out through `large` from the text the store holds, and `None`
    /// for those named in `skipped` (not read).
    async fn whole_state<'a, T>(
        &'a self,
        stored: &'a StoredFields,
        skipped: &[String],
        small: impl Fn(&Value) -> T,
        large: impl Fn(&str, String) -> Result<T, RunRequestError>,
    ) -> Result<Vec<(&'a str, Option<T>)>, RunRequestError> {
        let mut texts = self.left_out_texts(stored, skipped).await?;
        let mut fields = Vec::with_capacity(stored.order.len());
        for name in &stored.order {
            let field = match (self.view.state.get(name), texts.remove(name)) {
                _ if skipped.contains(name) => None,
                (Some(value), _) => Some(small(value)),
                (None, Some(text)) => Some(large(name, text)?),
                (None, None) => continue,
            };
            fields.push((name.as_str(), field));
        }
        Ok(fields)
    }

    /// The texts of the fields the record leaves out, but those `skipped`.
    async fn left_out_texts(
        &self,
        stored: &StoredFields,
        skipped: &[String],
    ) -> Result<std::collections::HashMap<String, String>, RunRequestError> {
        let wanted: Vec<String> = stored
            .left_out
            .iter()
            .filter(|name| !skipped.contains(name))
            .cloned()
            .collect();
        crate::durable::restore::read_fields(stored.keeper.store(), &self.view.id, &wanted)
            .await
            .map_err(|error| {
                RunRequestError::Store(format!("the run's state could not be read: {error}"))
            })
    }
}

/// Where an ended run's event log is.
pub enum EndedLog {
    /// In memory: a run kept without a store, a failed run that may be
    /// retried, or a log the store did not take whole.
    Held(Vec<StoredEvent>),
    /// In the store only, every event of it: a coordinator keeping
    /// thousands of ended runs holds none of their logs.
    Stored {
        /// The store.
        keeper: crate::durable::Keeper,
        /// How many events the run has.
        count: u64,
    },
}

impl EndedLog {
    /// How many events the run has.
    pub fn count(&self) -> u64 {
        match self {
            Self::Held(log) => log.len() as u64,
            Self::Stored { count, .. } => *count,
        }
    }

    /// The log, when it is in memory.
    pub fn held(&self) -> Option<&[StoredEvent]> {
        match self {
            Self::Held(log) => Some(log),
            Self::Stored { .. } => None,
        }
    }

    /// The events of run `id` from position `from` on.
    pub async fn since(&self, id: &str, from: u64) -> Result<Vec<StoredEvent>, RunRequestError> {
        let from_index = usize::try_from(from).unwrap_or(usize::MAX);
        match self {
            Self::Held(log) => Ok(log.get(from_index..).unwrap_or_default().to_vec()),
            Self::Stored { .. } if from >= self.count() => Ok(Vec::new()),
            Self::Stored { keeper, count } => {
                crate::durable::restore::read_events(keeper.store(), id, from..*count)
                    .await
                    .map_err(|error| RunRequestError::Store(error.to_string()))
            }
        }
    }
}

/// A cloneable handle to a run.
#[derive(Clone)]
pub struct RunHandle {
    id: RunId,
    /// The namespace the run belongs to (fixed at submission).
    namespace: Arc<str>,
    liveness: Arc<RwLock<Liveness>>,
    /// Its steps' model output as it streams.
    streams: Arc<crate::run_actor::streams::RunStreams>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle").field("id", &self.id).finish()
    }
}

impl RunHandle {
    pub(super) fn new(
        id: RunId,
        namespace: &str,
        liveness: Arc<RwLock<Liveness>>,
        streams: Arc<crate::run_actor::streams::RunStreams>,
    ) -> Self {
        Self {
            id,
            namespace: namespace.into(),
            liveness,
            streams,
        }
    }

    /// Its steps' model output as it streams (SPEC 19).
    pub fn streams(&self) -> &Arc<crate::run_actor::streams::RunStreams> {
        &self.streams
    }

    /// The run id.
    pub fn id(&self) -> &RunId {
        &self.id
    }

    /// The namespace the run belongs to.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// When the run ended (Unix milliseconds), if it has: [`Self::finished`]
    /// without taking a share of the record, for walks over every run.
    pub fn ended_unix_ms(&self) -> Option<i64> {
        match &*self.liveness.read().unwrap_or_else(|e| e.into_inner()) {
            Liveness::Finished(record) => Some(record.finished_unix_ms),
            Liveness::Live(_) => None,
        }
    }

    /// The record of the run if it has ended.
    pub fn finished(&self) -> Option<Arc<FinishedRun>> {
        match &*self.liveness.read().unwrap_or_else(|e| e.into_inner()) {
            Liveness::Finished(record) => Some(record.clone()),
            Liveness::Live(_) => None,
        }
    }

    /// The run's current view, its whole state with it (an ended run's
    /// large fields read back from the store).
    pub async fn get(&self) -> Result<RunView, RunRequestError> {
        if let Some(record) = self.finished() {
            return record.whole_view().await;
        }
        match self.request(Command::Get).await {
            Err(RunRequestError::ShuttingDown) => match self.finished() {
                Some(record) => record.whole_view().await,
                None => Err(RunRequestError::ShuttingDown),
            },
            other => other,
        }
    }

    /// The run's current view for a summary (a listing, a status): an
    /// ended run's large fields are left out of its state, not read back.
    pub async fn summary(&self) -> Result<RunView, RunRequestError> {
        if let Some(record) = self.finished() {
            return Ok(record.view.clone());
        }
        match self.request(Command::Get).await {
            Err(RunRequestError::ShuttingDown) => self.finished_or_gone(|r| r.view.clone()),
            other => other,
        }
    }

    /// Events from position `from`, and for a live run a receiver for the
    /// ones to come (`None`: the run has ended and these are all).
    pub async fn watch(
        &self,
        from: u64,
    ) -> Result<(Vec<StoredEvent>, Option<broadcast::Receiver<StoredEvent>>), RunRequestError> {
        if let Some(record) = self.finished() {
            return Ok((record.log.since(&self.id, from).await?, None));
        }
        match self.request(|reply| Command::Watch { from, reply }).await {
            Ok((events, live)) => Ok((events, Some(live))),
            Err(RunRequestError::ShuttingDown) => {
                let record = self.finished().ok_or(RunRequestError::ShuttingDown)?;
                Ok((record.log.since(&self.id, from).await?, None))
            }
            Err(other) => Err(other),
        }
    }

    /// The run's view once it has ended (completed, failed or cancelled).
    pub async fn ended(&self) -> Result<RunView, RunRequestError> {
        loop {
            let view = self.get().await?;
            if view.status.is_terminal() {
                return Ok(view);
            }
            let (_, live) = self.watch(view.event_count).await?;
            let Some(mut live) = live else { continue };
            loop {
                match live.recv().await {
                    Ok(stored) if matches!(*stored.event, RunEvent::RunFinished { .. }) => break,
                    Ok(_) => {}
                    // Behind or closed: look at the run again.
                    Err(_) => break,
                }
            }
        }
    }

    /// Answers a waiting node.
    pub async fn resume(
        &self,
        node: String,
        answer: HumanAnswer,
    ) -> Result<RunView, RunRequestError> {
        if self.finished().is_some() {
            return Err(Rejected::NotWaiting {
                node,
                waiting: Vec::new(),
            }
            .into());
        }
        self.act(Input::Answered { node, answer }).await
    }

    /// Cancels the run; `by`: who asked.
    pub async fn cancel(&self, by: Option<String>) -> Result<RunView, RunRequestError> {
        if self.finished().is_some() {
            return Err(Rejected::Ended.into());
        }
        self.act(Input::Cancel { by }).await
    }

    /// Retries a failed run from the wave that failed (`by`: who asked),
    /// at once: its actor starts again from the record if the run has
    /// ended and may be retried (`true`: it is live once this returns);
    /// `false` if the run is live, when [`RunHandle::ask_retry`] has its
    /// machine answer. The registry does this (`Runs::retry`), which counts
    /// the run going again as it revives.
    pub fn revive(&self, by: Option<String>) -> Result<bool, RunRequestError> {
        let Some(record) = self.finished() else {
            return Ok(false);
        };
        revive(&record, &self.liveness, by)?;
        Ok(true)
    }

    /// Asks a live run to retry: a live run is not a failed one, and its
    /// machine says so; a run that ended meanwhile is refused as ended.
    pub async fn ask_retry(&self, by: Option<String>) -> Result<RunView, RunRequestError> {
        self.act(Input::RetryRun { by }).await
    }

    async fn act(&self, input: Input) -> Result<RunView, RunRequestError> {
        let input = Box::new(input);
        match self.request(|reply| Command::Act { input, reply }).await {
            Ok(result) => Ok(result?),
            // The run ended between the check and the request.
            Err(RunRequestError::ShuttingDown) if self.finished().is_some() => {
                Err(Rejected::Ended.into())
            }
            Err(other) => Err(other),
        }
    }

    /// What `serve` makes of the record of a run whose actor just ended;
    /// no record means the coordinator is shutting down.
    fn finished_or_gone<T>(
        &self,
        serve: impl FnOnce(&FinishedRun) -> T,
    ) -> Result<T, RunRequestError> {
        self.finished()
            .map(|record| serve(&record))
            .ok_or(RunRequestError::ShuttingDown)
    }

    /// Sends a command carrying a reply channel and waits for the reply; a
    /// closed channel means the actor is gone.
    async fn request<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, RunRequestError> {
        let tx = match &*self.liveness.read().unwrap_or_else(|e| e.into_inner()) {
            Liveness::Live(tx) => tx.clone(),
            Liveness::Finished(_) => return Err(RunRequestError::ShuttingDown),
        };
        let (reply, answer) = oneshot::channel();
        tx.send(command(reply))
            .await
            .map_err(|_| RunRequestError::ShuttingDown)?;
        answer.await.map_err(|_| RunRequestError::ShuttingDown)
    }
}
