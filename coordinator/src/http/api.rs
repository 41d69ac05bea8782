//! The JSON API under `/api/v1/` (documented in `docs/viewer.md`): who
//! the caller is, runs listed and filtered, one run, its diagram, its
//! events (`events`), and the actions that resume, cancel, retry and
//! delete runs. Each handler admits its caller for its role, asks the
//! runs' front in domain terms (a leader's own runs, or the leader's
//! through a standby) and shapes the answer as JSON.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use weft_proto::events::HistoryPoint;
use weft_proto::types::RunStatus;

use super::Api;
use super::caller::{ApiError, Caller, parameters};
use super::run_json::run_json;
use crate::access::{RunReport, Shown};
use crate::auth::Role;

/// The API's routes.
pub(super) fn routes() -> Router<Api> {
    Router::new()
        .route("/whoami", get(whoami))
        .route("/group", get(group))
        .route("/runs", get(list))
        .route("/runs/{id}", get(one).delete(delete))
        .route("/runs/{id}/diagram.svg", get(diagram))
        .route("/runs/{id}/events", get(super::events::stream))
        .route("/runs/{id}/stream", get(super::events::pieces))
        .route("/runs/{id}/history", get(history))
        .route("/runs/{id}/fork", post(fork))
        .route("/runs/{id}/resume", post(resume))
        .route("/runs/{id}/cancel", post(cancel))
        .route("/runs/{id}/retry", post(retry))
}

/// The caller of `headers`, allowed to do `action`.
pub(super) fn admit(
    api: &Api,
    headers: &HeaderMap,
    action: (&str, Role),
) -> Result<Caller, ApiError> {
    Caller::admit(&api.identities, headers, action)
}

/// `GET /whoami`: the caller's name, role and namespace, and what the
/// page needs to know of the coordinator.
async fn whoami(State(api): State<Api>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("looking at runs", Role::Reader))?;
    let who = &caller.principal;
    Ok(Json(json!({
        "name": who.name,
        "role": who.role.as_str(),
        "namespace": who.namespace,
        "may_act": who.role.covers(Role::Operator),
        "sees_all_namespaces": who.role.covers(Role::Admin),
        "identities_required": api.identities.required(),
        "trace_url": api.settings.trace_url,
    })))
}

/// A run as the API shows it: [`run_json`], with the partition it lives
/// in when the coordinator is a member of a partitioned group.
fn run_shown(api: &Api, report: RunReport) -> Value {
    let partition = api.front.partition_of(report.run_id.as_ref());
    let mut shown = run_json(report, &api.settings);
    if let (Some(partition), Some(object)) = (partition, shown.as_object_mut()) {
        object.insert("partition".into(), partition.into());
    }
    shown
}

/// `GET /group`: the group of coordinators as this one sees it — its
/// partition count, each member with the partitions it leads (their runs
/// counted for a caller who sees every namespace; whether each is still
/// being restored), and the partitions nobody leads at the moment.
async fn group(State(api): State<Api>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("DescribeGroup", Role::Reader))?;
    let group = api.front.group(&caller.credentials).await?;
    let counted = group.runs_counted;
    let members: Vec<Value> = group
        .members
        .iter()
        .map(|member| {
            let partitions: Vec<Value> = member
                .partitions
                .iter()
                .map(|led| {
                    let mut shown = json!({"partition": led.partition, "restoring": led.restoring});
                    if counted && member.answered {
                        shown["runs"] = led.runs.into();
                    }
                    shown
                })
                .collect();
            json!({
                "url": member.url,
                "this": member.asked,
                "answered": member.answered,
                "partitions": partitions,
            })
        })
        .collect();
    Ok(Json(json!({
        "partitions": group.partitions,
        "members": members,
        "unled": group.unled,
        "runs_counted": counted,
    })))
}

/// Most runs a listing scans to fill one filtered page.
const SCANNED: usize = 10_000;

#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    graph: Option<String>,
    limit: Option<u32>,
    after: Option<String>,
}

/// `GET /runs?status=S&graph=G&limit=N&after=ID`: the runs, newest
/// first, that have status `S` and graph `G` (both optional), `N` of them
/// (default 50, at most 1,000), starting after run `ID`. `next` is the
/// `after` of the following page, absent on the last.
async fn list(
    State(api): State<Api>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("ListRuns", Role::Reader))?;
    let query = parameters(query)?;
    let status = match query.status.filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => Some(RunStatus::from_name(&name).ok_or_else(|| {
            let known: Vec<_> = RunStatus::ALL.iter().map(|s| s.name()).collect();
            ApiError::bad_request(format!(
                "unknown status '{name}': one of {}",
                known.join(", ")
            ))
        })?),
    };
    let graph = query.graph.filter(|g| !g.is_empty());
    let limit = query.limit.unwrap_or(50).clamp(1, 1000) as usize;
    let mut after = query.after.filter(|a| !a.is_empty());
    let (mut runs, mut scanned) = (Vec::new(), 0);
    let next = loop {
        let (page, next) = api
            .front
            .page(&caller.credentials, 200, after.clone())
            .await?;
        for report in page {
            scanned += 1;
            after = Some(report.run_id.to_string());
            let status_matches = status.is_none_or(|wanted| report.status == wanted);
            if status_matches && graph.as_deref().is_none_or(|g| g == report.graph_name) {
                runs.push(run_shown(&api, report));
                if runs.len() == limit {
                    break;
                }
            }
        }
        let more = next.is_some() || runs.len() == limit;
        if runs.len() == limit || next.is_none() || scanned >= SCANNED {
            break if more { after } else { None };
        }
    };
    Ok(Json(json!({ "runs": runs, "next": next })))
}

#[derive(Deserialize)]
struct RunQuery {
    /// `false`: leave the state out.
    state: Option<bool>,
}

/// `GET /runs/ID?state=false`: one run, with its state unless asked not.
async fn one(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<RunQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("GetRun", Role::Reader))?;
    let query = parameters(query)?;
    let shown = Shown {
        state: query.state != Some(false),
        diagram: false,
    };
    let report = api.front.report(&caller.credentials, id, shown).await?;
    Ok(Json(run_shown(&api, report)))
}

#[derive(Deserialize)]
struct HistoryQuery {
    /// The place: a wave (`3`; 0: the input) or a point within the next
    /// one (`3.57`); absent: the last kept.
    at: Option<String>,
}

/// A place in a run's history as the API is given it: a wave's number,
/// or text (`"3"`, `"3.57"`).
fn history_point(at: Option<&Value>) -> Result<Option<HistoryPoint>, ApiError> {
    let text = match at {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    text.parse()
        .map(Some)
        .map_err(|error: weft_proto::events::BadHistoryPoint| {
            ApiError::bad_request(format!("at: {error}"))
        })
}

/// A place's JSON: its step, its point and both as text (`"3.57"`).
fn place_json(step: u32, point: u64) -> (u32, u64, String) {
    (step, point, HistoryPoint { step, point }.to_string())
}

/// `GET /runs/ID/history?at=N`: the places the run's history keeps, and
/// its state at `N` (a wave, or `3.57`: a point within the next; SPEC 20).
async fn history(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("GetHistory", Role::Reader))?;
    let query = parameters(query)?;
    let at = history_point(query.at.map(Value::String).as_ref())?;
    let history = api
        .front
        .history(&caller.credentials, id.clone(), at)
        .await?;
    let state: Value = serde_json::from_str(&history.state_json).unwrap_or(Value::Null);
    let waves: Vec<Value> = history
        .waves
        .iter()
        .map(|wave| {
            let (step, point, at) = place_json(wave.step, wave.point);
            json!({
                "step": step,
                "point": point,
                "at": at,
                "at_unix_ms": wave.at_unix_ms,
                "status": wave.status,
                "changed": wave.changed,
                "removed": wave.removed,
            })
        })
        .collect();
    let (step, point, at) = place_json(history.step, history.point);
    Ok(Json(json!({
        "run_id": id,
        "step": step,
        "point": point,
        "at": at,
        "state": state,
        "waves": waves,
    })))
}

/// The body of `POST /runs/ID/fork`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    /// The place to fork at: a wave's number, or text (`"3.57"`: a point
    /// within the next wave); absent: the last kept.
    #[serde(default)]
    at: Option<Value>,
    /// Fields of the fork's state replaced.
    #[serde(default)]
    set: serde_json::Map<String, Value>,
}

/// `POST /runs/ID/fork`: a new run from the run's state after wave `at`
/// with the fields of `set` replaced (SPEC 20); `{"run_id"}` of the fork.
async fn fork(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    asked: Result<Json<ForkBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("Fork", Role::Operator))?;
    let asked = body(asked)?;
    let at = history_point(asked.at.as_ref())?;
    let forked = api
        .front
        .fork_run(&caller.credentials, id, at, asked.set)
        .await?;
    Ok(Json(json!({ "run_id": forked.run_id })))
}

/// `GET /runs/ID/diagram.svg`: the run's graph, drawn.
async fn diagram(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let caller = admit(&api, &headers, ("GetRun", Role::Reader))?;
    let shown = Shown {
        state: false,
        diagram: true,
    };
    let report = api.front.report(&caller.credentials, id, shown).await?;
    let svg = report.diagram_svg.unwrap_or_default();
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg))
}

/// The body of `POST /runs/ID/resume`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    /// The waiting node.
    node: String,
    /// The answer: `"approve"` or `"reject"` for an approval, any JSON
    /// value for an input.
    value: Value,
    #[serde(default)]
    comment: String,
}

/// A JSON body, or a 400 that says what is wrong with it.
fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(body)| body)
        .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
}

/// `POST /runs/ID/resume` with `{"node", "value", "comment"}`: answers a
/// waiting approval or input node.
async fn resume(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    answer: Result<Json<ResumeBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("Resume", Role::Operator))?;
    let answer = body(answer)?;
    let asked = api.front.answer(
        &caller.credentials,
        id,
        answer.node,
        answer.value,
        answer.comment,
    );
    Ok(Json(run_shown(&api, asked.await?)))
}

/// `POST /runs/ID/cancel`.
async fn cancel(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("Cancel", Role::Operator))?;
    let report = api.front.cancel_run(&caller.credentials, id).await?;
    Ok(Json(run_shown(&api, report)))
}

/// `POST /runs/ID/retry`.
async fn retry(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("Retry", Role::Operator))?;
    let report = api.front.retry_run(&caller.credentials, id).await?;
    Ok(Json(run_shown(&api, report)))
}

/// `DELETE /runs/ID`: removes an ended run (admin).
async fn delete(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&api, &headers, ("DeleteRun", Role::Admin))?;
    api.front.remove(&caller.credentials, id.clone()).await?;
    Ok(Json(json!({ "deleted": id })))
}
