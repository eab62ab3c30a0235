//! Loading a checkpoint once and building several engines that share it
//! (one per worker), as every command and the daemon do.

use std::sync::Arc;

use super::any::AnyEngine;
use super::pipeline::Engine;
use super::spec::{LoadError, ModelSpec, engines_on, load_weights};
use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::device::{Resolved, Target};
use crate::worker_count::WorkerCount;

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

/// [`load_engines`] for `workers` resolved on `resolved`'s device. Under
/// `auto`, workers that do not fit in GPU memory (a large model on a small
/// GPU) are halved until they do, one a GPU at least, with a warning; a
/// count given as a number is built as given or fails.
pub fn load_engines_for(spec: &ModelSpec<'_>, resolved: &Resolved, workers: WorkerCount, cpu: CpuBackend) -> Result<(Vec<AnyEngine>, Vec<String>), LoadError> {
    let count = workers.resolve(resolved);
    match &resolved.target {
        Target::Cpu => load_engines(spec, resolved, count, cpu),
        #[cfg(feature = "cuda")]
        Target::Cuda { info, gpus } => {
            let floor = if workers == WorkerCount::Auto { gpus.len().max(1) } else { count };
            fewer_until_they_fit(count, floor, |n| super::cuda_load::load_cuda_engines(spec, info, gpus, resolved.precision, n))
        }
    }
}

/// Calls `load(n)` from `n = start`, halving `n` (not below `floor`) while it
/// fails for lack of device memory.
#[cfg(feature = "cuda")]
fn fewer_until_they_fit<T>(start: usize, floor: usize, mut load: impl FnMut(usize) -> Result<T, LoadError>) -> Result<T, LoadError> {
    let mut n = start;
    loop {
        match load(n) {
            Err(e) if n > floor && e.is_out_of_device_memory() => {
                let next = (n / 2).max(floor);
                tracing::warn!("{n} inference workers do not fit in GPU memory ({e}); trying {next} (workers.count / --workers sets a number)");
                n = next;
            }
            result => return result,
        }
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;
    use crate::backend::BackendError;
    use crate::backend::cuda::CudaError;
    use crate::engine::EngineError;
    use cudarc::driver::{DriverError, sys::CUresult};

    fn error(code: CUresult) -> LoadError {
        LoadError { path: "model".into(), source: EngineError::Backend(BackendError::Cuda(CudaError::Driver(DriverError(code)))) }
    }

    #[test]
    fn auto_workers_are_halved_until_they_fit_in_device_memory() {
        let mut tried = Vec::new();
        let built = fewer_until_they_fit(8, 1, |n| {
            tried.push(n);
            if n > 2 { Err(error(CUresult::CUDA_ERROR_OUT_OF_MEMORY)) } else { Ok(n) }
        });
        assert_eq!(built.unwrap(), 2);
        assert_eq!(tried, [8, 4, 2]);
    }

    #[test]
    fn other_errors_and_the_floor_end_the_search() {
        let mut tried = Vec::new();
        let r = fewer_until_they_fit(8, 1, |n| -> Result<usize, _> {
            tried.push(n);
            Err(error(CUresult::CUDA_ERROR_INVALID_VALUE))
        });
        assert!(r.is_err() && tried == [8], "{tried:?}");
        let mut tried = Vec::new();
        let r = fewer_until_they_fit(6, 3, |n| -> Result<usize, _> {
            tried.push(n);
            Err(error(CUresult::CUDA_ERROR_OUT_OF_MEMORY))
        });
        assert!(r.unwrap_err().is_out_of_device_memory());
        assert_eq!(tried, [6, 3], "never below the floor (one a GPU, or the count given)");
    }
}
