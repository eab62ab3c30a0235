//! Overload made visible: each stream's frame rates as moving averages, and
//! whether inference keeps up with it. A stream whose frames meant for
//! inference are dropped as `ring_full` at more than `[daemon]
//! overload_drop_share` over `overload_window_s` is *degraded*: the API, the
//! status page and MQTT say so, and a warning naming the stream, its drop
//! rate and the remedies is logged (again at most every [`WARN_EVERY`] while
//! it lasts). /readyz is left alone: the daemon is running, only slowly.
//!
//! The daemon's main loop samples every stream's counters once a second
//! (run/load_monitor.rs); nothing on the frame path takes part.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::metrics::{DropReason, StreamReading};

/// How often the counters are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// fps in/out are averaged over this: at ~1 frame/s, one-second buckets
/// read 0 or 2 by turns.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);
/// The overload warning is repeated at most this often per stream.
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// Fewer frames meant for inference than this in the window are not judged
/// (a stream starting, reconnecting or rate-limited to almost nothing).
const MIN_FRAMES: u64 = 10;

/// `[daemon] overload_drop_share` and `overload_window_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverloadRule {
    pub drop_share: f64,
    pub window: Duration,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    pub fps_in: f64,
    pub fps_out: f64,
}

/// What the API and the page show of a stream's load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// Over [`RATE_WINDOW`]; None before two samples.
    pub rate: Option<Rate>,
    /// Share of the frames meant for inference (not `rate_limited`) dropped
    /// as `ring_full` over the rule's window; None until it is judged.
    pub drop_share: Option<f64>,
    pub degraded: bool,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    decoded: u64,
    out: u64,
    ring_full: u64,
    rate_limited: u64,
}

impl Sample {
    fn of(at: Instant, r: &StreamReading) -> Sample {
        let dropped = |reason| r.dropped.iter().find(|(d, _)| *d == reason).map_or(0, |(_, n)| *n);
        Sample { at, decoded: r.frames_decoded, out: r.frames_out, ring_full: dropped(DropReason::RingFull), rate_limited: dropped(DropReason::RateLimited) }
    }

    /// Counters only grow; a restarted stream counts afresh.
    fn went_back(&self, later: &Sample) -> bool {
        later.decoded < self.decoded || later.out < self.out || later.ring_full < self.ring_full || later.rate_limited < self.rate_limited
    }
}

/// What changed at a sample that the log should hear of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Notice {
    Warn,
    Recovered,
}

/// One stream's recent samples and overload state.
#[derive(Default)]
pub struct StreamLoad {
    samples: VecDeque<Sample>,
    load: Load,
    last_warned: Option<Instant>,
}

impl StreamLoad {
    /// Folds in one reading taken at `now`.
    pub fn update(&mut self, now: Instant, reading: &StreamReading, rule: &OverloadRule) -> (Load, Option<Notice>) {
        let sample = Sample::of(now, reading);
        if self.samples.back().is_some_and(|last| last.went_back(&sample)) {
            self.samples.clear();
        }
        self.samples.push_back(sample);
        // Keep one sample at or beyond the longer window, as its base.
        let keep = rule.window.max(RATE_WINDOW);
        while self.samples.len() > 2 && now.saturating_duration_since(self.samples[1].at) >= keep {
            self.samples.pop_front();
        }
        let rate = self.base(now, RATE_WINDOW).or(self.samples.front().copied()).and_then(|a| rate_between(&a, &sample));
        let drop_share = self.base(now, rule.window).and_then(|a| drop_share(&a, &sample));
        let degraded = drop_share.is_some_and(|s| s > rule.drop_share);
        let notice = match (self.load.degraded, degraded) {
            (_, true) if self.last_warned.is_none_or(|t| now.saturating_duration_since(t) >= WARN_EVERY) => {
                self.last_warned = Some(now);
                Some(Notice::Warn)
            }
            (true, false) => {
                self.last_warned = None;
                Some(Notice::Recovered)
            }
            _ => None,
        };
        self.load = Load { rate, drop_share, degraded };
        (self.load, notice)
    }

    /// The newest sample at least `window` old.
    fn base(&self, now: Instant, window: Duration) -> Option<Sample> {
        self.samples.iter().rev().find(|s| now.saturating_duration_since(s.at) >= window).copied()
    }
}

fn rate_between(a: &Sample, b: &Sample) -> Option<Rate> {
    let dt = b.at.checked_duration_since(a.at)?.as_secs_f64();
    (dt > 0.0).then(|| Rate { fps_in: (b.decoded - a.decoded) as f64 / dt, fps_out: (b.out - a.out) as f64 / dt })
}

/// `ring_full` drops over the frames meant for inference between `a` and `b`.
fn drop_share(a: &Sample, b: &Sample) -> Option<f64> {
    let meant = (b.decoded - a.decoded).saturating_sub(b.rate_limited - a.rate_limited);
    (meant >= MIN_FRAMES).then(|| ((b.ring_full - a.ring_full) as f64 / meant as f64).min(1.0))
}

/// The overload warning: the stream, how much it drops, and what helps.
pub fn warning(name: &str, load: &Load, rule: &OverloadRule) -> String {
    let share = load.drop_share.unwrap_or(0.0) * 100.0;
    let rate = load.rate.unwrap_or_default();
    format!(
        "stream {name} is degraded: inference cannot keep up, {share:.0}% of its frames were dropped (ring_full) over the last {} s \
         ({:.1} fps in, {:.1} fps out). Set infer_fps on the stream to what the machine can infer, add workers ([workers] count), \
         or use a GPU (model.device)",
        rule.window.as_secs(),
        rate.fps_in,
        rate.fps_out
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(decoded: u64, out: u64, ring_full: u64, rate_limited: u64) -> StreamReading {
        StreamReading {
            frames_decoded: decoded,
            frames_inferred: out,
            frames_out: out,
            dropped: [(DropReason::RingFull, ring_full), (DropReason::InferenceError, 0), (DropReason::DecodeError, 0), (DropReason::RateLimited, rate_limited), (DropReason::Shutdown, 0)],
            reconnects: 0,
            latency_s: None,
            road_coverage: None,
            mean_confidence: None,
            recording: None,
        }
    }

    const RULE: OverloadRule = OverloadRule { drop_share: 0.5, window: Duration::from_secs(10) };

    #[test]
    fn rates_are_moving_averages_over_a_few_seconds() {
        // Rule: fps in/out average over the last RATE_WINDOW, so 1 frame out every other second reads 0.5 fps, not 0 or 1 by turns; none before two samples or after a counter reset.
        let mut s = StreamLoad::default();
        let t0 = Instant::now();
        assert_eq!(s.update(t0, &reading(0, 0, 0, 0), &RULE).0.rate, None);
        for i in 1..=20u64 {
            let (load, _) = s.update(t0 + Duration::from_secs(i), &reading(25 * i, i / 2, 0, 0), &RULE);
            let rate = load.rate.unwrap();
            assert_eq!(rate.fps_in, 25.0);
            if i >= 5 {
                assert!((0.4..=0.6).contains(&rate.fps_out), "second {i}: {rate:?}");
            }
        }
        assert_eq!(s.update(t0 + Duration::from_secs(21), &reading(3, 0, 0, 0), &RULE).0.rate, None);
    }

    #[test]
    fn a_stream_dropping_more_than_the_share_over_the_window_is_degraded_and_warned_about_at_most_once_a_minute() {
        // Rule: degraded once ring_full drops exceed drop_share of the frames meant for inference over a whole window (rate_limited frames are not meant; a short or thin window is not judged); warned at once and then at most every WARN_EVERY; recovery is noticed once.
        let mut s = StreamLoad::default();
        let t0 = Instant::now();
        let at = |i: u64| t0 + Duration::from_secs(i);
        let mut notices = Vec::new();
        // 25 fps in, 1 out, 24 dropped a second: degraded from the first whole window.
        for i in 0..=80 {
            let (load, n) = s.update(at(i), &reading(25 * i, i, 24 * i, 0), &RULE);
            assert_eq!(load.degraded, i >= 10, "second {i}: {load:?}");
            notices.extend(n.map(|n| (i, n)));
        }
        assert_eq!(notices, [(10, Notice::Warn), (70, Notice::Warn)]);
        // It keeps up again: after a window without drops, one recovery.
        let mut notices = Vec::new();
        for i in 81..=100 {
            let (load, n) = s.update(at(i), &reading(2000 + 25 * (i - 80), 80 + 25 * (i - 80), 1920, 0), &RULE);
            assert_eq!(load.degraded, i < 85, "second {i}: {load:?}");
            notices.extend(n.map(|n| (i, n)));
        }
        assert_eq!(notices, [(85, Notice::Recovered)]);
        // infer_fps: 23 of 25 rate-limited, 2 inferred, none dropped as ring_full: fine.
        let mut s = StreamLoad::default();
        for i in 0..=20 {
            assert!(!s.update(at(i), &reading(25 * i, 2 * i, 0, 23 * i), &RULE).0.degraded);
        }
        // A trickle (under MIN_FRAMES a window) is not judged.
        let mut s = StreamLoad::default();
        for i in 0..=20 {
            let load = s.update(at(i), &reading(i / 2, 0, i / 2, 0), &RULE).0;
            assert!(!load.degraded && load.drop_share.is_none());
        }
    }

    #[test]
    fn the_warning_names_the_stream_the_drop_rate_and_the_remedies() {
        // Rule: the overload warning gives the stream, the share dropped, the window and the rates, and names infer_fps, workers and a GPU.
        let load = Load { rate: Some(Rate { fps_in: 25.0, fps_out: 1.04 }), drop_share: Some(0.9583), degraded: true };
        let w = warning("cam1", &load, &RULE);
        for part in ["stream cam1", "96%", "last 10 s", "25.0 fps in", "1.0 fps out", "infer_fps", "workers", "GPU"] {
            assert!(w.contains(part), "{part}: {w}");
        }
    }
}
