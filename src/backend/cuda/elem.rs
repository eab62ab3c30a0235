//! The element types the CUDA backend stores activations and weights in.

use cudarc::cublaslt::{CudaBlasLT, Matmul};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::slice::HalfFloatSliceExt;
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
    /// `src` converted into `dst` (same lengths). The 16-bit types convert
    /// several lanes at a time: a frame's logits cross the host twice per
    /// frame when a stream filters them, and element by element `half`
    /// checks for F16C at every value (~1 ms each way for 405k logits).
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = Self::from_f32(s));
    }
    /// `src` converted into `dst` (same lengths).
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.to_f32());
    }
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
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
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
            fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
                dst.convert_from_f32_slice(src);
            }
            fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
                src.convert_to_f32_slice(dst);
            }
        }
    )+};
}

half_elem! {
    f16 => "f16", Fp16;
    bf16 => "bf16", Bf16;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values across the ranges logits and weights take, and the edges.
    fn values(n: usize) -> Vec<f32> {
        let edges = [0.0, -0.0, 1e-8, -6.0e-5, 65504.0, 70000.0, f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE];
        (0..n).map(|i| edges.get(i).copied().unwrap_or(((i * 7919) % 2001) as f32 * 0.013 - 13.0)).collect()
    }

    fn same_as_one_by_one<T: CudaElem + PartialEq + std::fmt::Debug>() {
        // Lengths that leave every remainder of the 4- and 8-lane paths.
        for n in [0, 1, 3, 4, 7, 8, 9, 17, 405_504 + 5] {
            let src = values(n);
            let mut fast = vec![T::default(); n];
            T::slice_from_f32(&src, &mut fast);
            let slow: Vec<T> = src.iter().map(|&v| T::from_f32(v)).collect();
            assert_eq!(fast, slow, "{} from f32, {n} values", T::SUFFIX);
            let mut back = vec![0.0f32; n];
            T::slice_to_f32(&fast, &mut back);
            let back_slow: Vec<f32> = slow.iter().map(|v| v.to_f32()).collect();
            assert!(back.iter().zip(&back_slow).all(|(a, b)| a.to_bits() == b.to_bits()), "{} to f32, {n} values", T::SUFFIX);
        }
    }

    #[test]
    fn slice_conversions_equal_element_by_element_ones() {
        same_as_one_by_one::<f16>();
        same_as_one_by_one::<bf16>();
        same_as_one_by_one::<f32>();
    }
}
