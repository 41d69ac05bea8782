//! Flow control of a step's model calls (SPEC 18), the worker's half: the
//! coordinator enforces `[[limits]]` for every worker at once, so before a
//! call a step asks it for a grant and waits for the answer, and after the
//! call it reports what the provider said the call used (or that it
//! answered 429, which slows the matching limits for every worker).
//!
//! The first call of a step was reserved when the step was dispatched (its
//! assignment names the grant), so a step that makes one call never waits
//! here; an agent's later turns and the retries of a 429 ask. A step the
//! coordinator does not control (no limit counts its calls) gets a gate
//! that lets everything through and reports nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use weft_proto::worker_protocol::{
    CallFlow, CallUsage, FromWorker, PermitRequest, expected_tokens,
};
use weft_proto::{RunId, TaskKey};

use crate::task::{Failure, FailureKind};

/// The answer to a permit request: a grant, or why the call may not go.
type PermitAnswer = Result<u64, String>;

/// A session's permit requests waiting for the coordinator's answers.
#[derive(Debug)]
pub(crate) struct Permits {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<PermitAnswer>>>,
    /// The session's stream.
    outbound: mpsc::Sender<FromWorker>,
    /// The queue of the session's reports, which pieces of model output
    /// share so that none trails its attempt's result.
    reports: mpsc::Sender<crate::connection::Outbound>,
}

impl Permits {
    /// Requests and reports go out on `outbound`, the session's stream;
    /// pieces of model output in `reports`, the queue of its results.
    pub(crate) fn new(
        outbound: mpsc::Sender<FromWorker>,
        reports: mpsc::Sender<crate::connection::Outbound>,
    ) -> Self {
        Self {
            next: AtomicU64::new(0),
            waiting: Mutex::new(HashMap::new()),
            outbound,
            reports,
        }
    }

    /// The coordinator answered request `request_id`.
    pub(crate) fn answered(&self, request_id: u64, answer: PermitAnswer) {
        let waiting = self
            .waiting
            .lock()
            .expect("permits lock")
            .remove(&request_id);
        if let Some(tx) = waiting {
            let _ = tx.send(answer);
        }
    }
}

/// One step's gate: see the module docs. It is also where the step's
/// model output goes as it streams (SPEC 19): to the coordinator, on the
/// session's stream, in order.
#[derive(Debug)]
pub(crate) struct CallGate {
    control: Option<Control>,
    stream: Option<StreamTo>,
}

/// Where a step's model output goes as it streams.
#[derive(Debug)]
struct StreamTo {
    outbound: mpsc::Sender<crate::connection::Outbound>,
    run_id: RunId,
    key: TaskKey,
}

#[derive(Debug)]
struct Control {
    permits: Arc<Permits>,
    run_id: RunId,
    key: TaskKey,
    /// The grant reserved for the first call (0 once taken, or none).
    reserved: AtomicU64,
    ask: bool,
}

/// What a call was made under: its grant (0: none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket(u64);

/// How a call ended, as the coordinator is told.
#[derive(Debug, Clone, Default)]
pub(crate) struct Spent {
    /// The provider's name and the model.
    pub provider: String,
    pub model: String,
    /// The reply's `usage` (absent fields are 0).
    pub usage: Option<Value>,
    /// The provider answered 429, with its `Retry-After` when given.
    pub rate_limited: Option<Option<Duration>>,
}

impl CallGate {
    /// A gate that lets every call through and reports nothing.
    pub(crate) fn open() -> Self {
        Self {
            control: None,
            stream: None,
        }
    }

    /// The gate of attempt `key` of `run_id`, as its assignment's `flow`
    /// says.
    pub(crate) fn of(
        permits: &Arc<Permits>,
        run_id: &RunId,
        key: TaskKey,
        flow: Option<CallFlow>,
    ) -> Self {
        Self {
            control: flow.map(|flow| Control {
                permits: permits.clone(),
                run_id: run_id.clone(),
                key,
                reserved: AtomicU64::new(flow.grant.unwrap_or(0)),
                ask: flow.ask,
            }),
            stream: Some(StreamTo {
                outbound: permits.reports.clone(),
                run_id: run_id.clone(),
                key,
            }),
        }
    }

    /// Sends a piece of the step's model output to the coordinator (a
    /// gate of no step sends nothing). Waits only for the session's own
    /// stream to take it, never for a watcher.
    pub(crate) async fn stream(&self, kind: weft_proto::worker_protocol::StreamKind, text: String) {
        let Some(to) = &self.stream else {
            return;
        };
        let piece = crate::connection::Outbound::Piece {
            run_id: to.run_id.clone(),
            key: to.key,
            piece: weft_proto::worker_protocol::StreamPiece { kind, text },
        };
        // A session that ended takes nothing more; the step's answer
        // still goes with its result.
        let _ = to.outbound.send(piece).await;
    }

    /// Waits, before `deadline`, until the coordinator lets a call of
    /// `body` to `provider` go. A refusal (the run's budget) fails the
    /// step with the coordinator's message.
    pub(crate) async fn acquire(
        &self,
        provider: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Ticket, Failure> {
        let Some(control) = &self.control else {
            return Ok(Ticket(0));
        };
        let reserved = control.reserved.swap(0, Ordering::Relaxed);
        if reserved != 0 || !control.ask {
            return Ok(Ticket(reserved));
        }
        let permits = &control.permits;
        let request_id = permits.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, answer) = oneshot::channel();
        permits
            .waiting
            .lock()
            .expect("permits lock")
            .insert(request_id, tx);
        let request = FromWorker::CallPermit {
            run_id: control.run_id.clone(),
            key: control.key,
            permit: PermitRequest {
                request_id,
                provider: provider.to_owned(),
                model: body["model"].as_str().unwrap_or_default().to_owned(),
                tokens: call_tokens(body),
            },
        };
        let lost = || {
            Failure::new(
                FailureKind::WorkerError,
                "the connection to the coordinator ended while the step waited to call its model",
            )
        };
        let outcome = match permits.outbound.send(request).await {
            Err(_) => Err(lost()),
            Ok(()) => match tokio::time::timeout_at(deadline.into(), answer).await {
                Ok(Ok(Ok(grant))) => Ok(Ticket(grant)),
                Ok(Ok(Err(refusal))) => Err(Failure::new(FailureKind::BudgetExceeded, refusal)),
                Ok(Err(_)) => Err(lost()),
                Err(_) => Err(Failure::new(
                    FailureKind::Timeout,
                    "the step's time ran out while it waited for a rate limit to let its model \
                     call go",
                )),
            },
        };
        permits
            .waiting
            .lock()
            .expect("permits lock")
            .remove(&request_id);
        outcome
    }

    /// Tells the coordinator what the call made under `ticket` used.
    pub(crate) async fn report(&self, ticket: Ticket, spent: Spent) {
        let Some(control) = &self.control else {
            return;
        };
        let count = |key: &str| {
            spent
                .usage
                .as_ref()
                .and_then(|usage| usage.get(key))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let cached = spent
            .usage
            .as_ref()
            .and_then(|usage| usage.pointer("/prompt_tokens_details/cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let usage = FromWorker::CallUsage {
            run_id: control.run_id.clone(),
            key: control.key,
            usage: CallUsage {
                grant: ticket.0,
                prompt_tokens: count("prompt_tokens"),
                completion_tokens: count("completion_tokens"),
                cached_tokens: cached,
                rate_limited: spent.rate_limited,
                provider: spent.provider,
                model: spent.model,
            },
        };
        let _ = control.permits.outbound.send(usage).await;
    }

    /// Whether the coordinator paces this step's calls: a 429 is then
    /// tried again for as long as the step's time allows, as the
    /// coordinator holds every worker's calls back until the provider's
    /// `Retry-After`.
    pub(crate) fn paced(&self) -> bool {
        self.control.is_some()
    }
}

/// The tokens a call of `body` is expected to use (its messages and its
/// `max_tokens`).
fn call_tokens(body: &Value) -> u64 {
    let prompt = body.get("messages").map_or(0, |m| m.to_string().len());
    expected_tokens(prompt, body.get("max_tokens").and_then(Value::as_u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A step's model output goes in the queue of its result, in order,
    /// so no piece trails the result the coordinator ends its stream with.
    #[tokio::test]
    async fn pieces_of_model_output_share_the_queue_of_results() {
        use weft_proto::worker_protocol::StreamKind;
        let (tx, _rx) = mpsc::channel(8);
        let (reports, mut queued) = mpsc::channel(8);
        let permits = Arc::new(Permits::new(tx, reports));
        let gate = CallGate::of(&permits, &"r".into(), TaskKey(3), None);
        gate.stream(StreamKind::Text, "Once ".into()).await;
        gate.stream(StreamKind::ToolCall, "lookup".into()).await;
        for (kind, text) in [
            (StreamKind::Text, "Once "),
            (StreamKind::ToolCall, "lookup"),
        ] {
            match queued.recv().await {
                Some(crate::connection::Outbound::Piece { run_id, key, piece }) => {
                    assert_eq!((run_id.as_ref(), key), ("r", TaskKey(3)));
                    assert_eq!((piece.kind, piece.text.as_str()), (kind, text));
                }
                other => panic!("expected a piece, got {other:?}"),
            }
        }
        // A gate of no step sends nothing.
        CallGate::open().stream(StreamKind::Text, "x".into()).await;
        assert!(queued.try_recv().is_err());
    }

    #[tokio::test]
    async fn the_reserved_grant_serves_the_first_call_and_later_ones_ask() {
        let (tx, mut rx) = mpsc::channel(8);
        let permits = Arc::new(Permits::new(tx, mpsc::channel(8).0));
        let flow = CallFlow {
            grant: Some(7),
            ask: true,
        };
        let gate = CallGate::of(&permits, &"r".into(), TaskKey(3), Some(flow));
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(400)}], "max_tokens": 10});
        let deadline = Instant::now() + Duration::from_secs(5);
        let first = gate.acquire("p", &body, deadline).await.expect("reserved");
        assert_eq!(first.0, 7);
        assert!(rx.try_recv().is_err(), "the first call asks nothing");
        let answering = {
            let permits = permits.clone();
            tokio::spawn(async move {
                let Some(FromWorker::CallPermit { permit, key, .. }) = rx.recv().await else {
                    panic!("a permit request");
                };
                assert_eq!(key, TaskKey(3));
                assert_eq!(
                    (permit.provider.as_str(), permit.model.as_str()),
                    ("p", "m")
                );
                // 400 characters of content and its framing, over 4, plus 10.
                assert!((110..130).contains(&permit.tokens), "{}", permit.tokens);
                permits.answered(permit.request_id, Ok(9));
                rx
            })
        };
        let second = gate.acquire("p", &body, deadline).await.expect("granted");
        assert_eq!(second.0, 9);
        let mut rx = answering.await.expect("answered");
        gate.report(
            second,
            Spent {
                provider: "p".into(),
                model: "m".into(),
                usage: Some(json!({"prompt_tokens": 5, "completion_tokens": 2,
                                   "prompt_tokens_details": {"cached_tokens": 3}})),
                rate_limited: None,
            },
        )
        .await;
        let Some(FromWorker::CallUsage { usage, .. }) = rx.recv().await else {
            panic!("a usage report");
        };
        assert_eq!(
            (
                usage.grant,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens
            ),
            (9, 5, 2, 3)
        );
    }

    #[tokio::test]
    async fn a_refusal_fails_the_call_and_an_open_gate_asks_nothing() {
        let (tx, mut rx) = mpsc::channel(8);
        let permits = Arc::new(Permits::new(tx, mpsc::channel(8).0));
        let flow = CallFlow {
            grant: None,
            ask: true,
        };
        let gate = CallGate::of(&permits, &"r".into(), TaskKey(1), Some(flow));
        let body = json!({"model": "m", "messages": []});
        let answering = tokio::spawn({
            let permits = permits.clone();
            async move {
                if let Some(FromWorker::CallPermit { permit, .. }) = rx.recv().await {
                    permits.answered(permit.request_id, Err("over budget".into()));
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let refused = gate
            .acquire("p", &body, deadline)
            .await
            .expect_err("refused");
        assert_eq!(refused.message, "over budget");
        answering.await.expect("answered");
        let open = CallGate::open();
        assert!(!open.paced());
        assert_eq!(open.acquire("p", &body, deadline).await.expect("open").0, 0);
    }
}
