//! What every layer is built from and can fail with: [`Weights`] reads a
//! checkpoint tensor onto the backend, [`ModelError`] says what went wrong.

use crate::backend::{Backend, BackendError};
use crate::checkpoint::{Checkpoint, CheckpointError};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("input {width}x{height} is too small for this model: stage {stage} would be {h}x{w} (use a larger --size)")]
    InputTooSmall { width: usize, height: usize, stage: usize, h: usize, w: usize },
}

/// Checkpoint reader plus the backend parameters are uploaded to.
pub struct Weights<'a, B: Backend> {
    pub ckpt: &'a mut Checkpoint,
    pub backend: &'a B,
}

impl<B: Backend> Weights<'_, B> {
    pub fn param(&mut self, name: &str, shape: &[usize]) -> Result<B::Param, ModelError> {
        let values = self.ckpt.take(name, shape)?;
        self.upload(&values)
    }

    pub fn upload(&mut self, values: &[f32]) -> Result<B::Param, ModelError> {
        Ok(self.backend.param(values)?)
    }
}
