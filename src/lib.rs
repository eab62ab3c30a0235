//! roadseg: road segmentation of live video with SegFormer.
//!
//! The engine (checkpoint loading, the model, backends, pre/post-processing)
//! works without any video code; the `video` feature adds the daemon.

pub mod backend;
pub mod annotate;
pub mod checkpoint;
pub mod clock;
pub mod device;
pub mod disk;
pub mod engine;
pub mod eval;
pub mod exposure;
pub mod frame;
pub mod host_memory;
pub mod hub;
pub mod images;
pub mod input_size;
pub mod model;
pub mod npy;
pub mod synth;
pub mod temporal;
/// Test support: counted skips (tools/test-skips.sh).
#[doc(hidden)]
pub mod test_skip;
pub mod worker_count;

#[cfg(feature = "video")]
pub mod daemon;
#[cfg(feature = "video")]
pub mod video;
