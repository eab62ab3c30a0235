//! A stream's sinks: the MP4 recording (which pauses and resumes when its
//! folder fails) and the RTSP feed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::video::frame::VideoInfo;
use crate::video::output::{FrameSink, OutputError};
use crate::video::ring::FrameBuf;
use crate::video::rtsp::RtspFeed;
use crate::video::sink::{EncodedInput, FileSink, FileSinkSettings, SinkError, SinkInput};

/// How often a failed segmented recording tries to start again.
const REOPEN_EVERY: Duration = Duration::from_secs(2);
/// Free space a paused recording waits for before it starts a new file:
/// below it the file would fail again at once, leaving an empty one.
const MIN_FREE_TO_RESUME: u64 = 1 << 20;

/// Writes frames into an MP4 (one file or rotating segments). A segmented
/// recording that fails (folder deleted, disk full) is paused, not ended:
/// every [`REOPEN_EVERY`] it starts again, numbering on from where it
/// stopped, once the problem has cleared.
pub(super) struct FileOutput {
    sink: Option<FileSink>,
    reopen: Option<Reopen>,
    /// Frames on disk in the files of sinks closed before `sink`.
    on_disk_before: u64,
    /// With `max_fps`: frames earlier than this timestamp are not recorded.
    pacer: Option<Pacer>,
}

const PACER_SLACK_NS: u64 = 2_000_000;

/// Keeps a recording to at most one frame per `interval_ns` of the frames'
/// timestamps, without drift: each kept frame moves the next due time on by
/// one interval (or to one interval after it, after a gap).
struct Pacer {
    interval_ns: u64,
    next_due: Option<u64>,
}

impl Pacer {
    fn keep(&mut self, pts: Option<u64>) -> bool {
        let Some(pts) = pts else { return true };
        match self.next_due {
            // A little slack: timestamps of 1/30 s frames are rounded to the
            // nanosecond, so six of them fall a few ns short of 1/5 s.
            Some(due) if pts + PACER_SLACK_NS < due => false,
            due => {
                let next = due.map_or(pts, |d| d + self.interval_ns);
                self.next_due = Some(if next <= pts { pts + self.interval_ns } else { next });
                true
            }
        }
    }
}

/// What a recording is made of.
#[derive(Clone)]
pub(super) enum RecordInput {
    /// Annotated frames of this size and rate, encoded.
    Frames(VideoInfo),
    /// The source's own video, remuxed.
    Encoded(EncodedInput),
}

struct Reopen {
    target: FileTarget,
    input: RecordInput,
    next_index: u32,
    retry_at: Instant,
    /// What paused the recording (None until it first fails).
    last_error: Option<Arc<SinkError>>,
    /// It was paused for want of space: resuming waits for free space.
    disk_full: bool,
}

impl FileOutput {
    /// Opens `target` for frames of `info`. Segments are restarted after a
    /// failure; one file ends at its first error (reopening would overwrite it).
    pub(super) fn open(target: FileTarget, input: RecordInput) -> Result<Self, SinkError> {
        let sink = open_file_sink_at(&target, &input, 0)?;
        let pacer = target.max_fps.filter(|&f| f > 0.0).map(|fps| Pacer { interval_ns: (1e9 / fps) as u64, next_due: None });
        let reopen = target.segment_seconds.map(|_| Reopen { target, input, next_index: 0, retry_at: Instant::now(), last_error: None, disk_full: false });
        Ok(FileOutput { sink: Some(sink), reopen, on_disk_before: 0, pacer })
    }

    /// Writes one unit of the source's own video (see [`FileSink::push_encoded`]);
    /// false when it was dropped. A paused recording starts again only at a
    /// keyframe: a file cannot begin mid-GOP.
    pub(super) fn write_encoded(&mut self, unit: gstreamer::Buffer) -> Result<bool, OutputError> {
        if self.sink.is_none() {
            if unit.flags().contains(gstreamer::BufferFlags::DELTA_UNIT) {
                return Ok(false);
            }
            self.try_reopen()?;
        }
        let sink = self.sink.as_mut().expect("opened above");
        match sink.push_encoded(unit) {
            Ok(pushed) => Ok(pushed),
            Err(e) => Err(self.pause(e)),
        }
    }

    /// Ends the open file and starts the next segment for `input` (the
    /// source's video restarted: a new timeline, perhaps new caps). A single
    /// file cannot go on (reopening it would overwrite it).
    pub(super) fn restart(&mut self, input: RecordInput) -> Result<(), OutputError> {
        if self.reopen.is_none() {
            return Err(OutputError::Ended);
        }
        self.close_open(Duration::from_secs(5), 0);
        let r = self.reopen.as_mut().expect("checked above");
        r.input = input;
        r.retry_at = Instant::now();
        r.last_error = None;
        self.try_reopen()
    }

    /// Finishes the open sink, if any (what it wrote stays, and counts in
    /// `on_disk_before`), numbering the next start after its segments and
    /// `skip` more. The file that was open, if any.
    fn close_open(&mut self, timeout: Duration, skip: u32) -> Option<PathBuf> {
        let sink = self.sink.take()?;
        let open = sink.open_file();
        let on_disk = sink.frames_on_disk();
        let finished = sink.finish(timeout);
        if let Ok(f) = &finished {
            f.files.iter().for_each(|file| tracing::info!(file = %file.display(), "recording finalised"));
        }
        self.on_disk_before += finished.as_ref().map_or(on_disk, |f| f.frames);
        if let Some(r) = self.reopen.as_mut() {
            r.next_index += finished.map_or(1, |f| f.files.len() as u32 + skip);
        }
        open
    }

    /// The failed sink is closed (what it finished stays) and the next start
    /// numbered after every segment it may have begun.
    fn pause(&mut self, err: SinkError) -> OutputError {
        let Some(r) = self.reopen.as_ref() else { return err.into() };
        let err = Arc::new(err);
        let was_paused = r.last_error.is_some() && self.sink.is_none();
        let disk_full = OutputError::Paused(err.clone()).is_disk_full() || space_left(&r.target).is_some_and(|free| free < MIN_FREE_TO_RESUME);
        // A file begun as the disk filled holds nothing: it goes.
        if let Some(f) = self.close_open(Duration::from_secs(1), 1).filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() == 0)) {
            let _ = std::fs::remove_file(&f);
        }
        let r = self.reopen.as_mut().expect("checked above");
        r.disk_full = disk_full;
        // One warning per pause, not one per failed retry.
        if !was_paused {
            match r.disk_full {
                true => tracing::warn!(file = %r.target.path.display(), "recording paused: disk full ({err}); it resumes once {} MiB are free", MIN_FREE_TO_RESUME >> 20),
                false => tracing::warn!(file = %r.target.path.display(), "recording paused: {err}; retrying every {} s", REOPEN_EVERY.as_secs()),
            }
        }
        r.retry_at = Instant::now() + REOPEN_EVERY;
        r.last_error = Some(err.clone());
        OutputError::File(err)
    }

    fn try_reopen(&mut self) -> Result<(), OutputError> {
        let Some(r) = self.reopen.as_mut() else { return Err(OutputError::Ended) };
        if let Some(err) = r.last_error.as_ref().filter(|_| Instant::now() < r.retry_at) {
            return Err(OutputError::Paused(err.clone()));
        }
        if r.disk_full && space_left(&r.target).is_some_and(|free| free < MIN_FREE_TO_RESUME) {
            r.retry_at = Instant::now() + REOPEN_EVERY;
            return Err(OutputError::Paused(r.last_error.clone().expect("disk_full is set with the error")));
        }
        // Skip numbers already on disk: a resumed recording never overwrites.
        let name = |i: u32| PathBuf::from(r.target.path.to_string_lossy().replace("%05d", &format!("{i:05}")).replace("%%", "%"));
        while !r.target.wall_clock_names && name(r.next_index).exists() {
            r.next_index += 1;
        }
        match open_file_sink_at(&r.target, &r.input, r.next_index) {
            Ok(sink) => {
                tracing::info!(file = %r.target.path.display(), first_segment = r.next_index, "recording resumed");
                self.sink = Some(sink);
                Ok(())
            }
            Err(e) => Err(self.pause(e)),
        }
    }
}

impl FrameSink for FileOutput {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn write(&mut self, f: &FrameBuf) -> Result<(), OutputError> {
        if let Some(p) = self.pacer.as_mut()
            && !p.keep(f.timing.pts)
        {
            return Ok(());
        }
        if self.sink.is_none() {
            self.try_reopen()?;
        }
        let sink = self.sink.as_mut().expect("opened above");
        match sink.push(&f.data, f.stride(), f.timing) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.pause(e)),
        }
    }
    fn encode_times(&self, each: &mut dyn FnMut(Duration)) {
        if let Some(sink) = &self.sink {
            sink.encode_times(each);
        }
    }
    fn frames_on_disk(&self) -> Option<u64> {
        Some(self.on_disk_before + self.sink.as_ref().map_or(0, FileSink::frames_on_disk))
    }
    fn segments_closed(&self) -> usize {
        self.sink.as_ref().map_or(0, FileSink::segments_closed)
    }
    fn finish(self: Box<Self>, timeout: Duration) -> Result<Option<u64>, OutputError> {
        let Some(sink) = self.sink else {
            // Paused at the stop: nothing is open. A full disk that has since
            // been freed is no error now; anything else still is.
            return match self.reopen {
                Some(r) if r.disk_full && space_left(&r.target).is_some_and(|free| free >= MIN_FREE_TO_RESUME) => {
                    tracing::info!(file = %r.target.path.display(), "recording was paused for a full disk at the stop (space is free again); its finished segments stay");
                    Ok(Some(self.on_disk_before))
                }
                r => Err(r.and_then(|r| r.last_error).map_or(OutputError::Failed, OutputError::File)),
            };
        };
        let files = sink.finish(timeout)?;
        for (i, f) in files.files.iter().enumerate() {
            match files.segment_frames.get(i) {
                Some(frames) => tracing::info!(file = %f.display(), frames, "recording finalised"),
                None => tracing::info!(file = %f.display(), "recording finalised"),
            }
        }
        Ok(Some(self.on_disk_before + files.frames))
    }
}

/// Serves frames to RTSP clients (dropped when nobody watches).
pub(super) struct RtspOutput(pub RtspFeed);

impl FrameSink for RtspOutput {
    fn kind(&self) -> &'static str {
        "rtsp"
    }
    fn wants_pixels(&self) -> bool {
        self.0.has_clients()
    }
    fn write(&mut self, f: &FrameBuf) -> Result<(), OutputError> {
        self.0.push(&f.data, f.stride(), f.timing)?;
        Ok(())
    }
    fn finish(self: Box<Self>, _timeout: Duration) -> Result<Option<u64>, OutputError> {
        Ok(None)
    }
}

/// Where a stream's file output goes.
#[derive(Clone, Debug)]
pub struct FileTarget {
    pub path: PathBuf,
    pub segment_seconds: Option<u32>,
    /// H.264 target bitrate.
    pub bitrate_kbps: u32,
    /// `path` is a strftime pattern: segments named for their start (UTC).
    pub wall_clock_names: bool,
    /// Record at most this many frames a second (by the frames' timestamps);
    /// the others are not encoded. None: every frame.
    pub max_fps: Option<f64>,
    /// Record this many pixels wide (height from the frames' aspect, even),
    /// when narrower than the frames. None: the frames' own size.
    pub width: Option<u32>,
}

impl FileTarget {
    /// One file at the default bitrate.
    pub fn single(path: PathBuf) -> Self {
        FileTarget { path, segment_seconds: None, bitrate_kbps: DEFAULT_BITRATE_KBPS, wall_clock_names: false, max_fps: None, width: None }
    }

    /// A sink writing frames of `info` here (for writers that are not a
    /// stream, such as `synth`), its folder made.
    pub fn open(&self, info: VideoInfo) -> Result<FileSink, SinkError> {
        open_file_sink_at(self, &RecordInput::Frames(info), 0)
    }
}

/// `width` wide at the frames' aspect, both even (H.264's 4:2:0 wants it);
/// None when that is not smaller than the frames.
fn recording_size(width: u32, frame_w: u32, frame_h: u32) -> Option<(u32, u32)> {
    let w = width & !1;
    let h = ((u64::from(frame_h) * u64::from(w) / u64::from(frame_w.max(1))) as u32).max(2) & !1;
    (w >= 2 && w < frame_w).then_some((w, h))
}

/// Free bytes where `target` writes.
fn space_left(target: &FileTarget) -> Option<u64> {
    crate::disk::free_bytes_near(&target.path)
}

/// Encoder bitrate when none is configured (about 43 GB a day).
pub const DEFAULT_BITRATE_KBPS: u32 = 4000;

/// Opens the file sink for `input`, making its folder, numbering segments
/// from `start_index`.
fn open_file_sink_at(target: &FileTarget, input: &RecordInput, start_index: u32) -> Result<FileSink, SinkError> {
    // Wall-clock folders are made per segment, by the sink.
    if let Some(dir) = target.path.parent().filter(|d| !d.as_os_str().is_empty() && !target.wall_clock_names) {
        std::fs::create_dir_all(dir).map_err(|source| SinkError::CreateDir { dir: dir.into(), source })?;
    }
    let info = match input {
        RecordInput::Frames(info) => *info,
        RecordInput::Encoded(encoded) => {
            let mut settings = FileSinkSettings::new(target.path.clone(), 0, 0, (0, 1));
            settings.input = SinkInput::Encoded(encoded.clone());
            settings.segment_seconds = target.segment_seconds;
            settings.wall_clock_names = target.wall_clock_names;
            settings.start_index = start_index;
            return FileSink::start(settings);
        }
    };
    // Caps say the recorded rate: the encoder sizes each frame's bits by it.
    let fps = match target.max_fps {
        Some(max) if max < f64::from(info.fps_num) / f64::from(info.fps_den.max(1)) => ((max * 1000.0).round() as i32, 1000),
        _ => info.frame_rate(),
    };
    let mut settings = FileSinkSettings::new(target.path.clone(), info.width, info.height, fps);
    settings.scale_to = target.width.and_then(|w| recording_size(w, info.width, info.height));
    settings.format = info.format;
    settings.segment_seconds = target.segment_seconds;
    settings.encoder.bitrate_kbps = target.bitrate_kbps;
    settings.wall_clock_names = target.wall_clock_names;
    settings.start_index = start_index;
    FileSink::start(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_recording_keeps_one_frame_per_interval_without_drift() {
        // Rule: record_fps keeps the first frame at or after each due time, due times advance by exactly one interval (no drift at 30 -> 5 fps), and a gap restarts them.
        let mut p = Pacer { interval_ns: 200_000_000, next_due: None };
        let frame = 1_000_000_000 / 30;
        let kept: Vec<u64> = (0..61u64).filter(|i| p.keep(Some(i * frame))).collect();
        assert_eq!(kept, (0..=60).step_by(6).collect::<Vec<u64>>(), "30 fps to 5 fps: every 6th frame");
        assert!(p.keep(Some(100 * frame)) && !p.keep(Some(100 * frame + 1)), "after a gap the next due time starts again");
        assert!(p.keep(None), "untimed frames are kept");
        assert_eq!(recording_size(640, 1280, 720), Some((640, 360)));
        assert_eq!(recording_size(641, 1920, 1080), Some((640, 360)));
        assert_eq!(recording_size(1280, 1280, 720), None, "not smaller: no scaling");
        assert_eq!(recording_size(500, 1000, 333), Some((500, 166)));
    }
}
