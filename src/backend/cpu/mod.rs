//! The reference backend: f32 on the CPU, GEMMs by the `gemm` crate, the rest
//! parallel over rows with rayon.

mod attention;
mod attention_tiled;
mod frame;
mod gemm;
mod kernels;
mod postprocess;
mod preprocess;
pub(crate) mod simd;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use self::gemm::{MatRef, matmul};
use super::check_len as check;
use super::{
    Affine, AttnDims, Backend, BackendError, ConvDims, DwConvDims, FrameOutDims, GemmDims, HostPhases, NormDims, OpResult, Precision, ResizeDims,
};
use crate::exposure::ToneCurve;
use crate::frame::{FrameGeometry, FrameRef, Segmentation};

pub use frame::CpuFrameSlot;
pub use kernels::bilinear_source;
pub use postprocess::{PostprocessSpec, Postprocessor};
pub use preprocess::{MEAN, STD, preprocess, preprocess_toned};

/// Bilinear resize of host memory (multi-scale averaging, input rescaling).
pub fn resize_host(x: &[f32], y: &mut [f32], dims: ResizeDims, accumulate: bool) {
    let (src, dst) = (dims.src_h * dims.src_w * dims.channels, dims.dst_h * dims.dst_w * dims.channels);
    for i in 0..dims.batch {
        kernels::resize_bilinear(&x[i * src..], &mut y[i * dst..], dims, accumulate);
    }
}

#[derive(Debug, Default)]
pub struct CpuBackend {
    /// Time per op kind, when profiling was asked for (`roadseg bench --profile-ops`).
    profile: Option<Mutex<BTreeMap<&'static str, (f64, u64)>>>,
}

impl CpuBackend {
    pub fn new() -> Self {
        CpuBackend { profile: None }
    }

    pub fn with_profiling() -> Self {
        CpuBackend { profile: Some(Mutex::new(BTreeMap::new())) }
    }

    fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> T) -> T {
        let Some(profile) = &self.profile else { return f() };
        let start = std::time::Instant::now();
        let out = f();
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let mut p = profile.lock().unwrap_or_else(|e| e.into_inner());
        let entry = p.entry(op).or_default();
        entry.0 += ms;
        entry.1 += 1;
        out
    }

    /// (op, total ms, calls) since the last call, most expensive first.
    pub fn take_profile(&self) -> Vec<(&'static str, f64, u64)> {
        let Some(profile) = &self.profile else { return Vec::new() };
        let mut p = profile.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows: Vec<_> = std::mem::take(&mut *p).into_iter().map(|(k, (ms, n))| (k, ms, n)).collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        rows
    }
}

/// Starts each of `rows` output rows at `bias` (the GEMM then accumulates).
/// Over both cores: on stage 1's 36864-row maps this write pass alone cost
/// about 7 ms a frame when one thread did it.
fn fill_rows(y: &mut [f32], bias: &[f32], rows: usize) {
    let n = bias.len();
    y[..rows * n].par_chunks_mut(256 * n).for_each(|chunk| {
        for row in chunk.chunks_exact_mut(n) {
            row.copy_from_slice(bias);
        }
    });
}

impl Backend for CpuBackend {
    type Param = Arc<[f32]>;
    type Tensor = Vec<f32>;
    type FrameSlot = CpuFrameSlot;
    /// Nothing is recorded: every run calls the forward.
    type Recording = ();

    fn describe(&self) -> String {
        let simd = if simd::has_avx512() {
            "avx512"
        } else if simd::has_avx2_fma() {
            "avx2+fma"
        } else {
            "baseline"
        };
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
        // Every image's patches, so the GEMM after im2col runs over all of them.
        d.out_rows() * d.kernel * d.kernel * d.c_in
    }

    fn attention_workspace(&self, d: AttnDims) -> usize {
        attention::workspace_len(d)
    }

    fn linear(&self, x: &Self::Tensor, w: &Self::Param, bias: Option<&Self::Param>, y: &mut Self::Tensor, d: GemmDims, accumulate: bool) -> OpResult {
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
        self.timed("linear", || matmul(a, b, y, d.n, read_y, true));
        if let (Some(b), true) = (bias, accumulate) {
            for row in y.chunks_exact_mut(d.n).take(d.rows) {
                row.iter_mut().zip(b.iter()).for_each(|(v, b)| *v += b);
            }
        }
        Ok(())
    }

    fn conv2d(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, workspace: &mut Self::Tensor, d: ConvDims) -> OpResult {
        let image_in = d.h * d.w * d.c_in;
        check("conv2d x", d.batch * image_in, x.len())?;
        check("conv2d workspace", self.conv2d_workspace(d), workspace.len())?;
        let patch = d.kernel * d.kernel * d.c_in;
        // [batch, out_h, out_w] output pixels become GEMM rows; images only
        // meet in the GEMM, which treats every row on its own.
        let rows = d.out_rows();
        let unfolded: &[f32] = if d.kernel == 1 && d.stride == 1 && d.pad == 0 {
            x
        } else {
            let image_cols = d.out_h() * d.out_w() * patch;
            self.timed("im2col", || {
                for i in 0..d.batch {
                    kernels::im2col(&x[i * image_in..], &mut workspace[i * image_cols..], d);
                }
            });
            workspace
        };
        check("conv2d y", rows * d.c_out, y.len())?;
        check("conv2d w", patch * d.c_out, p.weight.len())?;
        fill_rows(y, &p.bias[..d.c_out], rows);
        let a = MatRef { data: unfolded, rows, cols: patch, row_stride: patch, col_stride: 1 };
        let b = MatRef { data: &p.weight, rows: patch, cols: d.c_out, row_stride: d.c_out, col_stride: 1 };
        self.timed("conv2d", || matmul(a, b, y, d.c_out, true, true));
        Ok(())
    }

    fn layer_norm(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, d: NormDims) -> OpResult {
        check("layer_norm x", d.rows * d.dim, x.len())?;
        check("layer_norm y", d.rows * d.dim, y.len())?;
        self.timed("layer_norm", || kernels::layer_norm(x, &p.weight, &p.bias, y, d));
        Ok(())
    }

    fn add_assign(&self, y: &mut Self::Tensor, x: &Self::Tensor, len: usize) -> OpResult {
        check("add_assign", len, x.len().min(y.len()))?;
        self.timed("add", || kernels::add_assign(y, x, len));
        Ok(())
    }

    fn attention(&self, q: &Self::Tensor, kv: &Self::Tensor, y: &mut Self::Tensor, workspace: &mut Self::Tensor, d: AttnDims) -> OpResult {
        let (q_len, kv_len) = d.image_lens(q.len(), kv.len(), y.len())?;
        check("attention workspace", self.attention_workspace(d), workspace.len())?;
        // One image after another: each already fills every core, and the
        // score scratch is reused, so the workspace does not grow with batch.
        self.timed("attention", || {
            for i in 0..d.batch {
                let (q, kv) = (&q[i * q_len..(i + 1) * q_len], &kv[i * kv_len..(i + 1) * kv_len]);
                attention::attention(q, kv, &mut y[i * q_len..(i + 1) * q_len], workspace, d);
            }
        });
        Ok(())
    }

    fn dwconv3x3_gelu(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, d: DwConvDims) -> OpResult {
        let image = d.h * d.w * d.channels;
        check("dwconv x", d.batch * image, x.len())?;
        check("dwconv y", d.batch * image, y.len())?;
        check("dwconv w", 9 * d.channels, p.weight.len())?;
        self.timed("dwconv_gelu", || {
            for i in 0..d.batch {
                kernels::dwconv3x3_gelu(&x[i * image..], &p.weight, &p.bias, &mut y[i * image..], d);
            }
        });
        Ok(())
    }

    fn resize_bilinear(&self, x: &Self::Tensor, y: &mut Self::Tensor, d: ResizeDims, accumulate: bool) -> OpResult {
        let (src, dst) = (d.src_h * d.src_w * d.channels, d.dst_h * d.dst_w * d.channels);
        check("resize x", d.batch * src, x.len())?;
        check("resize y", d.batch * dst, y.len())?;
        self.timed("resize", || {
            for i in 0..d.batch {
                kernels::resize_bilinear(&x[i * src..], &mut y[i * dst..], d, accumulate);
            }
        });
        Ok(())
    }

    fn relu(&self, y: &mut Self::Tensor, len: usize) -> OpResult {
        check("relu", len, y.len())?;
        self.timed("relu", || kernels::relu(y, len));
        Ok(())
    }

    fn recording(&self) -> Self::Recording {}

    fn run_recorded<E: From<BackendError>>(&self, _recording: &(), forward: &mut dyn FnMut() -> Result<(), E>) -> Result<(), E> {
        forward()
    }

    fn frame_slot(&self, geometry: FrameGeometry, road_classes: &[usize], pixel_confidence: bool) -> Result<CpuFrameSlot, BackendError> {
        Ok(CpuFrameSlot::new(geometry, road_classes, pixel_confidence))
    }

    fn stage_frame(&self, slot: &mut CpuFrameSlot, frame: &FrameRef<'_>, tone: &ToneCurve) -> OpResult {
        slot.stage(frame, tone)
    }

    fn frame_to_input(&self, slot: &mut CpuFrameSlot, input: &mut Self::Tensor, image: usize, w: usize, h: usize) -> OpResult {
        let len = w * h * 3;
        check("frame input", (image + 1) * len, input.len())?;
        self.timed("preprocess", || slot.preprocess_into(&mut input[image * len..(image + 1) * len], w, h))
    }

    fn frame_from_logits(&self, slot: &mut CpuFrameSlot, logits: &Self::Tensor, image: usize, d: FrameOutDims) -> OpResult {
        let len = d.logits_w * d.logits_h * d.labels;
        check("frame logits", (image + 1) * len, logits.len())?;
        self.timed("postprocess", || slot.postprocess_logits(&logits[image * len..(image + 1) * len], d))
    }

    fn collect_frame(&self, slot: &mut CpuFrameSlot, out: &mut Segmentation) -> Result<Option<HostPhases>, BackendError> {
        slot.collect(out)
    }
}
