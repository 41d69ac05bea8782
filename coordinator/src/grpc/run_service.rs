//! The client-facing run service: each method reads its request, asks the
//! leader's [`RunAccess`] as the caller the auth layer admitted, and
//! writes the answer; nothing else happens here.

use std::pin::Pin;
use weft_proto::events::HistoryPoint;

use serde_json::Value;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use weft_proto::v1 as pb;
use weft_proto::v1::run_service_server::RunService;

use super::{convert, principal};
use crate::access::{EventTypes, RunAccess, Shown};
use crate::indexes::SharedIndexes;
use crate::runs::SubmitError;
use crate::term::Services;

/// The run service over a coordinator's runs.
#[derive(Clone)]
pub struct RunApi {
    access: RunAccess,
    indexes: SharedIndexes,
}

impl RunApi {
    /// Serves a term's runs; watch streams end with the term (the client
    /// then asks again, of the next leader).
    pub fn new(term: &Services) -> Self {
        Self {
            access: RunAccess::new(term),
            indexes: term.indexes.clone(),
        }
    }

    /// Serves the runs `access` reaches, with `indexes`.
    pub fn over(access: RunAccess, indexes: SharedIndexes) -> Self {
        Self { access, indexes }
    }
}

pub(crate) type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;
pub(crate) type DeltaStream = Pin<Box<dyn Stream<Item = Result<pb::StreamDelta, Status>> + Send>>;

#[tonic::async_trait]
impl RunService for RunApi {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let bundle = convert::bundle(request.bundle, self.access.max_bundle_bytes())
            .map_err(SubmitError::from)?;
        let priority = match request.priority.as_str() {
            "" => None,
            text => Some(crate::graph::Priority::parse(text).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "priority '{text}' is not one of high, normal, low"
                ))
            })?),
        };
        let references: Vec<_> = request
            .input_refs
            .into_iter()
            .map(|reference| crate::runs::InputReference {
                field: reference.field,
                run: reference.run_id,
                from_field: reference.from_field,
            })
            .collect();
        let accepted = self
            .access
            .submit(
                &caller,
                bundle,
                &request.input_json,
                &references,
                priority,
                request.no_cache,
            )
            .await?;
        Ok(Response::new(pb::SubmitResponse {
            run_id: accepted.id.to_string(),
            warnings: accepted.warnings,
            referable: accepted.referable,
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        let bundle = convert::bundle(request.into_inner().bundle, self.access.max_bundle_bytes())
            .map_err(SubmitError::from)?;
        let findings = self.access.validate(&bundle)?;
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
        let shown = Shown {
            state: !request.omit_state,
            diagram: request.with_diagram,
        };
        let report = self
            .access
            .report_to_keeper(&caller, &request.run_id, shown, &request.kept_input)
            .await?;
        Ok(Response::new(report.into()))
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
        let (runs, next) = self.access.page(&caller, limit, after).await?;
        Ok(Response::new(pb::ListRunsResponse {
            runs: runs.into_iter().map(pb::RunInfo::from).collect(),
            next: next.unwrap_or_default(),
        }))
    }

    async fn list_indexes(
        &self,
        request: Request<pb::ListIndexesRequest>,
    ) -> Result<Response<pb::ListIndexesResponse>, Status> {
        let caller = principal(&request)?;
        let wanted = request.into_inner().namespace;
        let indexes = self
            .indexes
            .list(|namespace| caller.sees(namespace) && (wanted.is_empty() || wanted == namespace))
            .await
            .map_err(|error| Status::unavailable(error.to_string()))?;
        Ok(Response::new(pb::ListIndexesResponse {
            indexes: indexes.into_iter().map(convert::index_info).collect(),
        }))
    }

    async fn fetch_index(
        &self,
        request: Request<pb::FetchIndexRequest>,
    ) -> Result<Response<pb::FetchIndexResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let namespace = if request.namespace.is_empty() {
            caller.namespace.clone()
        } else {
            request.namespace
        };
        let missing = || {
            Status::not_found(format!(
                "no knowledge index '{}' is kept for namespace '{namespace}'",
                request.key
            ))
        };
        if !caller.sees(&namespace) {
            return Err(missing());
        }
        let content = self
            .indexes
            .fetch(&namespace, &request.key)
            .await
            .map_err(|error| Status::unavailable(error.to_string()))?
            .ok_or_else(missing)?;
        Ok(Response::new(pb::FetchIndexResponse {
            content: content.to_vec(),
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let wanted = EventTypes::parse(request.types)
            .map_err(|error| Status::invalid_argument(format!("WatchRunRequest.types: {error}")))?;
        let feed = self
            .access
            .watch(&caller, &request.run_id, request.from)
            .await?;
        let events = feed.filter_map(move |event| match event {
            Ok(stored) if wanted.wants(stored.event.kind()) => Some(Ok(convert::event(&stored))),
            Ok(_) => None,
            Err(error) => Some(Err(Status::from(error))),
        });
        Ok(Response::new(Box::pin(events)))
    }

    type StreamRunStream = DeltaStream;

    async fn stream_run(
        &self,
        request: Request<pb::StreamRunRequest>,
    ) -> Result<Response<DeltaStream>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let feed = self.access.stream(&caller, &request.run_id, request.from)?;
        let deltas = feed.map(|piece| Ok(convert::delta(&piece)));
        Ok(Response::new(Box::pin(deltas)))
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
        let report = self
            .access
            .answer(&caller, &request.run_id, request.node, value, comment)
            .await?;
        Ok(Response::new(report.into()))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::RunInfo>, Status> {
        let caller = principal(&request)?;
        let report = self
            .access
            .cancel(&caller, &request.into_inner().run_id)
            .await?;
        Ok(Response::new(report.into()))
    }

    async fn delete_run(
        &self,
        request: Request<pb::DeleteRunRequest>,
    ) -> Result<Response<pb::DeleteRunResponse>, Status> {
        let caller = principal(&request)?;
        self.access
            .delete(&caller, &request.into_inner().run_id)
            .await?;
        Ok(Response::new(pb::DeleteRunResponse {}))
    }

    async fn retry(
        &self,
        request: Request<pb::RetryRequest>,
    ) -> Result<Response<pb::RunInfo>, Status> {
        let caller = principal(&request)?;
        let report = self
            .access
            .retry(&caller, &request.into_inner().run_id)
            .await?;
        Ok(Response::new(report.into()))
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::RunHistory>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let asked = request.at.map(|step| HistoryPoint {
            step,
            point: request.point,
        });
        let at = self.access.history(&caller, &request.run_id, asked).await?;
        Ok(Response::new(pb::RunHistory {
            waves: at.waves.into_iter().map(convert::history_wave).collect(),
            step: at.wave.at.step,
            point: at.wave.at.point,
            state_json: Value::Object(at.state).to_string(),
        }))
    }

    async fn fork(
        &self,
        request: Request<pb::ForkRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let mut set = serde_json::Map::new();
        for (field, json) in request.set_json {
            let value = serde_json::from_str(&json).map_err(|error| {
                Status::invalid_argument(format!("--set {field}: not JSON ({error}): {json}"))
            })?;
            set.insert(field, value);
        }
        let at = request.at.map(|step| HistoryPoint {
            step,
            point: request.point,
        });
        let (accepted, _) = self.access.fork(&caller, &request.run_id, at, set).await?;
        Ok(Response::new(pb::SubmitResponse {
            run_id: accepted.id.to_string(),
            warnings: accepted.warnings,
            referable: Vec::new(),
        }))
    }

    /// A coordinator that leads the whole group (it is not a member of a
    /// partitioned one: those answer in front of this service) leads its
    /// one partition.
    async fn describe_group(
        &self,
        request: Request<pb::DescribeGroupRequest>,
    ) -> Result<Response<pb::GroupDescription>, Status> {
        principal(&request)?;
        Ok(Response::new(pb::GroupDescription {
            partitions: 1,
            members: Vec::new(),
            unled: Vec::new(),
            runs_counted: false,
        }))
    }
}
