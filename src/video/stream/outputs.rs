//! Where a stream's annotated frames go, as data, and opening it for the
//! frame size the source delivers.

use std::path::PathBuf;
use std::sync::Arc;

use super::sinks::{FileOutput, FileTarget, RecordInput, RtspOutput};
use super::source_record::SourceRecorder;
use crate::video::frame::VideoInfo;
use crate::video::output::{FrameSink, StatsError, StatsWriter};
use crate::video::rtsp::{RtspError, RtspServer};
use crate::video::sink::SinkError;

/// One place annotated frames go.
#[derive(Clone, Debug)]
pub enum OutputSpec {
    /// An MP4 recording of the annotated frames: one file, or segments (see [`FileTarget`]).
    File(FileTarget),
    /// An MP4 recording of the source's own H.264/H.265, remuxed (no
    /// encode), in segments; the annotated frames where the source has none.
    SourceFile(FileTarget),
    /// Served at `mount` (e.g. `/front`) on the RTSP server.
    Rtsp { mount: String, bitrate_kbps: u32 },
}

/// The JSON-lines sidecar, one line per written frame.
#[derive(Clone, Debug)]
pub enum StatsTarget {
    /// A new file (an existing one is replaced): one run, one file.
    Create(PathBuf),
    /// Appended to, so a restart never truncates it; every line names
    /// `stream`; with `masks`, every line carries the frame's road mask.
    Append { path: PathBuf, stream: String, masks: bool },
}

/// Why a stream's outputs could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    #[error("file output: {0}")]
    File(#[source] SinkError),
    #[error("stats output: {0}")]
    Stats(#[source] StatsError),
    #[error("rtsp output: the RTSP server is not running (rtsp.listen is empty)")]
    NoRtspServer,
    #[error("rtsp output: {0}")]
    Rtsp(#[source] RtspError),
}

/// Opened outputs, and the RTSP mounts to remove when the stream ends.
pub(super) struct Opened {
    pub sinks: Vec<Box<dyn FrameSink>>,
    pub stats: Option<StatsWriter>,
    pub mounts: Mounts,
}

/// RTSP mounts a stream added; removed together.
#[derive(Default)]
pub(super) struct Mounts {
    server: Option<Arc<RtspServer>>,
    paths: Vec<String>,
}

impl Mounts {
    pub(super) fn remove(&mut self, stream: &str) {
        let Some(server) = &self.server else { return };
        for path in self.paths.drain(..) {
            if let Err(e) = server.remove_stream(&path) {
                tracing::warn!(stream = %stream, "{e}");
            }
        }
    }
}

/// Opens every output of `stream` for frames of `info`. On failure nothing
/// stays open or mounted.
pub(super) fn open(
    stream: &str,
    outputs: &[OutputSpec],
    stats: Option<&StatsTarget>,
    info: VideoInfo,
    rtsp: Option<&Arc<RtspServer>>,
    recorder: Option<&Arc<SourceRecorder>>,
) -> Result<Opened, OutputsError> {
    let mut mounts = Mounts { server: rtsp.cloned(), paths: Vec::new() };
    let opened = open_each(stream, outputs, stats, info, &mut mounts, recorder);
    if opened.is_err() {
        mounts.remove(stream);
    }
    let (sinks, stats) = opened?;
    Ok(Opened { sinks, stats, mounts })
}

type Sinks = (Vec<Box<dyn FrameSink>>, Option<StatsWriter>);

fn open_each(
    stream: &str,
    outputs: &[OutputSpec],
    stats: Option<&StatsTarget>,
    info: VideoInfo,
    mounts: &mut Mounts,
    recorder: Option<&Arc<SourceRecorder>>,
) -> Result<Sinks, OutputsError> {
    let mut sinks: Vec<Box<dyn FrameSink>> = Vec::new();
    for output in outputs {
        match output {
            // It opens at the source's first keyframe, which may still be on its way.
            OutputSpec::SourceFile(_) if let Some(r) = recorder.filter(|r| r.has_video()) => sinks.push(r.sink()),
            OutputSpec::File(target) | OutputSpec::SourceFile(target) => {
                if let (OutputSpec::SourceFile(_), Some(r)) = (output, recorder) {
                    r.give_up();
                    tracing::warn!(
                        stream = %stream,
                        "record = \"source\": the source gives no H.264 or H.265 to remux (a test pattern, a raw or MJPEG camera, another codec); recording the annotated frames instead"
                    );
                }
                let file = FileOutput::open(target.clone(), RecordInput::Frames(info)).map_err(OutputsError::File)?;
                tracing::info!(stream = %stream, file = %target.path.display(), "recording");
                sinks.push(Box::new(file));
            }
            OutputSpec::Rtsp { mount, bitrate_kbps } => {
                let server = mounts.server.clone().ok_or(OutputsError::NoRtspServer)?;
                let feed = server
                    .add_stream_with(mount, info.with_known_rate(), &RtspServer::encoder(*bitrate_kbps))
                    .map_err(OutputsError::Rtsp)?;
                mounts.paths.push(mount.clone());
                sinks.push(Box::new(RtspOutput(feed)));
            }
        }
    }
    let stats = match stats {
        None => None,
        Some(StatsTarget::Create(path)) => Some(StatsWriter::create(path).map_err(OutputsError::Stats)?),
        Some(StatsTarget::Append { path, stream, masks }) => {
            Some(StatsWriter::append(path, stream).map_err(OutputsError::Stats)?.with_masks(*masks))
        }
    };
    Ok((sinks, stats))
}
