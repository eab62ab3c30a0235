//! One stream's supervisor: a thread that runs the stream for as long as it
//! is configured, deciding what happens when its source ends or drops out.
//! The stream itself (source, ring, outputs) is built by `video::stream`.
//!
//! - Live sources (cameras, network streams, test patterns): an error, an
//!   end of stream, or no frame for `max(5 s, 3 * latency)` restarts the
//!   source after a backoff doubling from `reconnect_initial_ms` to
//!   `reconnect_max_ms` (back to the start after a minute of frames). The
//!   ring, output stage and sinks keep running meanwhile; frames are re-timed
//!   on arrival so the recording's timeline keeps rising across reconnects.
//! - Files: at their end (or on an error) the stream drains, its recording is
//!   finalised, and it stays down. Other streams are unaffected. A looped
//!   file starts again at once, with no loss counted.
//! - A source that cannot even start counts as a failure like any other.
//!
//! If a reconnected source delivers another frame size, the stream's outputs
//! are finalised and re-opened for the new size (a new recording).

mod backoff;
mod observer;
mod spec;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::config::{SourceUri, StreamConfig, format_start};
use super::health::Health;
use super::metrics::StreamMetrics;
use super::status::{StreamState, StreamStatus};
use crate::video::frame::VideoInfo;
use crate::video::stop::{StopHandle, StopSignal, Wake, stop_channel};
use crate::video::stream::{FirstFrameError, Services, SourceEvent, StartError, StreamHandle};
use backoff::Backoff;
use observer::Observer;

/// A stable minute of frames resets the reconnect backoff.
const STABLE: Duration = Duration::from_secs(60);
/// How often a running stream samples its ring and checks for silence.
const TICK: Duration = Duration::from_millis(100);

/// What every stream shares with the daemon.
#[derive(Clone)]
pub struct StreamContext {
    /// The worker pool (already running) and the RTSP server.
    pub services: Services,
    pub health: Arc<Health>,
    pub metrics: StreamMetrics,
    /// State, last frame and latest annotated frame for the status page.
    pub status: Arc<StreamStatus>,
    /// `{start}` in the names of the stream's first outputs: the daemon's
    /// start, or the stream's own for one added or restarted by a reload (so
    /// it cannot overwrite the earlier recording). Outputs re-opened for a new
    /// frame size use the time they are opened.
    pub start_time: SystemTime,
    /// How long finalising the sinks may take when a stream ends by itself.
    pub finish_timeout: Duration,
}

/// A running stream supervisor. Dropping it asks the stream to stop at once
/// without waiting for it: call [`StreamSupervisor::request_stop`] and
/// [`StreamSupervisor::join_until`] for an orderly stop.
pub struct StreamSupervisor {
    pub name: String,
    pub config: StreamConfig,
    stop: StopHandle,
    /// Disconnected when the thread ends.
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl StreamSupervisor {
    pub fn spawn(config: StreamConfig, ctx: StreamContext) -> std::io::Result<StreamSupervisor> {
        let (stop, signal) = stop_channel();
        let (done_tx, done) = crossbeam_channel::bounded::<()>(0);
        let name = config.name.clone();
        let supervisor = Supervisor { live: config.is_live(), cfg: config.clone(), ctx, stop: signal };
        let thread = std::thread::Builder::new().name(format!("roadseg-stream-{name}")).spawn(move || {
            let _done = done_tx;
            let (health, stream) = (supervisor.ctx.health.clone(), supervisor.cfg.name.clone());
            // A bug in one stream must not take the others down; it stays down, loudly.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| supervisor.run())).is_err() {
                health.set_stream_up(&stream, false);
                tracing::error!(stream = %stream, "the stream supervisor panicked; the stream stays down");
            }
        })?;
        Ok(StreamSupervisor { name, config, stop, done, thread: Some(thread) })
    }

    /// Asks the stream to stop intake, drain and finalise its outputs by `deadline`.
    pub fn request_stop(&self, deadline: Instant) {
        self.stop.stop(deadline);
    }

    /// Waits for the thread until `deadline`; false if it is still running then.
    pub fn join_until(&mut self, deadline: Instant) -> bool {
        if let Err(RecvTimeoutError::Timeout) = self.done.recv_deadline(deadline) {
            return false;
        }
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!(stream = %self.name, "the stream supervisor panicked");
        }
        true
    }
}

/// How a run of the stream (one set of outputs) ended.
enum SessionEnd {
    /// Stop requested; outputs finalised.
    Stopped,
    /// A file ended or failed (or a file stream could not start): stays down.
    Down,
    /// Start again with new outputs (new frame size, or outputs could not be opened).
    Rebuild,
}

struct Supervisor {
    cfg: StreamConfig,
    live: bool,
    ctx: StreamContext,
    stop: StopSignal,
}

impl Supervisor {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The stop's deadline, or a stream's own when it ends by itself.
    fn deadline(&self) -> Instant {
        self.stop.requested().unwrap_or_else(|| Instant::now() + self.ctx.finish_timeout)
    }

    fn set_up(&self, up: bool, state: StreamState) {
        self.ctx.health.set_stream_up(self.name(), up);
        self.ctx.status.set_state(state);
        if up {
            self.ctx.status.set_last_error(None);
        }
    }

    fn run(self) {
        let mut backoff = Backoff::new(self.cfg.reconnect_initial_ms, self.cfg.reconnect_max_ms);
        let mut named_for = self.ctx.start_time;
        loop {
            let end = match self.start(named_for, &mut backoff) {
                Ok(handle) => self.watch(handle, &mut backoff),
                Err(end) => end,
            };
            match end {
                SessionEnd::Stopped => {
                    self.ctx.status.set_state(StreamState::Stopped);
                    tracing::info!(stream = %self.name(), "stream stopped");
                    break;
                }
                SessionEnd::Down => {
                    self.set_up(false, StreamState::Down);
                    tracing::warn!(stream = %self.name(), "stream is down and stays down (not live); other streams keep running");
                    break;
                }
                SessionEnd::Rebuild if !self.live => break,
                SessionEnd::Rebuild => named_for = SystemTime::now(),
            }
        }
    }

    /// Starts the stream with outputs named for `named_for`, retrying a live
    /// source until it delivers a frame.
    fn start(&self, named_for: SystemTime, backoff: &mut Backoff) -> Result<StreamHandle, SessionEnd> {
        if named_for != self.ctx.start_time {
            tracing::info!(stream = %self.name(), "new outputs named for {}", format_start(named_for));
        }
        let observer = Arc::new(Observer { metrics: self.ctx.metrics.clone(), status: self.ctx.status.clone() });
        let spec = spec::stream_spec(&self.cfg, named_for, self.ctx.finish_timeout, observer);
        let handle = self.until_up(backoff, true, || spec.clone().start(&self.ctx.services, &self.stop))?;
        self.set_up(true, StreamState::Up);
        Ok(handle)
    }

    /// Tries `attempt` until it succeeds. A live source is tried again after
    /// each failure, waiting out the backoff first (the first try too,
    /// unless `immediate`); a file's failure leaves the stream down.
    fn until_up<T>(&self, backoff: &mut Backoff, immediate: bool, mut attempt: impl FnMut() -> Result<T, StartError>) -> Result<T, SessionEnd> {
        let mut waits = 0u64;
        let mut wait = !immediate;
        loop {
            if wait {
                waits += 1;
                self.back_off(backoff, waits)?;
            }
            wait = true;
            match attempt() {
                Ok(x) => return Ok(x),
                Err(StartError::Source(FirstFrameError::Stopped)) => return Err(SessionEnd::Stopped),
                Err(StartError::Source(e)) if self.live => {
                    tracing::error!(stream = %self.name(), "source failed: {e}");
                    // Not "starting" any more: a camera that never answers is being retried.
                    self.ctx.status.set_state(StreamState::Reconnecting);
                    self.ctx.status.set_last_error(Some(e.to_string()));
                }
                Err(StartError::Source(e)) => {
                    tracing::error!(stream = %self.name(), "cannot play {}: {e}", SourceUri::redacted(&self.cfg.uri));
                    return Err(SessionEnd::Down);
                }
                Err(e @ StartError::Outputs(_)) => {
                    tracing::error!(stream = %self.name(), "{e}");
                    if !self.live {
                        return Err(SessionEnd::Down);
                    }
                    let delay = backoff.take();
                    tracing::info!(stream = %self.name(), "retrying in {} ms", delay.as_millis());
                    return Err(if self.stop.sleep(delay).is_some() { SessionEnd::Stopped } else { SessionEnd::Rebuild });
                }
            }
        }
    }

    /// Waits out the next backoff delay before reconnect attempt `attempt`.
    fn back_off(&self, backoff: &mut Backoff, attempt: u64) -> Result<(), SessionEnd> {
        let delay = backoff.take();
        let source = SourceUri::redacted(&self.cfg.uri);
        tracing::info!(stream = %self.name(), source = %source, attempt, "reconnecting in {} ms", delay.as_millis());
        if self.stop.sleep(delay).is_some() {
            return Err(SessionEnd::Stopped);
        }
        self.ctx.metrics.reconnects.increment(1);
        Ok(())
    }

    /// Runs the started stream until it stops, goes down or needs new outputs.
    fn watch(&self, mut handle: StreamHandle, backoff: &mut Backoff) -> SessionEnd {
        let mut source_started = Instant::now();
        loop {
            if source_started.elapsed() >= STABLE {
                backoff.reset();
            }
            // Also sampled here: at decode time it is always at least the frame just queued.
            self.ctx.metrics.ring_depth.set(handle.ring_depth() as f64);
            let lost = match self.stop.wait_on(handle.events(), TICK) {
                Wake::Stop(deadline) => return self.finish(handle, deadline, SessionEnd::Stopped),
                Wake::Item(SourceEvent::Eos) if self.cfg.r#loop => {
                    // Not a loss: the same file again, on the same timeline.
                    tracing::debug!(stream = %self.name(), "end of file; playing it again");
                    handle.drop_source();
                    match self.until_up(backoff, true, || Ok(handle.replay_source(&self.stop)?)) {
                        Ok(_) => {
                            source_started = Instant::now();
                            continue;
                        }
                        Err(end) => return self.finish(handle, self.deadline(), end),
                    }
                }
                Wake::Item(event) if !self.live => {
                    match event {
                        SourceEvent::Eos => tracing::info!(stream = %self.name(), "file finished; finalising its outputs"),
                        SourceEvent::Error(e) => tracing::error!(stream = %self.name(), "source failed: {e}; finalising its outputs"),
                    }
                    return self.finish(handle, self.deadline(), SessionEnd::Down);
                }
                Wake::Item(SourceEvent::Eos) => "end of stream".to_string(),
                Wake::Item(SourceEvent::Error(e)) => e.to_string(),
                Wake::Idle => {
                    let last = handle.last_frame().max(source_started);
                    if !self.live || last.elapsed() <= spec::silence(&self.cfg) {
                        continue;
                    }
                    format!("no frame for {:.1} s", last.elapsed().as_secs_f64())
                }
            };
            match self.reconnect(&mut handle, backoff, &lost) {
                Ok(()) => source_started = Instant::now(),
                Err(SessionEnd::Rebuild) => return self.finish(handle, Instant::now() + self.ctx.finish_timeout, SessionEnd::Rebuild),
                Err(end) => return self.finish(handle, self.deadline(), end),
            }
        }
    }

    /// The source was lost (`why`): restarts it into the running outputs.
    /// Err(Rebuild) when it came back at another frame size.
    fn reconnect(&self, handle: &mut StreamHandle, backoff: &mut Backoff, why: &str) -> Result<(), SessionEnd> {
        self.set_up(false, StreamState::Reconnecting);
        self.ctx.status.set_last_error(Some(format!("source lost: {why}")));
        tracing::warn!(stream = %self.name(), "source lost: {why}");
        self.ctx.metrics.interruptions.increment(1);
        handle.drop_source();
        let info = self.until_up(backoff, false, || Ok(handle.restart_source(&self.stop)?))?;
        let VideoInfo { width, height, .. } = handle.info();
        if (info.width, info.height) != (width, height) {
            tracing::warn!(
                stream = %self.name(),
                "source came back at {}x{} (was {width}x{height}): finalising the outputs and opening new ones",
                info.width, info.height
            );
            return Err(SessionEnd::Rebuild);
        }
        tracing::info!(stream = %self.name(), "source reconnected");
        self.set_up(true, StreamState::Up);
        Ok(())
    }

    /// Drains and finalises the stream by `deadline`; `end` passes through.
    fn finish(&self, handle: StreamHandle, deadline: Instant, end: SessionEnd) -> SessionEnd {
        let drained = handle.stop(deadline);
        self.ctx.health.set_stream_up(self.name(), false);
        let (summary, name) = (&drained.outputs, self.name());
        match &summary.first_error {
            None => tracing::info!(stream = %name, frames = summary.frames, dropped = summary.skipped, "outputs finalised"),
            Some(e) => tracing::error!(stream = %name, frames = summary.frames, "outputs finalised with an error: {e}"),
        }
        end
    }
}
