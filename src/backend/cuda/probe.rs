//! Is CUDA usable here? Asked before any CUDA call: cudarc's dynamic loading
//! panics on a missing library, so every library is looked for first and a
//! machine without a driver gets a sentence, not a panic.

use cudarc::driver::{CudaContext, sys};

/// What was found, for logs and `roadseg bench` output.
#[derive(Clone, Debug)]
pub struct CudaInfo {
    /// Driver API version, e.g. 12080 or 13000.
    pub driver_version: i32,
    pub devices: Vec<GpuInfo>,
}

#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub memory_bytes: usize,
    /// e.g. `00000000:3B:00.0`: how NVML finds the same GPU.
    pub pci_bus_id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CudaUnavailable {
    #[error("the NVIDIA driver library (libcuda.so) was not found: install the NVIDIA driver, or check that the container exposes it")]
    NoDriver,
    #[error("the CUDA driver failed to initialise ({0}): check `nvidia-smi` works on this machine")]
    InitFailed(String),
    #[error("the NVIDIA driver found no GPU")]
    NoDevice,
    #[error("CUDA device {asked} does not exist (this machine has {count})")]
    BadOrdinal { asked: usize, count: usize },
    #[error(
        "{lib} was not found: install the CUDA {what} (e.g. the `{package}` package) and put its folder on LD_LIBRARY_PATH"
    )]
    MissingLibrary { lib: &'static str, what: &'static str, package: &'static str },
    #[error("CUDA device {ordinal} is compute capability {major}.{minor}; roadseg's CUDA kernels need 8.0 (Ampere) or newer")]
    TooOld { ordinal: usize, major: i32, minor: i32 },
}

/// Whether NVRTC (the runtime compiler) can be loaded; needs no GPU.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library; nothing is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC's version as (major, minor), when it is present.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_present() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; the call writes two ints.
    let ok = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (ok == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// Checks the driver, the GPUs and every library the backend loads.
pub fn probe() -> Result<CudaInfo, CudaUnavailable> {
    // SAFETY: dlopen attempts only.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaUnavailable::NoDriver);
    }
    // SAFETY: the driver library is present, so its symbols resolve.
    let init = unsafe { sys::cuInit(0) };
    if init != sys::CUresult::CUDA_SUCCESS {
        return Err(CudaUnavailable::InitFailed(format!("{init:?}")));
    }
    let mut driver_version = 0;
    // SAFETY: as above; writes one int.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) };
    let count = CudaContext::device_count().map_err(|e| CudaUnavailable::InitFailed(e.to_string()))?;
    if count <= 0 {
        return Err(CudaUnavailable::NoDevice);
    }
    // SAFETY: dlopen attempts only.
    if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        return Err(CudaUnavailable::MissingLibrary { lib: "libcublasLt", what: "cuBLAS library", package: "nvidia-cublas-cu12" });
    }
    if !nvrtc_present() {
        return Err(CudaUnavailable::MissingLibrary { lib: "libnvrtc", what: "runtime compiler", package: "nvidia-cuda-nvrtc-cu12" });
    }
    let mut devices = Vec::with_capacity(count as usize);
    for ordinal in 0..count as usize {
        devices.push(gpu_info(ordinal)?);
    }
    Ok(CudaInfo { driver_version, devices })
}

fn gpu_info(ordinal: usize) -> Result<GpuInfo, CudaUnavailable> {
    let fail = |e: cudarc::driver::DriverError| CudaUnavailable::InitFailed(format!("device {ordinal}: {e}"));
    let mut dev = 0;
    // SAFETY: the driver is initialised; writes one handle.
    let r = unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(CudaUnavailable::InitFailed(format!("device {ordinal}: {r:?}")));
    }
    let attr = |a| {
        let mut v = 0;
        // SAFETY: valid device handle; writes one int.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
        if r == sys::CUresult::CUDA_SUCCESS { Ok(v) } else { Err(fail(cudarc::driver::DriverError(r))) }
    };
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: buffer of the stated length.
    unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev) };
    // SAFETY: the driver NUL-terminates within the buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    let mut memory_bytes = 0usize;
    // SAFETY: writes one size_t.
    unsafe { sys::cuDeviceTotalMem_v2(&mut memory_bytes, dev) };
    let mut bus = [0 as std::ffi::c_char; 64];
    // SAFETY: buffer of the stated length, NUL-terminated by the driver.
    let pci_bus_id = unsafe {
        sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev);
        std::ffi::CStr::from_ptr(bus.as_ptr()).to_string_lossy().into_owned()
    };
    Ok(GpuInfo { ordinal, name, compute_capability: (major, minor), memory_bytes, pci_bus_id })
}

/// The GPUs a request names (`[]` = all), checked against what exists and
/// against the kernels' minimum architecture.
pub fn select(info: &CudaInfo, ordinals: &[usize]) -> Result<Vec<GpuInfo>, CudaUnavailable> {
    let count = info.devices.len();
    let chosen: Vec<GpuInfo> = if ordinals.is_empty() {
        info.devices.clone()
    } else {
        ordinals
            .iter()
            .map(|&o| info.devices.get(o).cloned().ok_or(CudaUnavailable::BadOrdinal { asked: o, count }))
            .collect::<Result<_, _>>()?
    };
    for gpu in &chosen {
        let (major, minor) = gpu.compute_capability;
        if major < 8 {
            return Err(CudaUnavailable::TooOld { ordinal: gpu.ordinal, major, minor });
        }
    }
    Ok(chosen)
}
