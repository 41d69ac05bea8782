//! Agent tools that other workers host (SPEC 4, `agent`): an agent step
//! whose registered tool this worker lacks sends each call up its stream;
//! the coordinator passes it to a worker that hosts the tool and sends the
//! answer back, which this hands to the waiting step.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_proto::TaskKey;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use weft_proto::RunId;

use weft_proto::worker_protocol::{FromWorker, ToolCall};

/// What a tool's answer is: its value, or why there is none.
pub(crate) type ToolAnswer = Result<Value, String>;

/// A session's calls of tools elsewhere, waiting for their answers.
#[derive(Debug)]
pub(crate) struct RemoteTools {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<ToolAnswer>>>,
    /// The session's stream ([`FromWorker::ToolCall`]).
    outbound: mpsc::Sender<FromWorker>,
}

impl RemoteTools {
    /// Calls go out on `outbound`, the session's stream.
    pub(crate) fn new(outbound: mpsc::Sender<FromWorker>) -> Self {
        Self {
            next: AtomicU64::new(0),
            waiting: Mutex::new(HashMap::new()),
            outbound,
        }
    }

    /// Calls `tool` for attempt `key` of `run_id` and waits up to `timeout`
    /// for its answer.
    pub(crate) async fn call(
        &self,
        run_id: &RunId,
        key: TaskKey,
        tool: &str,
        arguments: Value,
        timeout: Duration,
    ) -> ToolAnswer {
        let call_id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, answer) = oneshot::channel();
        self.waiting
            .lock()
            .expect("tool calls lock")
            .insert(call_id, tx);
        let call = FromWorker::ToolCall {
            run_id: run_id.clone(),
            key,
            call: ToolCall {
                call_id,
                tool: tool.to_owned(),
                arguments,
                timeout,
            },
        };
        let outcome = match self.outbound.send(call).await {
            Err(_) => Err("the connection to the coordinator ended".to_owned()),
            Ok(()) => match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err("the connection to the coordinator ended".to_owned()),
                Err(_) => Err(format!("the tool did not answer within {timeout:?}")),
            },
        };
        self.waiting
            .lock()
            .expect("tool calls lock")
            .remove(&call_id);
        outcome
    }

    /// The coordinator answered call `call_id`.
    pub(crate) fn answered(&self, call_id: u64, answer: ToolAnswer) {
        let waiter = self
            .waiting
            .lock()
            .expect("tool calls lock")
            .remove(&call_id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_call_goes_out_and_waits_for_its_own_answer() {
        let (outbound, mut sent) = mpsc::channel(4);
        let remote = std::sync::Arc::new(RemoteTools::new(outbound));
        let answering = tokio::spawn({
            let remote = remote.clone();
            async move {
                let Some(FromWorker::ToolCall { key, call, .. }) = sent.recv().await else {
                    panic!("no call went out");
                };
                assert_eq!((call.tool.as_str(), key), ("lookup", TaskKey(3)));
                assert_eq!(call.arguments, json!({"key": "a"}));
                // An answer to another call reaches nobody.
                remote.answered(call.call_id + 1, Ok(json!("wrong")));
                remote.answered(call.call_id, Ok(json!("alpha")));
            }
        });
        let run: RunId = "r".into();
        let answer = remote
            .call(
                &run,
                TaskKey(3),
                "lookup",
                json!({"key": "a"}),
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(answer, Ok(json!("alpha")));
        answering.await.unwrap();
    }

    #[tokio::test]
    async fn an_unanswered_call_times_out_with_why() {
        let (outbound, _sent) = mpsc::channel(4);
        let remote = RemoteTools::new(outbound);
        let run: RunId = "r".into();
        let answer = remote
            .call(
                &run,
                TaskKey(1),
                "slow",
                json!({}),
                Duration::from_millis(20),
            )
            .await;
        assert_eq!(
            answer,
            Err("the tool did not answer within 20ms".to_owned())
        );
        assert!(remote.waiting.lock().unwrap().is_empty());
    }
}
