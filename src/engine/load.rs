//! Loading a checkpoint once and building several engines that share it
//! (one per worker), as every command and the daemon do.

use std::path::Path;
use std::sync::Arc;

use super::{AnyEngine, Engine, EngineError, EngineOptions, Preset};
use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::device::{Resolved, Target};
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
}

#[derive(Debug, thiserror::Error)]
#[error("loading model {path}: {source}")]
pub struct LoadError {
    pub path: String,
    #[source]
    pub source: EngineError,
}

/// The indices of `names` among `labels`; warns when none matches.
pub fn road_class_ids(labels: &[String], names: &[String]) -> Vec<usize> {
    let ids: Vec<usize> = names.iter().filter_map(|n| labels.iter().position(|l| l.eq_ignore_ascii_case(n))).collect();
    if ids.is_empty() && !names.is_empty() {
        tracing::warn!("none of the road classes {names:?} is a label of this model; road coverage will be 0");
    }
    ids
}

/// Loads the model once and builds `count` engines sharing its weights.
/// Returns the engines and the model's class names.
pub fn load_cpu_engines(spec: &ModelSpec<'_>, backend: CpuBackend, count: usize) -> Result<(Vec<Engine<CpuBackend>>, Vec<String>), LoadError> {
    let mut ckpt = open_checkpoint(spec)?;
    let backend = Arc::new(backend);
    let weights = SegformerWeights::load(&mut ckpt, &*backend).map_err(|e| load_error(spec, e.into()))?;
    let engines = engines_on(spec, &weights, vec![backend.clone(); count.max(1)])?;
    tracing::info!(
        model = %spec.path.display(),
        backend = %backend.describe(),
        size = %format!("{}x{}", spec.size.0, spec.size.1),
        preset = ?spec.preset,
        engines = engines.len(),
        "model loaded"
    );
    Ok((engines, weights.labels.clone()))
}

/// Loads the model for the resolved device and builds `count` engines: on
/// the CPU all share one copy of the weights; on CUDA each GPU holds one copy
/// and engines (each its own stream and graphs) are spread over the GPUs.
pub fn load_engines(spec: &ModelSpec<'_>, resolved: &Resolved, count: usize, cpu: CpuBackend) -> Result<(Vec<AnyEngine>, Vec<String>), LoadError> {
    match &resolved.target {
        Target::Cpu => {
            let (engines, labels) = load_cpu_engines(spec, cpu, count)?;
            Ok((engines.into_iter().map(AnyEngine::from).collect(), labels))
        }
        #[cfg(feature = "cuda")]
        Target::Cuda { info, gpus } => super::cuda_load::load_cuda_engines(spec, info, gpus, resolved.precision, count),
    }
}

fn options_for(spec: &ModelSpec<'_>, labels: &[String]) -> EngineOptions {
    EngineOptions {
        width: spec.size.0,
        height: spec.size.1,
        scales: spec.preset.scales(),
        road_classes: road_class_ids(labels, spec.road_classes),
        confidence_threshold: spec.confidence_threshold,
    }
}

pub(super) fn open_checkpoint(spec: &ModelSpec<'_>) -> Result<Checkpoint, LoadError> {
    Checkpoint::open(spec.path).map_err(|e| load_error(spec, EngineError::Model(ModelError::Checkpoint(e))))
}

pub(super) fn load_error(spec: &ModelSpec<'_>, source: EngineError) -> LoadError {
    LoadError { path: spec.path.display().to_string(), source }
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
        .map(|b| Engine::new(b, weights.clone(), options.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| load_error(spec, e))
}
