//! The routes. Handlers read shared state and return; the only CPU work is
//! rendering /metrics and encoding a snapshot (on a blocking thread).

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use super::{api, mjpeg};
use super::{REQUEST_TIMEOUT, WebContext, auth};

const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const PAGE: &str = include_str!("page.html");
/// Snapshots are for eyes, not measurement.
const JPEG_QUALITY: u8 = 80;

#[derive(Clone)]
struct AppState {
    ctx: WebContext,
}

pub fn router(ctx: WebContext) -> Router {
    let state = AppState { ctx: ctx.clone() };
    Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/streams", get(streams))
        .route("/api/v1/streams/{name}/snapshot.jpg", get(snapshot))
        .route("/api/v1/streams/{name}/live.mp4", get(live))
        .route("/api/v1/streams/{name}/live.mjpeg", get(live_mjpeg))
        .fallback(not_found)
        .with_state(state)
        .layer(middleware::from_fn_with_state(ctx, auth::require))
        .layer(middleware::from_fn(deadline))
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body.into()).into_response()
}

async fn deadline(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(r) => r,
        Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "request timed out\n"),
    }
}

async fn page() -> Response {
    ([(header::CACHE_CONTROL, "no-cache")], Html(PAGE)).into_response()
}

async fn metrics(State(s): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, METRICS_TYPE)], crate::daemon::metrics::render(&s.ctx.metrics)).into_response()
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n")
}

async fn readyz(State(s): State<AppState>) -> Response {
    match s.ctx.health.is_ready() {
        (true, reason) => text(StatusCode::OK, format!("{reason}\n")),
        (false, reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn streams(State(s): State<AppState>) -> Response {
    let body = api::streams_json(&s.ctx);
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
}

async fn snapshot(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    let Some(stream) = s.ctx.streams.get(&name) else {
        return text(StatusCode::NOT_FOUND, format!("no stream named '{name}'\n"));
    };
    let encoded = tokio::task::spawn_blocking(move || stream.latest.snapshot().map(|shot| shot.to_jpeg(JPEG_QUALITY))).await;
    match encoded {
        Ok(Some(Ok(jpeg))) => {
            ([(header::CONTENT_TYPE, "image/jpeg"), (header::CACHE_CONTROL, "no-store")], jpeg).into_response()
        }
        Ok(None) => text(StatusCode::SERVICE_UNAVAILABLE, format!("stream '{name}' has no annotated frame yet\n")),
        Ok(Some(Err(e))) => {
            tracing::warn!(stream = %name, "snapshot: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("snapshot task failed: {e}\n")),
    }
}

/// The annotated stream as endless fragmented MP4 for a `<video>` element;
/// the encoder runs while this response is being read.
async fn live(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    let Some(stream) = s.ctx.streams.get(&name) else {
        return text(StatusCode::NOT_FOUND, format!("no stream named '{name}'\n"));
    };
    match stream.viewers.watch() {
        Ok(body) => (
            [(header::CONTENT_TYPE, "video/mp4"), (header::CACHE_CONTROL, "no-store")],
            axum::body::Body::from_stream(body),
        )
            .into_response(),
        Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, format!("stream '{name}': {e}\n")),
    }
}

/// The fallback for browsers without H.264: MJPEG parts for an `<img>`.
async fn live_mjpeg(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    let Some(stream) = s.ctx.streams.get(&name) else {
        return text(StatusCode::NOT_FOUND, format!("no stream named '{name}'\n"));
    };
    mjpeg::response(stream).unwrap_or_else(|e| text(StatusCode::SERVICE_UNAVAILABLE, format!("stream '{name}': {e}\n")))
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found; try /, /metrics, /healthz, /readyz, /api/v1/streams, /api/v1/streams/NAME/snapshot.jpg, /api/v1/streams/NAME/live.mp4 or /api/v1/streams/NAME/live.mjpeg\n",
    )
}
