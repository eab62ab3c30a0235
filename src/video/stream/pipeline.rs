//! The running middle of a stream: its ring registered with the worker pool
//! and its output stage writing the sinks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::temporal::StreamTemporal;
use crate::video::output::{FrameSink, OutputParts, pixels_wanted, OutputStage, OutputSummary, StatsWriter, StreamObserver};
use crate::video::demand::PixelDemand;
use crate::video::pool::{OutputItem, SkipReason, StreamCounters, StreamInput, WorkerPool};
use crate::video::ring::FrameRing;

pub(super) struct StreamPipeline {
    name: String,
    ring: Arc<FrameRing>,
    pub(super) input: Arc<StreamInput>,
    output: OutputStage,
}

pub(super) struct PipelineParts {
    pub name: String,
    pub ring: Arc<FrameRing>,
    pub output_tx: Sender<OutputItem>,
    pub output_rx: Receiver<OutputItem>,
    pub sinks: Vec<Box<dyn FrameSink>>,
    pub stats: Option<StatsWriter>,
    pub observer: Arc<dyn StreamObserver>,
    pub finish_timeout: Duration,
    pub want_masks: bool,
    /// Shared with the stream's intake, which observes each frame.
    pub temporal: Arc<StreamTemporal>,
}

impl StreamPipeline {
    /// Starts the output stage and registers the stream with the pool.
    pub(super) fn start(parts: PipelineParts, pool: &WorkerPool) -> Self {
        let counters = Arc::new(StreamCounters::default());
        // The first frames are drawn if an output wants them from the start
        // (an annotated recording); the output stage keeps it current.
        let pixels = Arc::new(PixelDemand::new(pixels_wanted(&parts.sinks, &*parts.observer)));
        let input = Arc::new(StreamInput {
            name: parts.name.clone(),
            ring: parts.ring.clone(),
            output: parts.output_tx,
            counters: counters.clone(),
            want_masks: parts.want_masks,
            temporal: parts.temporal,
            pixels: pixels.clone(),
        });
        let output = OutputStage::start(OutputParts {
            stream: parts.name.clone(),
            items: parts.output_rx,
            ring: parts.ring.clone(),
            sinks: parts.sinks,
            stats: parts.stats,
            counters,
            observer: parts.observer,
            finish_timeout: parts.finish_timeout,
            pixels,
        });
        pool.add_stream(input.clone());
        StreamPipeline { name: parts.name, ring: parts.ring, input, output }
    }

    /// Lets queued and in-flight frames be inferred for half the time left
    /// before `deadline`, drops (and counts) those still waiting then, and
    /// finalises the sinks in the other half: what was produced is kept
    /// even when inference is far behind (an overloaded box at SIGTERM).
    pub(super) fn drain_and_finish(self, pool: &WorkerPool, deadline: Instant) -> OutputSummary {
        self.ring.close();
        let drain_until = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
        while (self.ring.depth() > 0 || self.input.in_flight() > 0) && Instant::now() < drain_until {
            pool.notify();
            std::thread::sleep(Duration::from_millis(5));
        }
        pool.remove_stream(&self.name);
        let mut dropped = 0u64;
        while let Some(buf) = self.ring.pop() {
            let _ = self.input.output.send(OutputItem::Skipped { seq: buf.seq, reason: SkipReason::Shutdown });
            self.ring.recycle(buf);
            dropped += 1;
        }
        // A worker may still be inside a batch of this stream: its frames
        // arrive after End and are not written.
        let unfinished = self.input.in_flight();
        if dropped + unfinished > 0 {
            tracing::warn!(stream = %self.name, dropped, unfinished, "shutting down: frames still waiting for inference are not written");
        }
        // Everything before this has been sent: the output stage finishes.
        let _ = self.input.output.send(OutputItem::End { finish_by: Some(deadline) });
        self.output.join()
    }
}
