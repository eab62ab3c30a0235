//! Video in: decodes a file, stream, camera or test pattern to RGBA frames and
//! hands each one, borrowed, to a [`FrameHandler`].
//!
//! Contract: once [`Source::start`] returns `Ok`, the handler gets frames and then
//! exactly one of `on_eos` / `on_error`, unless [`Source::stop`] came first. When
//! `start` returns `Err` the handler is never called.

mod bus;
mod decoders;
mod extent;
mod mp4_edit;
mod plan;
mod settings;
mod tap;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_video as gst_video;
use gstreamer_video::prelude::*;

use super::frame::{DecodedFrame, PixelFormat, VideoInfo};
use super::launch::{self, Failure, GstError};
pub use settings::{DEFAULT_LATENCY_MS, RtspTransport, SourceSettings, UnknownTransport};
pub use plan::TestUriError;
pub use extent::{EditListShortfall, Extent, Shortfall};
pub use mp4_edit::{VideoEdit, video_edit};
pub use decoders::DecoderInfo;
pub use tap::{EncodedTap, RunningTime};

use crate::video::uri::Scheme;

/// What a handler wants after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowAction {
    Continue,
    /// No more frames; the source winds down and `on_eos` follows.
    Stop,
}

/// Receives a source's frames on its streaming thread. For file sources `on_frame`
/// may block to apply back-pressure; for live sources it should copy and return.
pub trait FrameHandler: Send + Sync + 'static {
    fn on_frame(&self, frame: DecodedFrame<'_>) -> FlowAction;
    fn on_eos(&self);
    fn on_error(&self, err: SourceError);
    /// Damaged or lost input the source went on without: a warning from the
    /// demuxer, parser or decoder (logged at most every few seconds), or frames
    /// missing from the timestamps (concealment could not rebuild them).
    fn on_damaged_input(&self) {}
    /// The source's decodebin picked this video decoder (each pipeline run).
    fn on_decoder(&self, _decoder: &DecoderInfo) {}
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(
        "unsupported source uri {uri:?}: use file://, http(s)://, rtsp(s)://, v4l2:///dev/videoN or test://PATTERN"
    )]
    UnsupportedScheme { uri: String },
    #[error("bad source uri {uri:?}: {reason}")]
    BadUri { uri: String, reason: String },
    #[error("bad source uri {uri:?}: {source}")]
    BadTestUri { uri: String, source: TestUriError },
    #[error("cannot open {uri}: no such file or stream (check the path in the source uri)")]
    NotFound { uri: String },
    #[error("no video stream in {uri} (it has only: {streams})")]
    NoVideo { uri: String, streams: String },
    /// GStreamer's error (`detail`) while opening or reading `uri`, worded for its kind.
    #[error("{}", .problem.worded(.uri, .detail))]
    Failed { problem: SourceProblem, uri: String, detail: String },
    #[error("{}", .0.worded(&GST_PHRASES))]
    Gst(#[from] GstError),
}

launch::gst_errors!(SourceError, launch: "cannot build the source pipeline", call: "GStreamer call failed while setting up the source", state_change: "the source pipeline refused to start");

/// What went wrong with a source, as [`SourceError::Failed`] words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceProblem {
    CannotOpen,
    Unreachable,
    Unauthorized,
    NotMedia,
    MissingPlugin,
    Stream,
}

impl SourceProblem {
    /// This problem with `uri`, GStreamer saying `detail`.
    pub(crate) fn at(self, uri: String, detail: String) -> SourceError {
        SourceError::Failed { problem: self, uri, detail }
    }

    fn worded(self, uri: &str, detail: &str) -> String {
        match self {
            SourceProblem::CannotOpen => format!("cannot open {uri}: {detail} (check that it exists and is readable)"),
            SourceProblem::Unreachable => {
                format!("cannot connect to {uri}: {detail} (check the address and port, and that the camera or server is up)")
            }
            SourceProblem::Unauthorized => format!("{uri} refused the credentials: {detail} (check user:password in the uri)"),
            SourceProblem::NotMedia => format!("cannot decode {uri}: not a media file, or a damaged one ({detail})"),
            SourceProblem::MissingPlugin => {
                format!("cannot decode {uri}: {detail} (install the GStreamer plugin for it, e.g. gstreamer1.0-libav)")
            }
            SourceProblem::Stream => format!("error while decoding {uri}: {detail}"),
        }
    }
}

/// A running source. Dropping it stops it, like [`Source::stop`].
pub struct Source {
    pipeline: gst::Pipeline,
    shared: Arc<Shared>,
    bus_thread: Option<JoinHandle<()>>,
    uri: String,
}

/// What the streaming thread, the bus thread and the owner share.
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stopping: AtomicBool,
}

#[derive(Default)]
struct State {
    info: Option<VideoInfo>,
    ended: bool,
    /// What the frames delivered so far cover.
    extent: Extent,
}

impl Shared {
    fn set_info(&self, info: VideoInfo) {
        if let Ok(mut s) = self.state.lock()
            && s.info != Some(info)
        {
            s.info = Some(info);
            self.changed.notify_all();
        }
    }

    /// `pts` and `end` (where the video's segment stops, when the demuxer
    /// says) from the segment's start.
    fn note_frame(&self, pts: Option<u64>, duration: Option<u64>, fps: gst::Fraction, end: Option<u64>) {
        if let Ok(mut s) = self.state.lock() {
            if s.extent.fps.is_none() && fps.numer() > 0 && fps.denom() > 0 {
                s.extent.fps = Some(fps.numer() as f64 / fps.denom() as f64);
            }
            s.extent.announced_ns = s.extent.announced_ns.or(end);
            s.extent.note(pts, duration);
        }
    }

    fn mark_ended(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.ended = true;
            self.changed.notify_all();
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// The GStreamer pipeline description [`Source::start`] would launch for
/// `settings`, after the same URI checks, without starting anything (for
/// checks and tests; errors show the URI with its password masked).
pub fn describe(settings: &SourceSettings) -> Result<String, SourceError> {
    plan::plan(settings).map(|plan| plan.description)
}

/// How long `start` waits for the bus to explain a failed state change.
const START_ERROR_WAIT: Duration = Duration::from_secs(2);

impl Source {
    pub fn start(settings: SourceSettings, handler: Arc<dyn FrameHandler>) -> Result<Source, SourceError> {
        Source::start_tapped(settings, handler, None)
    }

    /// [`Source::start`], with `tap` given the source's own H.264/H.265
    /// before it is decoded (sources through uridecodebin only: files,
    /// HTTP, RTSP; a test pattern or a raw camera has none to give).
    pub fn start_tapped(
        settings: SourceSettings,
        handler: Arc<dyn FrameHandler>,
        tap: Option<Arc<dyn EncodedTap>>,
    ) -> Result<Source, SourceError> {
        gst::init()?;
        let plan = plan::plan(&settings)?;
        let pipeline = launch::launch(&plan.description)?;
        let shared =
            Arc::new(Shared { state: Mutex::default(), changed: Condvar::new(), stopping: AtomicBool::new(false) });

        let sink = pipeline
            .by_name("sink")
            .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
            .ok_or_else(|| glib::bool_error!("source description has no appsink named sink"))?;
        let pin = pipeline.by_name("size").map(|size| SizePin::watch(&pipeline, &size, &plan.shown)).transpose()?;
        sink.set_callbacks(frame_callbacks(handler.clone(), shared.clone(), pin));

        if plan::dynamic(plan.scheme) {
            let dec = pipeline.by_name("dec").ok_or_else(|| glib::bool_error!("no uridecodebin named dec"))?;
            let conv = pipeline.by_name("conv").ok_or_else(|| glib::bool_error!("no videoconvert named conv"))?;
            link_video_only(&pipeline, &dec, &conv)?;
            if let Some(tap) = tap {
                tap::attach(&dec, tap);
            }
            if plan.scheme == Scheme::Rtsp {
                configure_rtspsrc(&dec, &settings);
            }
            if settings.prefer_hardware {
                decoders::raise_ranks_once();
            } else {
                decoders::skip_hardware(&dec);
            }
            let reporter = handler.clone();
            decoders::report_decoders(&dec, move |decoder| reporter.on_decoder(&decoder));
        }

        let bus = pipeline.bus().ok_or_else(|| glib::bool_error!("pipeline has no bus"))?;
        if let Err(e) = pipeline.set_state(gst::State::Playing) {
            // The bus usually holds the reason (no such device, refused connection...).
            let reason = bus
                .timed_pop_filtered(
                    gst::ClockTime::from_mseconds(START_ERROR_WAIT.as_millis() as u64),
                    &[gst::MessageType::Error],
                )
                .and_then(|m| match m.view() {
                    gst::MessageView::Error(err) => {
                        Some(bus::classify(&plan.shown, plan.scheme, &Failure::from_message(err)))
                    }
                    _ => None,
                });
            let _ = pipeline.set_state(gst::State::Null);
            return Err(reason.unwrap_or(SourceError::from(e)));
        }

        let watch = bus::Watch {
            bus,
            pipeline: pipeline.downgrade(),
            uri: plan.shown.clone(),
            scheme: plan.scheme,
            handler,
            shared: shared.clone(),
        };
        let bus_thread = std::thread::Builder::new()
            .name("source-bus".into())
            .spawn(move || watch.run())
            .map_err(|e| glib::bool_error!("cannot start the source's bus thread: {e}"))?;
        // "source started" (INFO) waits for the first frame (the stream's
        // intake logs it): a camera that never answers gets this far too.
        tracing::debug!(source = %plan.shown, "source pipeline playing; waiting for its first frame");
        Ok(Source { pipeline, shared, bus_thread: Some(bus_thread), uri: plan.shown })
    }

    /// The negotiated size and frame rate, once the first frame has arrived.
    pub fn info(&self) -> Option<VideoInfo> {
        self.shared.state.lock().ok().and_then(|s| s.info)
    }

    /// Waits up to `timeout` for [`Source::info`]; None if the stream ended (or
    /// failed) first, or time ran out.
    pub fn wait_info(&self, timeout: Duration) -> Option<VideoInfo> {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.state.lock().ok()?;
        loop {
            if s.info.is_some() || s.ended {
                return s.info;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            s = self.shared.changed.wait_timeout(s, left).ok()?.0;
        }
    }

    /// The frames delivered so far, and where the container says the video ends.
    pub fn extent(&self) -> Extent {
        self.shared.state.lock().map(|s| s.extent).unwrap_or_default()
    }

    /// The source URI with any password masked.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Stops the pipeline and joins the bus thread; no handler call starts after
    /// this returns. A frame callback in progress is waited for, so a handler
    /// blocked on back-pressure must be released (e.g. its ring closed) first,
    /// and `on_frame` must not stop its own source (return `FlowAction::Stop`).
    /// Stopping from `on_eos` / `on_error` is fine.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        if let Some(t) = self.bus_thread.take() {
            // Posted before NULL: a pipeline going to NULL flushes its bus.
            let stop = gst::message::Application::new(gst::Structure::new_empty(bus::STOP));
            if let Some(b) = self.pipeline.bus() {
                let _ = b.post(stop);
            }
            // A handler may drop its source from on_eos/on_error, i.e. on this very
            // thread, which is about to return anyway.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Holds a source's output to the size of its first frame. Sinks are opened
/// at that size; a camera that switches resolution mid-stream (reconfigured,
/// day/night profiles) is scaled back to it rather than breaking them, with a
/// warning. A reconnect starts a new pipeline, free to adopt the new size.
struct SizePin {
    size: glib::WeakRef<gst::Element>,
    /// The pinned (width, height), once the first frame has set it.
    pinned: Arc<std::sync::OnceLock<(u32, u32)>>,
}

impl SizePin {
    fn watch(pipeline: &gst::Pipeline, size: &gst::Element, shown: &str) -> Result<SizePin, SourceError> {
        let pinned = Arc::new(std::sync::OnceLock::<(u32, u32)>::new());
        let scale = pipeline.by_name("scale").ok_or_else(|| glib::bool_error!("no videoscale named scale"))?;
        let pad = scale.static_pad("sink").ok_or_else(|| glib::bool_error!("videoscale has no sink pad"))?;
        let (seen, shown) = (pinned.clone(), shown.to_string());
        pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
            if let Some(gst::PadProbeData::Event(ev)) = &info.data
                && let gst::EventView::Caps(c) = ev.view()
                && let Ok(v) = gst_video::VideoInfo::from_caps(c.caps())
                && let Some(&(w, h)) = seen.get()
                && (v.width(), v.height()) != (w, h)
            {
                tracing::warn!(
                    source = %shown,
                    "the source changed resolution mid-stream to {}x{}; frames are scaled to {w}x{h} until it reconnects",
                    v.width(),
                    v.height()
                );
            }
            gst::PadProbeReturn::Ok
        });
        Ok(SizePin { size: size.downgrade(), pinned })
    }

    /// Pins the output to `v`'s size (first call only).
    fn pin(&self, v: &gst_video::VideoInfo) {
        if self.pinned.set((v.width(), v.height())).is_err() {
            return;
        }
        if let Some(size) = self.size.upgrade() {
            let caps = gst_video::VideoCapsBuilder::new()
                .format(v.format())
                .width(v.width() as i32)
                .height(v.height() as i32)
                .pixel_aspect_ratio(v.par())
                .build();
            size.set_property("caps", &caps);
        }
    }
}

/// Spots frames missing from a constant-rate stream: decoders conceal damaged
/// slices without telling anyone, but the frames they cannot rebuild leave a
/// hole in the timestamps, as do packets lost on the network.
#[derive(Default)]
struct GapWatch {
    last_pts: Option<u64>,
}

impl GapWatch {
    /// Whether a gap of more than 1.5 frame intervals came before `pts`.
    fn gap_before(&mut self, pts: Option<u64>, interval_ns: Option<u64>) -> bool {
        let (Some(pts), Some(interval)) = (pts, interval_ns.filter(|i| *i > 0)) else { return false };
        let gap = self.last_pts.is_some_and(|last| pts > last && pts - last > interval + interval / 2);
        self.last_pts = Some(pts);
        gap
    }
}

fn frame_callbacks(handler: Arc<dyn FrameHandler>, shared: Arc<Shared>, pin: Option<SizePin>) -> gst_app::AppSinkCallbacks {
    let mut gaps = GapWatch::default();
    gst_app::AppSinkCallbacks::builder()
        .new_sample(move |sink| {
            if shared.is_stopping() {
                return Err(gst::FlowError::Flushing);
            }
            let sample = sink.pull_sample().map_err(|_| gst::FlowError::Flushing)?;
            let (Some(buffer), Some(caps)) = (sample.buffer(), sample.caps()) else {
                gst::element_error!(sink, gst::StreamError::Format, ("decoded sample without buffer or caps"));
                return Err(gst::FlowError::Error);
            };
            let vinfo = gst_video::VideoInfo::from_caps(caps).map_err(|e| {
                gst::element_error!(sink, gst::StreamError::Format, ("unusable decoded caps {caps}: {e}"));
                gst::FlowError::NotNegotiated
            })?;
            if let Some(pin) = &pin {
                pin.pin(&vinfo);
            }
            let fps = vinfo.fps();
            let interval = (fps.numer() > 0).then(|| 1_000_000_000 * fps.denom() as u64 / fps.numer() as u64);
            if gaps.gap_before(buffer.pts().map(|t| t.nseconds()), buffer.duration().map(|t| t.nseconds()).or(interval)) {
                handler.on_damaged_input();
            }
            let format = match vinfo.format() {
                gst_video::VideoFormat::Nv12 => PixelFormat::Nv12,
                gst_video::VideoFormat::Rgba => PixelFormat::Rgba,
                other => {
                    gst::element_error!(sink, gst::StreamError::Format, ("decoded frames are {other:?}, not NV12 or RGBA"));
                    return Err(gst::FlowError::NotNegotiated);
                }
            };
            // NV12 pairs rows and columns for its chroma: an odd last row or
            // column (rare camera sizes) is cropped rather than half-coloured.
            let (width, height) = match format {
                PixelFormat::Nv12 => (vinfo.width() & !1, vinfo.height() & !1),
                _ => (vinfo.width(), vinfo.height()),
            };
            shared.set_info(VideoInfo { width, height, fps_num: fps.numer(), fps_den: fps.denom(), format });
            // The segment's stop is the video track's own end where the demuxer
            // knows it from an index (MP4/MOV: the track's length, not the
            // movie's, which an audio track may outlast).
            // Both measured from the segment's start (an edit list may start it past 0).
            let segment = sample.segment().and_then(|s| s.downcast_ref::<gst::ClockTime>().cloned());
            let start = segment.as_ref().and_then(|s| s.start()).map_or(0, |t| t.nseconds());
            let end = segment.as_ref().and_then(|s| s.stop()).map(|t| t.nseconds().saturating_sub(start));
            let pts = buffer.pts().map(|t| t.nseconds().saturating_sub(start));
            shared.note_frame(pts, buffer.duration().map(|t| t.nseconds()), fps, end);
            let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(buffer, &vinfo).map_err(|e| {
                gst::element_error!(sink, gst::ResourceError::Read, ("cannot map a decoded frame: {e}"));
                gst::FlowError::Error
            })?;
            let data = frame.plane_data(0).map_err(|_| gst::FlowError::Error)?;
            let chroma = match format {
                PixelFormat::Nv12 => Some((frame.plane_data(1).map_err(|_| gst::FlowError::Error)?, frame.plane_stride()[1] as usize)),
                _ => None,
            };
            let decoded = DecodedFrame {
                data,
                width,
                height,
                stride: frame.plane_stride()[0] as usize,
                format,
                chroma,
                pts: buffer.pts().map(|t| t.nseconds()),
                duration: buffer.duration().map(|t| t.nseconds()),
            };
            match handler.on_frame(decoded) {
                FlowAction::Continue => Ok(gst::FlowSuccess::Ok),
                // EOS upstream: demuxers and sources then send EOS down, which the bus
                // thread reports as the end of the stream.
                FlowAction::Stop => Err(gst::FlowError::Eos),
            }
        })
        .build()
}

/// Links uridecodebin's first video pad to `conv`; every other stream goes to a
/// fakesink so it cannot stall or fail the pipeline as not-linked. When decodebin
/// is done exposing pads without any video, a NO_VIDEO message tells the bus thread.
fn link_video_only(pipeline: &gst::Pipeline, dec: &gst::Element, conv: &gst::Element) -> Result<(), SourceError> {
    let conv_sink = conv.static_pad("sink").ok_or_else(|| glib::bool_error!("videoconvert has no sink pad"))?;
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let undecodable = Arc::new(Mutex::new(Vec::<String>::new()));
    let linked = Arc::new(AtomicBool::new(false));
    let weak = pipeline.downgrade();
    {
        let (seen, linked) = (seen.clone(), linked.clone());
        dec.connect_pad_added(move |dec, pad| {
            let caps = pad.current_caps().unwrap_or_else(|| pad.query_caps(None));
            let media = caps.structure(0).map(|s| s.name().to_string()).unwrap_or_else(|| "unknown".into());
            if let Ok(mut v) = seen.lock() {
                v.push(media.clone());
            }
            if media.starts_with("video/") && !linked.swap(true, Ordering::AcqRel) {
                if let Err(e) = pad.link(&conv_sink) {
                    gst::element_error!(
                        dec,
                        gst::CoreError::Negotiation,
                        ("cannot link decoded {caps} to videoconvert: {e:?}")
                    );
                }
                return;
            }
            let Some(pipeline) = weak.upgrade() else { return };
            let Ok(fake) =
                gst::ElementFactory::make("fakesink").property("sync", false).property("async", false).build()
            else {
                return;
            };
            if pipeline.add(&fake).is_ok() {
                let _ = fake.sync_state_with_parent();
                if let Some(p) = fake.static_pad("sink") {
                    let _ = pad.link(&p);
                }
            }
        });
    }
    {
        let undecodable = undecodable.clone();
        dec.connect("unknown-type", false, move |args| {
            let caps = args.get(2).and_then(|v| v.get::<gst::Caps>().ok());
            if let (Some(caps), Ok(mut v)) = (caps, undecodable.lock()) {
                let name = caps.structure(0).map(|s| s.name().to_string()).unwrap_or_default();
                if name.starts_with("video/") {
                    v.push(name);
                }
            }
            None
        });
    }
    dec.connect_no_more_pads(move |dec| {
        if linked.load(Ordering::Acquire) {
            return;
        }
        let streams = seen.lock().map(|v| v.join(", ")).unwrap_or_default();
        let undecodable = undecodable.lock().map(|v| v.join(", ")).unwrap_or_default();
        let s =
            gst::Structure::builder(bus::NO_VIDEO).field("streams", streams).field("undecodable", undecodable).build();
        let _ = dec.post_message(gst::message::Application::builder(s).src(dec).build());
    });
    Ok(())
}

/// Transport, jitter buffer and timeouts for the rtspsrc uridecodebin creates. The
/// default TCP timeout is 20 s; a camera that is down should be reported sooner.
fn configure_rtspsrc(dec: &gst::Element, settings: &SourceSettings) {
    let latency = settings.latency_ms;
    let protocols = match settings.rtsp_transport {
        RtspTransport::Tcp => "tcp",
        RtspTransport::Udp => "udp",
        RtspTransport::Auto => "tcp+udp+udp-mcast",
    };
    dec.connect("source-setup", false, move |args| {
        let src = args.get(1).and_then(|v| v.get::<gst::Element>().ok())?;
        if src.factory().is_some_and(|f| f.name() == "rtspsrc") {
            src.set_property("latency", latency);
            src.set_property_from_str("protocols", protocols);
            src.set_property("tcp-timeout", 5_000_000u64);
            src.set_property("timeout", 5_000_000u64);
        }
        None
    });
}

#[cfg(test)]
mod tests {
    use super::GapWatch;

    #[test]
    fn a_hole_in_the_timestamps_is_a_gap_and_jitter_is_not() {
        // Rule: frames more than 1.5 intervals apart mark a gap; small jitter, the first frame, a jump back and unknown timing do not.
        let ms = |v: u64| Some(v * 1_000_000);
        let mut g = GapWatch::default();
        let interval = ms(100);
        assert!(!g.gap_before(ms(0), interval));
        assert!(!g.gap_before(ms(100), interval));
        assert!(!g.gap_before(ms(240), interval), "jitter");
        assert!(g.gap_before(ms(500), interval), "two frames missing");
        assert!(!g.gap_before(ms(50), interval), "a restart from an earlier time");
        assert!(!g.gap_before(ms(900), None), "no frame rate, no judgement");
    }
}
