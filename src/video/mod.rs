//! Video in and out (GStreamer) and the streaming pipeline between them.

pub mod frame;
pub mod annotate;
mod font;
pub mod reorder;
pub mod ring;

pub mod pool;
pub mod output;
pub mod stream;
