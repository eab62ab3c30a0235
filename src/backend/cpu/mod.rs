//! The reference backend: f32 on the CPU, GEMMs by the `gemm` crate, the rest
//! parallel over rows with rayon.

mod attention;
mod gemm;
mod kernels;
pub(crate) mod simd;

use std::sync::Arc;

use self::gemm::{MatRef, matmul};
use super::{AttnDims, Backend, BackendError, ConvDims, GemmDims, OpResult, Precision, ResizeDims};

pub use kernels::bilinear_source;

/// Bilinear resize of host memory (multi-scale averaging, input rescaling).
pub fn resize_host(x: &[f32], y: &mut [f32], dims: ResizeDims, accumulate: bool) {
    kernels::resize_bilinear(x, y, dims, accumulate);
}

#[derive(Debug, Default)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn new() -> Self {
        CpuBackend
    }
}

fn check(op: &'static str, expected: usize, actual: usize) -> OpResult {
    if actual < expected {
        return Err(BackendError::Size { op, expected, actual });
    }
    Ok(())
}

fn fill_rows(y: &mut [f32], bias: &[f32], rows: usize) {
    for row in y.chunks_exact_mut(bias.len()).take(rows) {
        row.copy_from_slice(bias);
    }
}

impl Backend for CpuBackend {
    type Param = Arc<[f32]>;
    type Tensor = Vec<f32>;

    fn describe(&self) -> String {
        let simd = if simd::has_avx2_fma() { "avx2+fma" } else { "baseline" };
        format!("cpu ({} threads, {simd})", rayon::current_num_threads())
    }

    fn precision(&self) -> Precision {
        Precision::F32
    }

    fn param(&self, values: &[f32]) -> Result<Self::Param, BackendError> {
        Ok(Arc::from(values))
    }

    fn tensor(&self, len: usize) -> Result<Self::Tensor, BackendError> {
        Ok(vec![0.0; len])
    }

    fn write(&self, dst: &mut Self::Tensor, src: &[f32]) -> OpResult {
        check("write", src.len(), dst.len())?;
        dst[..src.len()].copy_from_slice(src);
        Ok(())
    }

    fn read(&self, src: &Self::Tensor, dst: &mut [f32]) -> OpResult {
        check("read", dst.len(), src.len())?;
        dst.copy_from_slice(&src[..dst.len()]);
        Ok(())
    }

    fn sync(&self) -> OpResult {
        Ok(())
    }

    fn conv2d_workspace(&self, d: ConvDims) -> usize {
        d.out_h() * d.out_w() * d.kernel * d.kernel * d.c_in
    }

    fn attention_workspace(&self, d: AttnDims) -> usize {
        attention::workspace_len(d)
    }

    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Param,
        bias: Option<&Self::Param>,
        y: &mut Self::Tensor,
        d: GemmDims,
        accumulate: bool,
    ) -> OpResult {
        check("linear x", d.rows * d.k, x.len())?;
        check("linear w", d.k * d.n, w.len())?;
        check("linear y", d.rows * d.n, y.len())?;
        let mut read_y = accumulate;
        if let Some(b) = bias {
            check("linear bias", d.n, b.len())?;
            if !accumulate {
                fill_rows(y, &b[..d.n], d.rows);
                read_y = true;
            }
        }
        let a = MatRef { data: x, rows: d.rows, cols: d.k, row_stride: d.k, col_stride: 1 };
        let b = MatRef { data: w, rows: d.k, cols: d.n, row_stride: d.n, col_stride: 1 };
        matmul(a, b, y, d.n, read_y, true);
        if let (Some(b), true) = (bias, accumulate) {
            for row in y.chunks_exact_mut(d.n).take(d.rows) {
                row.iter_mut().zip(b.iter()).for_each(|(v, b)| *v += b);
            }
        }
        Ok(())
    }

    fn conv2d(
        &self,
        x: &Self::Tensor,
        w: &Self::Param,
        bias: &Self::Param,
        y: &mut Self::Tensor,
        workspace: &mut Self::Tensor,
        d: ConvDims,
    ) -> OpResult {
        check("conv2d x", d.h * d.w * d.c_in, x.len())?;
        check("conv2d workspace", self.conv2d_workspace(d), workspace.len())?;
        let patch = d.kernel * d.kernel * d.c_in;
        let rows = d.out_h() * d.out_w();
        let unfolded: &[f32] = if d.kernel == 1 && d.stride == 1 && d.pad == 0 {
            x
        } else {
            kernels::im2col(x, workspace, d);
            workspace
        };
        check("conv2d y", rows * d.c_out, y.len())?;
        check("conv2d w", patch * d.c_out, w.len())?;
        fill_rows(y, &bias[..d.c_out], rows);
        let a = MatRef { data: unfolded, rows, cols: patch, row_stride: patch, col_stride: 1 };
        let b = MatRef { data: w, rows: patch, cols: d.c_out, row_stride: d.c_out, col_stride: 1 };
        matmul(a, b, y, d.c_out, true, true);
        Ok(())
    }

    fn layer_norm(
        &self,
        x: &Self::Tensor,
        gamma: &Self::Param,
        beta: &Self::Param,
        y: &mut Self::Tensor,
        rows: usize,
        dim: usize,
    ) -> OpResult {
        check("layer_norm x", rows * dim, x.len())?;
        check("layer_norm y", rows * dim, y.len())?;
        kernels::layer_norm(x, gamma, beta, y, rows, dim);
        Ok(())
    }

    fn add_assign(&self, y: &mut Self::Tensor, x: &Self::Tensor, len: usize) -> OpResult {
        check("add_assign", len, x.len().min(y.len()))?;
        kernels::add_assign(y, x, len);
        Ok(())
    }

    fn attention(
        &self,
        q: &Self::Tensor,
        kv: &Self::Tensor,
        y: &mut Self::Tensor,
        workspace: &mut Self::Tensor,
        d: AttnDims,
    ) -> OpResult {
        let channels = d.heads * d.head_dim;
        check("attention q", d.queries * channels, q.len())?;
        check("attention kv", d.keys * 2 * channels, kv.len())?;
        check("attention y", d.queries * channels, y.len())?;
        check("attention workspace", self.attention_workspace(d), workspace.len())?;
        attention::attention(q, kv, y, workspace, d);
        Ok(())
    }

    fn dwconv3x3_gelu(
        &self,
        x: &Self::Tensor,
        w: &Self::Param,
        bias: &Self::Param,
        y: &mut Self::Tensor,
        h: usize,
        w_: usize,
        c: usize,
    ) -> OpResult {
        check("dwconv x", h * w_ * c, x.len())?;
        check("dwconv y", h * w_ * c, y.len())?;
        check("dwconv w", 9 * c, w.len())?;
        kernels::dwconv3x3_gelu(x, w, bias, y, h, w_, c);
        Ok(())
    }

    fn resize_bilinear(&self, x: &Self::Tensor, y: &mut Self::Tensor, d: ResizeDims, accumulate: bool) -> OpResult {
        check("resize x", d.src_h * d.src_w * d.channels, x.len())?;
        check("resize y", d.dst_h * d.dst_w * d.channels, y.len())?;
        kernels::resize_bilinear(x, y, d, accumulate);
        Ok(())
    }

    fn relu(&self, y: &mut Self::Tensor, len: usize) -> OpResult {
        check("relu", len, y.len())?;
        kernels::relu(y, len);
        Ok(())
    }
}
