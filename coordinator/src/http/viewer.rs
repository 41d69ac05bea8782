//! The run viewer's page: static HTML, CSS and JavaScript from
//! `coordinator/viewer/`, built into the binary (no build step, nothing
//! fetched from elsewhere). One page serves `/` (the runs) and
//! `/runs/ID` (a run); it reads everything else from `/api/v1/`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const PAGE: &str = include_str!("../../viewer/index.html");
const STYLE: &str = include_str!("../../viewer/app.css");
/// The scripts, in the order the page loads them: the helpers and the
/// frame, the list of runs, a run's page.
const COMMON: &str = include_str!("../../viewer/common.js");
const RUNS: &str = include_str!("../../viewer/runs.js");
const RUN: &str = include_str!("../../viewer/run.js");

/// What the page may load and run: its own files only (the diagram's
/// inline `<style>` aside).
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                      img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The page's routes.
pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(page))
        .route("/runs/{id}", get(page))
        .route("/assets/common.js", get(|| script(COMMON)))
        .route("/assets/runs.js", get(|| script(RUNS)))
        .route("/assets/run.js", get(|| script(RUN)))
        .route("/assets/app.css", get(style))
}

fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
        ],
        body,
    )
}

async fn page() -> impl IntoResponse {
    file("text/html; charset=utf-8", PAGE)
}

async fn script(body: &'static str) -> impl IntoResponse {
    file("text/javascript; charset=utf-8", body)
}

async fn style() -> impl IntoResponse {
    file("text/css; charset=utf-8", STYLE)
}
