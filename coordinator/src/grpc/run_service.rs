//! The client-facing run service.

use std::pin::Pin;

use serde_json::Value;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use weft_proto::v1 as pb;
use weft_proto::v1::run_service_server::RunService;

use super::{convert, principal, unknown_run};
use crate::auth::Identity;
use crate::run_actor::{Caller, HumanAnswer, Owner};
use crate::runs::Runs;
use crate::term::Services;

/// The run service over a coordinator's runs.
#[derive(Clone)]
pub struct RunApi {
    runs: Runs,
    max_bundle_bytes: usize,
    tracker: tokio_util::task::TaskTracker,
    stop: tokio_util::sync::CancellationToken,
}

impl RunApi {
    /// Serves a term's runs; watch streams run on its tracker and end
    /// with the term (the client then asks again, of the next leader).
    pub fn new(term: &Services) -> Self {
        Self {
            runs: term.runs.clone(),
            max_bundle_bytes: term.max_bundle_bytes,
            tracker: term.tracker.clone(),
            stop: term.ended.clone(),
        }
    }

    /// Run `id`, if the caller may see it: a run of another namespace is
    /// as unknown as one that does not exist (its existence is not told).
    fn run(&self, caller: &Identity, id: &str) -> Result<crate::run_actor::RunHandle, Status> {
        // Counted alike whether the run is another namespace's or none at
        // all: the metric must not tell which.
        let Some(handle) = self.runs.get(id) else {
            crate::auth::layer::refused("unknown_run");
            return Err(unknown_run(id));
        };
        if !caller.sees(handle.namespace()) {
            crate::auth::layer::refused("unknown_run");
            return Err(unknown_run(id));
        }
        Ok(handle)
    }
}

pub(crate) type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl RunService for RunApi {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let bundle = convert::bundle(request.bundle, self.max_bundle_bytes)
            .map_err(crate::runs::SubmitError::from)?;
        let owner = Owner {
            namespace: caller.namespace.clone(),
            submitted_by: caller.name.clone(),
        };
        let (run_id, warnings) = self.runs.submit(bundle, &request.input_json, owner).await?;
        Ok(Response::new(pb::SubmitResponse {
            run_id: run_id.to_string(),
            warnings,
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        let bundle = convert::bundle(request.into_inner().bundle, self.max_bundle_bytes)
            .map_err(crate::runs::SubmitError::from)?;
        let findings = bundle.findings().map_err(crate::runs::SubmitError::from)?;
        Ok(Response::new(pb::ValidateResponse {
            findings: findings.iter().map(convert::finding).collect(),
        }))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::RunInfo>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let view = self.run(&caller, &request.run_id)?.get().await?;
        Ok(Response::new(convert::run_info_drawn(
            view,
            !request.omit_state,
            request.with_diagram,
        )))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let limit = match request.limit {
            0 => 100,
            n => n.min(1000) as usize,
        };
        let after = (!request.after.is_empty()).then_some(request.after.as_str());
        let visible = |handle: &crate::run_actor::RunHandle| caller.sees(handle.namespace());
        let (handles, more) = self.runs.page(limit, after, visible).await;
        let mut runs = Vec::with_capacity(handles.len());
        for handle in &handles {
            runs.push(convert::run_info(handle.get().await?, false));
        }
        let next = match (more, runs.last()) {
            (true, Some(last)) => last.run_id.clone(),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListRunsResponse { runs, next }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let handle = self.run(&caller, &request.run_id)?;
        let (past, live) = handle.watch(request.from).await?;
        // The log is whole: a watcher that falls behind the live feed reads
        // what it missed from the log and carries on, so no event is lost.
        // The stream ends with the run's last event (at once for an ended
        // run), and as soon as the client goes away.
        let stop = self.stop.clone();
        let stream = async_stream(&self.tracker, move |tx| async move {
            let mut next = request.from;
            let (mut past, mut live) = (past, live);
            loop {
                // In the log, only the last event of an ended run ends the
                // stream: a failure a retry undid is followed by more.
                let ended = live.is_none();
                for (index, stored) in past.iter().enumerate() {
                    if stored.seq < next {
                        continue;
                    }
                    next = stored.seq + 1;
                    let last = ended && index + 1 == past.len();
                    if tx.send(Ok(convert::event(stored))).await.is_err()
                        || (last && convert::is_final(stored))
                    {
                        return;
                    }
                }
                if ended {
                    return;
                }
                let Some(mut feed) = live.take() else {
                    return;
                };
                loop {
                    let received = tokio::select! {
                        received = feed.recv() => received,
                        () = tx.closed() => return,
                        () = stop.cancelled() => return,
                    };
                    match received {
                        Ok(stored) if stored.seq < next => continue,
                        Ok(stored) => {
                            next = stored.seq + 1;
                            if tx.send(Ok(convert::event(&stored))).await.is_err()
                                || convert::is_final(&stored)
                            {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                        // The actor ended: what is left is in its record.
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    }
                }
                match handle.watch(next).await {
                    Ok((missed, fresh)) => (past, live) = (missed, fresh),
                    Err(error) => {
                        let _ = tx.send(Err(Status::from(error))).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn resume(
        &self,
        request: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::RunInfo>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        // A value that is not JSON is taken as a string (SPEC section 12).
        let value =
            serde_json::from_str(&request.value_json).unwrap_or(Value::String(request.value_json));
        let comment = (!request.comment.is_empty()).then_some(request.comment);
        let by = Some(Caller {
            name: caller.name.clone(),
            role: caller.role.as_str().to_owned(),
        });
        let answer = HumanAnswer { value, comment, by };
        let handle = self.run(&caller, &request.run_id)?;
        let view = self.runs.answer(&handle, request.node, answer).await?;
        Ok(Response::new(convert::run_info(view, true)))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::RunInfo>, Status> {
        let caller = principal(&request)?;
        let handle = self.run(&caller, &request.into_inner().run_id)?;
        let view = handle.cancel(Some(caller.name.clone())).await?;
        Ok(Response::new(convert::run_info(view, true)))
    }

    async fn delete_run(
        &self,
        request: Request<pb::DeleteRunRequest>,
    ) -> Result<Response<pb::DeleteRunResponse>, Status> {
        let caller = principal(&request)?;
        let run_id = request.into_inner().run_id;
        self.run(&caller, &run_id)?;
        self.runs
            .delete(&run_id)
            .await
            .map_err(|error| match error {
                crate::runs::DeleteError::Unknown(id) => unknown_run(&id),
                not_ended => Status::failed_precondition(not_ended.to_string()),
            })?;
        Ok(Response::new(pb::DeleteRunResponse {}))
    }

    async fn retry(
        &self,
        request: Request<pb::RetryRequest>,
    ) -> Result<Response<pb::RunInfo>, Status> {
        let caller = principal(&request)?;
        let handle = self.run(&caller, &request.into_inner().run_id)?;
        let view = handle.retry(Some(caller.name.clone())).await?;
        Ok(Response::new(convert::run_info(view, true)))
    }
}

/// A stream fed by a task (tracked) writing into a channel.
fn async_stream<F, Fut>(tracker: &tokio_util::task::TaskTracker, produce: F) -> EventStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<pb::RunEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tracker.spawn(produce(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
