//! The running middle of a stream: its ring registered with the worker pool
//! and its output stage writing the sinks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::temporal::StreamTemporal;
use crate::video::output::{FrameSink, OutputParts, OutputStage, OutputSummary, StatsWriter, StreamObserver};
use crate::video::pool::{OutputItem, StreamCounters, StreamInput, WorkerPool};
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
        let input = Arc::new(StreamInput {
            name: parts.name.clone(),
            ring: parts.ring.clone(),
            output: parts.output_tx,
            counters: counters.clone(),
            want_masks: parts.want_masks,
            temporal: parts.temporal,
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
        });
        pool.add_stream(input.clone());
        StreamPipeline { name: parts.name, ring: parts.ring, input, output }
    }

    /// Waits (up to `deadline`) for queued and in-flight frames to be
    /// processed, then detaches from the pool and finalises the sinks.
    pub(super) fn drain_and_finish(self, pool: &WorkerPool, deadline: Instant) -> OutputSummary {
        self.ring.close();
        while (self.ring.depth() > 0 || self.input.in_flight() > 0) && Instant::now() < deadline {
            pool.notify();
            std::thread::sleep(Duration::from_millis(5));
        }
        pool.remove_stream(&self.name);
        // Everything before this has been sent: the output stage finishes.
        let _ = self.input.output.send(OutputItem::End);
        self.output.join()
    }
}
