//! GPU helpers for the CUDA test modules: the first usable GPU (or a
//! skip), a backend on it, and frames to push through it.

use std::sync::Arc;

use cudarc::cublaslt::{CudaBlasLT, Matmul};
use roadseg::backend::cuda::{CudaBackend, CudaDevice, CudaOptions, GemmElem, first_gpu};

/// The first usable GPU, or None with a SKIP line. A GPU that is usable
/// but does not open (context, kernels) fails the test instead.
pub fn gpu_or_skip() -> Option<Arc<CudaDevice>> {
    let (gpu, info) = match first_gpu() {
        Ok(found) => found,
        Err(why) => {
            roadseg::test_skip::skip(&format!("no usable CUDA GPU here ({why})"));
            return None;
        }
    };
    let d = CudaDevice::open(&gpu, &info, CudaOptions::DEFAULT.sync_wait).unwrap_or_else(|e| panic!("GPU {} is usable but did not open: {e}", gpu.name));
    eprintln!("GPU: {} (sm_{}{}), {} SMs", d.gpu.name, d.gpu.compute_capability.0, d.gpu.compute_capability.1, d.sm_count);
    Some(d)
}

pub fn backend<T: GemmElem>(d: &Arc<CudaDevice>, options: CudaOptions) -> Arc<CudaBackend<T>>
where
    CudaBlasLT: Matmul<T>,
{
    Arc::new(CudaBackend::<T>::new(d.clone(), options).expect("CUDA backend"))
}

/// A 322x198 frame with structure at every scale, as RGBA with padded rows
/// and as NV12: (rgba, nv12, width, height, rgba stride).
pub fn test_frames() -> (Vec<u8>, Vec<u8>, usize, usize, usize) {
    let (fw, fh) = (322, 198);
    let stride = fw * 4 + 16;
    let mut rgba = vec![0u8; stride * fh];
    for y in 0..fh {
        for x in 0..fw {
            let v = [(x * 255 / fw) as u8, (y * 255 / fh) as u8, ((x * 7 + y * 13) % 256) as u8, 255];
            rgba[y * stride + x * 4..y * stride + x * 4 + 4].copy_from_slice(&v);
        }
    }
    let nv12: Vec<u8> = (0..fw * fh * 3 / 2).map(|i| ((i * 31 + i / fw * 17) % 256) as u8).collect();
    (rgba, nv12, fw, fh, stride)
}
