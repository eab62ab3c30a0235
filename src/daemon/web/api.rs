//! `GET /api/v1/streams`: each stream's state and numbers as JSON.
//!
//! Frame rates and overload come from the daemon's once-a-second sample
//! (daemon::overload), so every client sees the same recent moving average
//! however often it asks.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::WebContext;
use crate::daemon::status::StreamStatus;
use crate::hub::ModelOrigin;

fn round(v: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (v * k).round() / k
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

fn stream_json(s: &StreamStatus) -> Value {
    let r = s.metrics.readings();
    let load = s.load();
    let rate = load.rate;
    let dropped: serde_json::Map<String, Value> = r.dropped.iter().map(|(reason, n)| (reason.label().to_string(), json!(n))).collect();
    let last = s.last_frame();
    json!({
        "name": s.name,
        "state": s.state_label(),
        "degraded": load.degraded,
        "drop_share": load.drop_share.map(|v| round(v, 3)),
        "last_error": s.last_error(),
        "live": s.live,
        // The live view's viewers (MP4 and MJPEG), and when the frame that
        // starts the newest MP4 viewer's timeline was decoded: a player at
        // currentTime t shows the frame decoded at that + t.
        "live_view": {
            "viewers": s.viewers.viewers(),
            "timeline_origin_unix_ms": s.viewers.timeline_origin_unix_ms(),
        },
        "source": s.source,
        "fps_in": rate.map(|r| round(r.fps_in, 2)),
        "fps_out": rate.map(|r| round(r.fps_out, 2)),
        "frames_decoded": r.frames_decoded,
        "frames_inferred": r.frames_inferred,
        "frames_out": r.frames_out,
        "frames_dropped": dropped,
        "reconnects": r.reconnects,
        "record": s.record,
        "recording": r.recording,
        "last_frame_unix_ms": last.map(unix_ms),
        "last_frame_age_s": last.map(|t| round(SystemTime::now().duration_since(t).unwrap_or_default().as_secs_f64(), 3)),
        "road_coverage": r.road_coverage.map(|v| round(v, 4)),
        "mean_confidence": r.mean_confidence.map(|v| round(v, 4)),
        "latency_ms": r.latency_s.map(|v| round(v * 1000.0, 1)),
        "snapshot": format!("/api/v1/streams/{}/snapshot.jpg", s.name),
    })
}

/// Where the running model came from: a folder, or a Hub repo at a commit.
fn model_json(origin: &ModelOrigin) -> Value {
    match origin {
        ModelOrigin::Folder(dir) => json!({ "source": "folder", "path": dir.display().to_string() }),
        ModelOrigin::Hub(m) => json!({
            "source": "hub",
            "repo": m.repo,
            "revision": m.revision,
            "commit": m.commit,
            "path": m.dir.display().to_string(),
        }),
    }
}

pub fn streams_json(ctx: &WebContext) -> Value {
    let (ready, reason) = ctx.health.is_ready();
    let streams: Vec<Value> = ctx.streams.list().iter().map(|s| stream_json(s)).collect();
    let reload_error = ctx.health.reload_error();
    json!({
        "ready": ready,
        "reason": reason,
        "model": ctx.health.model().map(model_json),
        "config_reload": { "failed": reload_error.is_some(), "error": reload_error },
        "streams": streams,
    })
}
