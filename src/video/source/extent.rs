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

/// A frame and a bit: the demuxer stops at a keyframe, and the announced
/// end and the last frame's end differ by rounding.
const EDIT_SLACK_S: f64 = 0.1;

impl Shortfall {
    /// True when what is missing is no more than `edit_start_s`, the seconds
    /// into its track at which an MP4's video starts (its edit list): what
    /// GStreamer 1.22's qtdemux leaves out of such a file (see
    /// `mp4_edit`), so the file itself may be whole.
    pub fn explained_by_edit_start(&self, edit_start_s: f64) -> bool {
        let missing_s = self.announced_ns.saturating_sub(self.read_ns) as f64 / 1e9;
        edit_start_s > 0.0 && missing_s <= edit_start_s + EDIT_SLACK_S
    }

    fn write_extent(&self, f: &mut fmt::Formatter<'_>, why: &str) -> fmt::Result {
        let secs = |ns: Nanos| ns as f64 / 1e9;
        write!(f, "the input stops at {:.2} s of the {:.2} s its container announces ({why}): ", secs(self.read_ns), secs(self.announced_ns))?;
        match self.expected_frames {
            Some(expected) => write!(f, "{} of {expected} frames read", self.frames),
            None => write!(f, "{} frames read", self.frames),
        }
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_extent(f, "truncated or damaged")
    }
}

/// A shortfall that the demuxer, not the file, explains: the message names
/// the edit list, the GStreamer version and the re-encode that avoids it.
pub struct EditListShortfall<'a> {
    pub shortfall: &'a Shortfall,
    pub edit_start_s: f64,
    /// The input as the user gave it, for the re-encode command.
    pub input: &'a str,
}

impl fmt::Display for EditListShortfall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shortfall.write_extent(f, "the demuxer's doing, the file is probably whole")?;
        let stem = std::path::Path::new(self.input).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "input".into());
        write!(
            f,
            "; its video starts {:.2} s into its track (an edit list, as a trim without re-encoding writes) and {}'s MP4 demuxer ends such a file up to that much early; \
             re-encode it to process every frame: ffmpeg -i {} -c:v libx264 -crf 18 {stem}-whole.mp4",
            self.edit_start_s,
            gstreamer::version_string(),
            self.input,
        )
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

    #[test]
    fn a_loss_no_longer_than_the_edit_start_is_put_down_to_the_demuxer() {
        // Rule: a shortfall of at most the MP4's edit start (plus a frame's slack) is explained by it, and the message says so with the re-encode command instead of calling the file damaged; a longer loss, or no edit start, is not explained.
        let s = Shortfall { read_ns: 6_500_000_000, announced_ns: 8_820_000_000, frames: 196, expected_frames: Some(265) };
        assert!(s.explained_by_edit_start(3.56));
        assert!(s.explained_by_edit_start(2.25), "2.32 s missing, 2.25 s start: within a frame's slack");
        assert!(!s.explained_by_edit_start(1.0), "2.32 s missing is more than a 1 s edit can lose");
        assert!(!s.explained_by_edit_start(0.0));
        gstreamer::init().unwrap();
        let line = EditListShortfall { shortfall: &s, edit_start_s: 3.56, input: "clips/road.mp4" }.to_string();
        assert!(line.contains("196 of 265 frames read") && line.contains("3.56 s into its track") && !line.contains("damaged"), "{line}");
        assert!(line.contains("ffmpeg -i clips/road.mp4 -c:v libx264 -crf 18 road-whole.mp4") && line.contains("GStreamer 1."), "{line}");
    }
}
