//! A stream's output stage: puts worker results back in order, writes each
//! frame to the stream's sinks (files, RTSP) and its stats sidecar, then
//! returns the frame buffer to the stream's pool.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::annotate::FrameStats;
use crate::video::demand::PixelDemand;
use super::pool::{OutputItem, SkipReason, StreamCounters};
use super::reorder::{Reorder, Slot};
use super::ring::{FrameBuf, FrameRing};
use super::rtsp::RtspError;
use super::sink::SinkError;

/// Kept back from a shutdown's deadline when finalising, so the stream's
/// supervisor reports back before it.
const FINISH_MARGIN: Duration = Duration::from_millis(250);

/// Why a sink, the stats sidecar or the output stage failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The recording (or opening it) failed. Shared: a paused recording
    /// reports the error that paused it until it resumes.
    #[error(transparent)]
    File(Arc<SinkError>),
    #[error("recording paused: {0}")]
    Paused(#[source] Arc<SinkError>),
    #[error("the recording has ended after an error")]
    Ended,
    #[error("the recording failed")]
    Failed,
    #[error(transparent)]
    Rtsp(#[from] RtspError),
    #[error(transparent)]
    Stats(#[from] StatsError),
    #[error("output thread panicked")]
    Panicked,
}

impl From<SinkError> for OutputError {
    fn from(e: SinkError) -> Self {
        OutputError::File(Arc::new(e))
    }
}

/// Why the JSON-lines sidecar could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("cannot create {}: {source}", .dir.display())]
    CreateDir { dir: PathBuf, source: std::io::Error },
    #[error("cannot open stats file {}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("writing {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("syncing {path}: {source}")]
    Sync { path: String, source: std::io::Error },
}

impl OutputError {
    /// The recording failed for want of space (ENOSPC, as GStreamer words it).
    pub fn is_disk_full(&self) -> bool {
        match self {
            OutputError::File(e) | OutputError::Paused(e) => e.to_string().contains("No space left"),
            _ => false,
        }
    }
}

/// Somewhere annotated frames go. `write` failing is counted and logged but
/// does not stop the stream's other sinks.
pub trait FrameSink: Send {
    /// "file" or "rtsp": the metric label.
    fn kind(&self) -> &'static str;
    fn write(&mut self, frame: &FrameBuf) -> Result<(), OutputError>;
    /// How long its encoder held each frame that came out since the last
    /// call, where that is measured (the recording's encoder).
    fn encode_times(&self, _each: &mut dyn FnMut(Duration)) {}
    /// Whether it shows the frames' pixels to someone now (an annotated
    /// recording always; an RTSP mount while a client plays it). Frames
    /// nobody looks at are not drawn, and such a sink is not given them.
    fn wants_pixels(&self) -> bool {
        true
    }
    /// Recorded segments closed so far (changes when one closes): the stats
    /// sidecar is synced to disk with them.
    fn segments_closed(&self) -> usize {
        0
    }
    /// Frames known to be on disk so far, for a sink that can tell (the
    /// recording); None: a frame counts as written when `write` takes it.
    fn frames_on_disk(&self) -> Option<u64> {
        None
    }
    /// Flushes and finalises (e.g. EOS so an MP4 gets its index); for a
    /// sink that counts them, the frames on disk at the end.
    fn finish(self: Box<Self>, timeout: Duration) -> Result<Option<u64>, OutputError>;
}

/// What a stream reports as frames go through it (metrics, progress, the
/// status page). Called on the source's and the output stage's threads, so
/// every method must return quickly; each has a do-nothing default.
pub trait StreamObserver: Send + Sync {
    /// A frame was decoded (queued or not); `ring_depth` frames now wait.
    fn decoded(&self, _ring_depth: usize) {}
    /// The source went on past damaged or lost input.
    fn damaged_input(&self) {}
    /// The source decodes with `decoder` (from now until the next report).
    fn decoder(&self, _decoder: &crate::video::source::DecoderInfo) {}
    /// `frames` more frames were written by `sink`.
    fn written(&self, _sink: &'static str, _frames: u64) {}
    fn sink_failed(&self, _sink: &'static str, _err: &OutputError) {}
    fn skipped(&self, _reason: SkipReason) {}
    /// An encoder took `took` from a frame's push to its encoded output.
    fn encoded(&self, _took: Duration) {}
    /// A frame was written to every sink, in order, `latency` after it was
    /// decoded; `frame.stages` says where that time went.
    fn frame_out(&self, _frame: &FrameBuf, _latency: Duration, _stats: &FrameStats) {}
    /// Last look at a written frame before its buffer goes back to the pool;
    /// may swap `buf.data` (see `snapshot::LatestFrame::offer`). Given drawn
    /// frames only (`buf.annotated`): at least one a second.
    fn keep_latest(&self, _buf: &mut FrameBuf) {}
    /// Whether someone watches every drawn frame (a live view) now.
    fn wants_pixels(&self) -> bool {
        false
    }
}

/// Whether any of `sinks` or `observer` shows the frames' pixels now.
pub fn pixels_wanted(sinks: &[Box<dyn FrameSink>], observer: &dyn StreamObserver) -> bool {
    sinks.iter().any(|s| s.wants_pixels()) || observer.wants_pixels()
}

pub struct NoObserver;
impl StreamObserver for NoObserver {}

/// JSON-lines sidecar: one object per written frame, with the wall-clock
/// time it was written. Each line goes to the file as it is made (one
/// write), so a crash or `kill -9` loses none that was written; the file
/// is synced to disk when a recorded segment closes and at the end.
pub struct StatsWriter {
    out: std::fs::File,
    line: Vec<u8>,
    path: String,
    /// Named in every line (daemon sidecars, which may be shared or shipped).
    stream: Option<String>,
    /// Each line also carries the frame's road mask, run-length coded
    /// (`road_rle`, see `video::mask_rle`).
    masks: bool,
}

impl StatsWriter {
    /// A new file (an existing one is replaced): one run, one file.
    pub fn create(path: &std::path::Path) -> Result<Self, StatsError> {
        Self::open(path, None, false)
    }

    /// Appends to `path`, so a restart never truncates what was written;
    /// every line names `stream`.
    pub fn append(path: &std::path::Path, stream: &str) -> Result<Self, StatsError> {
        Self::open(path, Some(stream.to_string()), true)
    }

    /// Lines also carry each frame's road mask (its `road_mask` must be filled).
    pub fn with_masks(mut self, masks: bool) -> Self {
        self.masks = masks;
        self
    }

    fn open(path: &std::path::Path, stream: Option<String>, append: bool) -> Result<Self, StatsError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StatsError::CreateDir { dir: dir.into(), source })?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|source| StatsError::Open { path: path.into(), source })?;
        Ok(StatsWriter { out: file, line: Vec::with_capacity(256), path: path.display().to_string(), stream, masks: false })
    }

    fn write(&mut self, frame: &FrameBuf, stats: &FrameStats) -> Result<(), StatsError> {
        let mut line = serde_json::json!({
            "time": crate::clock::rfc3339(std::time::SystemTime::now()),
            "frame": frame.seq,
            "pts": frame.timing.pts.map(|p| p as f64 / 1e9),
            "road_coverage": (stats.road_coverage as f64 * 1e5).round() / 1e5,
            "hood_pct": (stats.hood_coverage as f64 * 1e4).round() / 1e2,
            "road_cut": (stats.road_cut as f64 * 1e5).round() / 1e5,
            "mean_confidence": (stats.mean_confidence as f64 * 1e5).round() / 1e5,
            "exposure_gamma": (f64::from(stats.brightened.unwrap_or(1.0)) * 1e3).round() / 1e3,
            "inference_ms": (stats.inference_ms * 100.0).round() / 100.0,
            "dropped_before": frame.dropped_before,
        });
        if let Some(stream) = &self.stream {
            line["stream"] = stream.as_str().into();
        }
        if self.masks && frame.road_mask.len() == frame.width as usize * frame.height as usize {
            let rle = crate::video::mask_rle::encode(&frame.road_mask, frame.width as usize, frame.height as usize);
            line["road_rle"] = serde_json::to_value(rle).unwrap_or_default();
        }
        self.line.clear();
        let _ = writeln!(self.line, "{line}");
        self.out.write_all(&self.line).map_err(|source| StatsError::Write { path: self.path.clone(), source })
    }

    /// Puts what was written on the disk itself (survives power loss too).
    fn sync(&self) -> Result<(), StatsError> {
        self.out.sync_data().map_err(|source| StatsError::Sync { path: self.path.clone(), source })
    }

    fn finish(self) -> Result<(), StatsError> {
        self.out.sync_all().map_err(|source| StatsError::Sync { path: self.path.clone(), source })
    }
}

/// Totals once the stage has finished.
#[derive(Debug, Default)]
pub struct OutputSummary {
    pub frames: u64,
    pub skipped: u64,
    pub road_coverage_sum: f64,
    /// Sum over consecutive written frames with road masks of the share of
    /// pixels whose road / not-road label changed, and the number of pairs.
    pub road_flicker_sum: f64,
    pub road_flicker_pairs: u64,
    pub first_error: Option<OutputError>,
}

impl OutputSummary {
    /// Mean share of pixels whose road label flips from one frame to the
    /// next (None without road masks): the flicker temporal smoothing cuts.
    pub fn road_flicker(&self) -> Option<f64> {
        (self.road_flicker_pairs > 0).then(|| self.road_flicker_sum / self.road_flicker_pairs as f64)
    }
}

pub struct OutputStage {
    handle: JoinHandle<OutputSummary>,
}

pub struct OutputParts {
    pub stream: String,
    pub items: Receiver<OutputItem>,
    pub ring: Arc<FrameRing>,
    pub sinks: Vec<Box<dyn FrameSink>>,
    pub stats: Option<StatsWriter>,
    pub counters: Arc<StreamCounters>,
    pub observer: Arc<dyn StreamObserver>,
    pub finish_timeout: Duration,
    /// Told after each frame whether the sinks and observer want pixels.
    pub pixels: Arc<PixelDemand>,
}

impl OutputStage {
    /// Runs until every sender of `items` is gone, then finalises the sinks.
    pub fn start(parts: OutputParts) -> Self {
        let name = format!("roadseg-out-{}", parts.stream);
        let handle = std::thread::Builder::new().name(name).spawn(move || run(parts)).expect("spawning an output thread");
        OutputStage { handle }
    }

    pub fn join(self) -> OutputSummary {
        self.handle.join().unwrap_or_else(|_| OutputSummary { first_error: Some(OutputError::Panicked), ..Default::default() })
    }
}

fn run(mut p: OutputParts) -> OutputSummary {
    let mut reorder: Reorder<(FrameBuf, FrameStats)> = Reorder::default();
    let mut summary = OutputSummary::default();
    let mut fps_window = (Instant::now(), 0u64);
    let mut previous_mask: Vec<u8> = Vec::new();
    let mut segments_closed = 0usize;
    // Per sink: frames on disk already reported (sinks that count them).
    let mut on_disk = vec![0u64; p.sinks.len()];
    let mut emit = |(mut buf, stats): (FrameBuf, FrameStats), p: &mut OutputParts, summary: &mut OutputSummary| {
        buf.stages.in_order = Instant::now();
        for (sink, on_disk) in p.sinks.iter_mut().zip(on_disk.iter_mut()) {
            // A viewer who just arrived: frames already inferred undrawn are not shown.
            if !buf.annotated && sink.wants_pixels() {
                continue;
            }
            match sink.write(&buf) {
                Ok(()) => match sink.frames_on_disk() {
                    None => p.observer.written(sink.kind(), 1),
                    Some(now) => {
                        // Falls back to 0 when a new file starts counting afresh.
                        if now > *on_disk {
                            p.observer.written(sink.kind(), now - *on_disk);
                        }
                        *on_disk = now;
                    }
                },
                Err(e) => {
                    p.observer.sink_failed(sink.kind(), &e);
                    if summary.first_error.is_none() {
                        tracing::error!(stream = %p.stream, sink = sink.kind(), "{e}");
                        summary.first_error = Some(e);
                    }
                }
            }
        }
        if let Some(stats_out) = p.stats.as_mut() {
            match stats_out.write(&buf, &stats) {
                Ok(()) => p.observer.written("stats", 1),
                Err(e) => {
                    let e = OutputError::from(e);
                    p.observer.sink_failed("stats", &e);
                    summary.first_error.get_or_insert(e);
                }
            }
        }
        for sink in p.sinks.iter() {
            sink.encode_times(&mut |took| p.observer.encoded(took));
        }
        let closed: usize = p.sinks.iter().map(|s| s.segments_closed()).sum();
        if closed != segments_closed {
            segments_closed = closed;
            if let Some(Err(e)) = p.stats.as_ref().map(StatsWriter::sync) {
                tracing::warn!(stream = %p.stream, "{e}");
            }
        }
        p.observer.frame_out(&buf, buf.stages.decoded.elapsed(), &stats);
        summary.frames += 1;
        summary.road_coverage_sum += stats.road_coverage as f64;
        if !buf.road_mask.is_empty() {
            if previous_mask.len() == buf.road_mask.len() {
                let changed = previous_mask.iter().zip(&buf.road_mask).filter(|(a, b)| a != b).count();
                summary.road_flicker_sum += changed as f64 / buf.road_mask.len() as f64;
                summary.road_flicker_pairs += 1;
            }
            previous_mask.clone_from(&buf.road_mask);
        }
        if buf.annotated {
            p.observer.keep_latest(&mut buf);
        }
        p.pixels.set_wanted(pixels_wanted(&p.sinks, &*p.observer));
        fps_window.1 += 1;
        let elapsed = fps_window.0.elapsed();
        if elapsed >= Duration::from_secs(1) {
            let fps = fps_window.1 as f64 / elapsed.as_secs_f64();
            p.counters.fps_milli.store((fps * 1000.0) as u64, Ordering::Relaxed);
            fps_window = (Instant::now(), 0);
        }
        p.ring.recycle(buf);
    };
    let mut finish_by = None;
    while let Ok(item) = p.items.recv() {
        match item {
            OutputItem::Frame { buf, stats } => reorder.insert(buf.seq, Slot::Ready((buf, stats))),
            OutputItem::Skipped { seq, reason } => {
                p.observer.skipped(reason);
                summary.skipped += 1;
                reorder.insert(seq, Slot::Skipped);
            }
            OutputItem::End { finish_by: Some(by) } => {
                finish_by = Some(by);
                break;
            }
            OutputItem::End { finish_by: None } => break,
        }
        reorder.drain_ready(|x| emit(x, &mut p, &mut summary));
    }
    reorder.drain_all(|x| emit(x, &mut p, &mut summary));
    // Within a shutdown's deadline, less a moment for the caller to hear back.
    let timeout = match finish_by {
        Some(by) => p.finish_timeout.min(by.saturating_duration_since(Instant::now()).saturating_sub(FINISH_MARGIN)).max(FINISH_MARGIN),
        None => p.finish_timeout,
    };
    for (sink, reported) in std::mem::take(&mut p.sinks).into_iter().zip(on_disk) {
        let kind = sink.kind();
        match sink.finish(timeout) {
            Ok(Some(at_end)) if at_end > reported => p.observer.written(kind, at_end - reported),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(stream = %p.stream, sink = kind, "finalising failed: {e}");
                summary.first_error.get_or_insert(e);
            }
        }
    }
    if let Some(stats_out) = p.stats.take() {
        if let Err(e) = stats_out.finish() {
            summary.first_error.get_or_insert(e.into());
        }
    }
    summary
}
