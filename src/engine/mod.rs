//! The per-frame inference path: preprocess -> model (one instance per scale)
//! -> logits averaged at the base resolution -> class/confidence per pixel,
//! written once for every backend (`frame_path.rs`). One `Engine` per worker;
//! the model weights inside are shared. Frames from several streams can also
//! run as one batched forward (`batch.rs`).
//!
//! This file only names the parts; none of them imports from it.

mod any;
mod batch;
#[cfg(feature = "cuda")]
mod cuda_load;
mod frame_path;
mod layout;
mod load;
mod pipeline;
mod spec;
mod state;

pub use any::AnyEngine;
pub use batch::BatchFilter;
pub use load::{load_cpu_engines, load_engines, load_engines_for};
pub use pipeline::{DEFAULT_CONFIDENCE_THRESHOLD, Engine, EngineError, EngineOptions, FrameTimings, LogitsFilter, Preset, scaled_size};
pub use layout::{chw_to_hwc, hwc_to_chw};
pub use spec::{LoadError, ModelSpec, batch_sizes, road_class_ids};

/// The frame types, where they were before they moved down to [`crate::frame`].
pub use crate::frame::{FrameError, FrameRef, PixelFormat, Segmentation, UNKNOWN};
