//! One GPU: its context and the kernels compiled for it.

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::error::CudaError;
use super::kernels::{self, KernelModule};
use super::options::SyncWait;
use super::probe::{self, CudaInfo, CudaUnavailable, GpuInfo};

/// One GPU: its context and compiled kernels, shared by its workers.
pub struct CudaDevice {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) module: KernelModule,
    pub gpu: GpuInfo,
    /// Streaming multiprocessors: how many blocks a launch needs to fill the
    /// GPU (the split attention planner's target).
    pub sm_count: usize,
}

impl CudaDevice {
    /// Opens GPU `gpu.ordinal` and loads (or compiles) the kernels for it;
    /// host threads wait for it as `sync` says.
    pub fn open(gpu: &GpuInfo, info: &CudaInfo, sync: SyncWait) -> Result<Arc<Self>, CudaError> {
        // The primary context (shared with anything else in the process that
        // uses this GPU) takes its flags before this retain makes it active;
        // since CUDA 11 the call is allowed on an active one too.
        result::init()?;
        let dev = result::device::get(gpu.ordinal as i32)?;
        // SAFETY: a plain driver call on a valid device handle.
        unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, sync.context_flags()) }.result()?;
        let ctx = CudaContext::new(gpu.ordinal)?;
        // Before any allocation: slices made while tracking is on carry events
        // that would be recorded into graphs (cudarc's capture caveat).
        // SAFETY: no slice exists on this context yet.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = gpu.compute_capability;
        let module = KernelModule::load(&ctx, kernels::arch_name(major, minor), info.driver_version)?;
        let sm_count = ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        Ok(Arc::new(CudaDevice { ctx, module, gpu: gpu.clone(), sm_count }))
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), CudaError> {
        Ok(self.ctx.mem_get_info()?)
    }
}

/// The first usable GPU and the driver it runs under, or why this machine has
/// none (tests skip then). Open it with [`CudaDevice::open`]: once a GPU is
/// found, failing to open it is an error, not a reason to skip.
pub fn first_gpu() -> Result<(GpuInfo, CudaInfo), CudaUnavailable> {
    let info = probe::probe()?;
    let gpus = probe::select(&info, &[])?;
    Ok((gpus[0].clone(), info))
}
