//! One stream end to end: a GStreamer source feeding its ring, the shared
//! worker pool, and an output stage writing its sinks. Used by `process`
//! (one file, every frame) and by the daemon's per-stream supervisor.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::annotate::FrameStats;
use crate::temporal::{StreamTemporal, TemporalSettings};
use super::frame::{DecodedFrame, VideoInfo};
use super::output::{FrameSink, OutputError, OutputObserver, OutputParts, OutputStage, OutputSummary, StatsWriter};
use super::pool::{OutputItem, SkipReason, StreamCounters, StreamInput, WorkerPool};
use super::ring::{FrameBuf, FrameRing, Pushed};
use super::rtsp::RtspFeed;
use super::sink::{FileSink, FileSinkSettings, SinkError};
use super::source::{FlowAction, FrameHandler, Source, SourceError, SourceSettings};

/// What a source reports to whoever supervises it.
#[derive(Debug)]
pub enum SourceEvent {
    Eos,
    Error(SourceError),
}

/// Called for every decoded frame (metrics): was it queued, did it push out an older one.
pub type DecodeObserver = Arc<dyn Fn(&Pushed, usize) + Send + Sync>;

/// The source side of a stream: copies frames into the ring and announces
/// dropped ones to the output stage so reordering never waits for them.
pub struct RingFeeder {
    ring: Arc<FrameRing>,
    output: Sender<OutputItem>,
    wake_workers: Box<dyn Fn() + Send + Sync>,
    events: Sender<SourceEvent>,
    /// Live streams are re-timed on arrival (a reconnected camera restarts
    /// its clock; sinks need one rising timeline).
    retime_from: Option<Instant>,
    last_frame: Mutex<Instant>,
    decoded: AtomicU64,
    on_decoded: DecodeObserver,
    stopped: AtomicBool,
    rate: Option<RateLimit>,
    on_damaged: Option<Box<dyn Fn() + Send + Sync>>,
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
    pub fn new(
        ring: Arc<FrameRing>,
        output: Sender<OutputItem>,
        wake_workers: Box<dyn Fn() + Send + Sync>,
        events: Sender<SourceEvent>,
        retime_from: Option<Instant>,
        on_decoded: DecodeObserver,
    ) -> Self {
        RingFeeder {
            ring,
            output,
            wake_workers,
            events,
            retime_from,
            last_frame: Mutex::new(Instant::now()),
            decoded: AtomicU64::new(0),
            on_decoded,
            stopped: AtomicBool::new(false),
            rate: None,
            on_damaged: None,
        }
    }

    /// Called when the source reports damaged input it skipped (metrics).
    pub fn on_damaged_input(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_damaged = Some(Box::new(f));
        self
    }

    /// Caps inference at `fps` frames a second (None or 0: every frame).
    /// Frames over the cap are numbered and reported as skipped, never queued.
    pub fn with_rate_limit(mut self, fps: Option<f64>) -> Self {
        self.rate = fps.filter(|f| *f > 0.0).map(|f| RateLimit {
            interval_ns: (1e9 / f) as u64,
            next_due: Mutex::new(None),
            started: Instant::now(),
        });
        self
    }

    pub fn decoded(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    /// When the last frame arrived (silence detection for live sources).
    pub fn last_frame(&self) -> Instant {
        *self.last_frame.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops accepting frames (the stream is being shut down).
    pub fn stop(&self) {
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
        self.decoded.fetch_add(1, Ordering::Relaxed);
        if self.rate.as_ref().is_some_and(|r| !r.admits(frame.pts)) {
            let seq = self.ring.skip();
            // Still a decoded frame: fps in stays the source's rate.
            (self.on_decoded)(&Pushed::RateLimited { seq }, self.ring.depth());
            let _ = self.output.send(OutputItem::Skipped { seq, reason: SkipReason::RateLimited });
            return FlowAction::Continue;
        }
        let pushed = self.ring.push(&frame);
        (self.on_decoded)(&pushed, self.ring.depth());
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
        if let Some(f) = &self.on_damaged {
            f();
        }
    }
}

/// How often a failed segmented recording tries to start again.
const REOPEN_EVERY: Duration = Duration::from_secs(2);

/// Writes frames into an MP4 (one file or rotating segments). A segmented
/// recording that fails (folder deleted, disk full) is paused, not ended:
/// every [`REOPEN_EVERY`] it starts again, numbering on from where it
/// stopped, once the problem has cleared.
pub struct FileOutput {
    sink: Option<FileSink>,
    reopen: Option<Reopen>,
}

struct Reopen {
    target: FileTarget,
    info: VideoInfo,
    next_index: u32,
    retry_at: Instant,
    /// What paused the recording (None until it first fails).
    last_error: Option<Arc<SinkError>>,
}

impl FileOutput {
    /// Ends at the first error (one file: reopening would overwrite it).
    pub fn once(sink: FileSink) -> Self {
        FileOutput { sink: Some(sink), reopen: None }
    }

    /// Segments of `target`, restarted after failures.
    pub fn resuming(sink: FileSink, target: FileTarget, info: VideoInfo) -> Self {
        let reopen = target.segment_seconds.map(|_| Reopen { target, info, next_index: 0, retry_at: Instant::now(), last_error: None });
        FileOutput { sink: Some(sink), reopen }
    }

    /// The failed sink is closed (what it finished stays) and the next start
    /// numbered after every segment it may have begun.
    fn pause(&mut self, err: SinkError) -> OutputError {
        let Some(r) = self.reopen.as_mut() else { return err.into() };
        let err = Arc::new(err);
        if let Some(sink) = self.sink.take() {
            let begun = sink.finish(Duration::from_secs(1)).map_or(1, |f| f.files.len() as u32 + 1);
            r.next_index += begun;
            tracing::warn!(file = %r.target.path.display(), "recording paused: {err}; retrying every {} s", REOPEN_EVERY.as_secs());
        }
        r.retry_at = Instant::now() + REOPEN_EVERY;
        r.last_error = Some(err.clone());
        OutputError::File(err)
    }

    fn try_reopen(&mut self) -> Result<(), OutputError> {
        let Some(r) = self.reopen.as_mut() else { return Err(OutputError::Ended) };
        if let Some(err) = r.last_error.as_ref().filter(|_| Instant::now() < r.retry_at) {
            return Err(OutputError::Paused(err.clone()));
        }
        // Skip numbers already on disk: a resumed recording never overwrites.
        let name = |i: u32| PathBuf::from(r.target.path.to_string_lossy().replace("%05d", &format!("{i:05}")).replace("%%", "%"));
        while !r.target.wall_clock_names && name(r.next_index).exists() {
            r.next_index += 1;
        }
        match open_file_sink_at(&r.target, r.info, r.next_index) {
            Ok(sink) => {
                tracing::info!(file = %r.target.path.display(), first_segment = r.next_index, "recording resumed");
                self.sink = Some(sink);
                Ok(())
            }
            Err(e) => Err(self.pause(e)),
        }
    }
}

impl FrameSink for FileOutput {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn write(&mut self, f: &FrameBuf) -> Result<(), OutputError> {
        if self.sink.is_none() {
            self.try_reopen()?;
        }
        let sink = self.sink.as_mut().expect("opened above");
        match sink.push(&f.data, f.width as usize * 4, f.timing) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.pause(e)),
        }
    }
    fn finish(self: Box<Self>, timeout: Duration) -> Result<(), OutputError> {
        let Some(sink) = self.sink else {
            return Err(self.reopen.and_then(|r| r.last_error).map_or(OutputError::Failed, OutputError::File));
        };
        let files = sink.finish(timeout)?;
        for f in &files.files {
            tracing::info!(file = %f.display(), frames = files.frames, "recording finalised");
        }
        Ok(())
    }
}

/// Serves frames to RTSP clients (dropped when nobody watches).
pub struct RtspOutput(pub RtspFeed);

impl FrameSink for RtspOutput {
    fn kind(&self) -> &'static str {
        "rtsp"
    }
    fn write(&mut self, f: &FrameBuf) -> Result<(), OutputError> {
        self.0.push(&f.data, f.width as usize * 4, f.timing)?;
        Ok(())
    }
    fn finish(self: Box<Self>, _timeout: Duration) -> Result<(), OutputError> {
        Ok(())
    }
}

/// The running parts of one stream between its source and its sinks.
pub struct StreamPipeline {
    pub name: String,
    pub ring: Arc<FrameRing>,
    pub input: Arc<StreamInput>,
    pub counters: Arc<StreamCounters>,
    output: Option<OutputStage>,
}

pub struct PipelineParts {
    pub name: String,
    pub ring: Arc<FrameRing>,
    pub output_tx: Sender<OutputItem>,
    pub output_rx: crossbeam_channel::Receiver<OutputItem>,
    pub sinks: Vec<Box<dyn FrameSink>>,
    pub stats: Option<StatsWriter>,
    pub observer: Arc<dyn OutputObserver>,
    pub finish_timeout: Duration,
    pub on_frame: Option<Box<dyn FnMut(&FrameBuf, &FrameStats) + Send>>,
    pub want_masks: bool,
    pub temporal: TemporalSettings,
}

impl StreamPipeline {
    /// Starts the output stage and registers the stream with the pool.
    pub fn start(parts: PipelineParts, pool: &WorkerPool) -> Self {
        let counters = Arc::new(StreamCounters::default());
        let input = Arc::new(StreamInput {
            name: parts.name.clone(),
            ring: parts.ring.clone(),
            output: parts.output_tx,
            counters: counters.clone(),
            want_masks: parts.want_masks,
            temporal: StreamTemporal::new(parts.temporal),
        });
        let output = OutputStage::start(OutputParts {
            stream: parts.name.clone(),
            items: parts.output_rx,
            ring: parts.ring.clone(),
            sinks: parts.sinks,
            stats: parts.stats,
            counters: counters.clone(),
            observer: parts.observer,
            finish_timeout: parts.finish_timeout,
            on_frame: parts.on_frame,
        });
        pool.add_stream(input.clone());
        StreamPipeline { name: parts.name, ring: parts.ring, input, counters, output: Some(output) }
    }

    /// Waits (up to `deadline`) for queued and in-flight frames to be
    /// processed, then detaches from the pool and finalises the sinks.
    pub fn drain_and_finish(mut self, pool: &WorkerPool, deadline: Instant) -> OutputSummary {
        self.ring.close();
        while (self.ring.depth() > 0 || self.input.in_flight() > 0) && Instant::now() < deadline {
            pool.notify();
            std::thread::sleep(Duration::from_millis(5));
        }
        pool.remove_stream(&self.name);
        let _ = self.input.output.send(OutputItem::End);
        let output = self.output.take();
        drop(self);
        output.map(OutputStage::join).unwrap_or_default()
    }
}

/// Where a stream's file output goes.
#[derive(Clone, Debug)]
pub struct FileTarget {
    pub path: PathBuf,
    pub segment_seconds: Option<u32>,
    /// H.264 target bitrate.
    pub bitrate_kbps: u32,
    /// `path` is a strftime pattern: segments named for their start (UTC).
    pub wall_clock_names: bool,
}

impl FileTarget {
    /// One file at the default bitrate.
    pub fn single(path: PathBuf) -> Self {
        FileTarget { path, segment_seconds: None, bitrate_kbps: DEFAULT_BITRATE_KBPS, wall_clock_names: false }
    }
}

/// Encoder bitrate when none is configured (about 43 GB a day).
pub const DEFAULT_BITRATE_KBPS: u32 = 4000;

/// Opens the file sink for frames of `info`, making its folder.
pub fn open_file_sink(target: &FileTarget, info: VideoInfo) -> Result<FileSink, SinkError> {
    open_file_sink_at(target, info, 0)
}

/// As [`open_file_sink`], numbering segments from `start_index`.
fn open_file_sink_at(target: &FileTarget, info: VideoInfo, start_index: u32) -> Result<FileSink, SinkError> {
    // Wall-clock folders are made per segment, by the sink.
    if let Some(dir) = target.path.parent().filter(|d| !d.as_os_str().is_empty() && !target.wall_clock_names) {
        std::fs::create_dir_all(dir).map_err(|source| SinkError::CreateDir { dir: dir.into(), source })?;
    }
    let fps = if info.fps_num > 0 && info.fps_den > 0 { (info.fps_num, info.fps_den) } else { (25, 1) };
    let mut settings = FileSinkSettings::new(target.path.clone(), info.width, info.height, fps);
    settings.segment_seconds = target.segment_seconds;
    settings.encoder.bitrate_kbps = target.bitrate_kbps;
    settings.wall_clock_names = target.wall_clock_names;
    settings.start_index = start_index;
    FileSink::start(settings)
}

/// Starts `settings` feeding `feeder`.
pub fn start_source(settings: SourceSettings, feeder: Arc<RingFeeder>) -> Result<Source, SourceError> {
    Source::start(settings, feeder)
}

/// Nothing observed: for callers without metrics.
pub fn no_decode_observer() -> DecodeObserver {
    Arc::new(|_, _| {})
}
