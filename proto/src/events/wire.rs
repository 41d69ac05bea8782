//! The wire form of runs' events, statuses and errors: conversions between
//! [`RunEvent`] and the typed `oneof` of `weft.v1.RunEvent`.

use super::{ErrorInfo, Redispatch, RunEvent};
use crate::types::{RunStatus, Usage};
use crate::v1 as pb;

/// The wire form of a status.
pub fn status_to_wire(status: RunStatus) -> pb::RunStatus {
    match status {
        RunStatus::Running => pb::RunStatus::Running,
        RunStatus::Waiting => pb::RunStatus::Waiting,
        RunStatus::Completed => pb::RunStatus::Completed,
        RunStatus::Failed => pb::RunStatus::Failed,
        RunStatus::Cancelled => pb::RunStatus::Cancelled,
    }
}

/// A status from the wire; an unknown or unset one reads as running.
pub fn status_from_wire(status: i32) -> RunStatus {
    match pb::RunStatus::try_from(status).unwrap_or(pb::RunStatus::Unspecified) {
        pb::RunStatus::Running | pb::RunStatus::Unspecified => RunStatus::Running,
        pb::RunStatus::Waiting => RunStatus::Waiting,
        pb::RunStatus::Completed => RunStatus::Completed,
        pb::RunStatus::Failed => RunStatus::Failed,
        pb::RunStatus::Cancelled => RunStatus::Cancelled,
    }
}

fn index_to_wire(index: Option<usize>) -> Option<u64> {
    index.map(|i| i as u64)
}

fn index_from_wire(index: Option<u64>) -> Option<usize> {
    index.map(|i| usize::try_from(i).unwrap_or(usize::MAX))
}

/// The wire form of an event at position `seq` of its log.
pub fn event_to_wire(seq: u64, at_unix_ms: i64, event: &RunEvent) -> pb::RunEvent {
    use pb::run_event::Event as E;
    let event = match event.clone() {
        RunEvent::WaveStarted { step, nodes } => E::WaveStarted(pb::WaveStarted { step, nodes }),
        RunEvent::NodeStarted {
            node,
            attempt,
            item,
        } => E::NodeStarted(pb::NodeStarted {
            node: node.into(),
            attempt,
            item: index_to_wire(item),
        }),
        RunEvent::NodeFinished {
            node,
            item,
            worker,
            usage,
        } => E::NodeFinished(pb::NodeFinished {
            node: node.into(),
            item: index_to_wire(item),
            worker,
            usage: usage.map(pb::Usage::from),
        }),
        RunEvent::NodeRetrying {
            node,
            next_attempt,
            delay_ms,
            error,
        } => E::NodeRetrying(pb::NodeRetrying {
            node: node.into(),
            next_attempt,
            delay_ms,
            error,
        }),
        RunEvent::NodeFailed {
            node,
            item,
            error,
            fallback,
        } => E::NodeFailed(pb::NodeFailed {
            node: node.into(),
            item: index_to_wire(item),
            error,
            fallback,
        }),
        RunEvent::NodeSkipped { node } => E::NodeSkipped(pb::NodeSkipped { node: node.into() }),
        RunEvent::StateChanged {
            step,
            fields,
            values,
            folded,
        } => E::StateChanged(pb::StateChanged {
            step,
            fields,
            values: values
                .iter()
                .map(|(name, value)| (name.clone(), crate::json::to_string(value)))
                .collect(),
            folded: folded.into_iter().collect(),
        }),
        RunEvent::LoopReset { from, head } => E::LoopReset(pb::LoopReset { from, head }),
        RunEvent::LoopIteration {
            node,
            iteration,
            max_iterations,
            done,
            reason,
        } => E::LoopIteration(pb::LoopIteration {
            node: node.into(),
            iteration,
            max_iterations,
            done,
            reason: reason.unwrap_or_default(),
        }),
        RunEvent::SubgraphStarted { node, run_id } => E::SubgraphStarted(pb::SubgraphStarted {
            node: node.into(),
            run_id: run_id.into(),
        }),
        RunEvent::MessageSent {
            node,
            from,
            to,
            bytes,
            content,
        } => E::MessageSent(pb::MessageSent {
            node: node.into(),
            from,
            to,
            bytes,
            content_json: content.map(|c| c.to_string()).unwrap_or_default(),
        }),
        RunEvent::ModelCalled {
            node,
            item,
            model,
            prompt_tokens,
            completion_tokens,
            latency_ms,
            provider,
            cached_tokens,
            cost,
        } => E::ModelCalled(pb::ModelCalled {
            node: node.into(),
            item: index_to_wire(item),
            model,
            prompt_tokens,
            completion_tokens,
            latency_ms,
            provider,
            cached_tokens,
            cost,
        }),
        RunEvent::Retrieved {
            node,
            item,
            knowledge,
            mode,
            hits,
            latency_ms,
        } => E::Retrieved(pb::Retrieved {
            node: node.into(),
            item: index_to_wire(item),
            knowledge,
            mode,
            hits: hits
                .into_iter()
                .map(|hit| pb::RetrievedHit {
                    source: hit.source,
                    heading: hit.heading,
                    score: hit.score,
                })
                .collect(),
            latency_ms,
        }),
        RunEvent::IndexBuilt {
            node,
            item,
            knowledge,
            key,
            files,
            bytes,
            chunks,
            index_bytes,
            embedding_calls,
            vector_search,
            latency_ms,
        } => E::IndexBuilt(pb::IndexBuilt {
            node: node.into(),
            item: index_to_wire(item),
            knowledge,
            key,
            files,
            bytes,
            chunks,
            index_bytes,
            embedding_calls,
            vector_search,
            latency_ms,
        }),
        RunEvent::ToolCalled {
            node,
            item,
            tool,
            error,
            latency_ms,
        } => E::ToolCalled(pb::ToolCalled {
            node: node.into(),
            item: index_to_wire(item),
            tool,
            error,
            latency_ms,
        }),
        RunEvent::MapItemFinished {
            node,
            index,
            done,
            total,
        } => E::MapItemFinished(pb::MapItemFinished {
            node: node.into(),
            index: index as u64,
            done: done as u64,
            total: total as u64,
        }),
        RunEvent::TaskUnhosted { node, needs } => E::TaskUnhosted(pb::TaskUnhosted {
            node: node.into(),
            needs,
        }),
        RunEvent::TaskRedispatched {
            node,
            attempt,
            item,
            reason,
            worker,
        } => E::TaskRedispatched(pb::TaskRedispatched {
            node: node.into(),
            attempt,
            item: index_to_wire(item),
            reason: reason.as_str().to_owned(),
            worker,
        }),
        RunEvent::TaskThrottled {
            node,
            item,
            limit,
            wait_ms,
        } => E::TaskThrottled(pb::TaskThrottled {
            node: node.into(),
            item: index_to_wire(item),
            limit,
            wait_ms,
        }),
        RunEvent::NodeCached {
            node,
            item,
            stored_by,
            age_ms,
        } => E::NodeCached(pb::NodeCached {
            node: node.into(),
            item: index_to_wire(item),
            stored_by: stored_by.to_string(),
            age_ms,
        }),
        RunEvent::NodeNotCached { node, item, reason } => E::NodeNotCached(pb::NodeNotCached {
            node: node.into(),
            item: index_to_wire(item),
            reason,
        }),
        RunEvent::WaitingForInput { node, kind, prompt } => {
            E::WaitingForInput(pb::WaitingForInput {
                node: node.into(),
                kind,
                prompt,
            })
        }
        RunEvent::InputReceived { node, by } => E::InputReceived(pb::InputReceived {
            node: node.into(),
            by: by.unwrap_or_default(),
        }),
        RunEvent::RunSubmitted {
            by,
            namespace,
            forked_from,
        } => {
            let (forked_from_run, forked_from_step, forked_from_point) = match forked_from {
                Some(from) => (from.run.to_string(), Some(from.step), from.point),
                None => (String::new(), None, 0),
            };
            E::RunSubmitted(pb::RunSubmitted {
                by,
                namespace,
                forked_from_run,
                forked_from_step,
                forked_from_point,
            })
        }
        RunEvent::RunRetried { by } => E::RunRetried(pb::RunRetried { by }),
        RunEvent::CancelRequested { by } => E::CancelRequested(pb::CancelRequested { by }),
        RunEvent::RunFinished { status, error } => E::RunFinished(pb::RunFinished {
            status: status_to_wire(status) as i32,
            error: error.map(error_to_wire),
        }),
    };
    pb::RunEvent {
        seq,
        at_unix_ms,
        event: Some(event),
    }
}

/// The wire form of an error.
pub fn error_to_wire(error: ErrorInfo) -> pb::RunError {
    pb::RunError {
        kind: error.kind,
        node: error.node,
        message: error.message,
    }
}

/// An error from the wire.
pub fn error_from_wire(error: pb::RunError) -> ErrorInfo {
    ErrorInfo {
        kind: error.kind,
        node: error.node,
        message: error.message,
    }
}

/// An event from the wire; `None` for one with no event set (sent by a
/// newer coordinator with a kind this version does not know).
pub fn event_from_wire(event: pb::RunEvent) -> Option<RunEvent> {
    use pb::run_event::Event as E;
    Some(match event.event? {
        E::WaveStarted(e) => RunEvent::WaveStarted {
            step: e.step,
            nodes: e.nodes,
        },
        E::NodeStarted(e) => RunEvent::NodeStarted {
            node: e.node.into(),
            attempt: e.attempt,
            item: index_from_wire(e.item),
        },
        E::NodeFinished(e) => RunEvent::NodeFinished {
            node: e.node.into(),
            item: index_from_wire(e.item),
            worker: e.worker,
            usage: e.usage.map(Usage::from),
        },
        E::NodeRetrying(e) => RunEvent::NodeRetrying {
            node: e.node.into(),
            next_attempt: e.next_attempt,
            delay_ms: e.delay_ms,
            error: e.error,
        },
        E::NodeFailed(e) => RunEvent::NodeFailed {
            node: e.node.into(),
            item: index_from_wire(e.item),
            error: e.error,
            fallback: e.fallback,
        },
        E::NodeSkipped(e) => RunEvent::NodeSkipped {
            node: e.node.into(),
        },
        E::StateChanged(e) => RunEvent::StateChanged {
            step: e.step,
            fields: e.fields,
            // A value that does not parse is shown as its text.
            values: e
                .values
                .into_iter()
                .map(|(name, json)| {
                    let value =
                        serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json));
                    (name, value)
                })
                .collect(),
            folded: e.folded.into_iter().collect(),
        },
        E::LoopReset(e) => RunEvent::LoopReset {
            from: e.from,
            head: e.head,
        },
        E::LoopIteration(e) => RunEvent::LoopIteration {
            node: e.node.into(),
            iteration: e.iteration,
            max_iterations: e.max_iterations,
            done: e.done,
            reason: (!e.reason.is_empty()).then_some(e.reason),
        },
        E::SubgraphStarted(e) => RunEvent::SubgraphStarted {
            node: e.node.into(),
            run_id: e.run_id.into(),
        },
        E::ModelCalled(e) => RunEvent::ModelCalled {
            node: e.node.into(),
            item: index_from_wire(e.item),
            model: e.model,
            prompt_tokens: e.prompt_tokens,
            completion_tokens: e.completion_tokens,
            latency_ms: e.latency_ms,
            provider: e.provider,
            cached_tokens: e.cached_tokens,
            cost: e.cost,
        },
        E::Retrieved(e) => RunEvent::Retrieved {
            node: e.node.into(),
            item: index_from_wire(e.item),
            knowledge: e.knowledge,
            mode: e.mode,
            hits: e
                .hits
                .into_iter()
                .map(|hit| super::RetrievedHit {
                    source: hit.source,
                    heading: hit.heading,
                    score: hit.score,
                })
                .collect(),
            latency_ms: e.latency_ms,
        },
        E::IndexBuilt(e) => RunEvent::IndexBuilt {
            node: e.node.into(),
            item: index_from_wire(e.item),
            knowledge: e.knowledge,
            key: e.key,
            files: e.files,
            bytes: e.bytes,
            chunks: e.chunks,
            index_bytes: e.index_bytes,
            embedding_calls: e.embedding_calls,
            vector_search: e.vector_search,
            latency_ms: e.latency_ms,
        },
        E::ToolCalled(e) => RunEvent::ToolCalled {
            node: e.node.into(),
            item: index_from_wire(e.item),
            tool: e.tool,
            error: e.error,
            latency_ms: e.latency_ms,
        },
        E::MessageSent(e) => RunEvent::MessageSent {
            node: e.node.into(),
            from: e.from,
            to: e.to,
            bytes: e.bytes,
            content: serde_json::from_str(&e.content_json).ok(),
        },
        E::MapItemFinished(e) => RunEvent::MapItemFinished {
            node: e.node.into(),
            index: index_from_wire(Some(e.index)).unwrap_or_default(),
            done: index_from_wire(Some(e.done)).unwrap_or_default(),
            total: index_from_wire(Some(e.total)).unwrap_or_default(),
        },
        E::TaskUnhosted(e) => RunEvent::TaskUnhosted {
            node: e.node.into(),
            needs: e.needs,
        },
        E::TaskRedispatched(e) => RunEvent::TaskRedispatched {
            node: e.node.into(),
            attempt: e.attempt,
            item: index_from_wire(e.item),
            reason: Redispatch::from_name(&e.reason),
            worker: e.worker,
        },
        E::TaskThrottled(e) => RunEvent::TaskThrottled {
            node: e.node.into(),
            item: index_from_wire(e.item),
            limit: e.limit,
            wait_ms: e.wait_ms,
        },
        E::NodeCached(e) => RunEvent::NodeCached {
            node: e.node.into(),
            item: index_from_wire(e.item),
            stored_by: e.stored_by.into(),
            age_ms: e.age_ms,
        },
        E::NodeNotCached(e) => RunEvent::NodeNotCached {
            node: e.node.into(),
            item: index_from_wire(e.item),
            reason: e.reason,
        },
        E::WaitingForInput(e) => RunEvent::WaitingForInput {
            node: e.node.into(),
            kind: e.kind,
            prompt: e.prompt,
        },
        E::InputReceived(e) => RunEvent::InputReceived {
            node: e.node.into(),
            by: (!e.by.is_empty()).then_some(e.by),
        },
        E::RunSubmitted(e) => RunEvent::RunSubmitted {
            by: e.by,
            namespace: e.namespace,
            forked_from: (!e.forked_from_run.is_empty()).then(|| super::ForkedFrom {
                run: e.forked_from_run.into(),
                step: e.forked_from_step.unwrap_or_default(),
                point: e.forked_from_point,
            }),
        },
        E::RunRetried(e) => RunEvent::RunRetried { by: e.by },
        E::CancelRequested(e) => RunEvent::CancelRequested { by: e.by },
        E::RunFinished(e) => RunEvent::RunFinished {
            status: status_from_wire(e.status),
            error: e.error.map(error_from_wire),
        },
    })
}

impl From<Usage> for pb::Usage {
    fn from(usage: Usage) -> Self {
        Self {
            calls: usage.calls,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.cached_tokens,
            cost: usage.cost,
        }
    }
}

impl From<pb::Usage> for Usage {
    fn from(usage: pb::Usage) -> Self {
        Self {
            calls: usage.calls,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.cached_tokens,
            cost: usage.cost.filter(|c| c.is_finite()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_survives_the_wire() {
        let events = vec![
            RunEvent::WaveStarted {
                step: 2,
                nodes: vec!["a".into(), "b".into()],
            },
            RunEvent::NodeStarted {
                node: "a".into(),
                attempt: 1,
                item: Some(3),
            },
            RunEvent::NodeFinished {
                node: "a".into(),
                item: None,
                worker: Some("w1".into()),
                usage: None,
            },
            RunEvent::NodeFinished {
                node: "a".into(),
                item: Some(2),
                worker: Some("w1".into()),
                usage: Some(Usage {
                    calls: 2,
                    prompt_tokens: 300,
                    completion_tokens: 40,
                    cached_tokens: 128,
                    cost: Some(0.25),
                }),
            },
            RunEvent::NodeRetrying {
                node: "a".into(),
                next_attempt: 2,
                delay_ms: 500,
                error: "boom".into(),
            },
            RunEvent::NodeFailed {
                node: "a".into(),
                item: Some(0),
                error: "boom".into(),
                fallback: Some("rescue".into()),
            },
            RunEvent::NodeSkipped { node: "b".into() },
            RunEvent::StateChanged {
                step: 1,
                fields: vec!["x".into(), "doc".into()],
                values: [("x".to_owned(), serde_json::json!({"n": 1}))].into(),
                folded: [("doc".to_owned(), 5000)].into(),
            },
            RunEvent::LoopReset {
                from: "c".into(),
                head: "a".into(),
            },
            RunEvent::MapItemFinished {
                node: "fan".into(),
                index: 4,
                done: 5,
                total: 9,
            },
            RunEvent::SubgraphStarted {
                node: "summarise".into(),
                run_id: "run-1".into(),
            },
            RunEvent::MessageSent {
                node: "fan".into(),
                from: "fan/0".into(),
                to: "fan/2".into(),
                bytes: 13,
                content: Some(serde_json::json!({"hi": true})),
            },
            RunEvent::ModelCalled {
                node: "ask".into(),
                item: Some(1),
                model: "small".into(),
                prompt_tokens: Some(12),
                completion_tokens: None,
                latency_ms: 40,
                provider: None,
                cached_tokens: None,
                cost: None,
            },
            RunEvent::ModelCalled {
                node: "ask".into(),
                item: None,
                model: "gpt-4o".into(),
                prompt_tokens: Some(1_200),
                completion_tokens: Some(80),
                latency_ms: 900,
                provider: Some("default".into()),
                cached_tokens: Some(1_024),
                cost: Some(0.0038),
            },
            RunEvent::Retrieved {
                node: "answer".into(),
                item: Some(2),
                knowledge: vec!["handbook".into()],
                mode: "hybrid".into(),
                hits: vec![super::super::RetrievedHit {
                    source: "docs/a.md".into(),
                    heading: "Setup".into(),
                    score: 0.5,
                }],
                latency_ms: 4,
            },
            RunEvent::IndexBuilt {
                node: "answer".into(),
                item: None,
                knowledge: "handbook".into(),
                key: "ab12".into(),
                files: 3,
                bytes: 4096,
                chunks: 9,
                index_bytes: 8000,
                embedding_calls: 1,
                vector_search: Some("exact".into()),
                latency_ms: 20,
            },
            RunEvent::ToolCalled {
                node: "agent".into(),
                item: None,
                tool: "search".into(),
                error: Some("bad arguments".into()),
                latency_ms: 3,
            },
            RunEvent::LoopIteration {
                node: "refine".into(),
                iteration: 2,
                max_iterations: 5,
                done: false,
                reason: Some("too long".into()),
            },
            RunEvent::TaskUnhosted {
                node: "a".into(),
                needs: "handler 'a'".into(),
            },
            RunEvent::TaskRedispatched {
                node: "a".into(),
                attempt: 2,
                item: Some(4),
                reason: Redispatch::WorkerLost,
                worker: Some("w2".into()),
            },
            RunEvent::TaskRedispatched {
                node: "a".into(),
                attempt: 1,
                item: None,
                reason: Redispatch::CoordinatorRestarted,
                worker: None,
            },
            RunEvent::TaskThrottled {
                node: "ask".into(),
                item: Some(3),
                limit: "openai".into(),
                wait_ms: Some(250),
            },
            RunEvent::TaskThrottled {
                node: "ask".into(),
                item: None,
                limit: "openai".into(),
                wait_ms: None,
            },
            RunEvent::NodeCached {
                node: "ask".into(),
                item: Some(2),
                stored_by: "r-1".into(),
                age_ms: 1500,
            },
            RunEvent::NodeCached {
                node: "ask".into(),
                item: None,
                stored_by: "r-2".into(),
                age_ms: 0,
            },
            RunEvent::NodeNotCached {
                node: "ask".into(),
                item: None,
                reason: "too large".into(),
            },
            RunEvent::WaitingForInput {
                node: "ok".into(),
                kind: "approval".into(),
                prompt: "Ship?".into(),
            },
            RunEvent::InputReceived {
                node: "ok".into(),
                by: Some("alice".into()),
            },
            RunEvent::InputReceived {
                node: "ok".into(),
                by: None,
            },
            RunEvent::RunSubmitted {
                by: "ci".into(),
                namespace: "team-a".into(),
                forked_from: None,
            },
            RunEvent::RunSubmitted {
                by: "ci".into(),
                namespace: "team-a".into(),
                forked_from: Some(super::super::ForkedFrom {
                    run: "run-1".into(),
                    step: 3,
                    point: 57,
                }),
            },
            RunEvent::RunRetried { by: "ops".into() },
            RunEvent::CancelRequested { by: "ops".into() },
            RunEvent::RunFinished {
                status: RunStatus::Failed,
                error: Some(ErrorInfo {
                    kind: "ExecutionError".into(),
                    node: "a".into(),
                    message: "boom".into(),
                }),
            },
        ];
        for (seq, event) in events.into_iter().enumerate() {
            let wire = event_to_wire(seq as u64, 7, &event);
            assert_eq!(wire.seq, seq as u64);
            assert_eq!(
                event_from_wire(wire),
                Some(event.clone()),
                "{}",
                event.kind()
            );
            let json = serde_json::to_value(&event).expect("events serialize");
            assert_eq!(json["type"], event.kind(), "the JSON form names the kind");
        }
    }
}
