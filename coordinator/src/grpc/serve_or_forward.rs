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

use super::run_service::EventStream;
use super::worker_service::{IndexStream, OutStream};
use super::{RunApi, WorkerApi};
use crate::access::{RunAccess, RunReport, Shown, StoredEvent};
use crate::auth::Principal;
use crate::term::{Role, Services};

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
    /// The leader's URL and a connection to it, reused while it leads.
    leader: Arc<Mutex<Option<Forwarding>>>,
    /// Where relays of the leader's event streams run.
    tracker: TaskTracker,
    /// Requests must carry an identity (so forwarded ones their token).
    identities_required: bool,
    /// What to trust at an `https://` leader.
    peers: weft_proto::transport::ClientTls,
}

/// A leader's URL and a client of it.
type Forwarding = (String, RunServiceClient<Channel>);

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
            leader: Arc::default(),
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

    /// Where a request goes now; `forwarded_in`: it was forwarded here.
    fn route(&self, forwarded_in: bool) -> Result<Route, NotServed> {
        let url = match &*self.role.borrow() {
            Role::Leader(services) => {
                return Ok(Route::Local(RunApi::new(current(services)?)));
            }
            Role::Standby(_) if forwarded_in => return Err(NotServed::NoLongerLeads),
            Role::Standby(None) => return Err(NotServed::NoLeader),
            Role::Standby(Some(url)) => url.clone(),
        };
        let mut leader = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, client)) = &*leader
            && *known == url
        {
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
        *leader = Some((url.clone(), client.clone()));
        Ok(Route::Forward(client, url))
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
            Box::pin(async move {
                let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
                let credentials = Credentials::of(&request);
                let message = request.into_inner();
                let deadline = tokio::time::Instant::now() + ELECTION_PATIENCE;
                loop {
                    let changed = self.role_changed();
                    let (status, unreached) = match self.route(forwarded_in) {
                        Ok(Route::Local(api)) => return api.$method(credentials.local(message)).await,
                        Ok(Route::Forward(mut client, leader)) => {
                            let onward = credentials.onward(
                                message.clone(),
                                self.identities_required,
                                &leader,
                            )?;
                            let call = client.$method(onward);
                            match self.forward(&leader, call).await {
                                Ok(response) => return Ok(response),
                                Err(failed) => failed,
                            }
                        }
                        Err(refused) => {
                            let unreached = matches!(refused, NotServed::NoLeader);
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
            })
        }
    )*};
}

#[tonic::async_trait]
impl RunService for FrontRuns {
    routed! {
        submit(pb::SubmitRequest) -> pb::SubmitResponse;
        validate(pb::ValidateRequest) -> pb::ValidateResponse;
        get_run(pb::GetRunRequest) -> pb::RunInfo;
        list_runs(pb::ListRunsRequest) -> pb::ListRunsResponse;
        list_indexes(pb::ListIndexesRequest) -> pb::ListIndexesResponse;
        fetch_index(pb::FetchIndexRequest) -> pb::FetchIndexResponse;
        resume(pb::ResumeRequest) -> pb::RunInfo;
        cancel(pb::CancelRequest) -> pb::RunInfo;
        retry(pb::RetryRequest) -> pb::RunInfo;
        delete_run(pb::DeleteRunRequest) -> pb::DeleteRunResponse;
        get_history(pb::GetHistoryRequest) -> pb::RunHistory;
        fork(pb::ForkRequest) -> pb::SubmitResponse;
    }

    type StreamRunStream = super::run_service::DeltaStream;

    async fn stream_run(
        &self,
        request: Request<pb::StreamRunRequest>,
    ) -> Result<Response<Self::StreamRunStream>, Status> {
        let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
        match self.route(forwarded_in)? {
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
        match self.route(forwarded_in)? {
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
            Role::Standby(_) => Ok(None),
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
