//! An engine on whichever backend the device resolved to, so commands, the
//! worker pool and the daemon are written once.

use super::batch::BatchFilter;
use super::pipeline::{Engine, EngineError, EngineOptions, FrameTimings, LogitsFilter};
use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
#[cfg(feature = "cuda")]
use crate::backend::cuda::CudaBackend;
use crate::frame::{FrameOverlay, FrameRef, Segmentation};
#[cfg(feature = "cuda")]
use half::{bf16, f16};

pub enum AnyEngine {
    Cpu(Engine<CpuBackend>),
    #[cfg(feature = "cuda")]
    CudaF16(Engine<CudaBackend<f16>>),
    #[cfg(feature = "cuda")]
    CudaBf16(Engine<CudaBackend<bf16>>),
    #[cfg(feature = "cuda")]
    CudaF32(Engine<CudaBackend<f32>>),
}

macro_rules! each {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            AnyEngine::Cpu($e) => $body,
            #[cfg(feature = "cuda")]
            AnyEngine::CudaF16($e) => $body,
            #[cfg(feature = "cuda")]
            AnyEngine::CudaBf16($e) => $body,
            #[cfg(feature = "cuda")]
            AnyEngine::CudaF32($e) => $body,
        }
    };
}

impl AnyEngine {
    pub fn options(&self) -> &EngineOptions {
        each!(self, e => e.options())
    }

    pub fn labels(&self) -> &[String] {
        each!(self, e => e.labels())
    }

    pub fn num_labels(&self) -> usize {
        each!(self, e => e.num_labels())
    }

    pub fn logits_size(&self) -> (usize, usize) {
        each!(self, e => e.logits_size())
    }

    /// The shape of the logits a [`LogitsFilter`] is handed.
    pub fn logits_grid(&self) -> crate::temporal::LogitsGrid {
        let (width, height) = self.logits_size();
        crate::temporal::LogitsGrid { width, height, labels: self.labels().len() }
    }

    pub fn logits(&self) -> &[f32] {
        each!(self, e => e.logits())
    }

    pub fn segmentation(&self) -> &Segmentation {
        each!(self, e => e.segmentation())
    }

    pub fn timings(&self) -> FrameTimings {
        each!(self, e => e.timings())
    }

    /// The backend in words (device, precision).
    pub fn describe(&self) -> String {
        each!(self, e => e.backend().describe())
    }

    pub fn run_frame(&mut self, frame: &FrameRef<'_>) -> Result<&Segmentation, EngineError> {
        each!(self, e => e.run_frame(frame))
    }

    pub fn run_frame_filtered(&mut self, frame: &FrameRef<'_>, filter: Option<LogitsFilter<'_>>) -> Result<&Segmentation, EngineError> {
        each!(self, e => e.run_frame_filtered(frame, filter))
    }

    /// Up to [`crate::model::MAX_BATCH`] frames as one batched forward, their
    /// segmentations in order (see `engine/batch.rs`); `timings()` is then
    /// the whole batch's.
    pub fn run_batch(&mut self, frames: &[FrameRef<'_>], filter: Option<BatchFilter<'_>>) -> Result<&[Segmentation], EngineError> {
        each!(self, e => e.run_batch(frames, filter))
    }

    /// Builds these batch sizes' model instances now (see `engine/batch.rs`).
    pub fn prepare_batches(&mut self, sizes: &[usize]) -> Result<(), EngineError> {
        each!(self, e => e.prepare_batches(sizes))
    }

    /// The batch sizes whose model instance exists, ascending (1 first).
    pub fn batch_sizes_ready(&self) -> Vec<usize> {
        each!(self, e => e.batch_sizes_ready())
    }

    /// The segmentations of the last successful `run_batch`.
    pub fn batch_segmentations(&self) -> &[Segmentation] {
        each!(self, e => e.batch_segmentations())
    }

    pub fn run_normalized(&mut self, hwc: &[f32]) -> Result<&[f32], EngineError> {
        each!(self, e => e.run_normalized(hwc))
    }

    /// Keeps each frame's averaged logits on the host (`logits()`), at the
    /// cost of a round trip between the model and postprocessing.
    pub fn keep_logits(&mut self, keep: bool) {
        each!(self, e => e.set_keep_logits(keep))
    }

    /// Whether the backend draws overlays in its frame path ([`Engine::set_overlays`]).
    pub fn annotates_frames(&self) -> bool {
        each!(self, e => e.annotates_frames())
    }

    /// Overlays for the next run's frames (see [`Engine::set_overlays`]).
    pub fn set_overlays(&mut self, overlays: &[FrameOverlay]) {
        each!(self, e => e.set_overlays(overlays))
    }

    /// Overlays for the next run's frames, None for a frame not to draw (see [`Engine::set_overlays_where`]).
    pub fn set_overlays_where(&mut self, overlays: &[Option<FrameOverlay>]) {
        each!(self, e => e.set_overlays_where(overlays))
    }

    /// Frame `i` of the last run, drawn with its overlay, where the backend drew it.
    pub fn annotated(&self, i: usize) -> Option<&[u8]> {
        each!(self, e => e.annotated(i))
    }

    /// The CPU backend, for its op profile (`roadseg bench --profile-ops`).
    pub fn cpu_backend(&self) -> Option<&CpuBackend> {
        match self {
            AnyEngine::Cpu(e) => Some(e.backend()),
            #[cfg(feature = "cuda")]
            _ => None,
        }
    }
}

impl From<Engine<CpuBackend>> for AnyEngine {
    fn from(e: Engine<CpuBackend>) -> Self {
        AnyEngine::Cpu(e)
    }
}
