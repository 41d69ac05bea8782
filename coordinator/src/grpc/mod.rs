//! Thin gRPC services: each handler converts the request, calls the domain
//! (the leader's `access::RunAccess`, the dispatcher), and maps the error.
//! Generated protobuf types stay in this module, but for the worker
//! protocol's own conversion (`weft_proto::worker_protocol::wire`).

pub(crate) mod convert;
pub(crate) mod group_flow;
mod member_routes;
mod run_service;
mod serve_or_forward;
mod share_index;
#[cfg(test)]
mod state_sync_tests;
mod worker_service;

pub use run_service::RunApi;
pub(crate) use serve_or_forward::Credentials;
pub use serve_or_forward::{FrontRuns, FrontWorkers};
pub use worker_service::WorkerApi;

use tonic::Status;

use crate::access::AccessError;
use crate::auth::Principal;
use crate::bundle::BundleError;
use crate::run_actor::{Rejected, RunRequestError};
use crate::runs::SubmitError;

impl From<SubmitError> for Status {
    fn from(error: SubmitError) -> Self {
        match &error {
            SubmitError::Bundle(BundleError::TooLarge { .. })
            | SubmitError::InputTooLarge { .. }
            | SubmitError::TooManyRuns { .. }
            | SubmitError::DaySpent(_) => Status::resource_exhausted(error.to_string()),
            SubmitError::Store(_) | SubmitError::FlowUnanswered(_) => {
                Status::unavailable(error.to_string())
            }
            SubmitError::ReferenceNotHeld { .. } => Status::failed_precondition(error.to_string()),
            _ => Status::invalid_argument(error.to_string()),
        }
    }
}

impl From<RunRequestError> for Status {
    fn from(error: RunRequestError) -> Self {
        match &error {
            RunRequestError::ShuttingDown | RunRequestError::Store(_) => {
                Status::unavailable(error.to_string())
            }
            RunRequestError::Rejected(Rejected::BadAnswer { .. }) => {
                Status::invalid_argument(error.to_string())
            }
            RunRequestError::Rejected(Rejected::NotApprover { .. }) => {
                crate::auth::layer::refused("approver");
                Status::permission_denied(error.to_string())
            }
            RunRequestError::Rejected(_) => Status::failed_precondition(error.to_string()),
        }
    }
}

impl From<AccessError> for Status {
    fn from(error: AccessError) -> Self {
        match error {
            AccessError::UnknownRun(id) => unknown_run(&id),
            AccessError::Request(error) => error.into(),
            AccessError::NotEnded(error) => Status::failed_precondition(error.to_string()),
            AccessError::History(crate::durable::history::HistoryError::UnknownStep { .. }) => {
                Status::invalid_argument(error.to_string())
            }
            AccessError::History(error) => Status::internal(error.to_string()),
            AccessError::NoHistory => Status::failed_precondition(error.to_string()),
            AccessError::Fork(error) => error.into(),
        }
    }
}

/// The identity the auth layer admitted the request with.
fn principal<T>(request: &tonic::Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the request carries no identity"))
}

fn unknown_run(id: &str) -> Status {
    Status::not_found(format!("unknown run '{id}'"))
}
