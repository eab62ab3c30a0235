//! How long the encoder holds each frame. The encoder runs on GStreamer's
//! streaming thread, so a push returning says nothing about it: each pushed
//! frame's PTS is noted with the time, and matched when the encoded frame
//! reaches `h264parse` (a buffer probe on its sink pad). No encoder in
//! pipelines/encoders.txt makes B-frames, so frames leave in the order they
//! went in and a frame the encoder dropped is simply passed over.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use gstreamer as gst;
use gstreamer::prelude::*;

use super::frame::Nanos;

/// Frames noted and not yet seen leaving the encoder; older ones are
/// forgotten (an encoder never holds this many with zerolatency settings).
const PENDING_MAX: usize = 256;
/// Measurements not yet collected; the oldest give way.
const DONE_MAX: usize = 256;

pub struct EncodeClock {
    pending: Mutex<VecDeque<(Nanos, Instant)>>,
    done: ArrayQueue<Duration>,
}

impl EncodeClock {
    pub fn new() -> Arc<EncodeClock> {
        Arc::new(EncodeClock { pending: Mutex::new(VecDeque::with_capacity(PENDING_MAX)), done: ArrayQueue::new(DONE_MAX) })
    }

    /// Starts timing `element`'s input (the element after the encoder):
    /// every buffer reaching it ends the measurement of its PTS.
    pub fn watch(self: &Arc<Self>, element: &gst::Element) -> bool {
        let Some(pad) = element.static_pad("sink") else { return false };
        let clock = Arc::downgrade(self);
        pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
            if let (Some(clock), Some(pts)) = (clock.upgrade(), info.buffer().and_then(|b| b.pts())) {
                // Encoders shift timestamps (GstVideoEncoder adds 1000 h so DTS
                // can precede PTS) and move the segment with them: the running
                // time is what still equals the PTS the appsrc sent.
                let segment = pad.sticky_event::<gst::event::Segment>(0);
                let running = segment.as_ref().and_then(|s| s.segment().downcast_ref::<gst::ClockTime>()).and_then(|s| s.to_running_time(pts));
                if let Some(running) = running {
                    clock.encoded(running.nseconds());
                }
            }
            gst::PadProbeReturn::Ok
        })
        .is_some()
    }

    /// A frame with this PTS is about to enter the encoding pipeline.
    pub fn pushed(&self, pts: Nanos) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= PENDING_MAX {
            pending.pop_front();
        }
        pending.push_back((pts, Instant::now()));
    }

    fn encoded(&self, pts: Nanos) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(&(noted, at)) = pending.front() {
            if noted > pts {
                break;
            }
            pending.pop_front();
            if noted == pts {
                self.done.force_push(at.elapsed());
                break;
            }
        }
    }

    /// Hands over (and forgets) every measurement taken since the last call.
    pub fn drain(&self, each: &mut dyn FnMut(Duration)) {
        while let Some(took) = self.done.pop() {
            each(took);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_matched_by_pts_and_dropped_ones_passed_over() {
        let clock = EncodeClock::new();
        for pts in [0, 40, 80, 120] {
            clock.pushed(pts);
        }
        std::thread::sleep(Duration::from_millis(5));
        clock.encoded(0);
        clock.encoded(80); // 40 was dropped by the encoder
        clock.encoded(80); // a repeat matches nothing
        let mut took = Vec::new();
        clock.drain(&mut |d| took.push(d));
        assert_eq!(took.len(), 2);
        assert!(took.iter().all(|d| *d >= Duration::from_millis(5)), "{took:?}");
        assert_eq!(clock.pending.lock().unwrap().iter().map(|p| p.0).collect::<Vec<_>>(), [120]);
    }

    #[test]
    fn pending_frames_are_bounded() {
        let clock = EncodeClock::new();
        for pts in 0..(PENDING_MAX as u64 + 10) {
            clock.pushed(pts);
        }
        assert_eq!(clock.pending.lock().unwrap().len(), PENDING_MAX);
        assert_eq!(clock.pending.lock().unwrap().front().unwrap().0, 10);
    }
}
