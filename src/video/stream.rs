//! One stream end to end, built in one step: a [`StreamSpec`] (inert data:
//! where frames come from, how they queue, where annotated frames go) is
//! turned by [`StreamSpec::start`] into a running [`StreamHandle`] (a
//! GStreamer source feeding its ring, the shared worker pool, and an output
//! stage writing its sinks). `process` and the daemon's supervisors both
//! build their streams here and nowhere else; what to do when a source ends
//! or drops out is theirs to decide.

mod feeder;
mod intake;
mod outputs;
mod pipeline;
mod sinks;
mod source_record;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::temporal::{HoodMask, StreamTemporal, TemporalSettings};
use crate::video::frame::VideoInfo;
use crate::video::output::{OutputSummary, StreamObserver};
use crate::video::pool::WorkerPool;
use crate::video::ring::FrameRing;
use crate::video::rtsp::RtspServer;
use crate::video::source::{Extent, SourceSettings};
use crate::video::stop::StopSignal;
use feeder::{FeederParts, RingFeeder};
use intake::Intake;
use outputs::Mounts;
use pipeline::{PipelineParts, StreamPipeline};

pub use feeder::SourceEvent;
pub use intake::{FirstFrameError, probe};
pub use outputs::{OutputSpec, OutputsError, StatsTarget};
pub use sinks::{DEFAULT_BITRATE_KBPS, FileTarget};

/// How long a source may take to deliver its first frame unless told otherwise.
pub const FIRST_FRAME_WAIT: Duration = Duration::from_secs(30);
/// Frame buffers per stream beyond one per worker, for frames being
/// reordered and written.
const IN_FLIGHT_SLACK: usize = 8;

/// One stream, as data. Nothing runs until [`StreamSpec::start`].
#[derive(Clone)]
pub struct StreamSpec {
    /// Names the stream in logs, threads and the sidecar.
    pub name: String,
    pub source: SourceSettings,
    /// Frames queued between the source and the workers.
    pub ring_capacity: usize,
    /// Frames a second sent to inference at most; the rest are counted as
    /// dropped (None: every frame).
    pub infer_fps: Option<f64>,
    pub temporal: TemporalSettings,
    pub outputs: Vec<OutputSpec>,
    pub stats: Option<StatsTarget>,
    /// Fill each frame's road mask (for observers that save masks).
    pub want_masks: bool,
    pub first_frame_timeout: Duration,
    /// How long finalising the sinks may take.
    pub finish_timeout: Duration,
    pub observer: Arc<dyn StreamObserver>,
}

/// The running services a stream attaches to.
#[derive(Clone)]
pub struct Services {
    /// Its workers already started (the model's input size is settled).
    pub pool: Arc<WorkerPool>,
    pub rtsp: Option<Arc<RtspServer>>,
}

/// Why a stream did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Source(#[from] FirstFrameError),
    #[error("cannot open the stream's outputs: {0}")]
    Outputs(#[source] OutputsError),
}

/// What a stopped stream leaves behind.
pub struct Drained {
    pub outputs: OutputSummary,
    /// The final hood estimate (None when off).
    pub hood: Option<Arc<HoodMask>>,
}

/// A running stream. Dropping it without [`StreamHandle::stop`] leaves its
/// outputs unfinalised.
pub struct StreamHandle {
    name: String,
    info: VideoInfo,
    intake: Intake,
    pipeline: StreamPipeline,
    pool: Arc<WorkerPool>,
    mounts: Mounts,
}

impl StreamSpec {
    /// Starts the source, waits for its first frame, opens the outputs for
    /// that frame size and starts the pipeline. `stop` ends the wait early.
    pub fn start(self, services: &Services, stop: &StopSignal) -> Result<StreamHandle, StartError> {
        let live = self.source.live;
        let ring = Arc::new(FrameRing::new(self.ring_capacity, services.pool.workers() + IN_FLIGHT_SLACK, live));
        let (output_tx, output_rx) = crossbeam_channel::unbounded();
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let temporal = Arc::new(StreamTemporal::new(self.temporal));
        let feeder = Arc::new(RingFeeder::new(FeederParts {
            stream: self.name.clone(),
            ring: ring.clone(),
            output: output_tx.clone(),
            wake_workers: Box::new(services.pool.waker()),
            events: events_tx.clone(),
            live,
            infer_fps: self.infer_fps,
            observer: self.observer.clone(),
            temporal: temporal.clone(),
        }));
        let recorder = self.outputs.iter().find_map(|o| match o {
            OutputSpec::SourceFile(target) => Some(source_record::SourceRecorder::new(&self.name, target.clone(), live)),
            _ => None,
        });
        let tap = recorder.clone().map(|r| r as Arc<dyn crate::video::source::EncodedTap>);
        let mut intake = Intake::new(self.source, self.first_frame_timeout, feeder, (events_tx, events_rx), tap);
        let info = intake.connect(stop, true)?;
        tracing::info!(stream = %self.name, "source delivers {}x{} at {}/{} fps", info.width, info.height, info.fps_num, info.fps_den);
        let opened = match outputs::open(&self.name, &self.outputs, self.stats.as_ref(), info, services.rtsp.as_ref(), recorder.as_ref()) {
            Ok(opened) => opened,
            Err(e) => {
                intake.abandon();
                return Err(StartError::Outputs(e));
            }
        };
        let parts = PipelineParts {
            name: self.name.clone(),
            ring,
            output_tx,
            output_rx,
            sinks: opened.sinks,
            stats: opened.stats,
            observer: self.observer,
            finish_timeout: self.finish_timeout,
            want_masks: self.want_masks,
            temporal,
        };
        let pipeline = StreamPipeline::start(parts, &services.pool);
        Ok(StreamHandle { name: self.name, info, intake, pipeline, pool: services.pool.clone(), mounts: opened.mounts })
    }
}

impl StreamHandle {
    /// The frame size the outputs were opened for.
    pub fn info(&self) -> VideoInfo {
        self.info
    }

    /// What the source reports: its end or its failure.
    pub fn events(&self) -> &Receiver<SourceEvent> {
        self.intake.events()
    }

    /// When the last frame arrived.
    pub fn last_frame(&self) -> Instant {
        self.intake.feeder().last_frame()
    }

    /// Frames waiting for a worker.
    pub fn ring_depth(&self) -> usize {
        self.intake.feeder().ring.depth()
    }

    /// What the source has read against what its container announces (a
    /// file that ends short of that was truncated); None when no source runs.
    pub fn source_extent(&self) -> Option<Extent> {
        self.intake.extent()
    }

    /// Stops the source (lost, or about to be replaced); the outputs stay open.
    pub fn drop_source(&mut self) {
        self.intake.drop_source();
    }

    /// Starts the source again into the same ring and outputs, on the same
    /// timeline, and waits for its first frame; its size, which may differ
    /// from [`StreamHandle::info`] (frames are then scaled to that).
    pub fn restart_source(&mut self, stop: &StopSignal) -> Result<VideoInfo, FirstFrameError> {
        self.intake.connect(stop, true)
    }

    /// [`StreamHandle::restart_source`] for a looped file's next pass: the
    /// same source again is no news, so its start is logged at debug.
    pub fn replay_source(&mut self, stop: &StopSignal) -> Result<VideoInfo, FirstFrameError> {
        self.intake.connect(stop, false)
    }

    /// Stops intake, drains the frames in flight and finalises the outputs,
    /// by `deadline`. The source is stopped after the drain: a file source
    /// may be blocked on back-pressure until the ring closes.
    pub fn stop(mut self, deadline: Instant) -> Drained {
        self.intake.feeder().stop();
        let input = self.pipeline.input.clone();
        let outputs = self.pipeline.drain_and_finish(&self.pool, deadline);
        self.intake.drop_source();
        self.mounts.remove(&self.name);
        Drained { outputs, hood: input.temporal.hood() }
    }
}
