//! Video in and out (GStreamer) and the streaming pipeline between them.

pub mod encoder;
pub mod frame;
mod launch;
pub mod source;
mod rgba;
pub mod sink;
pub mod rtsp;
