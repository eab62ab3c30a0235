//! The CUDA backend: fp16/bf16 (or f32, for checking) storage with f32
//! accumulation, GEMMs on cuBLASLt's tensor-core kernels, everything else in
//! NVRTC-compiled kernels from `kernels/`, and the model's forward recorded
//! once into a CUDA graph per (worker, input size) and replayed per frame.
//!
//! One [`CudaDevice`] per GPU holds the context and the compiled module; one
//! [`CudaBackend`] per worker owns its stream, its cuBLASLt handle and
//! workspace, and its graphs. Weights (`Param`) are shared read-only by all
//! workers on a GPU. Event tracking is off: each worker's buffers are used
//! only on its own stream, and weights are written once before any worker runs.

mod backend;
mod busy;
mod device;
mod elem;
pub(super) mod error;
mod frame;
mod host;
mod launch;
mod options;
pub mod kernels;
pub mod probe;

pub use self::backend::{CudaBackend, SplitPlan, plan_split};
pub use self::options::{CudaOptions, SyncWait};
pub use self::device::{CudaDevice, first_gpu};
pub use self::elem::{CudaElem, GemmElem};
pub use self::error::CudaError;
pub use self::frame::FrameArena;
pub use self::host::PinnedFrames;
pub use self::probe::{CudaInfo, CudaUnavailable, GpuInfo};
