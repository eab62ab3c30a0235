//! Keeps each encoded frame's duration through `h264parse`. The parser
//! rewrites every duration from the frame rate in the caps (or the stream's
//! timing info), so a recording fed below that rate (inference rate-limited
//! or overloaded) would give each frame 1/25 s and a segment would play
//! shorter than the stretch of stream it covers. A probe on the parser's
//! input notes each frame's duration by PTS; one on its output puts it back.
//! The parser passes frames one to one with their PTS unchanged.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;

/// Frames noted and not yet seen leaving the parser; older ones give way.
const PENDING_MAX: usize = 64;

/// Installs both probes on `parse`; false if it lacks a pad.
pub(super) fn keep_through(parse: &gst::Element) -> bool {
    let (Some(sink), Some(src)) = (parse.static_pad("sink"), parse.static_pad("src")) else { return false };
    let pending: Arc<Mutex<VecDeque<(gst::ClockTime, gst::ClockTime)>>> = Arc::default();
    let noted = pending.clone();
    sink.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if let Some((pts, duration)) = info.buffer().and_then(|b| Some((b.pts()?, b.duration()?))) {
            let mut q = noted.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() >= PENDING_MAX {
                q.pop_front();
            }
            q.push_back((pts, duration));
        }
        gst::PadProbeReturn::Ok
    });
    src.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        let Some(pts) = info.buffer().and_then(|b| b.pts()) else { return gst::PadProbeReturn::Ok };
        let found = {
            let mut q = pending.lock().unwrap_or_else(|e| e.into_inner());
            // Frames before this one that never came out (none, with au alignment) are passed over.
            while q.front().is_some_and(|(noted, _)| *noted < pts) {
                q.pop_front();
            }
            q.front().filter(|(noted, _)| *noted == pts).map(|&(_, d)| d)
        };
        if let (Some(duration), Some(buffer)) = (found, info.buffer_mut())
            && buffer.duration() != Some(duration)
        {
            buffer.make_mut().set_duration(duration);
        }
        gst::PadProbeReturn::Ok
    })
    .is_some()
}
