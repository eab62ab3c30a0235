//! What a model folder becomes, shared by the CPU and CUDA loaders: the
//! [`ModelSpec`] asked for, the [`LoadError`] that names the folder, and
//! engines built on given backends around one loaded set of weights.

use std::path::Path;
use std::sync::Arc;

use super::pipeline::{Engine, EngineError, EngineOptions, Preset};
use crate::backend::Backend;
use crate::checkpoint::Checkpoint;
use crate::model::{ModelError, SegformerWeights};

/// Everything needed to turn a model folder into engines.
#[derive(Clone, Debug)]
pub struct ModelSpec<'a> {
    pub path: &'a Path,
    /// Model input (width, height).
    pub size: (usize, usize),
    pub preset: Preset,
    /// Class names counted as road (case-insensitive).
    pub road_classes: &'a [String],
    pub confidence_threshold: f32,
    /// CUDA: record each frame into a graph and replay it (false: the same
    /// kernels run eagerly, for debugging).
    pub cuda_graphs: bool,
    /// The most frames a worker runs as one batch (`[workers] batch`): each
    /// engine builds the model instances of [`batch_sizes`] of it at load.
    /// 1: single frames only.
    pub max_batch: usize,
    /// Dark frames brightened before inference (`crate::exposure`).
    pub exposure: crate::exposure::Exposure,
}

/// The batch sizes a worker runs for `max` frames at most: the powers of
/// two up to `max`, and `max`. Each size keeps its own model instance (on
/// CUDA its own graphs), so a few sizes bound that memory: 5 at most for 16
/// frames instead of 16.
pub fn batch_sizes(max: usize) -> Vec<usize> {
    let max = max.max(1);
    let mut sizes: Vec<usize> = (0..usize::BITS).map(|k| 1usize << k).take_while(|&n| n <= max).collect();
    if sizes.last() != Some(&max) {
        sizes.push(max);
    }
    sizes
}

#[derive(Debug, thiserror::Error)]
#[error("loading model {path}: {source}")]
pub struct LoadError {
    pub path: String,
    #[source]
    pub source: EngineError,
}

impl LoadError {
    /// Whether building ran out of GPU memory (the driver's or cuBLASLt's
    /// allocation failed).
    pub fn is_out_of_device_memory(&self) -> bool {
        #[cfg(feature = "cuda")]
        {
            use crate::backend::BackendError;
            use crate::backend::cuda::CudaError;
            use cudarc::cublaslt::sys::cublasStatus_t;
            use cudarc::driver::sys::CUresult;
            match &self.source {
                EngineError::Backend(BackendError::Cuda(CudaError::Driver(e))) => e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                EngineError::Backend(BackendError::Cuda(CudaError::Blas(e))) => e.0 == cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED,
                _ => false,
            }
        }
        #[cfg(not(feature = "cuda"))]
        false
    }
}

/// The indices of `names` among `labels`; warns when none matches.
pub fn road_class_ids(labels: &[String], names: &[String]) -> Vec<usize> {
    let ids: Vec<usize> = names.iter().filter_map(|n| labels.iter().position(|l| l.eq_ignore_ascii_case(n))).collect();
    if ids.is_empty() && !names.is_empty() {
        tracing::warn!("none of the road classes {names:?} is a label of this model; road coverage will be 0");
    }
    ids
}

fn options_for(spec: &ModelSpec<'_>, labels: &[String]) -> EngineOptions {
    EngineOptions {
        width: spec.size.0,
        height: spec.size.1,
        scales: spec.preset.scales(),
        road_classes: road_class_ids(labels, spec.road_classes),
        ego_class: crate::temporal::EgoClass::from_labels(labels),
        confidence_threshold: spec.confidence_threshold,
        exposure: spec.exposure,
        pixel_confidence: false,
    }
}

/// `source`, as the error of loading `spec`'s model.
pub(super) fn load_error(spec: &ModelSpec<'_>, source: impl Into<EngineError>) -> LoadError {
    LoadError { path: spec.path.display().to_string(), source: source.into() }
}

/// Opens the checkpoint and reads its weights onto `backend`.
pub(super) fn load_weights<B: Backend>(spec: &ModelSpec<'_>, backend: &B) -> Result<Arc<SegformerWeights<B>>, LoadError> {
    let mut ckpt = Checkpoint::open(spec.path).map_err(|e| load_error(spec, ModelError::Checkpoint(e)))?;
    SegformerWeights::load(&mut ckpt, backend).map_err(|e| load_error(spec, e))
}

/// Engines on `backends` (one each) sharing `weights`.
pub(super) fn engines_on<B: Backend>(
    spec: &ModelSpec<'_>,
    weights: &Arc<SegformerWeights<B>>,
    backends: Vec<Arc<B>>,
) -> Result<Vec<Engine<B>>, LoadError> {
    let options = options_for(spec, &weights.labels);
    backends
        .into_iter()
        .map(|b| {
            let mut engine = Engine::new(b, weights.clone(), options.clone())?;
            engine.prepare_batches(&batch_sizes(spec.max_batch))?;
            Ok(engine)
        })
        .collect::<Result<Vec<_>, EngineError>>()
        .map_err(|e| load_error(spec, e))
}
