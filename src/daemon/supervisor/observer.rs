//! A stream's numbers as its frames go through: metrics, and the latest
//! frame and last arrival for the status page.

use std::sync::Arc;
use std::time::Duration;

use crate::daemon::metrics::{DropReason, Sink, Stage, StreamMetrics, unix_now};
use crate::daemon::status::StreamStatus;
use crate::annotate::FrameStats;
use crate::video::output::{OutputError, StreamObserver};
use crate::video::source::DecoderInfo;
use crate::video::pool::SkipReason;
use crate::video::ring::FrameBuf;

pub(super) struct Observer {
    pub metrics: StreamMetrics,
    pub status: Arc<StreamStatus>,
}

impl StreamObserver for Observer {
    fn decoded(&self, ring_depth: usize) {
        self.status.frame_arrived();
        self.metrics.frames_decoded.increment(1);
        self.metrics.ring_depth.set(ring_depth as f64);
    }
    fn damaged_input(&self) {
        self.metrics.decode_errors.increment(1);
    }
    fn decoder(&self, decoder: &DecoderInfo) {
        self.metrics.decoder(decoder);
    }
    fn written(&self, sink: &'static str, frames: u64) {
        self.metrics.written(Sink::named(sink)).increment(frames);
        if sink == "file" {
            self.metrics.recording_ok();
        }
    }
    fn sink_failed(&self, sink: &'static str, err: &OutputError) {
        self.metrics.sink_errors(Sink::named(sink)).increment(1);
        if sink == "file" {
            self.metrics.recording_paused(&if err.is_disk_full() { "disk full".to_string() } else { err.to_string() });
        }
    }
    fn skipped(&self, reason: SkipReason) {
        let reason = match reason {
            SkipReason::RingFull => DropReason::RingFull,
            SkipReason::InferenceError => DropReason::InferenceError,
            SkipReason::RateLimited => DropReason::RateLimited,
            SkipReason::Shutdown => DropReason::Shutdown,
        };
        self.metrics.dropped(reason).increment(1);
    }
    fn encoded(&self, took: Duration) {
        self.metrics.record_stage(Stage::Encode, took);
    }
    fn frame_out(&self, frame: &FrameBuf, latency: Duration, _stats: &FrameStats) {
        self.metrics.record_latency(latency);
        let t = &frame.stages;
        for (stage, from, to) in [
            (Stage::DecodeToRing, t.decoded, t.queued),
            (Stage::RingWait, t.queued, t.taken),
            (Stage::Inference, t.taken, t.inferred),
            (Stage::Annotate, t.inferred, t.annotated),
            (Stage::Reorder, t.annotated, t.in_order),
        ] {
            self.metrics.record_stage(stage, to.saturating_duration_since(from));
        }
        self.metrics.last_written.set(unix_now());
    }
    fn wants_pixels(&self) -> bool {
        self.status.viewers.viewers() > 0
    }
    fn keep_latest(&self, buf: &mut FrameBuf) {
        // Before the snapshot slot takes the pixels (it swaps them out).
        self.status.viewers.offer(buf);
        self.status.latest.offer(buf);
    }
}
