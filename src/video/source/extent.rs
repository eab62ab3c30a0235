//! How much of its input a source read, against what its container
//! announced: a truncated file (a copy cut short, a recording whose writer
//! died) decodes up to where its data stops and then ends like a whole one.
//! A demuxer that reads an index (an MP4's moov) still announces the video
//! track's full length as the stop of its segment, so a stream that ends
//! well short of it was cut. Containers without an index (MPEG-TS, most
//! live streams) announce no stop and are never judged.

use std::fmt;

use crate::video::frame::Nanos;

/// Ends closer than this to the announced end count as whole (a last frame
/// whose duration the decoder does not know, edit lists that trim a little).
const SLACK_NS: Nanos = 1_000_000_000;

/// Frames read and how far their timestamps reached, with the container's
/// duration when it announced one.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Extent {
    pub frames: u64,
    /// Latest PTS + duration among the frames read.
    pub read_ns: Option<Nanos>,
    /// Where the container says the video ends, on the frames' timeline
    /// (None for live streams and containers that do not say).
    pub announced_ns: Option<Nanos>,
    /// Frames a second, when the stream has a rate.
    pub fps: Option<f64>,
}

impl Extent {
    /// Notes a frame delivered at `pts` lasting `duration` (or one frame interval).
    pub(crate) fn note(&mut self, pts: Option<Nanos>, duration: Option<Nanos>) {
        self.frames += 1;
        let interval = self.fps.filter(|f| *f > 0.0).map(|f| (1e9 / f) as Nanos);
        if let Some(pts) = pts {
            let end = pts + duration.or(interval).unwrap_or(0);
            self.read_ns = Some(self.read_ns.map_or(end, |r| r.max(end)));
        }
    }

    /// Some when the frames stop well before the announced end.
    pub fn shortfall(&self) -> Option<Shortfall> {
        let announced = self.announced_ns.filter(|a| *a > 0)?;
        let read = self.read_ns.unwrap_or(0);
        (read + SLACK_NS < announced).then_some(Shortfall {
            read_ns: read,
            announced_ns: announced,
            frames: self.frames,
            expected_frames: self.fps.filter(|f| *f > 0.0).map(|f| (announced as f64 / 1e9 * f).round() as u64),
        })
    }
}

/// A stream that ended before the end its container announced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shortfall {
    pub read_ns: Nanos,
    pub announced_ns: Nanos,
    pub frames: u64,
    /// The announced duration at the stream's frame rate.
    pub expected_frames: Option<u64>,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = |ns: Nanos| ns as f64 / 1e9;
        write!(f, "the input stops at {:.2} s of the {:.2} s its container announces (truncated or damaged): ", secs(self.read_ns), secs(self.announced_ns))?;
        match self.expected_frames {
            Some(expected) => write!(f, "{} of {expected} frames read", self.frames),
            None => write!(f, "{} frames read", self.frames),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_ending_short_of_its_announced_duration_is_a_shortfall() {
        // Rule: frames that stop more than a second before the container's duration are reported with frames expected and read; an end within a second of it (audio outlasting video), or no announced duration (live), is not.
        let mut e = Extent { fps: Some(25.0), announced_ns: Some(8_000_000_000), ..Extent::default() };
        for i in 0..80 {
            e.note(Some(i * 40_000_000), None);
        }
        let s = e.shortfall().expect("80 of 200 frames");
        assert_eq!((s.frames, s.expected_frames, s.read_ns), (80, Some(200), 3_200_000_000));
        assert!(s.to_string().contains("80 of 200 frames read"), "{s}");
        for i in 80..180 {
            e.note(Some(i * 40_000_000), Some(40_000_000));
        }
        assert_eq!(e.shortfall(), None, "7.2 s of 8 s: within the slack");
        assert_eq!(Extent { announced_ns: None, ..e }.shortfall(), None);
        assert!(Extent { announced_ns: Some(8_000_000_000), ..Extent::default() }.shortfall().is_some(), "nothing read");
    }
}
