//! What every layer is built from and can fail with: [`Weights`] reads a
//! checkpoint tensor onto the backend, [`ModelError`] says what went wrong.

use crate::backend::{Affine, Backend, BackendError};
use crate::checkpoint::{Checkpoint, CheckpointError};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("input {width}x{height} is too small for this model: stage {stage} would be {h}x{w} (use a larger --size)")]
    InputTooSmall { width: usize, height: usize, stage: usize, h: usize, w: usize },
    #[error("batch of {0} images: a model runs 1..={MAX_BATCH} at once")]
    Batch(usize),
}

/// Most images one model instance runs at once (`workers.batch`'s bound).
pub const MAX_BATCH: usize = 16;

/// Checkpoint reader plus the backend parameters are uploaded to.
pub struct Weights<'a, B: Backend> {
    pub ckpt: &'a mut Checkpoint,
    pub backend: &'a B,
}

impl<B: Backend> Weights<'_, B> {
    /// `{prefix}.weight` of `shape`, put in the backend's layout by `layout`,
    /// and `{prefix}.bias`, one per output (`shape[0]`, PyTorch's order).
    pub fn affine(&mut self, prefix: &str, shape: &[usize], layout: impl FnOnce(Vec<f32>) -> Vec<f32>) -> Result<Affine<B::Param>, ModelError> {
        let weight = self.ckpt.take(&format!("{prefix}.weight"), shape)?;
        let bias = self.ckpt.take(&format!("{prefix}.bias"), &shape[..1])?;
        Ok(Affine { weight: self.upload(&layout(weight))?, bias: self.upload(&bias)? })
    }

    pub fn upload(&mut self, values: &[f32]) -> Result<B::Param, ModelError> {
        Ok(self.backend.param(values)?)
    }
}
