//! The element types the CUDA backend stores activations and weights in.

use cudarc::cublaslt::{CudaBlasLT, Matmul};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

use crate::backend::Precision;

/// A storage type: every kernel exists once per type, named `<op>_<SUFFIX>`
/// (see `kernels/common.cuh`), and cuBLASLt multiplies it with f32 accumulation.
pub trait CudaElem: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + Unpin + 'static {
    const SUFFIX: &'static str;
    const PRECISION: Precision;
    /// Whether the tensor-core flash attention kernel exists for this type.
    const HAS_FLASH: bool;
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
}

/// What the backend needs of a type beyond storage: a cuBLASLt GEMM for it.
pub trait GemmElem: CudaElem
where
    CudaBlasLT: Matmul<Self>,
{
}

impl<T: CudaElem> GemmElem for T where CudaBlasLT: Matmul<T> {}

impl CudaElem for f32 {
    const SUFFIX: &'static str = "f32";
    const PRECISION: Precision = Precision::F32;
    const HAS_FLASH: bool = false;
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// The 16-bit types: stored as themselves, converted by `half`, and with the
/// tensor-core flash attention.
macro_rules! half_elem {
    ($($t:ident => $suffix:literal, $precision:ident;)+) => {$(
        impl CudaElem for $t {
            const SUFFIX: &'static str = $suffix;
            const PRECISION: Precision = Precision::$precision;
            const HAS_FLASH: bool = true;
            fn from_f32(v: f32) -> Self {
                $t::from_f32(v)
            }
            fn to_f32(self) -> f32 {
                $t::to_f32(self)
            }
        }
    )+};
}

half_elem! {
    f16 => "f16", Fp16;
    bf16 => "bf16", Bf16;
}
