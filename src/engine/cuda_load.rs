//! Building engines on CUDA GPUs: one weight copy per GPU, one backend
//! (stream, cuBLASLt handle, graphs) per engine.

use std::sync::Arc;

use cudarc::cublaslt::{CudaBlasLT, Matmul};
use half::{bf16, f16};

use super::any::AnyEngine;
use super::pipeline::Engine;
use super::spec::{LoadError, ModelSpec, engines_on, load_error, load_weights};
use crate::backend::cuda::{CudaBackend, CudaDevice, CudaError, CudaInfo, CudaOptions, GemmElem, GpuInfo, PinnedFrames};
use crate::backend::{BackendError, Precision};

pub fn load_cuda_engines(
    spec: &ModelSpec<'_>,
    info: &CudaInfo,
    gpus: &[GpuInfo],
    precision: Precision,
    count: usize,
) -> Result<(Vec<AnyEngine>, Vec<String>), LoadError> {
    // The kernel defaults and the environment's overrides (`ROADSEG_CUDA_*`).
    let mut options = CudaOptions::from_env();
    options.graphs &= spec.cuda_graphs;
    match precision {
        Precision::Fp16 => build::<f16>(spec, info, gpus, count, options, AnyEngine::CudaF16),
        Precision::Bf16 => build::<bf16>(spec, info, gpus, count, options, AnyEngine::CudaBf16),
        Precision::F32 => build::<f32>(spec, info, gpus, count, options, AnyEngine::CudaF32),
    }
}

fn build<T: GemmElem>(
    spec: &ModelSpec<'_>,
    info: &CudaInfo,
    gpus: &[GpuInfo],
    count: usize,
    options: CudaOptions,
    wrap: fn(Engine<CudaBackend<T>>) -> AnyEngine,
) -> Result<(Vec<AnyEngine>, Vec<String>), LoadError>
where
    CudaBlasLT: Matmul<T>,
{
    let fail = |e: CudaError| load_error(spec, BackendError::from(e));
    let count = count.max(1);
    let mut engines = Vec::with_capacity(count);
    let mut labels = Vec::new();
    for (g, gpu) in gpus.iter().enumerate() {
        // Engines g, g + n, g + 2n, ... run on GPU g.
        let here = (g..count).step_by(gpus.len()).count();
        if here == 0 {
            continue;
        }
        let device = CudaDevice::open(gpu, info).map_err(fail)?;
        // The ring's frame buffers come pinned from now on, so the GPU copies
        // them up by DMA without a host copy into staging first.
        if !std::env::var("ROADSEG_CUDA_PAGEABLE_FRAMES").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) && crate::host_memory::install(Arc::new(PinnedFrames::new(&device))) {
            tracing::debug!("frame buffers are pinned host memory");
        }
        let first = CudaBackend::<T>::new(device, options).map_err(fail)?;
        let weights = load_weights(spec, &first)?;
        labels = weights.labels.clone();
        let mut backends = Vec::with_capacity(here);
        for _ in 1..here {
            backends.push(Arc::new(first.sibling().map_err(fail)?));
        }
        backends.insert(0, Arc::new(first));
        engines.extend(engines_on(spec, &weights, backends)?.into_iter().map(wrap));
        tracing::info!(gpu = gpu.ordinal, name = %gpu.name, engines = here, precision = %T::PRECISION, "model loaded on GPU");
    }
    Ok((engines, labels))
}
