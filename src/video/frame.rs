//! A decoded video frame as it travels from the source to the sinks.

use std::time::Instant;

pub use crate::frame::PixelFormat;

/// Nanoseconds on the stream's own timeline (GStreamer running/PTS time).
pub type Nanos = u64;

/// A frame borrowed from the decoder (e.g. a mapped appsink buffer): RGBA,
/// or NV12's Y plane here and its interleaved UV plane in `chroma`, each
/// `stride` bytes per row.
#[derive(Clone, Copy, Debug)]
pub struct DecodedFrame<'a> {
    pub data: &'a [u8],
    pub width: u32,
    pub height: u32,
    pub stride: usize,
    pub format: PixelFormat,
    /// NV12's UV plane and its stride.
    pub chroma: Option<(&'a [u8], usize)>,
    pub pts: Option<Nanos>,
    pub duration: Option<Nanos>,
}

/// Timing of an output frame, carried unchanged from its input frame so the
/// output has the same timestamps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameTiming {
    pub pts: Option<Nanos>,
    pub duration: Option<Nanos>,
}

/// When a frame passed each stage on its way to the outputs, for the
/// per-stage latency histograms: stamped by the ring, the worker and the
/// output stage in turn (a stage not yet reached holds the previous stamp).
#[derive(Clone, Copy, Debug)]
pub struct StageTimes {
    /// The source offered the decoded frame to the ring.
    pub decoded: Instant,
    /// Queued in the ring, ready for a worker (files may wait for a slot).
    pub queued: Instant,
    /// Taken from the ring by a worker.
    pub taken: Instant,
    /// Inference done.
    pub inferred: Instant,
    /// Annotated and handed to the output stage.
    pub annotated: Instant,
    /// Its turn came in stream order (earlier frames written or skipped).
    pub in_order: Instant,
}

impl StageTimes {
    pub fn starting(at: Instant) -> StageTimes {
        StageTimes { decoded: at, queued: at, taken: at, inferred: at, annotated: at, in_order: at }
    }
}

/// Video caps negotiated by a source, known once the first frame arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VideoInfo {
    pub width: u32,
    pub height: u32,
    /// Frame rate as a fraction (0/1 when variable or unknown).
    pub fps_num: i32,
    pub fps_den: i32,
    /// How the frames' pixels are laid out (what outputs are opened for).
    pub format: PixelFormat,
}

/// The frame rate outputs are opened at when the source does not say
/// (variable-rate streams, some cameras): encoders and muxers need one.
pub const FALLBACK_FPS: (i32, i32) = (25, 1);

impl VideoInfo {
    /// The frame rate as a fraction, [`FALLBACK_FPS`] when unknown.
    pub fn frame_rate(&self) -> (i32, i32) {
        if self.fps_num > 0 && self.fps_den > 0 { (self.fps_num, self.fps_den) } else { FALLBACK_FPS }
    }

    /// This size at [`VideoInfo::frame_rate`].
    pub fn with_known_rate(self) -> VideoInfo {
        let (fps_num, fps_den) = self.frame_rate();
        VideoInfo { fps_num, fps_den, ..self }
    }
}
