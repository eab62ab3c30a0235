//! Is CUDA usable here? Asked before any CUDA call: cudarc's dynamic loading
//! panics on a missing library, so every library is looked for first and a
//! machine without a driver gets a sentence, not a panic.

use cudarc::driver::result::{self as driver, DriverError};
use cudarc::driver::sys;

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
    InitFailed(#[source] DriverError),
    #[error("the CUDA driver failed to initialise (device {ordinal}: {source}): check `nvidia-smi` works on this machine")]
    DeviceQuery { ordinal: usize, source: DriverError },
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
    // The driver library is present, so cudarc's calls into it resolve.
    driver::init().map_err(CudaUnavailable::InitFailed)?;
    let driver_version = driver_version().map_err(CudaUnavailable::InitFailed)?;
    let count = driver::device::get_count().map_err(CudaUnavailable::InitFailed)?;
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

/// The driver API version (cudarc has no wrapper for this one call).
fn driver_version() -> Result<i32, DriverError> {
    let mut version = 0;
    // SAFETY: the driver library is loaded; the call writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    Ok(version)
}

/// The PCI bus id, `domain:bus:device.function` (cudarc has no wrapper).
fn pci_bus_id(dev: sys::CUdevice) -> Result<String, DriverError> {
    let mut bus = [0 as std::ffi::c_char; 64];
    // SAFETY: `dev` came from cuDeviceGet; the buffer is of the stated length.
    unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev) }.result()?;
    // The driver NUL-terminates within the buffer on success; the last byte
    // stays 0 whatever it wrote, so the search cannot run past the end.
    let bytes: Vec<u8> = bus[..bus.len() - 1].iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn gpu_info(ordinal: usize) -> Result<GpuInfo, CudaUnavailable> {
    let fail = |source| CudaUnavailable::DeviceQuery { ordinal, source };
    let dev = driver::device::get(ordinal as i32).map_err(fail)?;
    // SAFETY: `dev` came from device::get.
    let attr = |a| unsafe { driver::device::get_attribute(dev, a) }.map_err(fail);
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let name = driver::device::get_name(dev).map_err(fail)?;
    // SAFETY: `dev` came from device::get.
    let memory_bytes = unsafe { driver::device::total_mem(dev) }.map_err(fail)?;
    let pci_bus_id = pci_bus_id(dev).map_err(fail)?;
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
