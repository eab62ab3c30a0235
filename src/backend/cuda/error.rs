//! Why the CUDA backend could not be set up or could not run.

use cudarc::driver::DriverError;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    #[error("cuBLASLt: {0:?}")]
    Blas(#[from] cudarc::cublaslt::result::CublasError),
    /// NVRTC's log is in the error (its Debug form, as cudarc prints it).
    #[error("compiling the CUDA kernels with NVRTC failed: {0:?}")]
    Compile(#[from] cudarc::nvrtc::CompileError),
    #[error("kernel {name} is missing from the compiled module: {source}")]
    MissingKernel { name: String, source: DriverError },
    #[error("CUDA graph capture produced no graph")]
    EmptyGraph,
}
