//! One stream's supervisor: a thread that owns the stream's ring, output stage
//! and sinks for as long as the stream is configured, and its source across
//! reconnects.
//!
//! - Live sources (cameras, test patterns): an error, an end of stream, or no
//!   frame for `max(5 s, 3 * latency)` restarts the source after a backoff
//!   doubling from `reconnect_initial_ms` to `reconnect_max_ms` (back to the
//!   start after a minute of frames). The ring, output stage and sinks keep
//!   running meanwhile; frames are re-timed on arrival so the recording's
//!   timeline keeps rising across reconnects.
//! - Files: at their end (or on an error) the stream drains, its recording is
//!   finalised, and it stays down. Other streams are unaffected.
//! - A source that cannot even start counts as a failure like any other.
//!
//! If a reconnected source delivers another frame size, the stream's outputs
//! are finalised and re-opened for the new size (a new recording).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::config::{RtspTransport, StreamConfig, format_start};
use super::health::Health;
use super::metrics::{DropReason, Sink, StreamMetrics};
use super::status::{StreamState, StreamStatus};
use crate::video::annotate::FrameStats;
use crate::video::frame::VideoInfo;
use crate::video::output::{FrameSink, OutputError, OutputObserver, StatsError, StatsWriter};
use crate::video::pool::{SkipReason, WorkerPool};
use crate::video::ring::FrameBuf;
use crate::video::ring::FrameRing;
use crate::video::rtsp::{RtspError, RtspServer};
use crate::video::sink::SinkError;
use crate::video::source::{self, Source, SourceSettings};
use crate::video::stream::{
    DecodeObserver, FileOutput, FileTarget, PipelineParts, RingFeeder, RtspOutput, SourceEvent, StreamPipeline,
    open_file_sink,
};

/// A stable minute of frames resets the reconnect backoff.
const STABLE: Duration = Duration::from_secs(60);
/// How long a file source may take to deliver its first frame.
const FILE_FIRST_FRAME: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

/// What every stream shares with the daemon.
#[derive(Clone)]
pub struct StreamContext {
    pub pool: Arc<RwLock<WorkerPool>>,
    pub rtsp: Option<Arc<RtspServer>>,
    pub health: Arc<Health>,
    pub metrics: StreamMetrics,
    /// State, last frame and latest annotated frame for the status page.
    pub status: Arc<StreamStatus>,
    /// `{start}` in the names of the stream's first outputs: the daemon's
    /// start, or the stream's own for one added or restarted by a reload (so
    /// it cannot overwrite the earlier recording). Outputs re-opened for a new
    /// frame size use the time they are opened.
    pub start_time: SystemTime,
    /// Buffers for frames being inferred, reordered and written (workers + slack).
    pub in_flight: usize,
    /// How long finalising the sinks may take when a stream ends by itself.
    pub finish_timeout: Duration,
    /// Set once the pool has its workers. A stream that ends before then
    /// waits for them (unless asked to stop), so its frames still get inferred
    /// and the pool's lock is not held while nothing can drain.
    pub workers_ready: Arc<AtomicBool>,
}

/// A running stream supervisor. Dropping it does not stop it: call
/// [`StreamSupervisor::request_stop`] and then join.
pub struct StreamSupervisor {
    pub name: String,
    pub config: StreamConfig,
    stop: Arc<Mutex<Option<Instant>>>,
    info: Arc<Mutex<Option<VideoInfo>>>,
    thread: Option<JoinHandle<()>>,
}

impl StreamSupervisor {
    pub fn spawn(config: StreamConfig, ctx: StreamContext) -> std::io::Result<StreamSupervisor> {
        let stop = Arc::new(Mutex::new(None));
        let info = Arc::new(Mutex::new(None));
        let name = config.name.clone();
        let thread = {
            let (config, stop, info) = (config.clone(), stop.clone(), info.clone());
            std::thread::Builder::new()
                .name(format!("roadseg-stream-{name}"))
                .spawn(move || {
                    let (health, stream) = (ctx.health.clone(), config.name.clone());
                    let supervisor = Supervisor {
                        cfg: config,
                        ctx,
                        stop,
                        info,
                    };
                    // A bug in one stream must not take the others down; it stays down, loudly.
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| supervisor.run())).is_err() {
                        health.set_stream_up(&stream, false);
                        tracing::error!(stream = %stream, "the stream supervisor panicked; the stream stays down");
                    }
                })?
        };
        Ok(StreamSupervisor {
            name,
            config,
            stop,
            info,
            thread: Some(thread),
        })
    }

    /// The source's frame size, once its first frame arrived.
    pub fn info(&self) -> Option<VideoInfo> {
        *self.info.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the stream to stop intake, drain and finalise its outputs by `deadline`.
    pub fn request_stop(&self, deadline: Instant) {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if stop.is_none() {
            *stop = Some(deadline);
        }
    }

    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the thread until `deadline`; false if it is still running then.
    pub fn join_until(&mut self, deadline: Instant) -> bool {
        while !self.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!(stream = %self.name, "the stream supervisor panicked");
        }
        true
    }
}

/// Exponential reconnect delay.
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial_ms: u64, max_ms: u64) -> Backoff {
        let initial = Duration::from_millis(initial_ms.max(1));
        let max = Duration::from_millis(max_ms.max(initial_ms).max(1));
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// How a session (one ring + output stage + sinks) ended.
enum SessionEnd {
    /// Stop requested; outputs finalised.
    Stopped,
    /// A file ended or failed (or a file stream could not start): stays down.
    Down,
    /// Start a new session (new frame size, or outputs could not be opened).
    Rebuild,
}

/// A session's sinks, its stats sidecar and its RTSP mount (to remove later).
struct Outputs {
    sinks: Vec<Box<dyn FrameSink>>,
    stats: Option<StatsWriter>,
    mount: Option<String>,
}

/// Why a stream's outputs could not be opened.
#[derive(Debug, thiserror::Error)]
enum OpenOutputsError {
    #[error("file output: {0}")]
    File(#[source] SinkError),
    #[error("stats output: {0}")]
    Stats(#[source] StatsError),
    #[error("rtsp output: the RTSP server is not running (rtsp.listen is empty)")]
    NoRtspServer,
    #[error("rtsp output: {0}")]
    Rtsp(#[source] RtspError),
}

/// Why connecting gave up.
enum Gave {
    Stopped,
    Down,
}

struct Supervisor {
    cfg: StreamConfig,
    ctx: StreamContext,
    stop: Arc<Mutex<Option<Instant>>>,
    info: Arc<Mutex<Option<VideoInfo>>>,
}

/// Metrics and the latest frame for one stream's output stage.
struct Observer(StreamMetrics, Arc<StreamStatus>);

impl OutputObserver for Observer {
    fn written(&self, sink: &'static str) {
        self.0.written(Sink::named(sink)).increment(1);
    }
    fn sink_failed(&self, sink: &'static str, _err: &OutputError) {
        self.0.sink_errors(Sink::named(sink)).increment(1);
    }
    fn skipped(&self, reason: SkipReason) {
        let reason = match reason {
            SkipReason::RingFull => DropReason::RingFull,
            SkipReason::InferenceError => DropReason::InferenceError,
            SkipReason::RateLimited => DropReason::RateLimited,
        };
        self.0.dropped(reason).increment(1);
    }
    fn frame_out(&self, latency: Duration, _stats: &FrameStats) {
        self.0.record_latency(latency);
        self.0.last_written.set(super::metrics::unix_now());
    }
    fn keep_latest(&self, buf: &mut FrameBuf) {
        self.1.latest.offer(buf);
    }
}

impl Supervisor {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn stop_deadline(&self) -> Option<Instant> {
        *self.stop.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps `d`, waking early for a stop request; true if one came.
    fn sleep_or_stop(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        loop {
            if self.stop_deadline().is_some() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(POLL));
        }
    }

    fn silence(&self) -> Duration {
        Duration::from_secs(5).max(Duration::from_millis(3 * u64::from(self.cfg.latency_ms)))
    }

    fn settings(&self) -> SourceSettings {
        let mut s = SourceSettings::new(self.cfg.uri.clone());
        s.live = self.cfg.is_live();
        s.latency_ms = self.cfg.latency_ms;
        s.rtsp_transport = match self.cfg.rtsp_transport {
            RtspTransport::Tcp => source::RtspTransport::Tcp,
            RtspTransport::Udp => source::RtspTransport::Udp,
            RtspTransport::Auto => source::RtspTransport::Auto,
        };
        s
    }

    fn run(self) {
        let live = self.cfg.is_live();
        let mut backoff = Backoff::new(self.cfg.reconnect_initial_ms, self.cfg.reconnect_max_ms);
        let mut session_start = self.ctx.start_time;
        loop {
            match self.session(&mut backoff, session_start) {
                SessionEnd::Stopped => {
                    self.ctx.status.set_state(StreamState::Stopped);
                    tracing::info!(stream = %self.name(), "stream stopped");
                    break;
                }
                SessionEnd::Down => {
                    self.ctx.health.set_stream_up(self.name(), false);
                    self.ctx.status.set_state(StreamState::Down);
                    tracing::warn!(stream = %self.name(), "stream is down and stays down (not live); other streams keep running");
                    break;
                }
                SessionEnd::Rebuild if !live => break,
                SessionEnd::Rebuild => session_start = SystemTime::now(),
            }
        }
    }

    /// Starts sources until one delivers a frame. `reconnect`: this is not the
    /// first attempt, so wait out the backoff first.
    fn connect(
        &self,
        ring: &FrameRing,
        feeder: &Arc<RingFeeder>,
        events: &Receiver<SourceEvent>,
        requeue: &Sender<SourceEvent>,
        backoff: &mut Backoff,
        mut reconnect: bool,
    ) -> Result<(Source, VideoInfo), Gave> {
        let live = self.cfg.is_live();
        let shown = super::config::SourceUri::redacted(&self.cfg.uri);
        let mut attempt = 0u64;
        loop {
            if self.stop_deadline().is_some() {
                return Err(Gave::Stopped);
            }
            if reconnect {
                let delay = backoff.take();
                attempt += 1;
                tracing::info!(stream = %self.name(), source = %shown, attempt, "reconnecting in {} ms", delay.as_millis());
                if self.sleep_or_stop(delay) {
                    return Err(Gave::Stopped);
                }
                self.ctx.metrics.reconnects.increment(1);
            }
            reconnect = true;
            events.try_iter().for_each(drop);
            let failure = match Source::start(self.settings(), feeder.clone()) {
                Err(e) => e.to_string(),
                Ok(source) => match self.first_frame(&source, events, requeue) {
                    Ok(info) => return Ok((source, info)),
                    Err(None) => {
                        // A file source may be blocked on back-pressure: release it first.
                        if !live {
                            ring.close();
                        }
                        source.stop();
                        return Err(Gave::Stopped);
                    }
                    Err(Some(reason)) => {
                        if !live {
                            ring.close();
                        }
                        source.stop();
                        events.try_iter().for_each(drop);
                        reason
                    }
                },
            };
            if live {
                tracing::error!(stream = %self.name(), "source failed: {failure}");
            } else {
                tracing::error!(stream = %self.name(), "cannot play {shown}: {failure}");
                return Err(Gave::Down);
            }
        }
    }

    /// Waits for the first frame: Ok(size), Err(None) when asked to stop,
    /// Err(Some(reason)) on failure.
    /// An end or error that raced the first frames is put back on `requeue`
    /// for the caller's loop (a short file can end right after its first frame).
    fn first_frame(
        &self,
        source: &Source,
        events: &Receiver<SourceEvent>,
        requeue: &Sender<SourceEvent>,
    ) -> Result<VideoInfo, Option<String>> {
        let limit = if self.cfg.is_live() {
            self.silence()
        } else {
            FILE_FIRST_FRAME
        };
        let deadline = Instant::now() + limit;
        loop {
            if self.stop_deadline().is_some() {
                return Err(None);
            }
            if let Some(info) = source.info() {
                return Ok(info);
            }
            match events.recv_timeout(Duration::from_millis(50)) {
                Ok(event) if source.info().is_some() => {
                    let _ = requeue.send(event);
                    continue;
                }
                Ok(SourceEvent::Eos) => return Err(Some("the stream ended before its first video frame".into())),
                Ok(SourceEvent::Error(e)) => return Err(Some(e.to_string())),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(Some(format!("no video frame within {:.1} s", limit.as_secs_f64())));
            }
        }
    }

    /// The stream's sinks for frames of `info`; the RTSP mount to remove later.
    fn open_sinks(&self, info: VideoInfo, start: SystemTime) -> Result<Outputs, OpenOutputsError> {
        let (o, name) = (&self.cfg.output, self.name());
        let mut sinks: Vec<Box<dyn FrameSink>> = Vec::new();
        if let Some(pattern) = o.segment_location(name, start) {
            let segment_seconds = Some(u32::try_from(o.segment_seconds).unwrap_or(u32::MAX));
            let target = FileTarget {
                path: pattern.into(),
                segment_seconds,
                bitrate_kbps: o.bitrate_kbps,
                wall_clock_names: o.wall_clock_names(),
            };
            let sink = open_file_sink(&target, info).map_err(OpenOutputsError::File)?;
            tracing::info!(stream = %name, file = %target.path.display(), "recording");
            sinks.push(Box::new(FileOutput::resuming(sink, target, info)));
        }
        let stats = match o.stats_path(name, start) {
            Some(p) => Some(StatsWriter::append(&p, name).map_err(OpenOutputsError::Stats)?),
            None => None,
        };
        let mut mount = None;
        if let Some(path) = o.rtsp_mount(name) {
            let Some(server) = &self.ctx.rtsp else {
                return Err(OpenOutputsError::NoRtspServer);
            };
            let mut rtsp_info = info;
            if rtsp_info.fps_num <= 0 || rtsp_info.fps_den <= 0 {
                (rtsp_info.fps_num, rtsp_info.fps_den) = (25, 1);
            }
            let feed = server
                .add_stream_with(&path, rtsp_info, &RtspServer::encoder(o.bitrate_kbps))
                .map_err(OpenOutputsError::Rtsp)?;
            sinks.push(Box::new(RtspOutput(feed)));
            mount = Some(path);
        }
        Ok(Outputs { sinks, stats, mount })
    }

    fn unmount(&self, mount: Option<String>) {
        if let (Some(path), Some(server)) = (mount, &self.ctx.rtsp)
            && let Err(e) = server.remove_stream(&path)
        {
            tracing::warn!(stream = %self.name(), "{e}");
        }
    }

    fn session(&self, backoff: &mut Backoff, start: SystemTime) -> SessionEnd {
        let live = self.cfg.is_live();
        let name = self.name().to_string();
        let ring = Arc::new(FrameRing::new(self.cfg.ring_capacity, self.ctx.in_flight, live));
        let (output_tx, output_rx) = crossbeam_channel::unbounded();
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let requeue = events_tx.clone();
        let waker = self.ctx.pool.read().unwrap_or_else(PoisonError::into_inner).waker();
        let (m, status) = (self.ctx.metrics.clone(), self.ctx.status.clone());
        let on_decoded: DecodeObserver = Arc::new(move |_, depth| {
            status.frame_arrived();
            m.frames_decoded.increment(1);
            m.ring_depth.set(depth as f64);
        });
        let feeder = Arc::new(RingFeeder::new(
            ring.clone(),
            output_tx.clone(),
            Box::new(waker),
            events_tx,
            // Each recording's timeline starts near 0 and rises across reconnects.
            live.then(Instant::now),
            on_decoded,
        )
        .with_rate_limit(self.cfg.infer_fps)
        .on_damaged_input({
            let m = self.ctx.metrics.clone();
            move || m.decode_errors.increment(1)
        }));

        let (source, info) = match self.connect(&ring, &feeder, &events_rx, &requeue, backoff, false) {
            Ok(x) => x,
            Err(Gave::Stopped) => return SessionEnd::Stopped,
            Err(Gave::Down) => return SessionEnd::Down,
        };
        *self.info.lock().unwrap_or_else(PoisonError::into_inner) = Some(info);
        tracing::info!(stream = %name, "source delivers {}x{} at {}/{} fps", info.width, info.height, info.fps_num, info.fps_den);
        if !start.eq(&self.ctx.start_time) {
            tracing::info!(stream = %name, "new outputs named for {}", format_start(start));
        }

        let Outputs { sinks, stats, mount } = match self.open_sinks(info, start) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(stream = %name, "cannot open the stream's outputs: {e}");
                feeder.stop();
                ring.close();
                source.stop();
                if !live {
                    return SessionEnd::Down;
                }
                let delay = backoff.take();
                tracing::info!(stream = %name, "retrying in {} ms", delay.as_millis());
                return if self.sleep_or_stop(delay) {
                    SessionEnd::Stopped
                } else {
                    SessionEnd::Rebuild
                };
            }
        };
        let pipeline = {
            let pool = self.ctx.pool.read().unwrap_or_else(PoisonError::into_inner);
            StreamPipeline::start(
                PipelineParts {
                    name: name.clone(),
                    ring: ring.clone(),
                    output_tx,
                    output_rx,
                    sinks,
                    stats,
                    observer: Arc::new(Observer(self.ctx.metrics.clone(), self.ctx.status.clone())),
                    finish_timeout: self.ctx.finish_timeout,
                    on_frame: None,
                    want_masks: false,
                    temporal: self.cfg.temporal(),
                },
                &pool,
            )
        };
        self.ctx.health.set_stream_up(&name, true);
        self.ctx.status.set_state(StreamState::Up);

        let finished = AtomicBool::new(false);
        // Stops intake, drains, finalises the sinks and unmounts; the source is stopped after the drain
        // (a file source may be blocked on back-pressure until the ring closes).
        let teardown = |pipeline: StreamPipeline, source: Option<Source>, deadline: Instant| {
            if finished.swap(true, Ordering::SeqCst) {
                return;
            }
            feeder.stop();
            while !self.ctx.workers_ready.load(Ordering::SeqCst) && self.stop_deadline().is_none() {
                std::thread::sleep(POLL);
            }
            let summary = {
                let pool = self.ctx.pool.read().unwrap_or_else(PoisonError::into_inner);
                pipeline.drain_and_finish(&pool, deadline)
            };
            if let Some(s) = source {
                s.stop();
            }
            self.unmount(mount.clone());
            self.ctx.health.set_stream_up(&name, false);
            match &summary.first_error {
                None => {
                    tracing::info!(stream = %name, frames = summary.frames, dropped = summary.skipped, "outputs finalised")
                }
                Some(e) => {
                    tracing::error!(stream = %name, frames = summary.frames, "outputs finalised with an error: {e}")
                }
            }
        };

        let mut source = Some(source);
        let mut source_started = Instant::now();
        loop {
            if let Some(deadline) = self.stop_deadline() {
                teardown(pipeline, source, deadline);
                return SessionEnd::Stopped;
            }
            if source_started.elapsed() >= STABLE {
                backoff.reset();
            }
            // Also sampled here: at decode time it is always at least the frame just queued.
            self.ctx.metrics.ring_depth.set(ring.depth() as f64);
            let failure = match events_rx.recv_timeout(POLL) {
                Ok(SourceEvent::Eos) if self.cfg.r#loop => {
                    // Not a loss: the same file again, on the same timeline.
                    tracing::debug!(stream = %name, "end of file; playing it again");
                    if let Some(s) = source.take() {
                        s.stop();
                    }
                    events_rx.try_iter().for_each(drop);
                    match self.connect(&ring, &feeder, &events_rx, &requeue, backoff, false) {
                        Ok((s, _)) => {
                            source = Some(s);
                            source_started = Instant::now();
                            continue;
                        }
                        Err(gave) => {
                            let deadline = self.stop_deadline().unwrap_or_else(|| Instant::now() + self.ctx.finish_timeout);
                            teardown(pipeline, None, deadline);
                            return if matches!(gave, Gave::Down) { SessionEnd::Down } else { SessionEnd::Stopped };
                        }
                    }
                }
                Ok(SourceEvent::Eos) => Some((true, "end of stream".to_string())),
                Ok(SourceEvent::Error(e)) => Some((false, e.to_string())),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
            };
            let last = feeder.last_frame().max(source_started);
            let failure = match failure {
                Some(f) => f,
                None if live && last.elapsed() > self.silence() => {
                    (false, format!("no frame for {:.1} s", last.elapsed().as_secs_f64()))
                }
                None => continue,
            };
            if !live {
                match failure {
                    (true, _) => tracing::info!(stream = %name, "file finished; finalising its outputs"),
                    (false, e) => tracing::error!(stream = %name, "source failed: {e}; finalising its outputs"),
                }
                teardown(pipeline, source, Instant::now() + self.ctx.finish_timeout);
                return SessionEnd::Down;
            }
            self.ctx.health.set_stream_up(&name, false);
            self.ctx.status.set_state(StreamState::Reconnecting);
            tracing::warn!(stream = %name, "source lost: {}", failure.1);
            self.ctx.metrics.interruptions.increment(1);
            if let Some(s) = source.take() {
                s.stop();
            }
            events_rx.try_iter().for_each(drop);
            match self.connect(&ring, &feeder, &events_rx, &requeue, backoff, true) {
                Ok((s, new_info)) => {
                    source_started = Instant::now();
                    if (new_info.width, new_info.height) != (info.width, info.height) {
                        tracing::warn!(
                            stream = %name,
                            "source came back at {}x{} (was {}x{}): finalising the outputs and opening new ones",
                            new_info.width, new_info.height, info.width, info.height
                        );
                        teardown(pipeline, Some(s), Instant::now() + self.ctx.finish_timeout);
                        return SessionEnd::Rebuild;
                    }
                    tracing::info!(stream = %name, "source reconnected");
                    source = Some(s);
                    self.ctx.health.set_stream_up(&name, true);
                    self.ctx.status.set_state(StreamState::Up);
                }
                Err(_) => {
                    let deadline = self
                        .stop_deadline()
                        .unwrap_or_else(|| Instant::now() + self.ctx.finish_timeout);
                    teardown(pipeline, None, deadline);
                    return SessionEnd::Stopped;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum_and_resets() {
        // Rule: reconnect delays double from reconnect_initial_ms, cap at reconnect_max_ms, and reset.
        let mut b = Backoff::new(500, 3000);
        let ms: Vec<u128> = (0..5).map(|_| b.take().as_millis()).collect();
        assert_eq!(ms, [500, 1000, 2000, 3000, 3000]);
        b.reset();
        assert_eq!(b.take().as_millis(), 500);
    }
}
