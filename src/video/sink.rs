//! Video out to MP4: one file, or numbered segments of a set length.
//!
//! Files are fragmented MP4 written unbuffered, so a crash (even kill -9) leaves
//! every finished segment intact and the open file playable up to its last
//! complete fragment; `finish` ends the stream so the last fragment is written too.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use super::encode_clock::EncodeClock;
use super::encoder::{self, EncoderChoice, EncoderError, EncoderSettings};
use super::frame::{FrameTiming, Nanos, PixelFormat, VideoInfo};
use super::launch::{self, Failure, GstError, fill, quote};
use super::packed::{FrameSizeError, Packed};

const FILE: &str = include_str!("../../pipelines/sink-file.txt");
const SEGMENTS: &str = include_str!("../../pipelines/sink-segments.txt");

/// Posted by the owner so the bus thread wakes without polling.
const STOP: &str = "roadseg-sink-stop";
/// Frames the appsrc may queue before `push` blocks.
const QUEUED_FRAMES: usize = 4;
/// The source's own video queued for the muxer: about 16 s of an 8 Mbit/s camera.
const ENCODED_QUEUE_BYTES: usize = 16 << 20;
/// How long `drop` waits for an unfinished file to be finalised.
const DROP_FINISH: Duration = Duration::from_secs(5);
/// The longest gap between frames taken as the stream's output rate (see
/// `push`); a longer one is a pause (a reconnect), not a frame's length.
const MAX_FRAME_GAP_NS: Nanos = 10_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkSettings {
    /// The file; with `segment_seconds`, a pattern with one number in it, e.g.
    /// `/rec/cam1-%05d.mp4`. Its directory must exist.
    pub path: PathBuf,
    /// Cut a new file every this many seconds of the frames' timestamps: at
    /// the first frame that far past the segment's first, made a keyframe.
    pub segment_seconds: Option<u32>,
    pub width: u32,
    pub height: u32,
    /// Of the frames pushed (RGBA unless set).
    pub format: PixelFormat,
    /// Frame rate as (numerator, denominator).
    pub fps: (i32, i32),
    /// About the most a crash can lose: the fragment length (in segment mode,
    /// half of it, with keyframes at least that often; see `start`).
    pub fragment_ms: u32,
    pub encoder: EncoderSettings,
    /// With `segment_seconds`: `path` is a strftime pattern (UTC, see
    /// [`crate::clock::strftime`]) and each segment is named for the wall-clock
    /// time it starts, folders made as needed, e.g. `cam/%Y-%m-%d/%H-%M-%S.mp4`.
    pub wall_clock_names: bool,
    /// Number of the first segment (a recording resumed after a failure
    /// goes on after the last one instead of overwriting it).
    pub start_index: u32,
    /// Record at this size instead of the frames' (scaled before the encoder).
    pub scale_to: Option<(u32, u32)>,
    /// Raw frames to encode (the default), or the source's own video.
    pub input: SinkInput,
}

/// What a file sink is fed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SinkInput {
    /// Raw frames of `width` x `height` in `format`, encoded here ([`FileSink::push`]).
    #[default]
    Frames,
    /// The source's own H.264 or H.265, remuxed with no encode ([`FileSink::push_encoded`]).
    Encoded(EncodedInput),
}

/// The source's own video as its parser gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedInput {
    /// `video/x-h264` or `video/x-h265`, with `codec_data` where the stream is `avc`/`hvc1`.
    pub caps: gst::Caps,
    /// A camera cannot wait for a slow disk: when the queue is full a unit is
    /// dropped (and the caller resumes at a keyframe) instead of blocking.
    pub live: bool,
}

impl FileSinkSettings {
    /// One file, 1 s fragments, the default encoder.
    pub fn new(path: impl Into<PathBuf>, width: u32, height: u32, fps: (i32, i32)) -> Self {
        FileSinkSettings {
            path: path.into(),
            segment_seconds: None,
            width,
            height,
            format: PixelFormat::Rgba,
            fps,
            fragment_ms: 1000,
            encoder: EncoderSettings::default(),
            wall_clock_names: false,
            start_index: 0,
            scale_to: None,
            input: SinkInput::Frames,
        }
    }
}

/// What `finish` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedFiles {
    /// Complete files, in order.
    pub files: Vec<PathBuf>,
    /// Frames in all of them.
    pub frames: u64,
    /// Frames in each of `files`, in the same order.
    pub segment_frames: Vec<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("bad file sink settings for {path}: {reason}")]
    Settings { path: PathBuf, reason: String },
    #[error("frame does not fit the file sink: {0}")]
    FrameSize(#[from] FrameSizeError),
    #[error("frame at {pts} ns is not after the previous one at {last} ns (frames must reach the sink in order)")]
    OutOfOrder { pts: Nanos, last: Nanos },
    #[error("cannot write {path}: {detail} (check free space and the directory's permissions)")]
    Write { path: PathBuf, detail: String },
    #[error("the file sink for {path} failed: {detail}")]
    Pipeline { path: PathBuf, detail: String },
    #[error("the file sink for {path} has already stopped")]
    Stopped { path: PathBuf },
    #[error("finalising {path} took longer than {secs:.1} s; it keeps what its complete fragments hold")]
    Timeout { path: PathBuf, secs: f64 },
    #[error("cannot record {codec} as it comes from the source: only H.264 and H.265 can be remuxed into MP4 (use record = \"annotated\")")]
    NotRemuxable { codec: String },
    #[error("cannot create {}: {source}", .dir.display())]
    CreateDir { dir: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Encoder(#[from] EncoderError),
    #[error("{}", .0.worded(&GST_PHRASES))]
    Gst(#[from] GstError),
}

launch::gst_errors!(SinkError, launch: "cannot build the file sink pipeline", call: "GStreamer call failed in the file sink", state_change: "the file sink pipeline refused to start");

/// A running MP4 writer fed with RGBA frames. Dropping it finishes the file
/// (waiting up to 5 s); call [`FileSink::finish`] to know how that went.
pub struct FileSink {
    pipeline: gst::Pipeline,
    appsrc: gst_app::AppSrc,
    /// For raw frames: their layout and the buffers they are copied into.
    raw: Option<(Packed, gst::BufferPool)>,
    /// For a live source's own video: the queue size past which a unit is dropped.
    drop_over_bytes: Option<u64>,
    frame_ns: Option<Nanos>,
    /// Held from stamping to push so concurrent pushers cannot reorder frames.
    order: Mutex<Timing>,
    frames: AtomicU64,
    shared: Arc<Shared>,
    bus_thread: Option<JoinHandle<()>>,
    path: PathBuf,
    /// In segment mode: the segment length and the splitmuxsink told where to cut.
    segments: Option<Segmenter>,
    encoder: EncoderChoice,
    encode_clock: Arc<EncodeClock>,
    /// Frames in fragments the file sink has written (disk_frames.rs).
    on_disk: Arc<AtomicU64>,
    closed: bool,
}

#[derive(Default)]
struct Timing {
    last_pts: Option<Nanos>,
    next_pts: Nanos,
    /// PTS of the open segment's first frame.
    segment_start: Option<Nanos>,
    /// Frames pushed into each segment begun, the open one last.
    segment_frames: Vec<u64>,
}

/// Cuts segments on the frames' own timestamps. With splitmuxsink's
/// `max-size-time` the cut lands on whichever keyframe comes near the limit,
/// which rests on the encoder honouring splitmuxsink's keyframe requests,
/// while the encoder counts its own keyframe interval in frames at the
/// nominal rate (at 2 frames a second, a "0.5 s" interval is 6 s). Here the
/// frame that reaches the limit is made a keyframe and the file is split
/// right before it, so each segment holds the frames of its
/// `segment_seconds` and its frame count is known.
struct Segmenter {
    length_ns: Nanos,
    split: gst::Element,
}

/// Written by the bus thread, read by pushers and `finish`.
#[derive(Default)]
struct Shared {
    end: Mutex<End>,
    changed: Condvar,
    /// `End::closed_segments.len()`, read per frame without the lock.
    segments_closed: AtomicUsize,
}

#[derive(Default)]
struct End {
    eos: bool,
    failure: Option<Failure>,
    closed_segments: Vec<PathBuf>,
}

impl FileSink {
    pub fn start(settings: FileSinkSettings) -> Result<FileSink, SinkError> {
        gst::init()?;
        validate(&settings)?;
        if let SinkInput::Encoded(input) = &settings.input {
            let parser = remux_parser(&input.caps)?;
            return FileSink::launch(&settings, EncoderChoice::remux(parser));
        }
        // The encoder sees the recording's size.
        let (width, height) = settings.scale_to.unwrap_or((settings.width, settings.height));
        let info = VideoInfo {
            width,
            height,
            fps_num: settings.fps.0,
            fps_den: settings.fps.1,
            format: settings.format,
        };
        let mut enc = settings.encoder.clone();
        if let Some(s) = settings.segment_seconds {
            // A segment can only start at a keyframe. And splitmuxsink holds each
            // GOP in memory until the next keyframe shows where it ends, on top of
            // the fragment mp4mux is filling: with both at half of fragment_ms, a
            // crash still loses at most about fragment_ms.
            enc.keyframe_interval = enc
                .keyframe_interval
                .min(Duration::from_secs(s as u64))
                .min(Duration::from_millis(segment_fragment_ms(settings.fragment_ms) as u64));
        }
        let choice = encoder::choose(&enc, &info)?;
        match FileSink::launch(&settings, choice.clone()) {
            Err(e) if choice.is_hardware() => {
                tracing::warn!(encoder = %choice, "hardware encoder failed to start ({e}); using software");
                FileSink::launch(&settings, encoder::software(&enc, &info)?)
            }
            other => other,
        }
    }

    fn launch(settings: &FileSinkSettings, encoder: EncoderChoice) -> Result<FileSink, SinkError> {
        let bad = |reason: &str| SinkError::Settings { path: settings.path.clone(), reason: reason.into() };
        let path_str = settings.path.to_str().ok_or_else(|| bad("the path is not valid UTF-8"))?;
        let fragment_ms = match settings.segment_seconds {
            None => settings.fragment_ms.max(1),
            Some(_) => segment_fragment_ms(settings.fragment_ms),
        }
        .to_string();
        let (raw, chain, caps, max_bytes, block) = match &settings.input {
            SinkInput::Frames => {
                let packed = Packed::new(settings.width, settings.height, settings.format)?;
                let scale = match settings.scale_to {
                    // A capsfilter element, not bare caps: the encoder's description starts with caps of its own.
                    Some((w, h)) => format!(" ! videoscale ! capsfilter caps=\"video/x-raw,width={w},height={h}\""),
                    None => String::new(),
                };
                let chain = format!("videoconvert{scale} ! {} ! h264parse name=parse", encoder.description());
                let (caps, max_bytes) = (packed.caps_desc(settings.fps.0, settings.fps.1), packed.size() * QUEUED_FRAMES);
                (Some((packed, packed.pool()?)), chain, caps, max_bytes, true)
            }
            // The appsrc's caps (with codec_data) are set below, not written
            // into the description; the remuxing "encoder" names the parser.
            SinkInput::Encoded(input) => (None, format!("{} name=parse", encoder.name()), "video/x-h264".to_string(), ENCODED_QUEUE_BYTES, !input.live),
        };
        let max_bytes_str = max_bytes.to_string();
        let block = if block { "true" } else { "false" };
        let description = match settings.segment_seconds {
            None => fill(
                FILE,
                &[
                    ("max_bytes", &max_bytes_str),
                    ("block", block),
                    ("caps", &caps),
                    ("chain", &chain),
                    ("fragment_ms", &fragment_ms),
                    ("path", &quote(path_str)),
                ],
            ),
            Some(_) => fill(
                SEGMENTS,
                &[
                    ("max_bytes", &max_bytes_str),
                    ("block", block),
                    ("caps", &caps),
                    ("chain", &chain),
                    ("fragment_ms", &fragment_ms),
                    // Wall-clock names come from the format-location handler below;
                    // the printf pattern is then never used.
                    ("pattern", &quote(if settings.wall_clock_names { "unused-%05d.mp4" } else { path_str })),
                    ("start_index", &settings.start_index.to_string()),
                ],
            ),
        };
        let pipeline = launch::launch(&description)?;
        if settings.wall_clock_names {
            let split = pipeline.by_name("split").ok_or_else(|| glib::bool_error!("segment description has no splitmuxsink named split"))?;
            let pattern = path_str.to_string();
            split.connect("format-location", false, move |_| Some(wall_clock_location(&pattern).to_value()));
        }
        let segments = match settings.segment_seconds {
            None => None,
            Some(secs) => {
                let split = pipeline.by_name("split").ok_or_else(|| glib::bool_error!("segment description has no splitmuxsink named split"))?;
                Some(Segmenter { length_ns: secs as u64 * 1_000_000_000, split })
            }
        };
        let appsrc = pipeline
            .by_name("src")
            .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
            .ok_or_else(|| glib::bool_error!("sink description has no appsrc named src"))?;
        let encode_clock = EncodeClock::new();
        if let SinkInput::Encoded(input) = &settings.input {
            appsrc.set_caps(Some(&input.caps));
        } else {
            let parse = pipeline.by_name("parse");
            if !parse.as_ref().is_some_and(|parse| encode_clock.watch(parse)) {
                tracing::debug!(path = %settings.path.display(), "no h264parse named parse: encode times are not measured");
            }
            if !parse.as_ref().is_some_and(super::frame_lengths::keep_through) {
                tracing::debug!(path = %settings.path.display(), "no h264parse named parse: frames last 1/fps each");
            }
        }
        let bus = pipeline.bus().ok_or_else(|| glib::bool_error!("pipeline has no bus"))?;
        let shared = Arc::new(Shared::default());
        let watch = (bus, pipeline.downgrade(), shared.clone());
        let bus_thread = std::thread::Builder::new()
            .name("sink-bus".into())
            .spawn(move || watch_bus(watch.0, watch.1, watch.2))
            .map_err(|e| glib::bool_error!("cannot start the sink's bus thread: {e}"))?;
        let on_disk = Arc::new(AtomicU64::new(0));
        let filesink = match &segments {
            Some(seg) => seg.split.property::<Option<gst::Element>>("sink"),
            None => pipeline.by_name("out"),
        };
        if !filesink.is_some_and(|f| super::disk_frames::count_into(&f, on_disk.clone())) {
            tracing::debug!(path = %settings.path.display(), "no file sink to watch: frames on disk are known only at the end");
        }
        let frame_ns = (settings.fps.0 > 0 && settings.fps.1 > 0)
            .then(|| 1_000_000_000u64 * settings.fps.1 as u64 / settings.fps.0 as u64);
        let drop_over_bytes = matches!(&settings.input, SinkInput::Encoded(i) if i.live).then_some(max_bytes as u64);
        let mut sink = FileSink {
            raw,
            drop_over_bytes,
            pipeline,
            appsrc,
            frame_ns,
            order: Mutex::default(),
            frames: AtomicU64::new(0),
            shared,
            bus_thread: Some(bus_thread),
            path: settings.path.clone(),
            segments,
            encoder,
            encode_clock,
            on_disk,
            closed: false,
        };
        if let Err(e) = sink.pipeline.set_state(gst::State::Playing) {
            sink.abort();
            return Err(sink.failure().map(|f| sink.error_from(f)).unwrap_or(SinkError::from(e)));
        }
        tracing::info!(path = %sink.path.display(), encoder = %sink.encoder, "file sink started");
        Ok(sink)
    }

    /// The encoder in use, for logs.
    pub fn encoder(&self) -> &EncoderChoice {
        &self.encoder
    }

    /// Copies one frame (`stride` bytes per row; NV12's UV rows follow its Y
    /// rows) into the file. Blocks while
    /// the encoder is a few frames behind. A missing PTS continues from the last
    /// frame; a missing duration is one frame at the configured rate, or the
    /// gap since the last frame when frames come further apart than that.
    pub fn push(&self, pixels: &[u8], stride: usize, timing: FrameTiming) -> Result<(), SinkError> {
        let Some((packed, pool)) = &self.raw else {
            return Err(SinkError::Settings { path: self.path.clone(), reason: "this recording takes the source's own video, not frames".into() });
        };
        packed.check(pixels.len(), stride)?;
        if let Some(f) = self.failure() {
            return Err(self.error_from(f));
        }
        let mut order = self.order.lock().map_err(|_| SinkError::Stopped { path: self.path.clone() })?;
        let pts = timing.pts.unwrap_or(order.next_pts);
        if let Some(last) = order.last_pts.filter(|last| pts <= *last) {
            return Err(SinkError::OutOfOrder { pts, last });
        }
        // mp4mux gives a file's last frame its buffer duration (the others last
        // until the next one): below the nominal rate, the gap before a frame is
        // the best guess at the gap after it, so a segment's length is the
        // stretch of stream it covers.
        let gap = order.last_pts.map(|last| pts - last).filter(|g| *g <= MAX_FRAME_GAP_NS);
        let duration = match (timing.duration.or(self.frame_ns), gap) {
            (Some(nominal), Some(gap)) if gap > nominal => Some(gap),
            (nominal, _) => nominal,
        };
        let buffer = packed.buffer(pool, pixels, stride, Some(pts), duration)?;
        self.begin_segment_if_due(&mut order, pts, true);
        order.last_pts = Some(pts);
        order.next_pts = pts + duration.unwrap_or(1).max(1);
        self.encode_clock.pushed(pts);
        self.push_in_order(order, buffer)
    }

    /// Writes one access unit of the source's own video (timestamps from the
    /// source's run, in decode order; the first one a keyframe). A segment
    /// due to end is cut at its next keyframe. Returns false when a live
    /// recording's queue was full and the unit was dropped: the caller must
    /// go on from a keyframe.
    pub fn push_encoded(&self, buffer: gst::Buffer) -> Result<bool, SinkError> {
        if self.raw.is_some() {
            return Err(SinkError::Settings { path: self.path.clone(), reason: "this recording encodes frames; it takes no encoded video".into() });
        }
        if let Some(f) = self.failure() {
            return Err(self.error_from(f));
        }
        let mut order = self.order.lock().map_err(|_| SinkError::Stopped { path: self.path.clone() })?;
        if self.drop_over_bytes.is_some_and(|limit| self.appsrc.current_level_bytes() >= limit) {
            return Ok(false);
        }
        // B-frames come before the frames they follow: PTS is not monotonic here, DTS is.
        let Some(pts) = buffer.pts().or(buffer.dts()).map(gst::ClockTime::nseconds) else {
            return Err(SinkError::Settings { path: self.path.clone(), reason: "an encoded unit without a timestamp".into() });
        };
        let keyframe = !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT);
        self.begin_segment_if_due(&mut order, pts, keyframe);
        order.last_pts = Some(order.last_pts.map_or(pts, |last| last.max(pts)));
        self.push_in_order(order, buffer).map(|()| true)
    }

    /// In segment mode: starts the first segment, or a new one at `pts` once
    /// the open one is `segment_seconds` long and the unit at `pts` may start one.
    fn begin_segment_if_due(&self, order: &mut Timing, pts: Nanos, may_start: bool) {
        let Some(seg) = &self.segments else { return };
        match order.segment_start {
            Some(start) if pts < start + seg.length_ns || !may_start => return,
            Some(_) => self.cut_before(seg, pts),
            None => {}
        }
        order.segment_start = Some(pts);
        order.segment_frames.push(0);
    }

    fn push_in_order(&self, mut order: std::sync::MutexGuard<'_, Timing>, buffer: gst::Buffer) -> Result<(), SinkError> {
        match self.appsrc.push_buffer(buffer) {
            Ok(_) => {
                self.frames.fetch_add(1, Ordering::Relaxed);
                if let Some(n) = order.segment_frames.last_mut() {
                    *n += 1;
                }
                Ok(())
            }
            Err(flow) => {
                drop(order);
                // The bus thread may be a moment behind the flow error that stopped us.
                Err(self.wait_failure(Duration::from_secs(1)).map(|f| self.error_from(f)).unwrap_or_else(|| {
                    SinkError::Pipeline { path: self.path.clone(), detail: format!("stopped with {flow:?}") }
                }))
            }
        }
    }

    /// Starts a new segment at the frame of `pts`, about to be pushed: the
    /// encoder makes it a keyframe (the event travels in order with the
    /// frames, running time = PTS since appsrc's segment starts at 0) and
    /// splitmuxsink splits at that keyframe.
    fn cut_before(&self, seg: &Segmenter, pts: Nanos) {
        let at = gst::ClockTime::from_nseconds(pts);
        let keyframe = gstreamer_video::DownstreamForceKeyUnitEvent::builder().timestamp(at).running_time(at).all_headers(true).build();
        // The source's own video is cut at a keyframe it already has.
        if self.raw.is_some() && !self.appsrc.send_event(keyframe) {
            tracing::debug!(path = %self.path.display(), "the encoder did not take a keyframe request; the cut waits for its next keyframe");
        }
        seg.split.emit_by_name::<()>("split-at-running-time", &[&pts]);
    }

    /// How long the encoder held each frame that came out of it since the
    /// last call (see [`EncodeClock`]).
    pub fn encode_times(&self, each: &mut dyn FnMut(Duration)) {
        self.encode_clock.drain(each);
    }

    /// Frames in the fragments written to disk so far (the fragment being
    /// written counts once the next begins; after `finish`, every frame).
    pub fn frames_on_disk(&self) -> u64 {
        self.on_disk.load(Ordering::Relaxed)
    }

    /// The file being written now: the segment open in segment mode.
    pub fn open_file(&self) -> Option<PathBuf> {
        let filesink = match &self.segments {
            Some(seg) => seg.split.property::<Option<gst::Element>>("sink"),
            None => self.pipeline.by_name("out"),
        }?;
        filesink.property::<Option<String>>("location").map(PathBuf::from)
    }

    /// Segments finalised so far (0 when not segmenting).
    pub fn segments_closed(&self) -> usize {
        self.shared.segments_closed.load(Ordering::Acquire)
    }

    /// Ends the stream and waits (up to `timeout`) until every file is finalised.
    pub fn finish(mut self, timeout: Duration) -> Result<FinishedFiles, SinkError> {
        self.close(timeout)
    }

    fn close(&mut self, timeout: Duration) -> Result<FinishedFiles, SinkError> {
        if std::mem::replace(&mut self.closed, true) {
            return Err(SinkError::Stopped { path: self.path.clone() });
        }
        let _ = self.appsrc.end_of_stream();
        let deadline = Instant::now() + timeout;
        let (eos, failure, closed_segments) = {
            let mut end = self.shared.end.lock().map_err(|_| SinkError::Stopped { path: self.path.clone() })?;
            while !end.eos && end.failure.is_none() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                end = self
                    .shared
                    .changed
                    .wait_timeout(end, left)
                    .map_err(|_| SinkError::Stopped { path: self.path.clone() })?
                    .0;
            }
            (end.eos, end.failure.clone(), end.closed_segments.clone())
        };
        self.abort();
        if let Some(f) = failure {
            return Err(self.error_from(f));
        }
        if !eos {
            return Err(SinkError::Timeout { path: self.path.clone(), secs: timeout.as_secs_f64() });
        }
        let frames = self.frames.load(Ordering::Relaxed);
        let (files, segment_frames) = match &self.segments {
            None => (vec![self.path.clone()], vec![frames]),
            Some(_) => {
                let counted = self.order.lock().map(|o| o.segment_frames.clone()).unwrap_or_default();
                if counted.len() != closed_segments.len() {
                    tracing::debug!(path = %self.path.display(), "{} segments closed, {} begun", closed_segments.len(), counted.len());
                }
                (closed_segments, counted)
            }
        };
        Ok(FinishedFiles { files, frames, segment_frames })
    }

    /// Stops the bus thread and the pipeline without finalising anything more.
    fn abort(&mut self) {
        self.closed = true;
        if let Some(t) = self.bus_thread.take() {
            if let Some(bus) = self.pipeline.bus() {
                let _ = bus.post(gst::message::Application::new(gst::Structure::new_empty(STOP)));
            }
            let _ = t.join();
        }
        let _ = self.pipeline.set_state(gst::State::Null);
        if let Some((_, pool)) = &self.raw {
            let _ = pool.set_active(false);
        }
    }

    fn failure(&self) -> Option<Failure> {
        self.shared.end.lock().ok().and_then(|e| e.failure.clone())
    }

    fn wait_failure(&self, timeout: Duration) -> Option<Failure> {
        let end = self.shared.end.lock().ok()?;
        let (end, _) = self.shared.changed.wait_timeout_while(end, timeout, |e| e.failure.is_none()).ok()?;
        end.failure.clone()
    }

    fn error_from(&self, f: Failure) -> SinkError {
        let (path, detail) = (self.path.clone(), f.describe());
        if f.error.kind::<gst::ResourceError>().is_some() {
            SinkError::Write { path, detail }
        } else {
            SinkError::Pipeline { path, detail }
        }
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if !self.closed
            && let Err(e) = self.close(DROP_FINISH)
        {
            tracing::warn!("file sink dropped without finish: {e}");
        }
    }
}

/// The next segment's name under a strftime `pattern`: now (UTC), with its
/// folders made; `-1`, `-2`, ... before the extension if that name is taken
/// (a reconnect within the same second).
fn wall_clock_location(pattern: &str) -> String {
    let path = crate::clock::strftime(pattern, std::time::SystemTime::now());
    if let Some(dir) = Path::new(&path).parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            tracing::error!(dir = %dir.display(), "cannot create the recording folder: {e}");
        }
    }
    if !Path::new(&path).exists() {
        return path;
    }
    let (stem, ext) = match path.rfind('.') {
        Some(i) if i > path.rfind('/').map_or(0, |s| s + 1) => (&path[..i], &path[i..]),
        _ => (path.as_str(), ""),
    };
    (1..).map(|n| format!("{stem}-{n}{ext}")).find(|p| !Path::new(p).exists()).expect("some suffix is free")
}

/// The parser that takes `caps` into mp4mux: only H.264 and H.265 are remuxed.
fn remux_parser(caps: &gst::Caps) -> Result<&'static str, SinkError> {
    match caps.structure(0).map(|s| s.name().as_str()) {
        Some("video/x-h264") => Ok("h264parse"),
        Some("video/x-h265") => Ok("h265parse"),
        other => Err(SinkError::NotRemuxable { codec: other.unwrap_or("video without caps").to_string() }),
    }
}

/// Fragment length, and keyframe interval cap, in segment mode (see `start`).
fn segment_fragment_ms(fragment_ms: u32) -> u32 {
    (fragment_ms / 2).max(1)
}

fn validate(s: &FileSinkSettings) -> Result<(), SinkError> {
    let bad = |reason: String| SinkError::Settings { path: s.path.clone(), reason };
    // The source's own video says its size and rate itself.
    if s.input == SinkInput::Frames && (s.width == 0 || s.height == 0) {
        return Err(bad(format!("frame size {}x{} (both must be > 0)", s.width, s.height)));
    }
    if s.input == SinkInput::Frames && (s.fps.0 <= 0 || s.fps.1 <= 0) {
        return Err(bad(format!("frame rate {}/{} (both must be > 0)", s.fps.0, s.fps.1)));
    }
    if s.segment_seconds == Some(0) {
        return Err(bad("segment_seconds is 0 (leave it unset for one file)".into()));
    }
    if s.wall_clock_names {
        if s.segment_seconds.is_none() {
            return Err(bad("wall-clock names need segment_seconds".into()));
        }
        let pattern = s.path.to_str().unwrap_or("");
        if let Some(c) = crate::clock::unknown_conversion(pattern) {
            return Err(bad(format!("unknown time conversion {c} (use %Y %m %d %H %M %S, %% for %)")));
        }
        return Ok(());
    }
    let dir = match s.path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(bad(format!("directory {} does not exist (create it first)", dir.display())));
    }
    let name = s.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if s.segment_seconds.is_some() {
        // splitmuxsink formats the name printf-style with the segment number: exactly
        // one integer conversion, or the name is wrong (or worse).
        if count_conversions(name) != Some(1) {
            return Err(bad("segment names need one number conversion, e.g. cam1-%05d.mp4".into()));
        }
    } else if name.is_empty() {
        return Err(bad("no file name".into()));
    }
    Ok(())
}

/// Number of `%d` / `%05d` conversions, or None if any other `%` appears.
fn count_conversions(name: &str) -> Option<usize> {
    let b = name.as_bytes();
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < b.len() && j - i <= 2 && b[j].is_ascii_digit() {
            j += 1;
        }
        if b.get(j) != Some(&b'd') {
            return None;
        }
        n += 1;
        i = j + 1;
    }
    Some(n)
}

fn watch_bus(bus: gst::Bus, pipeline: glib::WeakRef<gst::Pipeline>, shared: Arc<Shared>) {
    loop {
        let Some(msg) = bus.timed_pop(gst::ClockTime::NONE) else {
            continue;
        };
        match msg.view() {
            gst::MessageView::Eos(_) => {
                if let Ok(mut end) = shared.end.lock() {
                    end.eos = true;
                }
                shared.changed.notify_all();
                return;
            }
            gst::MessageView::Error(e) => {
                if let Ok(mut end) = shared.end.lock() {
                    end.failure = Some(Failure::from_message(e));
                }
                shared.changed.notify_all();
                // The streaming thread has stopped, so a push() blocked on the full
                // appsrc would wait forever; leaving PLAYING releases it.
                if let Some(p) = pipeline.upgrade() {
                    let _ = p.set_state(gst::State::Null);
                }
                return;
            }
            gst::MessageView::Element(e) => {
                let Some(s) = e.structure() else { continue };
                if s.name() == "splitmuxsink-fragment-closed"
                    && let (Ok(location), Ok(mut end)) = (s.get::<String>("location"), shared.end.lock())
                {
                    end.closed_segments.push(PathBuf::from(location));
                    shared.segments_closed.store(end.closed_segments.len(), Ordering::Release);
                }
            }
            gst::MessageView::Application(a) if a.structure().is_some_and(|s| s.name() == STOP) => return,
            gst::MessageView::Warning(w) => tracing::warn!("file sink: {}", launch::describe_warning(w)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_patterns() {
        assert_eq!(count_conversions("cam-%05d.mp4"), Some(1));
        assert_eq!(count_conversions("cam-%d.mp4"), Some(1));
        assert_eq!(count_conversions("cam.mp4"), Some(0));
        assert_eq!(count_conversions("cam-%s.mp4"), None);
        assert_eq!(count_conversions("%d-%d.mp4"), Some(2));
        assert_eq!(count_conversions("cam%"), None);
        assert_eq!(count_conversions("cam%123d"), None);
    }

    #[test]
    fn the_encoder_is_timed_for_every_frame_it_encodes() {
        // Rule: each frame pushed into a recording is timed from push to its encoded output.
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::start(FileSinkSettings::new(dir.path().join("t.mp4"), 64, 48, (25, 1))).unwrap();
        let rgba = vec![128u8; 64 * 48 * 4];
        for i in 0..10u64 {
            sink.push(&rgba, 64 * 4, FrameTiming { pts: Some(i * 40_000_000), duration: Some(40_000_000) }).unwrap();
        }
        let mut timed = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while timed < 10 && Instant::now() < deadline {
            sink.encode_times(&mut |took| {
                assert!(took < Duration::from_secs(5), "{took:?}");
                timed += 1;
            });
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(timed, 10);
        sink.finish(Duration::from_secs(5)).unwrap();
    }
}
