//! A run as a caller is shown it, in domain terms: what the gRPC
//! `RunInfo` and the API's run JSON both say, typed, so each door writes
//! its form from one record (and a standby's HTTP door reads the leader's
//! answer into it).

use weft_proto::events::ErrorInfo;
use weft_proto::types::RunStatus;
use weft_proto::{NodeId, RunId};

use crate::run_actor::{Answered, RunView, UnhostedWait};

/// What of a run is shown beyond its summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    /// Its state (which may be large).
    pub state: bool,
    /// Its graph, drawn.
    pub diagram: bool,
}

impl Shown {
    /// The summary alone (a listing's).
    pub const SUMMARY: Self = Self {
        state: false,
        diagram: false,
    };
    /// The summary and the state.
    pub const STATE: Self = Self {
        state: true,
        diagram: false,
    };
}

/// A node waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingNode {
    /// The node (a child run's, by its path).
    pub node: String,
    /// `approval` or `input`.
    pub kind: String,
    /// The question.
    pub prompt: String,
}

/// A run as its caller is shown it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// What its steps' model calls used, priced.
    pub usage: weft_proto::types::Usage,
    /// The run.
    pub run_id: RunId,
    /// Its graph's name.
    pub graph_name: String,
    /// Its status.
    pub status: RunStatus,
    /// The state as JSON text, when it was asked for.
    pub state_json: Option<String>,
    /// The fields `state_json` has as `null` because they are exactly as
    /// the run's input gave them and the caller kept that input.
    pub input_fields: Vec<String>,
    /// Why a failed or cancelled run ended so.
    pub error: Option<ErrorInfo>,
    /// Nodes waiting for a human.
    pub waiting: Vec<WaitingNode>,
    /// Events recorded so far.
    pub event_count: u64,
    /// When it was submitted (Unix milliseconds).
    pub created_unix_ms: i64,
    /// When it ended (Unix milliseconds), once it has.
    pub ended_unix_ms: Option<i64>,
    /// Work no connected worker hosts, which the run waits for.
    pub unhosted: Vec<UnhostedWait>,
    /// The child runs its subgraph nodes started, in order.
    pub children: Vec<(NodeId, RunId)>,
    /// Its namespace.
    pub namespace: String,
    /// Who submitted it (empty when not recorded).
    pub submitted_by: String,
    /// For a fork, the run and wave it was forked from.
    pub forked_from: Option<weft_proto::events::ForkedFrom>,
    /// Who answered its human nodes (the latest answer of each).
    pub answers: Vec<Answered>,
    /// Its trace's id (empty: not traced).
    pub trace_id: String,
    /// Its graph drawn as SVG, when it was asked for.
    pub diagram_svg: Option<String>,
}

impl RunReport {
    /// `view` as shown, with what `shown` asks for.
    pub fn of(view: RunView, shown: Shown) -> Self {
        Self::leaving_out(view, shown, &[])
    }

    /// As [`Self::of`], for a caller that kept the fields `kept` of the
    /// run's input: those still as the input gave them are not written
    /// into the state (their places hold `null`) and are named in
    /// `input_fields`.
    pub fn leaving_out(view: RunView, shown: Shown, kept: &[String]) -> Self {
        let input_fields = match shown.state {
            true => view.input_fields(kept),
            false => Vec::new(),
        };
        Self {
            usage: view.usage.clone(),
            diagram_svg: shown
                .diagram
                .then(|| crate::graph::diagram::svg(&view.graph)),
            state_json: shown.state.then(|| state_json(&view, &input_fields)),
            input_fields,
            run_id: view.id,
            graph_name: view.graph_name,
            status: view.status,
            error: view.error.map(|error| error.info()),
            waiting: view
                .waiting
                .into_iter()
                .map(|(node, kind, prompt)| WaitingNode { node, kind, prompt })
                .collect(),
            event_count: view.event_count,
            created_unix_ms: view.created_unix_ms,
            ended_unix_ms: view.ended_unix_ms,
            unhosted: view.unhosted,
            children: view.children,
            namespace: view.owner.namespace,
            submitted_by: view.owner.submitted_by,
            forked_from: view.forked_from,
            answers: view.answers,
            trace_id: view.trace_id.to_string(),
        }
    }
}

/// The state's JSON text, exactly as `weft_proto::json` writes it: from
/// the texts the run wrote already where the view has them (a live run),
/// so a large field is not written once more for every report; `null` for
/// the fields `left_out`.
fn state_json(view: &RunView, left_out: &[String]) -> String {
    let written = view.state_texts.len() == view.state.len();
    if left_out.is_empty() && !written {
        return weft_proto::json::object_to_string(&view.state);
    }
    // Each field's text: `null` for one left out (never written), the
    // run's own text where it has one, else the value written now.
    let texts: Vec<std::borrow::Cow<'_, str>> = view
        .state
        .iter()
        .enumerate()
        .map(|(at, (name, value))| match left_out.contains(name) {
            true => "null".into(),
            false if written => (&*view.state_texts[at]).into(),
            false => weft_proto::json::to_string(value).into(),
        })
        .collect();
    let names = view.state.keys().map(String::as_str);
    weft_proto::json::object_of_texts(names.zip(texts.iter().map(|t| &**t)))
}
