//! `GET /api/v1/runs/ID/stream?from=N`: the run's model output as its steps
//! stream it (SPEC 19), the same way: each piece's `id` is its offset, its
//! `data` `{"offset", "node", "item", "attempt", "kind", "text"}`; the
//! stream ends once the run has ended and every piece is sent.
//!
//! `GET /api/v1/runs/ID/events?from=N&types=A,B`: a run's events as
//! server-sent events, from position `N` (or after the `Last-Event-ID` a
//! reconnecting browser sends), those of the types named (none: all), live
//! until the run ends. Each event's `id` is its
//! position and its `data` its JSON form (`run_json::event_json`); the
//! stream ends after the run's `run_finished`, or with an `error` event
//! that says why it cannot go on. A comment every 15 seconds keeps idle
//! connections open through proxies.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Deserialize;
use tokio_stream::{Stream, StreamExt};

use super::Api;
use super::caller::{ApiError, Caller, parameters};
use super::run_json::event_json;
use crate::access::EventTypes;
use crate::auth::Role;

#[derive(Deserialize)]
pub(super) struct EventsQuery {
    from: Option<u64>,
    /// Only these event types, comma-separated (none: all).
    types: Option<String>,
}

/// Where a stream starts: `?from=`, else after the last event a
/// reconnecting browser saw, else the beginning.
fn start(query: &EventsQuery, headers: &HeaderMap) -> u64 {
    let resumed = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(|seen| seen + 1);
    query.from.or(resumed).unwrap_or(0)
}

pub(super) async fn stream(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let caller = Caller::admit(&api.identities, &headers, ("WatchRun", Role::Reader))?;
    let query = parameters(query)?;
    let from = start(&query, &headers);
    let types = (query.types.as_deref().unwrap_or_default().split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let wanted = EventTypes::parse(types)
        .map_err(|error| ApiError::bad_request(format!("types: {error}")))?;
    let events = api.front.watch(&caller.credentials, id, from).await?;
    let sent = events.filter_map(move |event| match event {
        Ok(stored) if !wanted.wants(stored.event.kind()) => None,
        Ok(stored) => Some(Ok(Event::default()
            .id(stored.seq.to_string())
            .data(event_json(&stored).to_string()))),
        Err(status) => {
            let error = serde_json::json!({ "message": status.message() });
            Some(Ok(Event::default().event("error").data(error.to_string())))
        }
    });
    Ok(Sse::new(sent).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[derive(Deserialize)]
pub(super) struct PiecesQuery {
    from: Option<u64>,
}

pub(super) async fn pieces(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<PiecesQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let caller = Caller::admit(&api.identities, &headers, ("StreamRun", Role::Reader))?;
    let query = parameters(query)?;
    let from = start(
        &EventsQuery {
            from: query.from,
            types: None,
        },
        &headers,
    );
    let pieces = api.front.pieces(&caller.credentials, id, from).await?;
    let sent = pieces.map(|piece| match piece {
        Ok(piece) => {
            let data = serde_json::json!({
                "offset": piece.offset,
                "node": piece.node,
                "item": piece.item,
                "attempt": piece.attempt,
                "kind": piece.kind,
                "text": piece.text,
            });
            Ok(Event::default()
                .id(piece.offset.to_string())
                .data(data.to_string()))
        }
        Err(status) => {
            let error = serde_json::json!({ "message": status.message() });
            Ok(Event::default().event("error").data(error.to_string()))
        }
    });
    Ok(Sse::new(sent).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
