//! The one place metric names live. Everything else records through the
//! handles built here, registered once per stream / device so hot paths only
//! touch atomics.
//!
//! Handles built before [`install`] record into nothing: install first.
//! Series are labelled by `stream` (and `device`/`worker` for inference).
//! A removed stream's series stay in /metrics until the process restarts
//! (the exporter cannot unregister); its `roadseg_stream_up` drops to 0.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use ::metrics::{Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Unit, counter, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use crate::video::source::DecoderInfo;

pub use metrics_exporter_prometheus::PrometheusHandle;

pub const FRAMES_DECODED: &str = "roadseg_frames_decoded_total";
pub const FRAMES_INFERRED: &str = "roadseg_frames_inferred_total";
pub const FRAMES_DROPPED: &str = "roadseg_frames_dropped_total";
pub const FRAMES_WRITTEN: &str = "roadseg_frames_written_total";
pub const SINK_ERRORS: &str = "roadseg_sink_errors_total";
pub const LATENCY: &str = "roadseg_latency_seconds";
pub const STAGE: &str = "roadseg_stage_seconds";
pub const RING_DEPTH: &str = "roadseg_ring_depth";
pub const ROAD_COVERAGE: &str = "roadseg_road_coverage_ratio";
pub const HOOD_COVERAGE: &str = "roadseg_hood_coverage_ratio";
pub const ROAD_CUT: &str = "roadseg_road_cut_ratio";
pub const EXPOSURE_GAMMA: &str = "roadseg_exposure_gamma";
pub const MEAN_CONFIDENCE: &str = "roadseg_mean_confidence_ratio";
pub const LAST_INFERRED: &str = "roadseg_last_inferred_timestamp_seconds";
pub const LAST_WRITTEN: &str = "roadseg_last_written_timestamp_seconds";
pub const STORAGE_FREE: &str = "roadseg_storage_free_bytes";
pub const SEGMENTS_DELETED: &str = "roadseg_segments_deleted_total";
pub const RECONNECTS: &str = "roadseg_reconnects_total";
pub const INTERRUPTIONS: &str = "roadseg_stream_interruptions_total";
pub const DECODE_ERRORS: &str = "roadseg_decode_errors_total";
pub const STREAM_DECODER: &str = "roadseg_stream_decoder";
pub const STREAM_UP: &str = "roadseg_stream_up";
pub const STREAM_DEGRADED: &str = "roadseg_stream_degraded";
pub const RTSP_CLIENTS: &str = "roadseg_rtsp_clients";
pub const LIVE_VIEWERS: &str = "roadseg_live_viewers";
pub const LIVE_FRAMES: &str = "roadseg_live_frames_encoded_total";
pub const INFERENCE: &str = "roadseg_inference_seconds";
pub const WORKER_BUSY: &str = "roadseg_worker_busy_ratio";
pub const DEVICE_FALLBACK: &str = "roadseg_device_fallback_total";
pub const MODEL_LOADED: &str = "roadseg_model_loaded";
pub const BUILD_INFO: &str = "roadseg_build_info";
pub const GPU_UTILIZATION: &str = "roadseg_gpu_utilization_ratio";
pub const GPU_MEMORY_USED: &str = "roadseg_gpu_memory_used_bytes";
pub const GPU_TEMPERATURE: &str = "roadseg_gpu_temperature_celsius";
pub const GPU_POWER: &str = "roadseg_gpu_power_watts";
pub const GPU_BUSY: &str = "roadseg_gpu_busy_ratio";
pub const SHARD_STREAMS: &str = "roadseg_shard_streams";
pub const CONFIG_RELOAD_FAILED: &str = "roadseg_config_reload_failed";

/// Every name above, for checks that dashboards and docs use only real ones.
pub const ALL_NAMES: [&str; 38] = [
    GPU_UTILIZATION,
    GPU_BUSY,
    STAGE,
    GPU_MEMORY_USED,
    GPU_TEMPERATURE,
    GPU_POWER,
    FRAMES_DECODED,
    FRAMES_INFERRED,
    FRAMES_DROPPED,
    FRAMES_WRITTEN,
    SINK_ERRORS,
    LATENCY,
    RING_DEPTH,
    ROAD_COVERAGE,
    HOOD_COVERAGE,
    ROAD_CUT,
    EXPOSURE_GAMMA,
    MEAN_CONFIDENCE,
    LAST_INFERRED,
    LAST_WRITTEN,
    STORAGE_FREE,
    SEGMENTS_DELETED,
    RECONNECTS,
    INTERRUPTIONS,
    DECODE_ERRORS,
    STREAM_DECODER,
    STREAM_UP,
    STREAM_DEGRADED,
    RTSP_CLIENTS,
    LIVE_VIEWERS,
    LIVE_FRAMES,
    INFERENCE,
    WORKER_BUSY,
    DEVICE_FALLBACK,
    MODEL_LOADED,
    BUILD_INFO,
    SHARD_STREAMS,
    CONFIG_RELOAD_FAILED,
];

/// Source frame to annotated output, 5 ms to 10 s.
pub const LATENCY_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// One stage of one frame, 0.1 ms to 10 s.
pub const STAGE_BUCKETS: [f64; 16] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// One forward pass, 1 ms to 5 s.
pub const INFERENCE_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// Histograms accumulate samples until upkeep folds them into buckets; with
/// the HTTP endpoint disabled nothing else would.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot install the Prometheus metrics recorder: {0}")]
    Install(BuildError),
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static INSTALLING: Mutex<()> = Mutex::new(());

/// Installs the process-wide Prometheus recorder; later calls return the
/// same handle. Fails if some other recorder was installed first.
pub fn install() -> Result<PrometheusHandle, MetricsError> {
    let _once = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = builder().and_then(PrometheusBuilder::install_recorder).map_err(MetricsError::Install)?;
    describe();
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    gauge!(MODEL_LOADED).set(0.0);
    gauge!(CONFIG_RELOAD_FAILED).set(0.0);
    let upkeep = handle.clone();
    // Detached on purpose: the recorder it tends is global and lives as long.
    let spawned = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
        loop {
            std::thread::sleep(UPKEEP_EVERY);
            upkeep.run_upkeep();
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("no metrics upkeep thread ({e}); histograms are folded only when /metrics is scraped");
    }
    Ok(HANDLE.get_or_init(|| handle).clone())
}

fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(LATENCY.into()), &LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(INFERENCE.into()), &INFERENCE_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(STAGE.into()), &STAGE_BUCKETS)
}

/// (name, help) of each counter, all counts, as /metrics describes them.
const COUNTERS: &[(&str, &str)] = &[
    (FRAMES_DECODED, "Frames decoded from the source"),
    (FRAMES_INFERRED, "Frames segmented by a worker"),
    (FRAMES_DROPPED, "Frames dropped, by reason (ring_full, inference_error, decode_error, rate_limited, shutdown)"),
    (FRAMES_WRITTEN, "Frames written, by sink (file: frames in fragments on disk; rtsp, stats: frames handed over)"),
    (SINK_ERRORS, "Frames an output failed to write (a paused recording counts each frame it missed)"),
    (SEGMENTS_DELETED, "Recording segments deleted by retention (reason: age or space)"),
    (RECONNECTS, "Source reconnect attempts"),
    (LIVE_FRAMES, "Frames given to the live view's encoders (stops moving when nobody watches)"),
    (INTERRUPTIONS, "Times a running live source was lost (error, end, silence); each is followed by reconnect attempts"),
    (DECODE_ERRORS, "Damaged or lost input the source went on without: warnings from its demuxer, parser or decoder, and gaps in the frames' timestamps (frames lost)"),
    (DEVICE_FALLBACK, "Times inference fell back from one device to another"),
];

/// (name, help) of each histogram, all in seconds.
const HISTOGRAMS: &[(&str, &str)] = &[
    (LATENCY, "Source frame to annotated output"),
    (INFERENCE, "One inference (all scales of the preset)"),
    (
        STAGE,
        "Where a frame's latency went, by stage: decode_to_ring (offered by the source to queued, files wait for a slot), ring_wait, inference, annotate, reorder (waiting for earlier frames), encode (push to encoded output, recordings)",
    ),
];

/// (name, unit, help) of each gauge; most are ratios or flags, without a unit.
const GAUGES: &[(&str, Option<Unit>, &str)] = &[
    (ROAD_COVERAGE, None, "Fraction of the last frame's scene (pixels outside the hood) classified as road"),
    (MEAN_CONFIDENCE, None, "Mean per-pixel confidence (max class probability) of the last inferred frame"),
    (HOOD_COVERAGE, None, "Fraction of the frame that is the ego vehicle's hood (0 when none is seen)"),
    (
        ROAD_CUT,
        None,
        "Fraction of the last frame the model called road that joins no road in the lower picture (night sky, lit walls, tunnel ceilings), drawn and counted as its next-best class instead; high and lasting means this camera or light confuses the model",
    ),
    (
        EXPOSURE_GAMMA,
        None,
        "Gamma the last frame was brightened with before inference (1: as it came; under 1: darker than [model] exposure_target, night or dusk)",
    ),
    (STREAM_UP, None, "1 while the stream's source delivers frames"),
    (
        STREAM_DECODER,
        None,
        "1 for the video decoder the stream's source uses now, 0 for one it used before (decoder: the GStreamer element; hardware: true for NVDEC, VA-API, V4L2 and the like; memory: where decoded frames reach roadseg, system until GPU-memory frames are taken in place)",
    ),
    (
        STREAM_DEGRADED,
        None,
        "1 while the stream drops more than daemon.overload_drop_share of its frames meant for inference as ring_full (inference cannot keep up: set infer_fps, add workers or use a GPU)",
    ),
    (WORKER_BUSY, None, "Fraction of recent time the worker spent inferring"),
    (MODEL_LOADED, None, "1 once the model is loaded"),
    (CONFIG_RELOAD_FAILED, None, "1 when the last reload (SIGHUP) was rejected and the running configuration kept; 0 after one applied"),
    (BUILD_INFO, None, "Always 1; the version label says which build runs"),
    (GPU_UTILIZATION, None, "Fraction of the last sample period a kernel ran on the GPU (NVML)"),
    (GPU_BUSY, None, "Fraction of the last second the GPU spent running roadseg's frames (CUDA events around each frame's graph, summed over workers, at most 1)"),
    (GPU_TEMPERATURE, None, "GPU core temperature in degrees Celsius (NVML)"),
    (GPU_POWER, None, "GPU board power draw in watts (NVML)"),
    (RING_DEPTH, Some(Unit::Count), "Frames waiting between the source and the workers"),
    (RTSP_CLIENTS, Some(Unit::Count), "Clients connected to the stream's RTSP mount"),
    (LIVE_VIEWERS, Some(Unit::Count), "Browsers playing the stream's live view (/api/v1/streams/NAME/live.mp4); its encoders run only while this is above 0"),
    (SHARD_STREAMS, Some(Unit::Count), "Configured streams this daemon runs (state=owned) and leaves to other shards (state=skipped), per [daemon] shard"),
    (LAST_INFERRED, Some(Unit::Seconds), "Unix time of the stream's last inferred frame"),
    (LAST_WRITTEN, Some(Unit::Seconds), "Unix time of the stream's last frame through its outputs"),
    (STORAGE_FREE, Some(Unit::Bytes), "Free bytes on the disk holding the stream's recordings"),
    (GPU_MEMORY_USED, Some(Unit::Bytes), "GPU memory in use, all processes (NVML)"),
];

fn describe() {
    ::metrics::with_recorder(|recorder| {
        for &(name, help) in COUNTERS {
            recorder.describe_counter(name.into(), Some(Unit::Count), help.into());
        }
        for &(name, help) in HISTOGRAMS {
            recorder.describe_histogram(name.into(), Some(Unit::Seconds), help.into());
        }
        for &(name, unit, help) in GAUGES {
            recorder.describe_gauge(name.into(), unit, help.into());
        }
    });
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    RingFull,
    InferenceError,
    DecodeError,
    RateLimited,
    Shutdown,
}

impl DropReason {
    pub const ALL: [DropReason; 5] =
        [DropReason::RingFull, DropReason::InferenceError, DropReason::DecodeError, DropReason::RateLimited, DropReason::Shutdown];

    pub fn label(self) -> &'static str {
        match self {
            DropReason::RingFull => "ring_full",
            DropReason::InferenceError => "inference_error",
            DropReason::DecodeError => "decode_error",
            DropReason::RateLimited => "rate_limited",
            DropReason::Shutdown => "shutdown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    File,
    Rtsp,
    Stats,
}

impl Sink {
    pub const ALL: [Sink; 3] = [Sink::File, Sink::Rtsp, Sink::Stats];

    /// From an output's `kind()`.
    pub fn named(kind: &str) -> Sink {
        match kind {
            "file" => Sink::File,
            "rtsp" => Sink::Rtsp,
            _ => Sink::Stats,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Sink::File => "file",
            Sink::Rtsp => "rtsp",
            Sink::Stats => "stats",
        }
    }
}

/// A part of a frame's way from the source to its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    DecodeToRing,
    RingWait,
    Inference,
    Annotate,
    Reorder,
    Encode,
}

impl Stage {
    pub const ALL: [Stage; 6] = [Stage::DecodeToRing, Stage::RingWait, Stage::Inference, Stage::Annotate, Stage::Reorder, Stage::Encode];

    pub fn label(self) -> &'static str {
        match self {
            Stage::DecodeToRing => "decode_to_ring",
            Stage::RingWait => "ring_wait",
            Stage::Inference => "inference",
            Stage::Annotate => "annotate",
            Stage::Reorder => "reorder",
            Stage::Encode => "encode",
        }
    }
}

/// One stream's handles. `roadseg_stream_up` is not here: it is driven by
/// `Health::set_stream_up` (health.rs), so /readyz and the gauge cannot disagree.
///
/// The handles that the status API reports also count into
/// [`StreamReadings`] (one more atomic per update), because the exporter's
/// values cannot be read back per series without rendering everything.
#[derive(Clone)]
pub struct StreamMetrics {
    pub frames_decoded: Counter,
    pub frames_inferred: Counter,
    dropped: [Counter; DropReason::ALL.len()],
    written: [Counter; 3],
    sink_errors: [Counter; 3],
    pub latency: Histogram,
    stages: [Histogram; Stage::ALL.len()],
    pub ring_depth: Gauge,
    pub road_coverage: Gauge,
    pub mean_confidence: Gauge,
    pub hood_coverage: Gauge,
    pub road_cut: Gauge,
    pub exposure_gamma: Gauge,
    pub last_inferred: Gauge,
    pub last_written: Gauge,
    pub reconnects: Counter,
    pub interruptions: Counter,
    pub decode_errors: Counter,
    pub rtsp_clients: Gauge,
    pub live_viewers: Gauge,
    pub live_frames: Counter,
    readings: Arc<StreamReadings>,
}

impl StreamMetrics {
    pub fn new(stream: &str) -> StreamMetrics {
        let s = stream.to_string();
        let r = Arc::new(StreamReadings { stream: s.clone(), ..StreamReadings::default() });
        let tee = |c: Counter, slot: Slot| Counter::from_arc(Arc::new(TeeCounter { inner: c, readings: r.clone(), slot }));
        let dropped = DropReason::ALL.map(|reason| {
            tee(counter!(FRAMES_DROPPED, "stream" => s.clone(), "reason" => reason.label()), Slot::Dropped(reason))
        });
        StreamMetrics {
            frames_decoded: tee(counter!(FRAMES_DECODED, "stream" => s.clone()), Slot::Decoded),
            frames_inferred: tee(counter!(FRAMES_INFERRED, "stream" => s.clone()), Slot::Inferred),
            dropped,
            written: Sink::ALL.map(|k| counter!(FRAMES_WRITTEN, "stream" => s.clone(), "sink" => k.label())),
            sink_errors: Sink::ALL.map(|k| counter!(SINK_ERRORS, "stream" => s.clone(), "sink" => k.label())),
            latency: Histogram::from_arc(Arc::new(TeeLatency { inner: histogram!(LATENCY, "stream" => s.clone()), readings: r.clone() })),
            stages: Stage::ALL.map(|stage| histogram!(STAGE, "stream" => s.clone(), "stage" => stage.label())),
            ring_depth: gauge!(RING_DEPTH, "stream" => s.clone()),
            road_coverage: Gauge::from_arc(Arc::new(TeeGauge { inner: FrameGauge::new(ROAD_COVERAGE, &s), readings: r.clone(), into: |r| &r.road_coverage })),
            mean_confidence: Gauge::from_arc(Arc::new(TeeGauge { inner: FrameGauge::new(MEAN_CONFIDENCE, &s), readings: r.clone(), into: |r| &r.mean_confidence })),
            hood_coverage: FrameGauge::new(HOOD_COVERAGE, &s),
            road_cut: FrameGauge::new(ROAD_CUT, &s),
            exposure_gamma: FrameGauge::new(EXPOSURE_GAMMA, &s),
            last_inferred: FrameGauge::new(LAST_INFERRED, &s),
            last_written: FrameGauge::new(LAST_WRITTEN, &s),
            reconnects: tee(counter!(RECONNECTS, "stream" => s.clone()), Slot::Reconnects),
            interruptions: counter!(INTERRUPTIONS, "stream" => s.clone()),
            decode_errors: counter!(DECODE_ERRORS, "stream" => s.clone()),
            rtsp_clients: gauge!(RTSP_CLIENTS, "stream" => s.clone()),
            live_viewers: gauge!(LIVE_VIEWERS, "stream" => s.clone()),
            live_frames: counter!(LIVE_FRAMES, "stream" => s),
            readings: r,
        }
    }

    pub fn dropped(&self, reason: DropReason) -> &Counter {
        &self.dropped[reason as usize]
    }

    pub fn written(&self, sink: Sink) -> &Counter {
        &self.written[sink as usize]
    }

    pub fn sink_errors(&self, sink: Sink) -> &Counter {
        &self.sink_errors[sink as usize]
    }

    pub fn record_latency(&self, latency: Duration) {
        self.latency.record(latency.as_secs_f64());
    }

    pub fn record_stage(&self, stage: Stage, took: Duration) {
        self.stages[stage as usize].record(took.as_secs_f64());
    }

    /// A frame went into the recording (one relaxed load when nothing changed).
    pub fn recording_ok(&self) {
        if self.readings.recording.load(Ordering::Relaxed) != 1 {
            self.readings.recording.store(1, Ordering::Relaxed);
        }
    }

    /// The recording is paused, `why` ("disk full", or the error).
    pub fn recording_paused(&self, why: &str) {
        let mut paused = self.readings.paused.lock().unwrap_or_else(PoisonError::into_inner);
        if *paused != why {
            *paused = why.to_string();
        }
        self.readings.recording.store(2, Ordering::Relaxed);
    }

    /// The source decodes with `decoder`: its `roadseg_stream_decoder` series
    /// goes to 1, the one before (another codec, a hardware decoder that
    /// failed over) to 0. Called once a pipeline run, not per frame.
    pub fn decoder(&self, decoder: &DecoderInfo) {
        let r = &self.readings;
        let mut current = r.decoder.lock().unwrap_or_else(PoisonError::into_inner);
        let series = |name: &str, hardware: bool| {
            gauge!(STREAM_DECODER, "stream" => r.stream.clone(), "decoder" => name.to_string(), "hardware" => hardware.to_string(), "memory" => DecoderInfo::MEMORY)
        };
        if let Some((name, hardware)) = current.take() {
            series(&name, hardware).set(0.0);
        }
        series(&decoder.name, decoder.hardware).set(1.0);
        *current = Some((decoder.name.clone(), decoder.hardware));
    }

    /// What this handle set has counted since the stream was first started
    /// (a reload's restart keeps the set, as the exported counters go on).
    pub fn readings(&self) -> StreamReading {
        self.readings.read()
    }
}

/// Atomics beside the exported series, for the status API.
#[derive(Debug, Default)]
struct StreamReadings {
    decoded: AtomicU64,
    inferred: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
    reconnects: AtomicU64,
    /// Frames through the output stage: one latency sample each.
    out: AtomicU64,
    /// f64 bits of the last value.
    latency_s: AtomicU64,
    road_coverage: AtomicU64,
    mean_confidence: AtomicU64,
    /// The recording's state: 0 none yet, 1 writing, 2 paused (why in `paused`).
    recording: AtomicU8,
    paused: Mutex<String>,
    /// The stream, and the decoder its gauge names now (`decoder()`).
    stream: String,
    decoder: Mutex<Option<(String, bool)>>,
}

/// Which of [`StreamReadings`]' counts a tee'd counter adds to.
#[derive(Clone, Copy)]
enum Slot {
    Decoded,
    Inferred,
    Dropped(DropReason),
    Reconnects,
}

impl StreamReadings {
    fn count(&self, slot: Slot) -> &AtomicU64 {
        match slot {
            Slot::Decoded => &self.decoded,
            Slot::Inferred => &self.inferred,
            Slot::Dropped(reason) => &self.dropped[reason as usize],
            Slot::Reconnects => &self.reconnects,
        }
    }

    fn read(&self) -> StreamReading {
        let f = |a: &AtomicU64| f64::from_bits(a.load(Ordering::Relaxed));
        let out = self.out.load(Ordering::Relaxed);
        let inferred = self.inferred.load(Ordering::Relaxed);
        StreamReading {
            frames_decoded: self.decoded.load(Ordering::Relaxed),
            frames_inferred: inferred,
            frames_out: out,
            dropped: DropReason::ALL.map(|r| (r, self.dropped[r as usize].load(Ordering::Relaxed))),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            latency_s: (out > 0).then(|| f(&self.latency_s)),
            road_coverage: (inferred > 0).then(|| f(&self.road_coverage)),
            mean_confidence: (inferred > 0).then(|| f(&self.mean_confidence)),
            recording: match self.recording.load(Ordering::Relaxed) {
                0 => None,
                1 => Some("recording".to_string()),
                _ => Some(format!("paused: {}", self.paused.lock().unwrap_or_else(PoisonError::into_inner))),
            },
        }
    }
}

/// One read of a stream's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamReading {
    pub frames_decoded: u64,
    pub frames_inferred: u64,
    pub frames_out: u64,
    pub dropped: [(DropReason, u64); DropReason::ALL.len()],
    pub reconnects: u64,
    /// Source to annotated output, of the last frame out.
    pub latency_s: Option<f64>,
    /// Of the last frame inferred.
    pub road_coverage: Option<f64>,
    pub mean_confidence: Option<f64>,
    /// "recording", "paused: disk full", "paused: <error>"; None before the
    /// recording's first frame (or without one).
    pub recording: Option<String>,
}

struct TeeCounter {
    inner: Counter,
    readings: Arc<StreamReadings>,
    slot: Slot,
}

impl CounterFn for TeeCounter {
    fn increment(&self, value: u64) {
        self.readings.count(self.slot).fetch_add(value, Ordering::Relaxed);
        self.inner.increment(value);
    }
    fn absolute(&self, value: u64) {
        self.readings.count(self.slot).fetch_max(value, Ordering::Relaxed);
        self.inner.absolute(value);
    }
}

struct TeeLatency {
    inner: Histogram,
    readings: Arc<StreamReadings>,
}

impl HistogramFn for TeeLatency {
    fn record(&self, value: f64) {
        self.readings.latency_s.store(value.to_bits(), Ordering::Relaxed);
        self.readings.out.fetch_add(1, Ordering::Relaxed);
        self.inner.record(value);
    }
}

/// A gauge whose last value is also kept in one of [`StreamReadings`]' slots.
struct TeeGauge {
    inner: Gauge,
    readings: Arc<StreamReadings>,
    into: fn(&StreamReadings) -> &AtomicU64,
}

impl GaugeFn for TeeGauge {
    fn increment(&self, value: f64) {
        self.inner.increment(value);
    }
    fn decrement(&self, value: f64) {
        self.inner.decrement(value);
    }
    fn set(&self, value: f64) {
        (self.into)(&self.readings).store(value.to_bits(), Ordering::Relaxed);
        self.inner.set(value);
    }
}

/// A per-frame gauge whose series appears with its first value: before a
/// stream's first frame there is nothing measured, and a 0 would read as a
/// measurement (no road, no confidence). Registered once, on first set.
struct FrameGauge {
    name: &'static str,
    stream: String,
    gauge: OnceLock<Gauge>,
}

impl FrameGauge {
    fn new(name: &'static str, stream: &str) -> Gauge {
        Gauge::from_arc(Arc::new(FrameGauge { name, stream: stream.to_string(), gauge: OnceLock::new() }))
    }

    fn gauge(&self) -> &Gauge {
        self.gauge.get_or_init(|| gauge!(self.name, "stream" => self.stream.clone()))
    }
}

impl GaugeFn for FrameGauge {
    fn increment(&self, value: f64) {
        self.gauge().increment(value);
    }
    fn decrement(&self, value: f64) {
        self.gauge().decrement(value);
    }
    fn set(&self, value: f64) {
        self.gauge().set(value);
    }
}

/// Now as Unix time in seconds, for the `*_timestamp_seconds` gauges.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Handles for one inference device (`cpu`, `cuda:0`, ...).
#[derive(Clone)]
pub struct DeviceMetrics {
    pub inference: Histogram,
}

impl DeviceMetrics {
    pub fn new(device: &str) -> DeviceMetrics {
        DeviceMetrics { inference: histogram!(INFERENCE, "device" => device.to_string()) }
    }

    pub fn record_inference(&self, took: Duration) {
        self.inference.record(took.as_secs_f64());
    }

    /// The gauge worker `worker` sets to its busy fraction (0..=1), labelled
    /// with the device it runs on (`cpu`, or its own GPU `cuda:N`,
    /// `Resolved::worker_devices`); call once per worker and keep it.
    pub fn worker_busy(&self, worker: usize, device: &str) -> Gauge {
        gauge!(WORKER_BUSY, "device" => device.to_string(), "worker" => worker.to_string())
    }

    /// `roadseg_gpu_busy_ratio` per GPU, fed by the workers on it
    /// (`worker_devices[i]` is worker i's device).
    pub fn gpu_busy(&self, worker_devices: &[String]) -> GpuBusy {
        let workers = worker_devices.len();
        GpuBusy { devices: worker_devices.to_vec(), gauges: (0..workers).map(|_| OnceLock::new()).collect(), shares: Mutex::new(vec![0.0; workers]) }
    }
}

/// Each GPU's busy share: its workers' shares summed, at most 1 (their
/// streams overlap only when kernels run side by side). A GPU's series
/// appears with its first timed frame, so a CPU device never exports one.
pub struct GpuBusy {
    /// Worker i's device.
    devices: Vec<String>,
    /// Worker i's handle on its device's gauge.
    gauges: Vec<OnceLock<Gauge>>,
    shares: Mutex<Vec<f64>>,
}

impl GpuBusy {
    pub fn set(&self, worker: usize, share: f64) {
        let Some(device) = self.devices.get(worker) else { return };
        let total = {
            let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
            shares[worker] = share;
            shares.iter().zip(&self.devices).filter(|(_, d)| *d == device).map(|(s, _)| s).sum::<f64>().min(1.0)
        };
        self.gauges[worker].get_or_init(|| gauge!(GPU_BUSY, "device" => device.clone())).set(total);
    }
}

/// Gauges for one GPU (labelled `gpu="cuda:N"`), set by the NVML sampler.
#[derive(Clone)]
pub struct GpuMetrics {
    pub utilization: Gauge,
    pub memory_used: Gauge,
    pub temperature: Gauge,
    pub power: Gauge,
}

impl GpuMetrics {
    pub fn new(gpu: &str) -> GpuMetrics {
        let g = gpu.to_string();
        GpuMetrics {
            utilization: gauge!(GPU_UTILIZATION, "gpu" => g.clone()),
            memory_used: gauge!(GPU_MEMORY_USED, "gpu" => g.clone()),
            temperature: gauge!(GPU_TEMPERATURE, "gpu" => g.clone()),
            power: gauge!(GPU_POWER, "gpu" => g),
        }
    }
}

/// Counts one fall-back of inference from device `from` to device `to`
/// (rare, so the handle is looked up each time).
pub fn device_fallback(from: &str, to: &str) {
    counter!(DEVICE_FALLBACK, "from" => from.to_string(), "to" => to.to_string()).increment(1);
}

/// Drives `roadseg_model_loaded`; see `Health::set_model_loaded` (health.rs).
pub(super) fn set_model_loaded(loaded: bool) {
    gauge!(MODEL_LOADED).set(if loaded { 1.0 } else { 0.0 });
}

/// `roadseg_shard_streams{state}`: how `[daemon] shard` split the configured streams.
pub fn set_shard_streams(owned: usize, skipped: usize) {
    gauge!(SHARD_STREAMS, "state" => "owned").set(owned as f64);
    gauge!(SHARD_STREAMS, "state" => "skipped").set(skipped as f64);
}

/// Drives `roadseg_config_reload_failed`; see `Health::set_reload` (health.rs).
pub(super) fn set_reload_failed(failed: bool) {
    gauge!(CONFIG_RELOAD_FAILED).set(if failed { 1.0 } else { 0.0 });
}

/// Streams removed by a reload: their series leave `/metrics` (the
/// exporter cannot forget a series, so [`render`] leaves them out), or a
/// "stream down" alert would fire for a stream that no longer exists.
static RETIRED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

pub(super) fn retire_stream(stream: &str) {
    RETIRED.lock().unwrap_or_else(PoisonError::into_inner).insert(stream.to_string());
}

/// A stream (re)added: its series show again, counters where they were.
pub(super) fn revive_stream(stream: &str) {
    RETIRED.lock().unwrap_or_else(PoisonError::into_inner).remove(stream);
}

/// The exposition text, less the series of retired streams.
pub fn render(handle: &PrometheusHandle) -> String {
    let text = handle.render();
    let retired: Vec<String> = RETIRED.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|s| format!("stream=\"{s}\"")).collect();
    if retired.is_empty() {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines().filter(|l| l.starts_with('#') || !retired.iter().any(|r| l.contains(r.as_str()))) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Drives `roadseg_stream_up`; see `Health::set_stream_up` (health.rs).
pub(super) fn set_stream_up(stream: &str, up: bool) {
    gauge!(STREAM_UP, "stream" => stream.to_string()).set(if up { 1.0 } else { 0.0 });
}

pub(super) fn set_stream_degraded(stream: &str, degraded: bool) {
    gauge!(STREAM_DEGRADED, "stream" => stream.to_string()).set(if degraded { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series whose line starts with `prefix` (name and labels).
    pub(crate) fn sample(text: &str, prefix: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
    }

    #[test]
    fn dashboard_queries_only_real_metrics() {
        // Rule: every roadseg_* name in docs/grafana-roadseg.json is defined here, and every name here is charted.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana-roadseg.json");
        let text = std::fs::read_to_string(path).unwrap();
        let mut used = std::collections::BTreeSet::new();
        for (i, _) in text.match_indices("roadseg_") {
            let name: String = text[i..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            used.insert(name.strip_suffix("_bucket").unwrap_or(&name).to_string());
        }
        let defined: std::collections::BTreeSet<String> = ALL_NAMES.iter().map(|n| n.to_string()).collect();
        assert_eq!(used, defined);
    }

    #[test]
    fn install_is_idempotent() {
        // Rule: a second install() returns the same recorder instead of failing.
        let a = install().unwrap();
        let b = install().unwrap();
        counter!("roadseg_test_idempotent_total").increment(2);
        assert!(a.render().contains("roadseg_test_idempotent_total 2"));
        assert!(b.render().contains("roadseg_test_idempotent_total 2"));
    }

    #[test]
    fn stream_series_are_labelled_by_stream_and_reason() {
        // Rule: stream metrics carry stream=, drops reason=, writes sink=; build info is exported.
        let handle = install().unwrap();
        let m = StreamMetrics::new("metrics-test");
        m.frames_decoded.increment(3);
        m.dropped(DropReason::RingFull).increment(1);
        m.written(Sink::Rtsp).increment(2);
        m.ring_depth.set(4.0);
        let text = handle.render();
        assert_eq!(sample(&text, "roadseg_frames_decoded_total{stream=\"metrics-test\"}"), Some(3.0), "{text}");
        assert_eq!(sample(&text, "roadseg_frames_dropped_total{stream=\"metrics-test\",reason=\"ring_full\"}"), Some(1.0));
        assert_eq!(sample(&text, "roadseg_frames_dropped_total{stream=\"metrics-test\",reason=\"decode_error\"}"), Some(0.0));
        assert_eq!(sample(&text, "roadseg_frames_written_total{stream=\"metrics-test\",sink=\"rtsp\"}"), Some(2.0));
        assert_eq!(sample(&text, "roadseg_ring_depth{stream=\"metrics-test\"}"), Some(4.0));
        let build = format!("roadseg_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"));
        assert_eq!(sample(&text, &build), Some(1.0), "{text}");
    }

    #[test]
    fn histograms_have_the_configured_buckets() {
        // Rule: latency, stage and inference are Prometheus histograms with explicit buckets.
        let handle = install().unwrap();
        let stream = StreamMetrics::new("buckets-test");
        stream.record_latency(Duration::from_millis(30));
        stream.record_stage(Stage::Encode, Duration::from_micros(300));
        let d = DeviceMetrics::new("test-device");
        d.record_inference(Duration::from_millis(3));
        d.worker_busy(1, "test-device").set(0.5);
        let gpu = d.gpu_busy(&["test-device".to_string(), "test-device".to_string()]);
        gpu.set(0, 0.5);
        gpu.set(1, 0.75);
        let text = handle.render();
        assert_eq!(sample(&text, "roadseg_latency_seconds_bucket{stream=\"buckets-test\",le=\"0.05\"}"), Some(1.0), "{text}");
        assert_eq!(sample(&text, "roadseg_latency_seconds_bucket{stream=\"buckets-test\",le=\"0.025\"}"), Some(0.0));
        assert_eq!(sample(&text, "roadseg_stage_seconds_bucket{stream=\"buckets-test\",stage=\"encode\",le=\"0.0005\"}"), Some(1.0), "{text}");
        assert_eq!(sample(&text, "roadseg_stage_seconds_bucket{stream=\"buckets-test\",stage=\"encode\",le=\"0.00025\"}"), Some(0.0));
        assert_eq!(sample(&text, "roadseg_inference_seconds_bucket{device=\"test-device\",le=\"0.005\"}"), Some(1.0));
        assert_eq!(sample(&text, "roadseg_worker_busy_ratio{device=\"test-device\",worker=\"1\"}"), Some(0.5));
        assert_eq!(sample(&text, "roadseg_gpu_busy_ratio{device=\"test-device\"}"), Some(1.0), "two workers' shares summed, capped at 1");
        assert_eq!(sample(&text, "roadseg_gpu_busy_ratio{device=\"cpu\"}"), None);
    }

    #[test]
    fn workers_and_gpu_busy_are_labelled_by_their_own_gpu() {
        // Rule: with workers spread over GPUs, each worker's busy gauge names its GPU, and each GPU's busy share sums only its own workers.
        let handle = install().unwrap();
        let d = DeviceMetrics::new("cuda:7,8");
        let devices = vec!["cuda:7".to_string(), "cuda:8".to_string(), "cuda:7".to_string()];
        for (i, dev) in devices.iter().enumerate() {
            d.worker_busy(i, dev).set((i + 1) as f64 / 4.0);
        }
        let gpu = d.gpu_busy(&devices);
        for (worker, share) in [0.25, 0.5, 0.125].into_iter().enumerate() {
            gpu.set(worker, share);
        }
        let text = handle.render();
        let expected = [
            ("roadseg_worker_busy_ratio{device=\"cuda:8\",worker=\"1\"}", 0.5),
            ("roadseg_worker_busy_ratio{device=\"cuda:7\",worker=\"2\"}", 0.75),
            ("roadseg_gpu_busy_ratio{device=\"cuda:7\"}", 0.375), // workers 0 and 2
            ("roadseg_gpu_busy_ratio{device=\"cuda:8\"}", 0.5),   // worker 1 alone
        ];
        for (series, value) in expected {
            assert_eq!(sample(&text, series), Some(value), "{series} in {text}");
        }
    }
}
