//! The services a coordinator serves whatever its role: while it leads,
//! every request goes to its runs and dispatcher; while it stands by,
//! clients' requests are forwarded to the leader (reads and writes alike,
//! so a client sees exactly the leader's view and never needs to know who
//! leads), and workers are refused with the leader's URL to join instead.

use std::future::Future;
use std::sync::{Arc, Mutex};
use weft_proto::events::HistoryPoint;

use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};
use weft_proto::v1 as pb;
use weft_proto::v1::run_service_client::RunServiceClient;
use weft_proto::v1::run_service_server::RunService;
use weft_proto::v1::worker_service_server::WorkerService;
use weft_proto::{FORWARDED_METADATA, LEADER_METADATA, MAX_MESSAGE_BYTES};

use super::member_routes::{MemberRoute, Target, Targeted, member_route};
use super::run_service::EventStream;
use super::worker_service::{IndexStream, OutStream};
use super::{RunApi, WorkerApi};
use crate::access::{RunAccess, RunReport, Shown, StoredEvent};
use crate::auth::Principal;
use crate::ha::member::Member;
use crate::term::{Role, Services};

mod group_description;

/// Why this coordinator cannot serve a request itself, nor pass it on.
#[derive(Debug, thiserror::Error)]
enum NotServed {
    /// It led, but its lease may have lapsed.
    #[error(
        "this coordinator's lead may have lapsed (its lease was not renewed in time); ask again"
    )]
    Lapsed,
    /// Nobody leads (an election is under way).
    #[error(
        "no coordinator of the group leads at the moment (an election is under way); ask again shortly"
    )]
    NoLeader,
    /// A request forwarded here found this coordinator a standby.
    #[error("this coordinator no longer leads its group; ask again")]
    NoLongerLeads,
    /// The leader's URL does not make an endpoint.
    #[error("the leader's URL '{url}' is not usable: {reason}")]
    LeaderUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The leader did not answer a forwarded request in time.
    #[error("the leader did not answer within {FORWARD_TIMEOUT:?}")]
    LeaderSilent,
    /// The role changed while a request was forwarded.
    #[error("the leader changed while the request was forwarded")]
    LeaderChanged,
    /// A forwarded watch's leader changed.
    #[error("the leader changed; watch again")]
    WatchLeaderChanged,
    /// The leader could not be reached, or the connection died.
    #[error(
        "this coordinator stands by and forwarded the request to the leader at {leader}: {said}; if the leader is gone, another coordinator takes over within its lease: ask again"
    )]
    Forwarding {
        /// The leader's URL.
        leader: String,
        /// What the transport said.
        said: String,
    },
    /// A caller known by its certificate alone cannot be vouched for.
    #[error(
        "this coordinator stands by and forwards requests to the leader at {leader} with their token; a client identified by its certificate alone must call the leader itself"
    )]
    CertificateOnly {
        /// The leader's URL.
        leader: String,
    },
    /// A worker joined a standby: it is told where the leader is.
    #[error("this coordinator stands by; the leader is at {0}")]
    StandingBy(String),
    /// No coordinator of a partitioned group leads the partition a request
    /// needs (a hand-over or a take-over is under way).
    #[error(
        "no coordinator of the group leads {0} at the moment (a hand-over is under way); ask again shortly"
    )]
    NoPartitionLeader(&'static str),
    /// A request forwarded here for a partition led here no longer.
    #[error("the partition of run '{0}' is no longer led by this coordinator; ask again")]
    PartitionMoved(String),
}

impl From<NotServed> for Status {
    fn from(error: NotServed) -> Self {
        let message = error.to_string();
        match error {
            NotServed::CertificateOnly { .. } => Status::failed_precondition(message),
            NotServed::StandingBy(url) => {
                let mut status = Status::unavailable(message);
                if let Ok(value) = url.parse() {
                    status.metadata_mut().insert(LEADER_METADATA, value);
                }
                status
            }
            _ => Status::unavailable(message),
        }
    }
}

/// A term's services, unless this leader's lease may have lapsed.
fn current(services: &Services) -> Result<&Services, NotServed> {
    if services.current() {
        Ok(services)
    } else {
        Err(NotServed::Lapsed)
    }
}

/// How long a request a standby could not get to any leader waits for one
/// to be elected.
const ELECTION_PATIENCE: std::time::Duration = std::time::Duration::from_secs(15);

/// Whether a forwarded call failed because the leader refused the
/// connection: then the request reached nobody.
fn connection_refused(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = error.source();
    }
    status.message().contains("tcp connect error")
}

/// How long a forwarded request may wait for the leader's answer.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The client-facing service in front of the role.
#[derive(Clone)]
pub struct FrontRuns {
    role: watch::Receiver<Role>,
    /// Connections to the coordinators requests were forwarded to (the
    /// leader; in a partitioned group, the partitions' leaders), by URL.
    peers_by_url: Arc<Mutex<std::collections::HashMap<String, RunServiceClient<Channel>>>>,
    /// Where relays of the leader's event streams run.
    tracker: TaskTracker,
    /// Requests must carry an identity (so forwarded ones their token).
    identities_required: bool,
    /// What to trust at an `https://` leader.
    peers: weft_proto::transport::ClientTls,
}

enum Route {
    Local(RunApi),
    /// The leader's client and URL.
    Forward(RunServiceClient<Channel>, String),
}

impl FrontRuns {
    /// Serves by `role`; relays of the leader's event streams run on
    /// `tracker`; `identities_required`: requests carry an identity;
    /// `peers`: what to trust at an `https://` leader.
    pub fn new(
        role: watch::Receiver<Role>,
        tracker: TaskTracker,
        identities_required: bool,
        peers: weft_proto::transport::ClientTls,
    ) -> Self {
        Self {
            role,
            peers_by_url: Arc::default(),
            tracker,
            identities_required,
            peers,
        }
    }

    /// Resolves when the role changes from what it is now (or the
    /// coordinator stops): a request forwarded to a leader that is gone
    /// (dead, paused, deposed) is given up rather than waited on.
    fn role_changed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut role = self.role.clone();
        role.mark_unchanged();
        async move {
            let _ = role.changed().await;
        }
    }

    /// A forwarded call's answer, or `unavailable` (which clients retry)
    /// if the leader changes, cannot be reached or does not answer in time;
    /// with whether the request certainly reached no leader (the
    /// connection was refused), so it may be routed again.
    async fn forward<T>(
        &self,
        leader: &str,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<Response<T>, (Status, bool)> {
        let answer = tokio::select! {
            answer = tokio::time::timeout(FORWARD_TIMEOUT, call) => answer.unwrap_or_else(|_| {
                Err(NotServed::LeaderSilent.into())
            }),
            () = self.role_changed() => Err(NotServed::LeaderChanged.into()),
        };
        answer.map_err(|status| match status.code() {
            // Cancelled: the connection died under the request.
            tonic::Code::Unavailable | tonic::Code::Cancelled => {
                let refused = connection_refused(&status);
                let status = NotServed::Forwarding {
                    leader: leader.to_owned(),
                    said: status.message().to_owned(),
                };
                (status.into(), refused)
            }
            _ => (status, false),
        })
    }

    /// Resolves when the role changes, or, for a member of a partitioned
    /// group, when its view of the group does: a request that found no
    /// leader for its partition is routed again then.
    fn changed(&self) -> impl Future<Output = ()> + Send + 'static {
        let role = self.role_changed();
        let view = match &*self.role.borrow() {
            Role::Member(member) => Some(member.view_changed()),
            _ => None,
        };
        async move {
            match view {
                Some(view) => tokio::select! {
                    () = role => {}
                    () = view => {}
                },
                None => role.await,
            }
        }
    }

    /// Where a request about `target` goes now; `forwarded_in`: it was
    /// forwarded here.
    fn route(&self, forwarded_in: bool, target: Target<'_>) -> Result<Route, NotServed> {
        let url = match &*self.role.borrow() {
            Role::Leader(services) => {
                return Ok(Route::Local(RunApi::new(current(services)?)));
            }
            Role::Member(member) => match (member_route(member, &target), target) {
                (MemberRoute::Here(api), _) => return Ok(Route::Local(*api)),
                (MemberRoute::At(_), Target::Run(id)) if forwarded_in => {
                    return Err(NotServed::PartitionMoved(id.to_owned()));
                }
                (MemberRoute::At(url), _) if !forwarded_in => url,
                (MemberRoute::At(_) | MemberRoute::Nowhere, _) => {
                    return Err(NotServed::NoPartitionLeader(target.what()));
                }
            },
            Role::Standby(_) if forwarded_in => return Err(NotServed::NoLongerLeads),
            Role::Standby(None) => return Err(NotServed::NoLeader),
            Role::Standby(Some(url)) => url.clone(),
        };
        self.client_of(url)
    }

    /// A client of the coordinator at `url`, reused from one request to
    /// the next.
    fn client_of(&self, url: String) -> Result<Route, NotServed> {
        let mut clients = self.peers_by_url.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(&url) {
            return Ok(Route::Forward(client.clone(), url));
        }
        let peers = if url.starts_with("https://") {
            self.peers.clone()
        } else {
            weft_proto::transport::ClientTls::default()
        };
        let endpoint =
            weft_proto::transport::endpoint(&url, &peers).map_err(|e| NotServed::LeaderUrl {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let client = RunServiceClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        clients.insert(url.clone(), client.clone());
        Ok(Route::Forward(client, url))
    }

    /// This coordinator's member services, when it is a member of a
    /// partitioned group.
    fn member(&self) -> Option<Arc<Member>> {
        match &*self.role.borrow() {
            Role::Member(member) => Some(member.clone()),
            _ => None,
        }
    }

    /// A page of runs across a partitioned group: the partitions led here,
    /// and (unless the request was forwarded here) every other member's,
    /// merged newest first. Run ids sort in the order runs are made, so the
    /// page's last id is where every member's next page starts.
    async fn list_across(
        &self,
        member: &Member,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
        let credentials = Credentials::of(&request);
        let message = request.into_inner();
        let limit = match message.limit {
            0 => 100,
            n => n.min(1000) as usize,
        };
        let mut runs = Vec::new();
        let mut more = false;
        for access in member.partitions.every_access(member.max_bundle_bytes) {
            let api = RunApi::over(access, member.indexes.clone());
            let page = api.list_runs(credentials.local(message.clone())).await?;
            let page = page.into_inner();
            more |= !page.next.is_empty();
            runs.extend(page.runs);
        }
        if !forwarded_in {
            for url in member.others() {
                let Route::Forward(mut client, url) = self.client_of(url)? else {
                    continue;
                };
                let onward = credentials.onward(message.clone(), self.identities_required, &url)?;
                let page = self
                    .forward(&url, client.list_runs(onward))
                    .await
                    .map_err(|(status, _)| status)?
                    .into_inner();
                more |= !page.next.is_empty();
                runs.extend(page.runs);
            }
        }
        runs.sort_by(|a, b| b.run_id.cmp(&a.run_id));
        if runs.len() > limit {
            runs.truncate(limit);
            more = true;
        }
        let next = match runs.last() {
            Some(last) if more => last.run_id.clone(),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListRunsResponse { runs, next }))
    }
}

/// Who made a request, as the leader is to learn it: the bearer token it
/// carried (the leader checks it again), or nothing when it carried none.
#[derive(Clone)]
pub(crate) struct Credentials {
    principal: Option<Principal>,
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Credentials {
    /// A caller another door admitted as `principal`, with the token it
    /// showed (`authorization`, as the header said it).
    pub(crate) fn new(principal: Principal, authorization: Option<&str>) -> Self {
        Self {
            principal: Some(principal),
            authorization: authorization.and_then(|text| text.parse().ok()),
        }
    }

    /// Who asks, as the leader's access checks it.
    fn principal(&self) -> Result<&Principal, Status> {
        self.principal
            .as_ref()
            .ok_or_else(|| Status::unauthenticated("the request carries no identity"))
    }

    /// `message` as a call of the run service by this caller: served here
    /// with its identity, or forwarded with its token.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = self.local(message);
        if let Some(token) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        request
    }

    fn of<T>(request: &Request<T>) -> Self {
        Self {
            principal: request.extensions().get::<Principal>().cloned(),
            authorization: request.metadata().get("authorization").cloned(),
        }
    }

    /// `message` as a request served here, with its caller.
    fn local<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(principal) = &self.principal {
            request.extensions_mut().insert(principal.clone());
        }
        request
    }

    /// `message` as sent on to the leader, with the caller's token, and
    /// marked so it is not sent further. A caller named by its client
    /// certificate alone cannot be vouched for to the leader: it is told
    /// to call the leader itself.
    fn onward<T>(&self, message: T, required: bool, leader: &str) -> Result<Request<T>, Status> {
        if required && self.authorization.is_none() {
            return Err(NotServed::CertificateOnly {
                leader: leader.to_owned(),
            }
            .into());
        }
        let mut onward = Request::new(message);
        onward.metadata_mut().insert(
            FORWARDED_METADATA,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        if let Some(token) = &self.authorization {
            onward.metadata_mut().insert("authorization", token.clone());
        }
        Ok(onward)
    }
}

/// Unary methods, each served locally or forwarded; written out in the
/// shape `tonic::async_trait` gives the trait's methods. A request that
/// certainly reached no leader (none is known, or its connection was
/// refused) is routed again when the role changes, for up to
/// [`ELECTION_PATIENCE`]: a client sent to a standby mid-election is
/// served by whoever leads next.
macro_rules! routed {
    ($($method:ident($request:ty) -> $response:ty;)*) => {$(
        fn $method<'life0, 'async_trait>(
            &'life0 self,
            request: Request<$request>,
        ) -> std::pin::Pin<Box<
            dyn std::future::Future<Output = Result<Response<$response>, Status>>
                + Send
                + 'async_trait,
        >>
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(routed_body!(self, request, $method))
        }
    )*};
}

/// A routed method's body (see [`routed`]).
macro_rules! routed_body {
    ($self:ident, $request:ident, $method:ident) => {
        async move {
            let request = $request;
            let this = $self;
            let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
            let credentials = Credentials::of(&request);
            let message = request.into_inner();
            let deadline = tokio::time::Instant::now() + ELECTION_PATIENCE;
            loop {
                let changed = this.changed();
                let (status, unreached) = match this.route(forwarded_in, message.target()) {
                    Ok(Route::Local(api)) => return api.$method(credentials.local(message)).await,
                    Ok(Route::Forward(mut client, leader)) => {
                        let onward = credentials.onward(
                            message.clone(),
                            this.identities_required,
                            &leader,
                        )?;
                        let call = client.$method(onward);
                        match this.forward(&leader, call).await {
                            Ok(response) => return Ok(response),
                            Err(failed) => failed,
                        }
                    }
                    Err(refused) => {
                        let unreached = matches!(
                            refused,
                            NotServed::NoLeader | NotServed::NoPartitionLeader(_)
                        );
                        (refused.into(), unreached)
                    }
                };
                if !unreached || tokio::time::Instant::now() >= deadline {
                    return Err(status);
                }
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(deadline) => {}
                }
            }
        }
    };
}

#[tonic::async_trait]
impl RunService for FrontRuns {
    routed! {
        submit(pb::SubmitRequest) -> pb::SubmitResponse;
        validate(pb::ValidateRequest) -> pb::ValidateResponse;
        get_run(pb::GetRunRequest) -> pb::RunInfo;
        list_indexes(pb::ListIndexesRequest) -> pb::ListIndexesResponse;
        fetch_index(pb::FetchIndexRequest) -> pb::FetchIndexResponse;
        resume(pb::ResumeRequest) -> pb::RunInfo;
        cancel(pb::CancelRequest) -> pb::RunInfo;
        retry(pb::RetryRequest) -> pb::RunInfo;
        delete_run(pb::DeleteRunRequest) -> pb::DeleteRunResponse;
        get_history(pb::GetHistoryRequest) -> pb::RunHistory;
        fork(pb::ForkRequest) -> pb::SubmitResponse;
    }

    /// In a partitioned group, every member's runs; otherwise routed as
    /// the rest are.
    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        if let Some(member) = self.member() {
            return self.list_across(&member, request).await;
        }
        routed_body!(self, request, list_runs).await
    }

    /// In a partitioned group, every member's partitions; otherwise
    /// routed as the rest are (the leader leads the one partition).
    async fn describe_group(
        &self,
        request: Request<pb::DescribeGroupRequest>,
    ) -> Result<Response<pb::GroupDescription>, Status> {
        if let Some(member) = self.member() {
            return self.describe_across(&member, request).await;
        }
        routed_body!(self, request, describe_group).await
    }

    type StreamRunStream = super::run_service::DeltaStream;

    async fn stream_run(
        &self,
        request: Request<pb::StreamRunRequest>,
    ) -> Result<Response<Self::StreamRunStream>, Status> {
        let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
        let route = self.route(forwarded_in, request.get_ref().target())?;
        match route {
            Route::Local(api) => api.stream_run(request).await,
            Route::Forward(mut client, leader) => {
                let changed = self.role_changed();
                let credentials = Credentials::of(&request);
                let onward =
                    credentials.onward(request.into_inner(), self.identities_required, &leader)?;
                let call = client.stream_run(onward);
                let deltas = self
                    .forward(&leader, call)
                    .await
                    .map_err(|(status, _)| status)?
                    .into_inner();
                Ok(Response::new(relay(deltas, changed, &self.tracker)))
            }
        }
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
        let route = self.route(forwarded_in, request.get_ref().target())?;
        match route {
            Route::Local(api) => api.watch_run(request).await,
            Route::Forward(mut client, leader) => {
                let changed = self.role_changed();
                let credentials = Credentials::of(&request);
                let onward =
                    credentials.onward(request.into_inner(), self.identities_required, &leader)?;
                let call = client.watch_run(onward);
                let events = self
                    .forward(&leader, call)
                    .await
                    .map_err(|(status, _)| status)?
                    .into_inner();
                Ok(Response::new(relay(events, changed, &self.tracker)))
            }
        }
    }
}

/// A run's events in domain terms, as the HTTP door relays them.
pub(crate) type StoredEvents =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<StoredEvent, Status>> + Send>>;

/// The same routes for the HTTP door, answered in domain terms: a leader
/// asks its [`RunAccess`] directly (no protobuf on the way); a standby
/// forwards as the run service does and reads the leader's answer once,
/// into the same domain types.
impl FrontRuns {
    /// This coordinator's runs, when it leads now; `None` when it stands
    /// by (the request is forwarded).
    fn leading(&self) -> Result<Option<RunAccess>, Status> {
        match &*self.role.borrow() {
            Role::Leader(services) => Ok(Some(RunAccess::new(current(services)?))),
            // A member routes each request by its run (the run service).
            Role::Standby(_) | Role::Member(_) => Ok(None),
        }
    }

    /// Run `id` as `caller` sees it, showing `shown`.
    pub(crate) async fn report(
        &self,
        caller: &Credentials,
        id: String,
        shown: Shown,
    ) -> Result<RunReport, Status> {
        if let Some(access) = self.leading()? {
            return Ok(access.report(caller.principal()?, &id, shown).await?);
        }
        let request = caller.request(pb::GetRunRequest {
            run_id: id,
            omit_state: !shown.state,
            with_diagram: shown.diagram,
            kept_input: Vec::new(),
        });
        Ok(self.get_run(request).await?.into_inner().into())
    }

    /// A page of the runs `caller` sees (see [`RunAccess::page`]).
    pub(crate) async fn page(
        &self,
        caller: &Credentials,
        limit: usize,
        after: Option<String>,
    ) -> Result<(Vec<RunReport>, Option<String>), Status> {
        if let Some(access) = self.leading()? {
            let after = after.as_deref();
            return Ok(access.page(caller.principal()?, limit, after).await?);
        }
        let request = caller.request(pb::ListRunsRequest {
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            after: after.unwrap_or_default(),
        });
        let page = self.list_runs(request).await?.into_inner();
        let runs = page.runs.into_iter().map(RunReport::from).collect();
        Ok((runs, (!page.next.is_empty()).then_some(page.next)))
    }

    /// Run `id`'s events from `from`; a kind of event this coordinator
    /// does not know (a newer leader's) is left out.
    pub(crate) async fn watch(
        &self,
        caller: &Credentials,
        id: String,
        from: u64,
    ) -> Result<StoredEvents, Status> {
        use tokio_stream::StreamExt;
        if let Some(access) = self.leading()? {
            let feed = access.watch(caller.principal()?, &id, from).await?;
            return Ok(Box::pin(feed.map(|event| event.map_err(Status::from))));
        }
        let request = caller.request(pb::WatchRunRequest {
            run_id: id,
            from,
            types: Vec::new(),
        });
        let events = self.watch_run(request).await?.into_inner();
        Ok(Box::pin(events.filter_map(|event| match event {
            Ok(event) => super::convert::stored_event(event).map(Ok),
            Err(status) => Some(Err(status)),
        })))
    }

    /// Run `id`'s model output from offset `from`, live until it ends: a
    /// leader reads it itself, a standby through the leader.
    pub(crate) async fn pieces(
        &self,
        caller: &Credentials,
        id: String,
        from: u64,
    ) -> Result<
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::StreamDelta, Status>> + Send>>,
        Status,
    > {
        use tokio_stream::StreamExt;
        if let Some(access) = self.leading()? {
            let feed = access.stream(caller.principal()?, &id, from)?;
            return Ok(Box::pin(
                feed.map(|piece| Ok(super::convert::delta(&piece))),
            ));
        }
        let request = caller.request(pb::StreamRunRequest { run_id: id, from });
        Ok(self.stream_run(request).await?.into_inner())
    }

    /// Starts a fork of run `id` at place `at` of its history with `set`
    /// replacing fields, through the leader (itself, or through it).
    pub(crate) async fn fork_run(
        &self,
        caller: &Credentials,
        id: String,
        at: Option<HistoryPoint>,
        set: serde_json::Map<String, serde_json::Value>,
    ) -> Result<pb::SubmitResponse, Status> {
        let set_json = set
            .into_iter()
            .map(|(field, value)| (field, value.to_string()))
            .collect();
        let request = caller.request(pb::ForkRequest {
            run_id: id,
            at: at.map(|at| at.step),
            point: at.map_or(0, |at| at.point),
            set_json,
        });
        Ok(RunService::fork(self, request).await?.into_inner())
    }

    /// Run `id`'s history and its state at place `at` (the last kept when
    /// `None`), from the leader (itself, or through it).
    pub(crate) async fn history(
        &self,
        caller: &Credentials,
        id: String,
        at: Option<HistoryPoint>,
    ) -> Result<pb::RunHistory, Status> {
        let request = caller.request(pb::GetHistoryRequest {
            run_id: id,
            at: at.map(|at| at.step),
            point: at.map_or(0, |at| at.point),
        });
        Ok(self.get_history(request).await?.into_inner())
    }

    /// Answers the waiting `node` of run `id` with `value` and `comment`.
    pub(crate) async fn answer(
        &self,
        caller: &Credentials,
        id: String,
        node: String,
        value: serde_json::Value,
        comment: String,
    ) -> Result<RunReport, Status> {
        if let Some(access) = self.leading()? {
            let comment = (!comment.is_empty()).then_some(comment);
            let asked = access.answer(caller.principal()?, &id, node, value, comment);
            return Ok(asked.await?);
        }
        let request = caller.request(pb::ResumeRequest {
            run_id: id,
            node,
            value_json: weft_proto::json::to_string(&value),
            comment,
        });
        Ok(self.resume(request).await?.into_inner().into())
    }

    /// Cancels run `id`.
    pub(crate) async fn cancel_run(
        &self,
        caller: &Credentials,
        id: String,
    ) -> Result<RunReport, Status> {
        if let Some(access) = self.leading()? {
            return Ok(access.cancel(caller.principal()?, &id).await?);
        }
        let request = caller.request(pb::CancelRequest { run_id: id });
        Ok(self.cancel(request).await?.into_inner().into())
    }

    /// Retries failed run `id`.
    pub(crate) async fn retry_run(
        &self,
        caller: &Credentials,
        id: String,
    ) -> Result<RunReport, Status> {
        if let Some(access) = self.leading()? {
            return Ok(access.retry(caller.principal()?, &id).await?);
        }
        let request = caller.request(pb::RetryRequest { run_id: id });
        Ok(self.retry(request).await?.into_inner().into())
    }

    /// Removes ended run `id`.
    pub(crate) async fn remove(&self, caller: &Credentials, id: String) -> Result<(), Status> {
        if let Some(access) = self.leading()? {
            return Ok(access.delete(caller.principal()?, &id).await?);
        }
        let request = caller.request(pb::DeleteRunRequest { run_id: id });
        self.delete_run(request).await?;
        Ok(())
    }
}

/// The leader's stream of events (or of a run's model output), ended with
/// `unavailable` (the client watches again) when `changed` resolves: the
/// leader is gone or deposed.
#[allow(clippy::type_complexity)]
fn relay<T: Send + 'static>(
    mut events: Streaming<T>,
    changed: impl Future<Output = ()> + Send + 'static,
    tracker: &TaskTracker,
) -> std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tracker.spawn(async move {
        tokio::pin!(changed);
        loop {
            let item = tokio::select! {
                item = events.message() => item,
                () = &mut changed => Err(NotServed::WatchLeaderChanged.into()),
                () = tx.closed() => return,
            };
            let (item, last) = match item {
                Ok(Some(event)) => (Ok(event), false),
                Ok(None) => return,
                Err(status) => (Err(status), true),
            };
            if tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// The worker-facing service in front of the role.
#[derive(Clone)]
pub struct FrontWorkers {
    role: watch::Receiver<Role>,
}

impl FrontWorkers {
    /// Serves by `role`.
    pub fn new(role: watch::Receiver<Role>) -> Self {
        Self { role }
    }

    /// The leader's worker service, or a refusal that names the leader.
    fn local(&self) -> Result<WorkerApi, Status> {
        match &*self.role.borrow() {
            Role::Leader(services) => Ok(WorkerApi::new(current(services)?)),
            Role::Member(member) => Ok(WorkerApi::for_member(member)),
            Role::Standby(None) => Err(NotServed::NoLeader.into()),
            Role::Standby(Some(url)) => Err(NotServed::StandingBy(url.clone()).into()),
        }
    }
}

#[tonic::async_trait]
impl WorkerService for FrontWorkers {
    type JoinStream = OutStream;

    async fn join(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<OutStream>, Status> {
        self.local()?.join(request).await
    }

    async fn fetch_blob(
        &self,
        request: Request<pb::FetchBlobRequest>,
    ) -> Result<Response<pb::FetchBlobResponse>, Status> {
        self.local()?.fetch_blob(request).await
    }

    type ShareIndexStream = IndexStream;

    async fn share_index(
        &self,
        request: Request<Streaming<pb::IndexUpload>>,
    ) -> Result<Response<IndexStream>, Status> {
        self.local()?.share_index(request).await
    }
}
