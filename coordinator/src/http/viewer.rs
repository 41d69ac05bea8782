//! The run viewer's page: static HTML, CSS and JavaScript from
//! `coordinator/viewer/`, built into the binary (no build step, nothing
//! fetched from elsewhere). One page serves `/` (the runs) and
//! `/runs/ID` (a run); it reads everything else from `/api/v1/`.

use axum::Router;
use axum::extract::Path;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const PAGE: &str = include_str!("../../viewer/index.html");
const STYLE: &str = include_str!("../../viewer/app.css");

/// The page's scripts, served under `/assets/`: the loader (a classic
/// script that imports the rest and reloads the page when a file could not
/// be fetched), then ES modules: the entry point, the shared helpers, the
/// list of runs, a run's page with its model, and one module per panel of
/// it.
const SCRIPTS: [(&str, &str); 13] = [
    ("start.js", include_str!("../../viewer/start.js")),
    ("main.js", include_str!("../../viewer/main.js")),
    ("common.js", include_str!("../../viewer/common.js")),
    ("runs.js", include_str!("../../viewer/runs.js")),
    ("run.js", include_str!("../../viewer/run.js")),
    ("run_model.js", include_str!("../../viewer/run_model.js")),
    (
        "panels/header.js",
        include_str!("../../viewer/panels/header.js"),
    ),
    (
        "panels/waiting.js",
        include_str!("../../viewer/panels/waiting.js"),
    ),
    (
        "panels/graph.js",
        include_str!("../../viewer/panels/graph.js"),
    ),
    (
        "panels/maps.js",
        include_str!("../../viewer/panels/maps.js"),
    ),
    (
        "panels/loops.js",
        include_str!("../../viewer/panels/loops.js"),
    ),
    (
        "panels/state.js",
        include_str!("../../viewer/panels/state.js"),
    ),
    (
        "panels/events.js",
        include_str!("../../viewer/panels/events.js"),
    ),
];

/// What the page may load and run: its own files only (the diagram's
/// inline `<style>` aside).
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                      img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The page's routes.
pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(page))
        .route("/runs/{id}", get(page))
        .route("/assets/app.css", get(style))
        .route("/assets/{*file}", get(asset))
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

/// A script by its path under `/assets/`, or 404.
async fn asset(Path(name): Path<String>) -> axum::response::Response {
    match SCRIPTS.iter().find(|(file, _)| *file == name) {
        Some((_, body)) => file("text/javascript; charset=utf-8", body).into_response(),
        None => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}

async fn style() -> impl IntoResponse {
    file("text/css; charset=utf-8", STYLE)
}
