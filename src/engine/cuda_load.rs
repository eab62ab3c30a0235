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
    // Worker i runs on GPU plan[i] (round robin): each GPU builds its
    // workers' engines, which are then dealt out in worker order.
    let plan = crate::device::plan_workers(count.max(1), gpus.len());
    let mut per_gpu = Vec::with_capacity(gpus.len());
    let mut labels = Vec::new();
    for (g, gpu) in gpus.iter().enumerate() {
        let here = plan.iter().filter(|&&p| p == g).count();
        if here == 0 {
            per_gpu.push(Vec::new().into_iter());
            continue;
        }
        let device = CudaDevice::open(gpu, info, options.sync_wait).map_err(fail)?;
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
        let built: Vec<AnyEngine> = engines_on(spec, &weights, backends)?.into_iter().map(wrap).collect();
        per_gpu.push(built.into_iter());
        tracing::info!(gpu = gpu.ordinal, name = %gpu.name, engines = here, precision = %T::PRECISION, sync = %options.sync_wait, "model loaded on GPU");
    }
    let engines = plan.iter().map(|&g| per_gpu[g].next().expect("one engine per planned worker")).collect();
    Ok((engines, labels))
}
