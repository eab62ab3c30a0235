//! A stream's intake: its source (restarted as often as its owner likes)
//! feeding one ring, the events the source reports, and the wait for a
//! source's first frame, which tells the frame size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::feeder::{RingFeeder, SourceEvent};
use crate::video::frame::VideoInfo;
use crate::video::source::{EncodedTap, Extent, FlowAction, FrameHandler, Source, SourceError, SourceSettings};
use crate::video::stop::{StopSignal, Wake};

/// How often the first-frame wait looks at the source's size.
const LOOK: Duration = Duration::from_millis(50);

/// Why a source delivered no first frame.
#[derive(Debug, thiserror::Error)]
pub enum FirstFrameError {
    #[error("asked to stop before the first frame")]
    Stopped,
    /// The source could not start, or failed before its first frame.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// `uri` is shown with its password masked.
    #[error("{uri} ended before its first video frame")]
    Ended { uri: String },
    #[error("no video frame from {uri} within {:.1} s", .waited.as_secs_f64())]
    Silent { uri: String, waited: Duration },
}

pub(super) struct Intake {
    settings: SourceSettings,
    first_frame_timeout: Duration,
    feeder: Arc<RingFeeder>,
    events: Receiver<SourceEvent>,
    /// Puts back an event that raced a first frame, for the owner's loop.
    requeue: Sender<SourceEvent>,
    source: Option<Source>,
    /// Given each source's own video before decoding (`record = "source"`).
    tap: Option<Arc<dyn EncodedTap>>,
}

impl Intake {
    /// An intake whose sources feed `feeder`, which reports on `channel`
    /// (this end reads it, and puts back events that raced a first frame).
    /// No source runs until [`Intake::connect`].
    pub(super) fn new(
        settings: SourceSettings,
        first_frame_timeout: Duration,
        feeder: Arc<RingFeeder>,
        (requeue, events): (Sender<SourceEvent>, Receiver<SourceEvent>),
        tap: Option<Arc<dyn EncodedTap>>,
    ) -> Intake {
        Intake { settings, first_frame_timeout, feeder, events, requeue, source: None, tap }
    }

    /// What the source reports: its end or its failure.
    pub(super) fn events(&self) -> &Receiver<SourceEvent> {
        &self.events
    }

    pub(super) fn feeder(&self) -> &RingFeeder {
        &self.feeder
    }

    /// Gives the stream up before it ran (its outputs did not open): no more
    /// frames are taken, the ring closes and the source stops.
    pub(super) fn abandon(&mut self) {
        self.feeder.stop();
        self.feeder.ring.close();
        self.drop_source();
    }

    /// Starts a source (stopping any running one) and waits for its first
    /// frame. On failure no source runs, and a file's ring is closed so a
    /// source blocked on back-pressure could let go. `announce`: its start
    /// is logged at INFO, else at debug.
    pub(super) fn connect(&mut self, stop: &StopSignal, announce: bool) -> Result<VideoInfo, FirstFrameError> {
        self.drop_source();
        let source = Source::start_tapped(self.settings.clone(), self.feeder.clone(), self.tap.clone())?;
        match first_frame(&source, &self.events, &self.requeue, self.first_frame_timeout, stop) {
            Ok(info) => {
                if announce {
                    tracing::info!(source = %source.uri(), "source started");
                } else {
                    tracing::debug!(source = %source.uri(), "source started");
                }
                self.source = Some(source);
                Ok(info)
            }
            Err(e) => {
                if !self.settings.live {
                    self.feeder.ring.close();
                }
                source.stop();
                if let Some(tap) = &self.tap {
                    tap.run_ended();
                }
                self.events.try_iter().for_each(drop);
                Err(e)
            }
        }
    }

    /// What the running source has read of its input (None when none runs).
    pub(super) fn extent(&self) -> Option<Extent> {
        self.source.as_ref().map(Source::extent)
    }

    /// Stops the running source, if any, and forgets what it reported.
    pub(super) fn drop_source(&mut self) {
        if let Some(s) = self.source.take() {
            s.stop();
            if let Some(tap) = &self.tap {
                tap.run_ended();
            }
        }
        self.events.try_iter().for_each(drop);
    }
}

/// Waits for `source`'s first frame. An end or error that raced the first
/// frames is put back on `requeue` (a short file can end right after its
/// first frame).
fn first_frame(
    source: &Source,
    events: &Receiver<SourceEvent>,
    requeue: &Sender<SourceEvent>,
    limit: Duration,
    stop: &StopSignal,
) -> Result<VideoInfo, FirstFrameError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(info) = source.info() {
            return Ok(info);
        }
        match stop.wait_on(events, LOOK) {
            Wake::Stop(_) => return Err(FirstFrameError::Stopped),
            Wake::Item(event) if source.info().is_some() => {
                let _ = requeue.send(event);
            }
            Wake::Item(SourceEvent::Eos) => return Err(FirstFrameError::Ended { uri: source.uri().to_string() }),
            Wake::Item(SourceEvent::Error(e)) => return Err(e.into()),
            Wake::Idle => {}
        }
        if Instant::now() >= deadline {
            return Err(FirstFrameError::Silent { uri: source.uri().to_string(), waited: limit });
        }
    }
}

/// The size and rate of `settings`' frames, from a source started for its
/// first frame and stopped again; waits at most `limit`.
pub fn probe(settings: &SourceSettings, limit: Duration, stop: &StopSignal) -> Result<VideoInfo, FirstFrameError> {
    let (tx, events) = crossbeam_channel::unbounded();
    let source = Source::start(settings.clone(), Arc::new(Probe(tx.clone())))?;
    let found = first_frame(&source, &events, &tx, limit, stop);
    source.stop();
    found
}

/// Takes one frame and asks for no more.
struct Probe(Sender<SourceEvent>);

impl FrameHandler for Probe {
    fn on_frame(&self, _frame: crate::video::frame::DecodedFrame<'_>) -> FlowAction {
        FlowAction::Stop
    }
    fn on_eos(&self) {
        let _ = self.0.send(SourceEvent::Eos);
    }
    fn on_error(&self, err: SourceError) {
        let _ = self.0.send(SourceEvent::Error(err));
    }
}
