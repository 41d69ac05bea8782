//! How a member of a partitioned group routes a run-service request: by
//! what it is about ([`Target`]) to the partition led here, to the member
//! that leads it, or nowhere yet (a hand-over or a restore under way).

use weft_proto::v1 as pb;

use super::RunApi;
use crate::ha::member::Member;

/// What a request is about, for a member of a partitioned group to route.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// Run `id`: served where its partition is led (a fork is made in its
    /// source's partition).
    Run(&'a str),
    /// A new run: made in a partition led here, or by a member that leads
    /// one.
    New,
    /// Nothing of a run's (a validation, the shared indexes): served here
    /// when any partition is.
    Any,
}

impl Target<'_> {
    /// What the request needs a leader of, for a refusal.
    pub(super) fn what(&self) -> &'static str {
        match self {
            Self::Run(_) => "the run's partition",
            Self::New | Self::Any => "any partition",
        }
    }
}

/// Where a member of a partitioned group serves a request.
pub(super) enum MemberRoute {
    /// Here.
    Here(Box<RunApi>),
    /// At the member with this URL.
    At(String),
    /// Nowhere yet: nobody leads what it needs.
    Nowhere,
}

pub(super) fn member_route(member: &Member, target: &Target<'_>) -> MemberRoute {
    let here = |access| RunApi::over(access, member.indexes.clone());
    let (access, elsewhere) = match target {
        // Led here, its runs not yet restored: waited for.
        Target::Run(id) if member.restoring(id) => return MemberRoute::Nowhere,
        Target::Run(id) => (member.access(id), member.leader_of(id)),
        Target::New => (member.access_for_new_run(), member.another_leader()),
        Target::Any => (
            member
                .partitions
                .every_access(member.max_bundle_bytes)
                .into_iter()
                .next(),
            member.another_leader(),
        ),
    };
    match (access, elsewhere) {
        (Some(access), _) => MemberRoute::Here(Box::new(here(access))),
        (None, Some(url)) => MemberRoute::At(url),
        (None, None) => MemberRoute::Nowhere,
    }
}

/// What each request of the run service is about.
pub(crate) trait Targeted {
    fn target(&self) -> Target<'_>;
}

macro_rules! about_a_run {
    ($($request:ty),*) => {$(
        impl Targeted for $request {
            fn target(&self) -> Target<'_> {
                Target::Run(&self.run_id)
            }
        }
    )*};
}

about_a_run!(
    pb::GetRunRequest,
    pb::ResumeRequest,
    pb::CancelRequest,
    pb::RetryRequest,
    pb::DeleteRunRequest,
    pb::GetHistoryRequest,
    pb::ForkRequest,
    pb::StreamRunRequest,
    pb::WatchRunRequest
);

impl Targeted for pb::SubmitRequest {
    fn target(&self) -> Target<'_> {
        Target::New
    }
}

macro_rules! about_no_run {
    ($($request:ty),*) => {$(
        impl Targeted for $request {
            fn target(&self) -> Target<'_> {
                Target::Any
            }
        }
    )*};
}

about_no_run!(
    pb::ValidateRequest,
    pb::ListRunsRequest,
    pb::ListIndexesRequest,
    pb::FetchIndexRequest,
    pb::DescribeGroupRequest
);
