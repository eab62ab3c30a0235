//! Video in and out (GStreamer) and the streaming pipeline between them.

pub mod frame;
