//! The source's own video, before it is decoded: what `record = "source"`
//! writes to disk with no encode.
//!
//! decodebin puts a parser (h264parse, h265parse) in front of the decoder;
//! a probe on its output sees every access unit in decode order, the caps
//! (with `codec_data`) before the first, and the segment that turns their
//! timestamps into running time. The units are handed on by reference, not
//! copied, and the decode path is not touched.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;

/// Receives a source's own video on its streaming thread. Must return
/// quickly for a live source (a camera does not wait).
pub trait EncodedTap: Send + Sync + 'static {
    /// The video's caps: before its first unit, and again when they change.
    fn caps(&self, caps: &gst::Caps);
    /// One access unit (its own timestamps as the demuxer or depayloader
    /// set them) and when it runs.
    fn unit(&self, unit: gst::Buffer, at: RunningTime);
    /// The source run that fed this tap has stopped (the stream reconnects,
    /// replays a looped file or ends); the next run starts a new timeline.
    fn run_ended(&self);
}

/// A unit's PTS and DTS in the source's running time, in ns. Either may be
/// negative: with B-frames a stream's first DTS comes before its start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunningTime {
    pub pts: Option<i64>,
    pub dts: Option<i64>,
}

/// Parsers whose output can be remuxed into MP4.
const PARSERS: &[&str] = &["h264parse", "h265parse"];

/// Taps the first H.264/H.265 parser that `uridecodebin` (or any bin
/// inside it) adds.
pub(super) fn attach(dec: &gst::Element, tap: Arc<dyn EncodedTap>) {
    let Some(bin) = dec.downcast_ref::<gst::Bin>() else { return };
    let tapped = Arc::new(AtomicBool::new(false));
    bin.connect_deep_element_added(move |_, _, element| {
        let is_parser = element.factory().is_some_and(|f| PARSERS.contains(&f.name().as_str()));
        if !is_parser || tapped.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(src) = element.static_pad("src") else { return };
        let tap = tap.clone();
        let segment: Mutex<Option<gst::FormattedSegment<gst::ClockTime>>> = Mutex::new(None);
        src.add_probe(gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST | gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
            match &info.data {
                Some(gst::PadProbeData::Event(ev)) => match ev.view() {
                    gst::EventView::Caps(c) => tap.caps(&c.caps_owned()),
                    gst::EventView::Segment(s) => {
                        *segment.lock().unwrap_or_else(|e| e.into_inner()) = s.segment().downcast_ref::<gst::ClockTime>().cloned();
                    }
                    _ => {}
                },
                Some(gst::PadProbeData::Buffer(b)) => {
                    let seg = segment.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    tap.unit(b.clone(), running_time(b, seg.as_ref()));
                }
                Some(gst::PadProbeData::BufferList(list)) => {
                    let seg = segment.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    for b in list.iter_owned() {
                        let at = running_time(&b, seg.as_ref());
                        tap.unit(b, at);
                    }
                }
                _ => {}
            }
            gst::PadProbeReturn::Ok
        });
    });
}

/// When `b` runs: its timestamps through `segment` (as they are without one).
fn running_time(b: &gst::Buffer, segment: Option<&gst::FormattedSegment<gst::ClockTime>>) -> RunningTime {
    let signed = |t: Option<gst::ClockTime>| -> Option<i64> {
        let t = t?;
        let Some(seg) = segment else { return i64::try_from(t.nseconds()).ok() };
        match seg.to_running_time_full(t)? {
            gst::Signed::Positive(v) => i64::try_from(v.nseconds()).ok(),
            gst::Signed::Negative(v) => i64::try_from(v.nseconds()).ok().map(|v| -v),
        }
    };
    RunningTime { pts: signed(b.pts()), dts: signed(b.dts()) }
}
