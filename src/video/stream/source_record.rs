//! `record = "source"`: the camera's own H.264/H.265, remuxed into the
//! stream's MP4 segments as it arrives, with no decode-annotate-encode.
//!
//! It is fed by the source's tap (before decoding), not by the output
//! stage, so it keeps every frame the camera sent, also those inference
//! dropped or skipped, and costs no encoder. Each source run (a reconnect,
//! a looped file's next pass) starts a new segment: its timeline starts
//! again and its caps may differ. A file can only begin at a keyframe, so
//! after a drop, a pause or a new run the units before the next keyframe are
//! passed over.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gstreamer as gst;

use super::sinks::{FileOutput, FileTarget, RecordInput};
use crate::video::output::{FrameSink, OutputError};
use crate::video::ring::FrameBuf;
use crate::video::sink::{EncodedInput, SinkError};
use crate::video::source::{EncodedTap, RunningTime};

/// Records one stream's source video. Shared by the source's tap (which
/// feeds it) and the stream's outputs (which report and finish it).
pub(super) struct SourceRecorder {
    stream: String,
    live: bool,
    state: Mutex<Recording>,
    /// Mirrors of the recording's counters, for readers that must not wait
    /// behind a unit being pushed.
    on_disk: AtomicU64,
    segments_closed: AtomicUsize,
    /// Why the recording is paused, while it is.
    paused: Mutex<Option<Arc<SinkError>>>,
}

struct Recording {
    target: FileTarget,
    /// Opened at the first keyframe.
    output: Option<FileOutput>,
    caps: Option<gst::Caps>,
    /// Subtracted from this run's running times so its file starts at 0.
    offset: Option<i64>,
    /// The next keyframe starts a new segment (new run or new caps).
    restart: bool,
    need_keyframe: bool,
    /// Finished, or given up for the annotated recording: units are ignored.
    closed: bool,
    dropped: u64,
    /// Its first start failed (logged once).
    open_failed: bool,
}

impl SourceRecorder {
    pub(super) fn new(stream: &str, target: FileTarget, live: bool) -> Arc<SourceRecorder> {
        Arc::new(SourceRecorder {
            stream: stream.to_string(),
            live,
            state: Mutex::new(Recording {
                target,
                output: None,
                caps: None,
                offset: None,
                restart: false,
                need_keyframe: true,
                closed: false,
                dropped: 0,
                open_failed: false,
            }),
            on_disk: AtomicU64::new(0),
            segments_closed: AtomicUsize::new(0),
            paused: Mutex::new(None),
        })
    }

    /// The source has shown H.264 or H.265 that can be recorded.
    pub(super) fn has_video(&self) -> bool {
        self.lock().caps.is_some()
    }

    /// Stops taking units (the stream records annotated frames instead).
    pub(super) fn give_up(&self) {
        self.lock().closed = true;
    }

    /// The sink the stream's output stage reports and finishes.
    pub(super) fn sink(self: &Arc<Self>) -> Box<dyn FrameSink> {
        Box::new(SourceRecording(self.clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_paused(&self, why: Option<Arc<SinkError>>) {
        *self.paused.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }

    fn record(&self, rec: &mut Recording, unit: gst::Buffer) {
        let input = || RecordInput::Encoded(EncodedInput { caps: rec.caps.clone().expect("caps come before units"), live: self.live });
        let opened: Result<(), OutputError> = match rec.output.as_mut() {
            // Once open, the recording pauses and resumes itself (FileOutput), logging once a pause.
            None => match FileOutput::open(rec.target.clone(), input()) {
                Ok(out) => {
                    tracing::info!(stream = %self.stream, file = %rec.target.path.display(), "recording the source's own video (no encode)");
                    rec.output = Some(out);
                    Ok(())
                }
                Err(e) => {
                    if !std::mem::replace(&mut rec.open_failed, true) {
                        tracing::warn!(stream = %self.stream, "cannot start recording the source's video: {e}; trying again at each keyframe");
                    }
                    Err(e.into())
                }
            },
            Some(out) if rec.restart => out.restart(input()),
            Some(_) => Ok(()),
        };
        rec.restart = false;
        if let Err(e) = opened {
            rec.need_keyframe = true;
            if let OutputError::File(why) | OutputError::Paused(why) = e {
                self.set_paused(Some(why));
            }
            return;
        }
        let out = rec.output.as_mut().expect("opened above");
        match out.write_encoded(unit) {
            Ok(true) => self.set_paused(None),
            Ok(false) => {
                rec.need_keyframe = true;
                rec.dropped += 1;
                if rec.dropped == 1 {
                    tracing::warn!(stream = %self.stream, "the source recording fell behind the camera; units were dropped up to the next keyframe");
                }
            }
            Err(OutputError::File(e) | OutputError::Paused(e)) => {
                rec.need_keyframe = true;
                self.set_paused(Some(e));
            }
            Err(e) => {
                tracing::error!(stream = %self.stream, "the source recording has ended: {e}");
                rec.closed = true;
            }
        }
        if let Some(out) = rec.output.as_ref() {
            self.on_disk.store(out.frames_on_disk().unwrap_or(0), Ordering::Relaxed);
            self.segments_closed.store(out.segments_closed(), Ordering::Relaxed);
        }
    }

    fn finish(&self, timeout: Duration) -> Result<Option<u64>, OutputError> {
        let mut rec = self.lock();
        rec.closed = true;
        if rec.dropped > 0 {
            tracing::warn!(stream = %self.stream, dropped = rec.dropped, "source recording: units dropped while the disk was behind");
        }
        match rec.output.take() {
            Some(out) => Box::new(out).finish(timeout),
            None => Ok(Some(0)),
        }
    }
}

impl EncodedTap for SourceRecorder {
    fn caps(&self, caps: &gst::Caps) {
        let mut rec = self.lock();
        if rec.closed || rec.caps.as_ref() == Some(caps) {
            return;
        }
        if rec.caps.is_some() {
            rec.restart = true;
            rec.need_keyframe = true;
        }
        rec.caps = Some(caps.clone());
    }

    fn unit(&self, unit: gst::Buffer, at: RunningTime) {
        let mut rec = self.lock();
        if rec.closed || rec.caps.is_none() {
            return;
        }
        let keyframe = !unit.flags().contains(gst::BufferFlags::DELTA_UNIT);
        if rec.need_keyframe && !keyframe {
            return;
        }
        rec.need_keyframe = false;
        // The run's first keyframe sets its zero: its DTS, before its PTS where
        // B-frames are reordered. DTS only grows and PTS never precedes it.
        let Some(first) = [at.pts, at.dts].into_iter().flatten().min() else { return };
        let offset = *rec.offset.get_or_insert(first);
        let from_zero = |t: Option<i64>| t.map(|t| gst::ClockTime::from_nseconds(u64::try_from(t - offset).unwrap_or(0)));
        let mut unit = unit.copy();
        {
            let unit = unit.make_mut();
            unit.set_pts(from_zero(at.pts));
            unit.set_dts(from_zero(at.dts));
        }
        self.record(&mut rec, unit);
    }

    fn run_ended(&self) {
        let mut rec = self.lock();
        rec.offset = None;
        rec.need_keyframe = true;
        rec.restart = rec.output.is_some();
    }
}

/// The source recording as one of the stream's sinks: it writes nothing per
/// annotated frame, but reports what is on disk, its pause, and is finished
/// with the others.
struct SourceRecording(Arc<SourceRecorder>);

impl FrameSink for SourceRecording {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn wants_pixels(&self) -> bool {
        false
    }
    fn write(&mut self, _frame: &FrameBuf) -> Result<(), OutputError> {
        match self.0.paused.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            Some(why) => Err(OutputError::Paused(why)),
            None => Ok(()),
        }
    }
    fn frames_on_disk(&self) -> Option<u64> {
        // Fresh when the recording is free, else as of its last unit.
        let now = self.0.state.try_lock().ok().and_then(|rec| rec.output.as_ref().and_then(|out| out.frames_on_disk()));
        if let Some(n) = now {
            self.0.on_disk.store(n, Ordering::Relaxed);
        }
        Some(self.0.on_disk.load(Ordering::Relaxed))
    }
    fn segments_closed(&self) -> usize {
        self.0.segments_closed.load(Ordering::Relaxed)
    }
    fn finish(self: Box<Self>, timeout: Duration) -> Result<Option<u64>, OutputError> {
        self.0.finish(timeout)
    }
}
