//! Loading a checkpoint once and building several engines that share it
//! (one per worker), as every command and the daemon do.

use std::sync::Arc;

use super::any::AnyEngine;
use super::pipeline::Engine;
use super::spec::{LoadError, ModelSpec, engines_on, load_weights};
use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::device::{Resolved, Target};

/// Loads the model once and builds `count` engines sharing its weights.
/// Returns the engines and the model's class names.
pub fn load_cpu_engines(spec: &ModelSpec<'_>, backend: CpuBackend, count: usize) -> Result<(Vec<Engine<CpuBackend>>, Vec<String>), LoadError> {
    let backend = Arc::new(backend);
    let weights = load_weights(spec, &*backend)?;
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
