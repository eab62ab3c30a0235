//! `GET /api/v1/streams`: each stream's state and numbers as JSON.
//!
//! Frame rates come from a sampler that reads the counters once a second, so
//! every client sees the same recent rate however often it asks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::WebContext;
use crate::daemon::metrics::StreamReading;
use crate::daemon::status::{StreamDirectory, StreamStatus};

const SAMPLE_EVERY: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    pub fps_in: f64,
    pub fps_out: f64,
}

/// The latest rates by stream, and the samples they came from.
#[derive(Default)]
pub struct Rates {
    by_stream: Mutex<HashMap<String, (Sample, Option<Rate>)>>,
}

#[derive(Clone, Copy)]
struct Sample {
    at: Instant,
    decoded: u64,
    out: u64,
}

impl Rates {
    fn get(&self, name: &str) -> Option<Rate> {
        self.by_stream.lock().unwrap_or_else(PoisonError::into_inner).get(name).and_then(|(_, r)| *r)
    }

    /// Folds in one read of every stream; forgets streams no longer listed.
    fn update(&self, now: Instant, readings: &[(String, StreamReading)]) {
        let mut map = self.by_stream.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|name, _| readings.iter().any(|(n, _)| n == name));
        for (name, r) in readings {
            let sample = Sample { at: now, decoded: r.frames_decoded, out: r.frames_out };
            let rate = map.get(name).and_then(|(prev, _)| rate_between(prev, &sample));
            map.insert(name.clone(), (sample, rate));
        }
    }
}

/// None when the counters went back (a restarted stream counts afresh).
fn rate_between(a: &Sample, b: &Sample) -> Option<Rate> {
    let dt = b.at.checked_duration_since(a.at)?.as_secs_f64();
    if dt <= 0.0 || b.decoded < a.decoded || b.out < a.out {
        return None;
    }
    Some(Rate { fps_in: (b.decoded - a.decoded) as f64 / dt, fps_out: (b.out - a.out) as f64 / dt })
}

pub async fn sample_rates(streams: Arc<StreamDirectory>, rates: Arc<Rates>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tick.tick().await;
        let readings: Vec<(String, StreamReading)> = streams.list().iter().map(|s| (s.name.clone(), s.metrics.readings())).collect();
        rates.update(Instant::now(), &readings);
    }
}

fn round(v: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (v * k).round() / k
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

fn stream_json(s: &StreamStatus, rate: Option<Rate>) -> Value {
    let r = s.metrics.readings();
    let dropped: serde_json::Map<String, Value> = r.dropped.iter().map(|(reason, n)| (reason.label().to_string(), json!(n))).collect();
    let last = s.last_frame();
    json!({
        "name": s.name,
        "state": s.state().label(),
        "live": s.live,
        "source": s.source,
        "fps_in": rate.map(|r| round(r.fps_in, 2)),
        "fps_out": rate.map(|r| round(r.fps_out, 2)),
        "frames_decoded": r.frames_decoded,
        "frames_inferred": r.frames_inferred,
        "frames_out": r.frames_out,
        "frames_dropped": dropped,
        "reconnects": r.reconnects,
        "last_frame_unix_ms": last.map(unix_ms),
        "last_frame_age_s": last.map(|t| round(SystemTime::now().duration_since(t).unwrap_or_default().as_secs_f64(), 3)),
        "road_coverage": r.road_coverage.map(|v| round(v, 4)),
        "mean_confidence": r.mean_confidence.map(|v| round(v, 4)),
        "latency_ms": r.latency_s.map(|v| round(v * 1000.0, 1)),
        "snapshot": format!("/api/v1/streams/{}/snapshot.jpg", s.name),
    })
}

pub fn streams_json(ctx: &WebContext, rates: &Rates) -> Value {
    let (ready, reason) = ctx.health.is_ready();
    let streams: Vec<Value> = ctx.streams.list().iter().map(|s| stream_json(s, rates.get(&s.name))).collect();
    json!({ "ready": ready, "reason": reason, "streams": streams })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::metrics::DropReason;

    fn reading(decoded: u64, out: u64) -> StreamReading {
        StreamReading {
            frames_decoded: decoded,
            frames_inferred: out,
            frames_out: out,
            dropped: DropReason::ALL.map(|r| (r, 0)),
            reconnects: 0,
            latency_s: None,
            road_coverage: None,
            mean_confidence: None,
        }
    }

    #[test]
    fn rates_are_frames_per_second_between_samples() {
        // Rule: fps in/out are counter deltas over the sampling interval; none before two samples or after a counter reset, and gone streams are forgotten.
        let rates = Rates::default();
        let t0 = Instant::now();
        rates.update(t0, &[("a".into(), reading(10, 8))]);
        assert_eq!(rates.get("a"), None);
        rates.update(t0 + Duration::from_secs(2), &[("a".into(), reading(30, 18))]);
        assert_eq!(rates.get("a"), Some(Rate { fps_in: 10.0, fps_out: 5.0 }));
        rates.update(t0 + Duration::from_secs(3), &[("a".into(), reading(1, 1))]);
        assert_eq!(rates.get("a"), None);
        rates.update(t0 + Duration::from_secs(4), &[]);
        assert!(rates.by_stream.lock().unwrap().is_empty());
    }
}
