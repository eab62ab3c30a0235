//! The daemon's configuration: inert typed data, layered from TOML files and
//! the environment, then checked by [`DaemonConfig::validate`] before anything
//! starts.
//!
//! Layers, later ones win key by key (arrays such as `streams` are replaced
//! whole, never merged element by element):
//! 1. built-in defaults (the `Default` impls below, documented per field);
//! 2. [`SYSTEM_CONFIG`], when it exists;
//! 3. the file given with `--config` (required when given);
//! 4. environment variables `ROADSEG__SECTION__KEY`, e.g.
//!    `ROADSEG__MODEL__DEVICE=cpu` or `ROADSEG__WORKERS__COUNT=2`
//!    (`ROADSEG__MODEL__ROAD_CLASSES=road,lane` for the one list). Streams
//!    cannot be set this way: `[[streams]]` is an array.
//!
//! Relative paths (model, recordings, stats) are relative to the working
//! directory, `/var/lib/roadseg` under the shipped systemd unit.

mod load;
mod locate;
mod mqtt_url;
mod reload;
mod serde_names;
mod summary;
mod template;
#[cfg(test)]
mod tests;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::backend::Precision;
use crate::device::DeviceRequest;
use crate::engine::{ModelSpec, Preset};
pub use crate::worker_count::WorkerCount;

pub use load::Sources;
pub use mqtt_url::{MqttError, parse_mqtt_url};
pub use reload::{ReloadPlan, changed_sections, plan_reload};
pub use summary::{Summary, check, check_sources};
pub use template::format_start;
pub use crate::video::source::{RtspTransport, UnknownTransport};
pub use crate::video::uri::{Scheme, SourceUri, UriError};
pub use validate::{Problem, Problems};
pub use crate::daemon::shard::{Shard, ShardSetting};

/// Base layer, read whenever it exists.
pub const SYSTEM_CONFIG: &str = "/etc/roadseg/roadseg.toml";
/// Environment overrides look like `ROADSEG__MODEL__DEVICE`.
pub const ENV_PREFIX: &str = "ROADSEG";
pub const ENV_SEPARATOR: &str = "__";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {} does not exist", .0.display())]
    NotFound(PathBuf),
    /// A syntax error, an unknown key or a value of the wrong type; `origin`
    /// names the layers (or the text) read.
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{0}")]
    Invalid(Problems),
    #[error("no streams configured: add at least one [[streams]] section")]
    NoStreams,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    pub model: ModelConfig,
    pub workers: WorkersConfig,
    pub metrics: MetricsConfig,
    pub rtsp: RtspConfig,
    pub annotate: AnnotateConfig,
    pub daemon: DaemonSection,
    pub mqtt: MqttConfig,
    /// No default: `run` needs at least one.
    pub streams: Vec<StreamConfig>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// HuggingFace SegFormer checkpoint folder, or a Hub model
    /// `org/name[@revision]` (see `crate::hub`). Default `models/roadseg-camvid`.
    pub path: PathBuf,
    /// Model input width, a multiple of 32 in 64..=4096. Default 1024.
    pub width: u32,
    /// Model input height; 0 (default) derives it from the first stream's
    /// aspect ratio, rounded to a multiple of 32, fixed at start.
    pub height: u32,
    /// cpu | cuda | cuda:0,1 | auto. Default auto.
    pub device: DeviceRequest,
    /// `None` is "auto" (the default): fp16 on CUDA, f32 on the CPU.
    #[serde(with = "serde_names::auto_precision")]
    pub precision: Option<Precision>,
    /// fast | accurate. Default fast.
    #[serde(with = "serde_names::preset")]
    pub preset: Preset,
    /// Class names (the checkpoint's id2label) counted as road. Default ["road"].
    #[serde(with = "serde_names::name_list")]
    pub road_classes: Vec<String>,
    /// Pixels whose top probability is below this are "unknown" (not road).
    /// Default 0.4 (`engine::DEFAULT_CONFIDENCE_THRESHOLD`).
    pub confidence_threshold: f32,
    /// CUDA: replay each frame as a recorded CUDA graph. Default true; false
    /// runs the same kernels eagerly (debugging).
    pub cuda_graphs: bool,
    /// Frames whose mean luma (0..1) is under this are brightened by a gamma
    /// curve on their way into the model (night, dusk; `crate::exposure`);
    /// the video written and served is untouched. 0 = off. Default 0.25.
    pub exposure_target: f32,
}

impl ModelConfig {
    /// What the engine loads, at `height` (the configured one, or what the
    /// daemon derived for `height = 0`): the one place config becomes a spec.
    pub fn spec(&self, height: u32) -> ModelSpec<'_> {
        ModelSpec {
            path: &self.path,
            size: (self.width as usize, height as usize),
            preset: self.preset,
            road_classes: &self.road_classes,
            confidence_threshold: self.confidence_threshold,
            cuda_graphs: self.cuda_graphs,
            // Set by the worker pool from `[workers] batch`.
            max_batch: 1,
            exposure: crate::exposure::Exposure { target: self.exposure_target },
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            path: PathBuf::from("models/roadseg-camvid"),
            width: 1024,
            height: 0,
            device: DeviceRequest::Auto,
            precision: None,
            preset: Preset::Fast,
            road_classes: vec!["road".to_string()],
            confidence_threshold: crate::engine::DEFAULT_CONFIDENCE_THRESHOLD,
            cuda_graphs: true,
            exposure_target: crate::exposure::DEFAULT_TARGET,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersConfig {
    /// Inference workers, `auto` or 1..=64; each owns an engine, weights are
    /// shared. `auto`: 4 a GPU (at most one a CPU core), 1 on the CPU
    /// ([`WorkerCount`]). Default `auto`.
    pub count: WorkerCount,
    /// Frames a worker runs as one batched forward, 1..=16: it takes up to
    /// this many frames that are ready now (round-robin over the streams,
    /// never waiting to fill a batch). Each batch size keeps its own model
    /// instance (N images' activations), built when the model loads, and,
    /// on CUDA, its own graphs, recorded on its first batch.
    /// Per-stream order and timestamps are unchanged. Sizes run: the powers
    /// of two up to `batch`, and `batch` (13 frames of 16 run as 8, 4, 1).
    /// Default 1.
    pub batch: usize,
    /// With `batch` > 1: when fewer frames are ready, how long a worker waits
    /// (from its first frame) for more before it runs what it has: the most
    /// a live frame is held back for a fuller batch. 0..=1000; 0 never
    /// waits. Default 5.
    pub max_batch_wait_ms: u64,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig { count: WorkerCount::Auto, batch: 1, max_batch_wait_ms: 5 }
    }
}

#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:port` of the HTTP endpoint: /metrics, /healthz, /readyz, the
    /// status page `/` and `/api/v1/...`; "" disables it. Default `127.0.0.1:9464`.
    pub listen: String,
    /// Basic auth, required (and only asked for) when `listen` is not a
    /// loopback address; both or neither. Unset, the RTSP credentials are
    /// used. /healthz and /readyz never ask (probes). Default none.
    pub username: Option<String>,
    pub password: Option<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { listen: "127.0.0.1:9464".to_string(), username: None, password: None }
    }
}

// By hand so the password never reaches a log line.
impl fmt::Debug for MetricsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsConfig")
            .field("listen", &self.listen)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// MQTT events (see `daemon::mqtt` for the topics). Off unless `url` is set.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// Broker, `mqtt://HOST[:PORT]` (port 1883 by default); "" = no MQTT. Default "".
    pub url: String,
    /// Topics start with this. Default "roadseg".
    pub topic_prefix: String,
    /// Default "roadseg"; give each daemon on one broker its own.
    pub client_id: String,
    /// Both or neither. Default none.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Seconds between each stream's stats messages, 1..=3600. Default 5.
    pub stats_interval_s: u64,
    /// Road coverage (0..=1) whose crossing, either way, is an event. Default none.
    pub coverage_threshold: Option<f64>,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            url: String::new(),
            topic_prefix: "roadseg".into(),
            client_id: "roadseg".into(),
            username: None,
            password: None,
            stats_interval_s: 5,
            coverage_threshold: None,
        }
    }
}

// By hand so the password never reaches a log line.
impl fmt::Debug for MqttConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MqttConfig")
            .field("url", &self.url)
            .field("topic_prefix", &self.topic_prefix)
            .field("client_id", &self.client_id)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("stats_interval_s", &self.stats_interval_s)
            .field("coverage_threshold", &self.coverage_threshold)
            .finish()
    }
}

impl MetricsConfig {
    /// `None` when disabled or (before validation) unparsable.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        parse_listen(&self.listen)
    }

    /// Whether HTTP clients must authenticate: the endpoint is reachable
    /// from other hosts.
    pub fn needs_auth(&self) -> bool {
        self.listen_addr().is_some_and(|a| !a.ip().is_loopback())
    }
}

#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RtspConfig {
    /// `IP:port` of the RTSP server; "" disables it. Default `127.0.0.1:8554`.
    pub listen: String,
    /// Basic auth for every mount; both or neither. Default none.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Serve without credentials on an address other hosts can reach.
    /// Default false: a `listen` beyond loopback then needs username and
    /// password, and validation refuses the config without them.
    pub allow_anonymous: bool,
}

impl Default for RtspConfig {
    fn default() -> Self {
        RtspConfig { listen: "127.0.0.1:8554".to_string(), username: None, password: None, allow_anonymous: false }
    }
}

// By hand so the password never reaches a log line.
impl fmt::Debug for RtspConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtspConfig")
            .field("listen", &self.listen)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("allow_anonymous", &self.allow_anonymous)
            .finish()
    }
}

impl RtspConfig {
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        parse_listen(&self.listen)
    }

    /// `(username, password)` when basic auth is configured.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        Some((self.username.as_deref()?, self.password.as_deref()?))
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnnotateConfig {
    /// RGB tint of road pixels. Default [255, 0, 200].
    pub road_colour: [u8; 3],
    /// Opacity of the road tint, 0..=1. Default 0.45.
    pub road_alpha: f32,
    /// Tint every class with the model palette, not just road. Default false.
    pub full_palette: bool,
    /// Mark low-confidence pixels with a sparse checker (a debugging view:
    /// it covers skies and trees). Default false.
    pub show_unknown: bool,
    /// Tint the road's uncertain edge faintly (low-confidence pixels next to
    /// road). Default true.
    pub road_edge: bool,
    /// Draw the stream's name and each frame's decode time (UTC), and a
    /// status line (road coverage, hood, confidence, inference time, fps),
    /// at the picture's top-left corner. Default true.
    pub overlay_text: bool,
}

impl Default for AnnotateConfig {
    fn default() -> Self {
        AnnotateConfig { road_colour: [255, 0, 200], road_alpha: 0.45, full_palette: false, show_unknown: false, road_edge: true, overlay_text: true }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonSection {
    /// Seconds to drain and finalise outputs on SIGTERM, 1..=600: frames
    /// still waiting for inference get the first half, then are dropped and
    /// counted; finalising gets the rest. Default 10 (keep it below the
    /// unit's TimeoutStopSec=30).
    pub shutdown_timeout_s: u64,
    /// A stream whose source delivers frames but that has had nothing
    /// inferred for this many seconds is stalled: /readyz answers 503 naming
    /// it and the systemd watchdog is no longer fed (so systemd restarts the
    /// daemon). 0..=3600, 0 = never. Default 30.
    pub stall_timeout_s: u64,
    /// A stream is *degraded* when more than this share of its frames meant
    /// for inference (those `infer_fps` lets through) is dropped because
    /// inference cannot keep up (`ring_full`) over `overload_window_s`: the
    /// API, the status page and MQTT say so and a warning is logged (at most
    /// once a minute). /readyz stays ready. (0, 1]; 1 = never. Default 0.5.
    pub overload_drop_share: f64,
    /// The window, in seconds, over which that share is measured. 2..=600.
    /// Default 10.
    pub overload_window_s: u64,
    /// When a disk holding recordings has less free space than this, the
    /// oldest recording segments on it are deleted (each stream's newest is
    /// kept). 0 = never. Default 1 GiB.
    pub min_free_bytes: u64,
    /// Run only this daemon's share of `[[streams]]`, so replicas with one
    /// config run each stream exactly once (see `daemon::shard`): "I/N"
    /// (shard I of N, 0 <= I < N), or "auto" (I from the host name's
    /// trailing -N, as in a StatefulSet pod `roadseg-2`; N from
    /// `ROADSEG_SHARDS`). Read at start only. Default "0/1": every stream.
    #[serde(with = "crate::daemon::shard::serde_shard")]
    pub shard: ShardSetting,
}

impl Default for DaemonSection {
    fn default() -> Self {
        DaemonSection {
            shutdown_timeout_s: 10,
            stall_timeout_s: 30,
            overload_drop_share: 0.5,
            overload_window_s: 10,
            min_free_bytes: 1 << 30,
            shard: ShardSetting::default(),
        }
    }
}

/// One camera or file. `name` and `uri` are required; the rest defaults.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    /// `[A-Za-z0-9_-]+`, unique; used in RTSP paths, file names and metric labels.
    pub name: String,
    /// file://, rtsp://, rtsps://, http(s)://, v4l2:///dev/videoN or test://PATTERN?width=&height=&fps=.
    pub uri: String,
    /// Pace and reconnect like a camera. Default: false for file://, true otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
    /// RTSP jitter buffer. Default 200.
    #[serde(default = "defaults::latency_ms")]
    pub latency_ms: u32,
    /// tcp | udp | auto. Default tcp.
    #[serde(default)]
    pub rtsp_transport: RtspTransport,
    /// Frames buffered between the source and the workers (older ones are
    /// dropped when full), 1..=1024. Default 8.
    #[serde(default = "defaults::ring_capacity")]
    pub ring_capacity: usize,
    /// First reconnect delay; doubles up to `reconnect_max_ms`. Default 500.
    #[serde(default = "defaults::reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Default 30000.
    #[serde(default = "defaults::reconnect_max_ms")]
    pub reconnect_max_ms: u64,
    /// Smooth class logits over time so masks do not flicker. Default: the
    /// value of `live` (on for cameras, off for files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smooth: Option<bool>,
    /// Weight of the newest frame in the smoothed logits, (0, 1]. Default 0.3.
    #[serde(default = "defaults::smooth_weight")]
    pub smooth_weight: f32,
    /// Frames a second sent to inference at most (like Frigate's
    /// `detect.fps`); the others are dropped before inference and counted as
    /// `roadseg_frames_dropped_total{reason="rate_limited"}`. Default: every frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infer_fps: Option<f64>,
    /// Estimate the ego vehicle's hood, keep it out of road coverage and
    /// draw it. Default true.
    #[serde(default = "defaults::hood")]
    pub hood: bool,
    /// Keep only road joined to the bottom of the picture (above the hood):
    /// road-coloured blobs in the sky, on walls or vehicles' tops that no
    /// path of road reaches go to their next most likely class. Default true.
    #[serde(default = "defaults::connected_road")]
    pub connected_road: bool,
    /// Play a file again from its start when it ends, forever, on one rising
    /// timeline with its outputs left open (a stand-in camera for demos and
    /// soak tests). File sources only; makes `live` default to true.
    #[serde(default, rename = "loop")]
    pub r#loop: bool,
    #[serde(default)]
    pub output: OutputConfig,
}

mod defaults {
    pub fn latency_ms() -> u32 {
        crate::video::source::DEFAULT_LATENCY_MS
    }
    pub fn ring_capacity() -> usize {
        8
    }
    pub fn reconnect_initial_ms() -> u64 {
        500
    }
    pub fn reconnect_max_ms() -> u64 {
        30_000
    }
    pub fn smooth_weight() -> f32 {
        crate::temporal::DEFAULT_WEIGHT
    }
    pub fn hood() -> bool {
        true
    }

    pub fn connected_road() -> bool {
        true
    }
}

impl StreamConfig {
    /// A stream with the default settings and no output.
    pub fn new(name: &str, uri: &str) -> Self {
        StreamConfig {
            name: name.to_string(),
            uri: uri.to_string(),
            live: None,
            latency_ms: defaults::latency_ms(),
            rtsp_transport: RtspTransport::default(),
            ring_capacity: defaults::ring_capacity(),
            reconnect_initial_ms: defaults::reconnect_initial_ms(),
            reconnect_max_ms: defaults::reconnect_max_ms(),
            smooth: None,
            smooth_weight: defaults::smooth_weight(),
            infer_fps: None,
            hood: defaults::hood(),
            connected_road: defaults::connected_road(),
            r#loop: false,
            output: OutputConfig::default(),
        }
    }

    /// Files play as fast as the pipeline goes and end; everything else is
    /// paced by its source and reconnected when it drops.
    pub fn is_live(&self) -> bool {
        self.live.unwrap_or_else(|| self.r#loop || SourceUri::live_by_default(&self.uri))
    }

    /// Hood estimate and smoothing as the workers apply them.
    pub fn temporal(&self) -> crate::temporal::TemporalSettings {
        let smooth = self.smooth.unwrap_or_else(|| self.is_live());
        crate::temporal::TemporalSettings {
            smoothing: smooth.then_some(self.smooth_weight),
            hood: self.hood,
            connected_road: self.connected_road,
        }
    }

    /// How the stream's source is opened.
    pub fn source_settings(&self) -> crate::video::source::SourceSettings {
        crate::video::source::SourceSettings {
            live: self.is_live(),
            latency_ms: self.latency_ms,
            rtsp_transport: self.rtsp_transport,
            ..crate::video::source::SourceSettings::new(self.uri.clone())
        }
    }

    /// The parsed `uri` (validation guarantees it parses).
    pub fn source(&self) -> Result<SourceUri, UriError> {
        SourceUri::parse(&self.uri)
    }
}

/// Where a stream's annotated video and statistics go. At least one is required.
///
/// `file` and `stats` may hold `{stream}` and `{start}` (the daemon's start
/// time in UTC, e.g. `20261121T075800Z`); `rtsp` may hold `{stream}`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputConfig {
    /// MP4 recording, rotated every `segment_seconds`: see [`OutputConfig::segment_location`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Length of each file segment, >= 1. Default 300.
    pub segment_seconds: u64,
    /// RTSP mount path, served at `rtsp://HOST:PORT/<rtsp>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtsp: Option<String>,
    /// JSON-lines statistics sidecar, one line per inferred frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
    /// Each stats line also carries the frame's road mask, at most 320
    /// wide, run-length coded (`road_rle`: `w`, `h`, `counts` alternating
    /// not-road and road, row-major): every frame's road for a few KB, with
    /// or without a video recording. Needs `stats`. Default false.
    pub stats_masks: bool,
    /// H.264 bitrate of the recording and the RTSP stream, 100..=100000
    /// kbit/s. Default 4000 (about 43 GB a day).
    pub bitrate_kbps: u32,
    /// Recording segments older than this many hours are deleted (the
    /// newest is always kept). Default: kept until `[daemon] min_free_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retain_hours: Option<f64>,
    /// Record at most this many frames a second, 0.1..=240 (by the frames'
    /// timestamps; the others are inferred, counted and sent to RTSP, but
    /// not encoded into the file). Default: every frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_fps: Option<f64>,
    /// Record this many pixels wide, 64..=7680 (height from the aspect);
    /// only ever smaller than the frames. Default: the frames' own size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_width: Option<u32>,
    /// What `file` records. Default "annotated".
    pub record: RecordMode,
}

/// What a stream's `file` records: each costs the host differently
/// (docs/scaling.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordMode {
    /// The annotated frames, encoded (`bitrate_kbps`, `record_fps`, `record_width`).
    #[default]
    Annotated,
    /// The camera's own H.264/H.265, remuxed with no encode; every frame the
    /// camera sent. A source without either records the annotated frames.
    Source,
    /// No video: each stats line carries the frame's road mask (`stats_masks`).
    Masks,
    /// No recording; `file` is not written.
    None,
}

impl RecordMode {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordMode::Annotated => "annotated",
            RecordMode::Source => "source",
            RecordMode::Masks => "masks",
            RecordMode::None => "none",
        }
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            file: None,
            segment_seconds: 300,
            rtsp: None,
            stats: None,
            bitrate_kbps: crate::video::stream::DEFAULT_BITRATE_KBPS,
            retain_hours: None,
            stats_masks: false,
            record_fps: None,
            record_width: None,
            record: RecordMode::Annotated,
        }
    }
}

impl OutputConfig {
    pub fn is_empty(&self) -> bool {
        self.recorded_file().is_none() && self.rtsp.is_none() && self.stats.is_none()
    }

    /// `file`, where `record` writes video to it.
    pub fn recorded_file(&self) -> Option<&str> {
        self.file.as_deref().filter(|_| matches!(self.record, RecordMode::Annotated | RecordMode::Source))
    }

    /// What the stream records, as the API shows it: `record`, or "none"
    /// where it would record into a `file` that is not set.
    pub fn record_label(&self) -> &'static str {
        match self.record {
            RecordMode::Annotated | RecordMode::Source if self.file.is_none() => RecordMode::None.as_str(),
            mode => mode.as_str(),
        }
    }

    /// Each stats line carries the frame's road mask.
    pub fn masks_in_stats(&self) -> bool {
        self.stats.is_some() && (self.stats_masks || self.record == RecordMode::Masks)
    }

    /// `file` with its placeholders expanded: the recording's base name, as
    /// logged. Segment files add an index to it (see `segment_location`).
    pub fn file_path(&self, stream: &str, start: SystemTime) -> Option<PathBuf> {
        Some(PathBuf::from(template::expand_lossy(self.file.as_deref()?, stream, start)))
    }

    /// The `location` pattern for splitmuxsink: `file_path` with any `%`
    /// doubled (the sink formats it printf-style) and `-%05d` inserted before
    /// the extension, so `rec/{stream}-{start}.mp4` becomes
    /// `rec/front-20261121T075800Z-%05d.mp4` and segments are `...-00000.mp4`,
    /// `...-00001.mp4`, one per `segment_seconds`.
    pub fn segment_location(&self, stream: &str, start: SystemTime) -> Option<String> {
        let path = template::expand_lossy(self.recorded_file()?, stream, start);
        // A strftime pattern names each segment itself (see `wall_clock_names`).
        Some(if self.wall_clock_names() { path } else { template::segment_pattern(&path) })
    }

    /// `file` holds time conversions (`%Y`, `%H`, ...): each segment is named
    /// for its UTC start time, e.g. `{stream}/%Y-%m-%d/%H-%M-%S.mp4`.
    pub fn wall_clock_names(&self) -> bool {
        self.file.as_deref().is_some_and(crate::clock::has_conversions)
    }

    /// The concrete name of segment `index` (0 is the first), as splitmuxsink
    /// will write it from [`OutputConfig::segment_location`].
    pub fn segment_path(&self, stream: &str, start: SystemTime, index: u32) -> Option<PathBuf> {
        let path = template::expand_lossy(self.file.as_deref()?, stream, start);
        Some(PathBuf::from(template::segment_name(&path, index)))
    }

    pub fn stats_path(&self, stream: &str, start: SystemTime) -> Option<PathBuf> {
        Some(PathBuf::from(template::expand_lossy(self.stats.as_deref()?, stream, start)))
    }

    /// The mount point with its leading slash, e.g. `/front`.
    pub fn rtsp_mount(&self, stream: &str) -> Option<String> {
        let path = self.rtsp.as_deref()?.replace("{stream}", stream);
        Some(format!("/{}", path.trim_start_matches('/')))
    }
}

impl DaemonConfig {
    /// Every rule except the model folder check; see [`DaemonConfig::validate_model_path`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        Problems::into_result(validate::problems(self))
    }

    /// `model.path` is a folder holding `config.json`. Separate from
    /// `validate()` so configs can be checked on machines without the model.
    pub fn validate_model_path(&self) -> Result<(), ConfigError> {
        Problems::into_result(validate::model_path_problems(&self.model.path))
    }

    /// Legal but probably unintended settings, for `check-config` and the
    /// start-up log.
    pub fn warnings(&self) -> Vec<String> {
        validate::warnings(self)
    }

    /// Basic-auth credentials for the HTTP endpoint when it needs them:
    /// `[metrics]`'s own, else `[rtsp]`'s.
    pub fn http_credentials(&self) -> Option<(&str, &str)> {
        if !self.metrics.needs_auth() {
            return None;
        }
        let m = &self.metrics;
        match (m.username.as_deref(), m.password.as_deref()) {
            (Some(u), Some(p)) => Some((u, p)),
            _ => self.rtsp.credentials(),
        }
    }

    pub fn stream(&self, name: &str) -> Option<&StreamConfig> {
        self.streams.iter().find(|s| s.name == name)
    }
}

fn parse_listen(listen: &str) -> Option<SocketAddr> {
    if listen.trim().is_empty() { None } else { listen.trim().parse().ok() }
}
