//! Video in and out (GStreamer) and the streaming pipeline between them:
//! source -> ring -> worker pool -> reorder -> annotate -> sinks.

pub mod demand;
mod disk_frames;
mod encode_clock;
pub mod encoder;
pub mod frame;
mod frame_lengths;
pub mod headless;
pub mod live;
pub mod mask_rle;
mod launch;
pub mod output;
pub mod pool;
pub mod reorder;
mod packed;
pub mod ring;
pub mod rtsp;
pub mod snapshot;
pub mod sink;
pub mod source;
pub mod stop;
pub mod stream;
pub mod uri;

pub use launch::GstError;
pub use packed::FrameSizeError;
