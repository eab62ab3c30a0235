//! The source side of a stream: copies each decoded frame into the ring and
//! tells the output stage about frames that never get there, so reordering
//! never waits for them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::temporal::StreamTemporal;
use crate::video::frame::DecodedFrame;
use crate::video::output::StreamObserver;
use crate::video::pool::{OutputItem, SkipReason};
use crate::video::ring::{FrameRing, Pushed};
use crate::video::source::{DecoderInfo, FlowAction, FrameHandler, SourceError};

/// What a source reports to whoever runs its stream.
#[derive(Debug)]
pub enum SourceEvent {
    Eos,
    Error(SourceError),
}

pub(super) struct RingFeeder {
    stream: String,
    pub(super) ring: Arc<FrameRing>,
    output: Sender<OutputItem>,
    wake_workers: Box<dyn Fn() + Send + Sync>,
    events: Sender<SourceEvent>,
    /// Live streams are re-timed on arrival (a reconnected camera restarts
    /// its clock; sinks need one rising timeline).
    retime_from: Option<Instant>,
    last_frame: Mutex<Instant>,
    observer: Arc<dyn StreamObserver>,
    stopped: AtomicBool,
    rate: Option<RateLimit>,
    temporal: Arc<StreamTemporal>,
}

/// What a feeder is built from.
pub(super) struct FeederParts {
    /// The stream's name, for the log.
    pub stream: String,
    pub ring: Arc<FrameRing>,
    pub output: Sender<OutputItem>,
    pub wake_workers: Box<dyn Fn() + Send + Sync>,
    pub events: Sender<SourceEvent>,
    pub live: bool,
    /// Frames a second sent to inference at most (None or 0: every frame).
    pub infer_fps: Option<f64>,
    pub observer: Arc<dyn StreamObserver>,
    /// The stream's hood, bars and cut detector: fed each frame that enters
    /// the ring, here on the source's thread, so workers only infer.
    pub temporal: Arc<StreamTemporal>,
}

/// At most `1 / interval` frames a second go to inference, evenly spread
/// by the frames' own timestamps (arrival time when they have none).
struct RateLimit {
    interval_ns: u64,
    /// Timestamp from which the next frame is due.
    next_due: Mutex<Option<u64>>,
    started: Instant,
}

impl RateLimit {
    fn admits(&self, pts_ns: Option<u64>) -> bool {
        let now = pts_ns.unwrap_or_else(|| self.started.elapsed().as_nanos() as u64);
        let mut due = self.next_due.lock().unwrap_or_else(|e| e.into_inner());
        match *due {
            Some(d) if now < d && d - now < 4 * self.interval_ns => false,
            // Keep the average rate when frames arrive a little after their
            // slot; restart the schedule after a gap or a clock jump back.
            Some(d) if now >= d && now - d < self.interval_ns => {
                *due = Some(d + self.interval_ns);
                true
            }
            _ => {
                *due = Some(now + self.interval_ns);
                true
            }
        }
    }
}

impl RingFeeder {
    pub(super) fn new(p: FeederParts) -> Self {
        let now = Instant::now();
        RingFeeder {
            ring: p.ring,
            output: p.output,
            wake_workers: p.wake_workers,
            events: p.events,
            // Each recording's timeline starts near 0 and rises across reconnects.
            retime_from: p.live.then_some(now),
            last_frame: Mutex::new(now),
            observer: p.observer,
            stream: p.stream,
            stopped: AtomicBool::new(false),
            rate: p.infer_fps.filter(|f| *f > 0.0).map(|f| RateLimit {
                interval_ns: (1e9 / f) as u64,
                next_due: Mutex::new(None),
                started: now,
            }),
            temporal: p.temporal,
        }
    }

    /// When the last frame arrived (silence detection for live sources).
    pub(super) fn last_frame(&self) -> Instant {
        *self.last_frame.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops accepting frames (the stream is being shut down).
    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

impl FrameHandler for RingFeeder {
    fn on_frame(&self, frame: DecodedFrame<'_>) -> FlowAction {
        if self.stopped.load(Ordering::SeqCst) {
            return FlowAction::Stop;
        }
        let mut frame = frame;
        if let Some(start) = self.retime_from {
            frame.pts = Some(start.elapsed().as_nanos() as u64);
            frame.duration = None;
        }
        *self.last_frame.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if self.rate.as_ref().is_some_and(|r| !r.admits(frame.pts)) {
            let seq = self.ring.skip();
            // Still a decoded frame: fps in stays the source's rate.
            self.observer.decoded(self.ring.depth());
            let _ = self.output.send(OutputItem::Skipped { seq, reason: SkipReason::RateLimited });
            return FlowAction::Continue;
        }
        let pushed = self.ring.push_with(&frame, |buf| {
            buf.unseen = Some(self.temporal.observe(buf.seq, buf.timing.pts, &buf.frame()).hood);
        });
        self.observer.decoded(self.ring.depth());
        match pushed {
            Pushed::Queued { .. } | Pushed::RateLimited { .. } => {}
            Pushed::QueuedDroppingOldest { dropped_seq: seq, .. } | Pushed::DroppedIncoming { seq } => {
                let _ = self.output.send(OutputItem::Skipped { seq, reason: SkipReason::RingFull });
            }
            Pushed::Closed => return FlowAction::Stop,
        }
        (self.wake_workers)();
        FlowAction::Continue
    }

    fn on_eos(&self) {
        let _ = self.events.send(SourceEvent::Eos);
    }

    fn on_error(&self, err: SourceError) {
        let _ = self.events.send(SourceEvent::Error(err));
    }

    fn on_damaged_input(&self) {
        self.observer.damaged_input();
    }

    fn on_decoder(&self, decoder: &DecoderInfo) {
        tracing::info!(
            stream = %self.stream,
            decoder = %decoder.name,
            hardware = decoder.hardware,
            memory = DecoderInfo::MEMORY,
            "decoding on the {}; frames reach the workers in host memory",
            if decoder.hardware { "GPU or SoC" } else { "CPU" }
        );
        self.observer.decoder(decoder);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::PixelFormat;
    use crate::temporal::TemporalSettings;
    use crate::video::output::NoObserver;

    #[test]
    fn frames_enter_the_ring_with_their_observation() {
        // Rule: every frame a stream's intake puts in the ring carries its hood-and-bars observation, made in order on the source's thread before a worker can take it.
        let ring = Arc::new(FrameRing::new(4, 1, false));
        let (output, _outputs) = crossbeam_channel::unbounded();
        let (events, _events) = crossbeam_channel::unbounded();
        let temporal = Arc::new(StreamTemporal::new(TemporalSettings { smoothing: Some(0.5), hood: true, connected_road: true }));
        let feeder = RingFeeder::new(FeederParts {
            stream: "s".into(),
            ring: ring.clone(),
            output,
            wake_workers: Box::new(|| {}),
            events,
            live: false,
            infer_fps: None,
            observer: Arc::new(NoObserver),
            temporal: temporal.clone(),
        });
        for value in [10u8, 20, 30] {
            let pixels = vec![value; 8 * 6 * 4];
            let frame = DecodedFrame { data: &pixels, width: 8, height: 6, stride: 32, format: PixelFormat::Rgba, chroma: None, pts: Some(value as u64 * 40_000_000), duration: None };
            assert!(matches!(feeder.on_frame(frame), FlowAction::Continue));
        }
        for seq in 0..3 {
            let buf = ring.pop().expect("queued");
            assert_eq!(buf.seq, seq);
            let unseen = buf.unseen.as_ref().expect("observed on arrival");
            assert_eq!((unseen.width, unseen.height), (8, 6), "frame {seq}");
        }
        assert!(temporal.hood().is_some(), "the stream's estimator saw the frames");
    }
}
