//! A worker's CUDA backend: its stream, cuBLASLt handle and graphs, and the
//! [`Backend`] ops as launches of the NVRTC kernels and cuBLASLt GEMMs.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
use cudarc::driver::{CudaFunction, CudaGraph, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg, sys};

use super::busy::BusyClock;
use super::device::CudaDevice;
use super::elem::GemmElem;
use super::error::CudaError;
use super::frame::{FrameArena, Pinned};
use super::kernels::Ops;
use super::launch::{BLOCK, Queue, grid_for, launch};
use super::options::CudaOptions;
use crate::backend::{
    Affine, AttnDims, Backend, BackendError, ConvDims, DecodeDims, DwConvDims, FrameOutDims, GemmDims, HostPhases, NormDims, OpResult, Precision,
    ResizeDims, StageMap, check_len, decode_tail_unfused,
};
use crate::exposure::ToneCurve;
use crate::frame::{FrameGeometry, FrameOverlay, FrameRef, Segmentation};

/// A recorded forward; only touched by its worker's thread (under the mutex).
struct Recording(CudaGraph);
// SAFETY: CUDA graph handles may move between threads; cudarc only marks the
// type !Send because concurrent use is unsafe, which the mutex rules out.
unsafe impl Send for Recording {}

type Graphs = Arc<Mutex<HashMap<usize, Recording>>>;

/// The handle to one recorded graph: held next to the buffers the graph
/// uses, so the graph goes when they do.
pub struct GraphHandle {
    id: usize,
    graphs: Graphs,
}

impl Drop for GraphHandle {
    fn drop(&mut self) {
        self.graphs.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

pub struct CudaBackend<T: GemmElem>
where
    CudaBlasLT: Matmul<T>,
{
    device: Arc<CudaDevice>,
    pub(super) stream: Arc<CudaStream>,
    blas: CudaBlasLT,
    pub(super) ops: Ops,
    options: CudaOptions,
    recordings: Graphs,
    next_recording: AtomicUsize,
    busy: BusyClock,
    /// Host end of `read` and `write` (the logits' round trip to the
    /// temporal filters, every frame of a smoothed stream): pinned, so the
    /// copies are DMA with no staging copy inside the driver, and kept,
    /// grown to the longest tensor asked for, so no frame allocates it.
    host_staging: Mutex<Option<Pinned<T>>>,
    _elem: PhantomData<T>,
}


/// kernels/decoder.cu: pixels per block and the most hidden channels its
/// shared memory holds.
const DEC_PIXELS: usize = 8;
const DEC_MAX_HIDDEN: usize = 1024;

/// Row length of the im2col matrix: k*k*c_in rounded up to 8 elements.
fn im2col_ld(d: ConvDims) -> usize {
    (d.kernel * d.kernel * d.c_in).div_ceil(8) * 8
}

/// kernels/attention_split.cu: queries per block (4 warps x 16) and keys per
/// shared-memory tile (FS_BQ, FS_BK).
const SPLIT_BQ: usize = 64;
const SPLIT_BK: usize = 64;
/// Blocks the planner aims for, per SM: a few resident blocks per SM hide the
/// copies' and the MMAs' latency, and past one wave the tail matters less.
const SPLIT_BLOCKS_PER_SM: usize = 3;
/// Keys a split keeps at least (but the last): fewer and the pipeline never
/// fills, and the partials' traffic grows against the work they save.
const SPLIT_MIN_KEYS: usize = 128;
const SPLIT_MAX: usize = 16;

/// How the split attention covers one image: grid (q_tiles, heads, splits),
/// each split `tiles_per_split` whole key tiles (the last possibly fewer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    pub q_tiles: usize,
    pub splits: usize,
    pub tiles_per_split: usize,
}

impl SplitPlan {
    pub fn blocks(&self, heads: usize) -> usize {
        self.q_tiles * heads * self.splits
    }

    /// f32s of the partials (O, then (max, sum) per row and head); none
    /// with one split, which writes y directly.
    pub fn workspace_floats(&self, queries: usize, heads: usize, head_dim: usize) -> usize {
        if self.splits == 1 { 0 } else { self.splits * queries * (heads * head_dim + 2 * heads) }
    }
}

/// Splits the keys of each (64 queries, head) block until the grid holds
/// about SPLIT_BLOCKS_PER_SM blocks per SM, in whole tiles of at least
/// SPLIT_MIN_KEYS keys, and never leaves a split empty.
pub fn plan_split(queries: usize, keys: usize, heads: usize, sm_count: usize) -> SplitPlan {
    let q_tiles = queries.div_ceil(SPLIT_BQ).max(1);
    let key_tiles = keys.div_ceil(SPLIT_BK).max(1);
    let blocks = q_tiles * heads.max(1);
    let most = (keys / SPLIT_MIN_KEYS).clamp(1, SPLIT_MAX);
    let wanted = (SPLIT_BLOCKS_PER_SM * sm_count.max(1)).div_ceil(blocks).clamp(1, most);
    let tiles_per_split = key_tiles.div_ceil(wanted);
    SplitPlan { q_tiles, splits: key_tiles.div_ceil(tiles_per_split), tiles_per_split }
}

/// Rows each thread of `dwconv3x3_gelu_tiled` slides down (DW_ROWS in kernels/conv.cu).
const DW_ROWS: usize = 8;
const DW_BLOCK: usize = 128;

/// 16-byte chunks per lane the vectorised layer norm needs for rows of `dim`
/// elements of `elem_bytes` (1, 2 or 4), or None where the row is not whole
/// chunks or too long: the scalar kernel takes those. Buffers start 256-byte
/// aligned (cudarc allocations), so whole-chunk rows keep every load aligned.
pub(crate) fn layer_norm_chunks(dim: usize, elem_bytes: usize) -> Option<usize> {
    let per_chunk = 16 / elem_bytes;
    if dim == 0 || !dim.is_multiple_of(per_chunk) {
        return None;
    }
    match (dim / per_chunk).div_ceil(32) {
        1 => Some(1),
        2 => Some(2),
        3 | 4 => Some(4),
        _ => None,
    }
}

impl<T: GemmElem> CudaBackend<T>
where
    CudaBlasLT: Matmul<T>,
{
    /// The stream and kernels, for the frame arena's launches.
    fn queue(&self) -> Queue<'_> {
        Queue { stream: &self.stream, ops: &self.ops }
    }

    /// A worker's backend on `device`: its own stream, cuBLASLt handle and graphs.
    pub fn new(device: Arc<CudaDevice>, options: CudaOptions) -> Result<Self, CudaError> {
        let stream = device.ctx.new_stream()?;
        let blas = CudaBlasLT::new(stream.clone())?;
        let ops = Ops::resolve(&device.module, T::SUFFIX, T::HAS_FLASH && options.flash_attention, options.split_attention)?;
        Ok(CudaBackend {
            device,
            stream,
            blas,
            ops,
            options,
            recordings: Graphs::default(),
            next_recording: AtomicUsize::new(0),
            busy: BusyClock::default(),
            host_staging: Mutex::new(None),
            _elem: PhantomData,
        })
    }

    /// Another worker on the same GPU (weights made by `self` stay usable).
    pub fn sibling(&self) -> Result<Self, CudaError> {
        Self::new(self.device.clone(), self.options)
    }

    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Number of recorded graphs alive (one per handle that has run).
    pub fn recordings(&self) -> usize {
        self.recordings.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The first `len` elements of the pinned staging, grown (never shrunk)
    /// to hold them. Its previous copies were all waited for.
    fn staging_for<'a>(&self, staging: &'a mut Option<Pinned<T>>, len: usize) -> Result<&'a mut [T], CudaError> {
        if staging.as_ref().is_none_or(|s| s.len < len) {
            // Cached (not write-combined): the CPU reads what comes back.
            *staging = Some(Pinned::new(&self.stream, len, false)?);
        }
        let s = staging.as_mut().expect("made above");
        // SAFETY: the allocation holds s.len >= len plain-bits elements; both
        // callers write every element of the view (the conversion, the DMA)
        // before reading it, and the &mut borrow of the staging makes this
        // view the only one.
        Ok(unsafe { std::slice::from_raw_parts_mut(s.ptr, len) })
    }

    fn gemm(&self, x: &CudaSlice<T>, w: &CudaSlice<T>, bias: Option<&CudaSlice<T>>, y: &mut CudaSlice<T>, d: GemmDims, accumulate: bool) -> OpResult {
        self.gemm_ld(x, w, bias, y, d, accumulate, d.k)
    }

    /// As `gemm`, with x's rows `x_ld` elements apart (>= k).
    #[allow(clippy::too_many_arguments)]
    fn gemm_ld(&self, x: &CudaSlice<T>, w: &CudaSlice<T>, bias: Option<&CudaSlice<T>>, y: &mut CudaSlice<T>, d: GemmDims, accumulate: bool, x_ld: usize) -> OpResult {
        check_len("linear x", d.rows.saturating_sub(1) * x_ld + d.k, x.len())?;
        // cuBLASLt finds the device through the thread's current context; a
        // worker's first op may be a GEMM.
        self.stream.context().bind_to_thread()?;
        check_len("linear w", d.k * d.n, w.len())?;
        check_len("linear y", d.rows * d.n, y.len())?;
        // Row-major y[rows, n] = x[rows, k] w[k, n] is column-major
        // y^T[n, rows] = w^T[n, k] x^T[k, rows]: cuBLASLt's m = n, n = rows,
        // with no transposes. The bias epilogue adds bias[m] to every column.
        let cfg = MatmulConfig {
            transa: false,
            transb: false,
            transc: false,
            m: d.n as u64,
            n: d.rows as u64,
            k: d.k as u64,
            alpha: 1.0,
            lda: d.n as i64,
            ldb: x_ld as i64,
            beta: if accumulate { 1.0 } else { 0.0 },
            ldc: d.n as i64,
            stride_a: None,
            stride_b: None,
            stride_c: None,
            stride_bias: None,
            batch_size: None,
        };
        // SAFETY: lengths checked above against the dimensions cuBLASLt reads.
        Ok(unsafe { self.blas.matmul(cfg, w, x, y, bias, None) }?)
    }

    /// The split attention's kernels for this head size, and its plan for
    /// one image of `d`, when it is on and applies (no keys: the flash
    /// kernel's behaviour stays).
    fn split_attention(&self, d: AttnDims) -> Option<(&CudaFunction, &CudaFunction, SplitPlan)> {
        let f = match d.head_dim {
            32 => self.ops.flash_split_hd32.as_ref(),
            64 => self.ops.flash_split_hd64.as_ref(),
            _ => None,
        }?;
        let combine = self.ops.flash_split_combine.as_ref()?;
        (d.keys > 0).then(|| (f, combine, plan_split(d.queries, d.keys, d.heads, self.device.sm_count)))
    }

    /// One image's attention: `q`, `y` `[queries, C]`, `kv` `[keys, 2C]`;
    /// `ws` holds one image's split partials (reused image after image: the
    /// launches are ordered on the stream).
    fn attention_one(&self, q: &CudaView<'_, T>, kv: &CudaView<'_, T>, y: &mut CudaViewMut<'_, T>, ws: &mut CudaSlice<T>, d: AttnDims) -> OpResult {
        let (nq, nk, heads) = (d.queries as i32, d.keys as i32, d.heads as i32);
        if let Some((f, combine, plan)) = self.split_attention(d) {
            if d.queries == 0 {
                return Ok(());
            }
            // The kernels take the workspace as float*: a T buffer of at least
            // the partials' bytes (cudarc's allocations are 256-byte aligned).
            let floats = plan.workspace_floats(d.queries, d.heads, d.head_dim);
            check_len("attention workspace", (floats * 4).div_ceil(std::mem::size_of::<T>()), ws.len())?;
            let cfg = LaunchConfig { grid_dim: (plan.q_tiles as u32, d.heads as u32, plan.splits as u32), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
            let scale_log2 = std::f32::consts::LOG2_E / (d.head_dim as f32).sqrt();
            let tiles_per_split = plan.tiles_per_split as i32;
            launch!(self, f, cfg, q, kv, &mut *y, &mut *ws, &nq, &nk, &heads, &tiles_per_split, &scale_log2)?;
            if plan.splits == 1 {
                return Ok(());
            }
            let (hd, splits) = (d.head_dim as i32, plan.splits as i32);
            return launch!(self, combine, grid_for(d.queries * d.heads * d.head_dim / 2), &*ws, y, &nq, &heads, &hd, &splits);
        }
        let flash = match d.head_dim {
            32 => self.ops.flash_hd32.as_ref(),
            64 => self.ops.flash_hd64.as_ref(),
            _ => None,
        };
        if let Some(f) = flash {
            // 4 warps x 16 queries per block, one block column per head.
            let cfg = LaunchConfig { grid_dim: (d.queries.div_ceil(64) as u32, d.heads as u32, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
            let scale_log2 = std::f32::consts::LOG2_E / (d.head_dim as f32).sqrt();
            return launch!(self, f, cfg, q, kv, y, &nq, &nk, &heads, &scale_log2);
        }
        let (hd, scale) = (d.head_dim as i32, 1.0 / (d.head_dim as f32).sqrt());
        let cfg = LaunchConfig { grid_dim: ((d.queries * d.heads).div_ceil(128) as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        launch!(self, &self.ops.attention_simple, cfg, q, kv, y, &nq, &nk, &heads, &hd, &scale)
    }
}

impl<T: GemmElem> Backend for CudaBackend<T>
where
    CudaBlasLT: Matmul<T>,
{
    type Param = Arc<CudaSlice<T>>;
    type Tensor = CudaSlice<T>;
    type FrameSlot = FrameArena;
    type Recording = GraphHandle;

    fn describe(&self) -> String {
        let (major, minor) = self.device.gpu.compute_capability;
        format!("cuda:{} {} (sm_{major}{minor}, {})", self.device.gpu.ordinal, self.device.gpu.name, T::PRECISION)
    }

    fn precision(&self) -> Precision {
        T::PRECISION
    }

    fn param(&self, values: &[f32]) -> Result<Self::Param, BackendError> {
        let mut host = vec![T::default(); values.len()];
        T::slice_from_f32(values, &mut host);
        let slice = if host.is_empty() { self.stream.alloc_zeros::<T>(1)? } else { self.stream.clone_htod(&host)? };
        // Weights are read by other workers' streams: make them complete now.
        self.stream.synchronize()?;
        Ok(Arc::new(slice))
    }

    fn tensor(&self, len: usize) -> Result<Self::Tensor, BackendError> {
        Ok(self.stream.alloc_zeros::<T>(len.max(1))?)
    }

    fn write(&self, dst: &mut Self::Tensor, src: &[f32]) -> OpResult {
        check_len("write", src.len(), dst.len())?;
        let mut staging = self.host_staging.lock().unwrap_or_else(|e| e.into_inner());
        let host = self.staging_for(&mut staging, src.len())?;
        T::slice_from_f32(src, host);
        let (dst_ptr, _guard) = dst.device_ptr_mut(&self.stream);
        // SAFETY: `host` holds src.len() elements and `dst` at least as many;
        // the staging is not touched again before the copy is waited for.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst_ptr, &*host, self.stream.cu_stream()) }?;
        // The staging is reused by the next call: wait for the copy.
        self.stream.synchronize()?;
        Ok(())
    }

    fn read(&self, src: &Self::Tensor, dst: &mut [f32]) -> OpResult {
        check_len("read", dst.len(), src.len())?;
        let mut staging = self.host_staging.lock().unwrap_or_else(|e| e.into_inner());
        let host = self.staging_for(&mut staging, dst.len())?;
        let (src_ptr, _guard) = src.device_ptr(&self.stream);
        // SAFETY: `host` holds dst.len() elements and `src` at least as many.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut *host, src_ptr, self.stream.cu_stream()) }?;
        self.stream.synchronize()?;
        T::slice_to_f32(host, dst);
        Ok(())
    }

    fn sync(&self) -> OpResult {
        Ok(self.stream.synchronize()?)
    }

    fn conv2d_workspace(&self, d: ConvDims) -> usize {
        // Every image's patches, so one GEMM after im2col covers the batch.
        d.out_rows() * im2col_ld(d)
    }

    fn attention_workspace(&self, d: AttnDims) -> usize {
        // One image's partials, as elements of T (f32s are 2 of fp16's).
        self.split_attention(d).map_or(0, |(_, _, plan)| (plan.workspace_floats(d.queries, d.heads, d.head_dim) * 4).div_ceil(std::mem::size_of::<T>()))
    }

    fn linear(&self, x: &Self::Tensor, w: &Self::Param, bias: Option<&Self::Param>, y: &mut Self::Tensor, d: GemmDims, accumulate: bool) -> OpResult {
        self.gemm(x, w, bias.map(|b| &**b), y, d, accumulate)
    }

    fn conv2d(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, ws: &mut Self::Tensor, d: ConvDims) -> OpResult {
        let (oh, ow) = (d.out_h(), d.out_w());
        let cols = self.conv2d_workspace(d);
        let (image_in, image_cols) = (d.h * d.w * d.c_in, oh * ow * im2col_ld(d));
        check_len("conv2d x", d.batch * image_in, x.len())?;
        check_len("conv2d workspace", cols, ws.len())?;
        let (h, wd, c_in, k, stride, pad) = (d.h as i32, d.w as i32, d.c_in as i32, d.kernel as i32, d.stride as i32, d.pad as i32);
        let (oh_i, ow_i, ld) = (oh as i32, ow as i32, im2col_ld(d) as i32);
        // Whole 16-byte chunks of channels: one chunk per thread. ld (a
        // multiple of 8 elements) and every image's offsets are whole chunks too.
        let chunk = 16 / std::mem::size_of::<T>();
        let (kernel, per_thread) = if d.c_in.is_multiple_of(chunk) && self.options.vector_im2col { (&self.ops.im2col_vec, chunk) } else { (&self.ops.im2col, 1) };
        // One im2col launch per image at its offsets (the kernel knows one
        // map); the rows land one image after another, so one GEMM follows.
        for i in 0..d.batch {
            let src = x.slice(i * image_in..(i + 1) * image_in);
            let mut dst = ws.slice_mut(i * image_cols..(i + 1) * image_cols);
            launch!(self, kernel, grid_for(image_cols / per_thread), &src, &mut dst, &h, &wd, &c_in, &k, &stride, &pad, &oh_i, &ow_i, &ld)?;
        }
        let gemm = GemmDims { rows: d.out_rows(), k: d.kernel * d.kernel * d.c_in, n: d.c_out };
        self.gemm_ld(ws, &p.weight, Some(&p.bias), y, gemm, false, im2col_ld(d))
    }

    fn layer_norm(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, d: NormDims) -> OpResult {
        check_len("layer_norm x", d.rows * d.dim, x.len())?;
        check_len("layer_norm y", d.rows * d.dim, y.len())?;
        const WARPS: usize = 8;
        let cfg = LaunchConfig { grid_dim: (d.rows.div_ceil(WARPS).max(1) as u32, 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: 0 };
        let (rows, dim) = (d.rows as i32, d.dim as i32);
        let kernel = match layer_norm_chunks(d.dim, std::mem::size_of::<T>()) {
            _ if !self.options.vector_layer_norm => &self.ops.layer_norm,
            Some(1) => &self.ops.layer_norm_vec1,
            Some(2) => &self.ops.layer_norm_vec2,
            Some(_) => &self.ops.layer_norm_vec4,
            None => &self.ops.layer_norm,
        };
        launch!(self, kernel, cfg, x, &*p.weight, &*p.bias, y, &rows, &dim)
    }

    fn add_assign(&self, y: &mut Self::Tensor, x: &Self::Tensor, len: usize) -> OpResult {
        check_len("add_assign", len, x.len().min(y.len()))?;
        let n = len as i64;
        launch!(self, &self.ops.add_assign, grid_for(len), y, x, &n)
    }

    fn attention(&self, q: &Self::Tensor, kv: &Self::Tensor, y: &mut Self::Tensor, ws: &mut Self::Tensor, d: AttnDims) -> OpResult {
        let (q_len, kv_len) = d.image_lens(q.len(), kv.len(), y.len())?;
        if d.head_dim > 256 {
            return Err(BackendError::HeadDim { head_dim: d.head_dim, max: 256 });
        }
        // One launch per image on its slices: image i's queries only see
        // image i's keys, with the kernels unchanged.
        for i in 0..d.batch {
            let (qi, kvi) = (q.slice(i * q_len..(i + 1) * q_len), kv.slice(i * kv_len..(i + 1) * kv_len));
            let mut yi = y.slice_mut(i * q_len..(i + 1) * q_len);
            self.attention_one(&qi, &kvi, &mut yi, ws, d)?;
        }
        Ok(())
    }

    fn dwconv3x3_gelu(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, d: DwConvDims) -> OpResult {
        let (n, c) = (d.h * d.w * d.channels, d.channels);
        check_len("dwconv x", d.batch * n, x.len())?;
        check_len("dwconv y", d.batch * n, y.len())?;
        check_len("dwconv w", 9 * c, p.weight.len())?;
        let (h_i, w_i, c_i) = (d.h as i32, d.w as i32, c as i32);
        let (w, bias) = (&*p.weight, &*p.bias);
        // Every SegFormer's Mix-FFN width is a multiple of 4, and each image's
        // map starts at a multiple of 4 elements of a 256-byte aligned buffer
        // (n = h*w*c), as the vector loads need.
        let tiled = c % 4 == 0 && self.options.tiled_dwconv;
        for i in 0..d.batch {
            let xi = x.slice(i * n..(i + 1) * n);
            let mut yi = y.slice_mut(i * n..(i + 1) * n);
            if tiled {
                let cfg = LaunchConfig {
                    grid_dim: ((c / 4 * d.w).div_ceil(DW_BLOCK) as u32, d.h.div_ceil(DW_ROWS) as u32, 1),
                    block_dim: (DW_BLOCK as u32, 1, 1),
                    shared_mem_bytes: 0,
                };
                launch!(self, &self.ops.dwconv3x3_gelu_tiled, cfg, &xi, w, bias, &mut yi, &h_i, &w_i, &c_i)?;
            } else {
                launch!(self, &self.ops.dwconv3x3_gelu, grid_for(n), &xi, w, bias, &mut yi, &h_i, &w_i, &c_i)?;
            }
        }
        Ok(())
    }

    fn resize_bilinear(&self, x: &Self::Tensor, y: &mut Self::Tensor, d: ResizeDims, accumulate: bool) -> OpResult {
        let (src, n) = (d.src_h * d.src_w * d.channels, d.dst_h * d.dst_w * d.channels);
        check_len("resize x", d.batch * src, x.len())?;
        check_len("resize y", d.batch * n, y.len())?;
        let [sh, sw, dh, dw, ch, acc] = [d.src_h as i32, d.src_w as i32, d.dst_h as i32, d.dst_w as i32, d.channels as i32, i32::from(accumulate)];
        for i in 0..d.batch {
            let xi = x.slice(i * src..(i + 1) * src);
            let mut yi = y.slice_mut(i * n..(i + 1) * n);
            launch!(self, &self.ops.resize_bilinear, grid_for(n), &xi, &mut yi, &sh, &sw, &dh, &dw, &ch, &acc)?;
        }
        Ok(())
    }

    fn decode_tail(&self, acc: &mut Self::Tensor, stages: &[StageMap<'_, Self::Tensor>], classifier: &Affine<Self::Param>, logits: &mut Self::Tensor, d: DecodeDims) -> OpResult {
        let [s1, s2, s3] = stages else { return decode_tail_unfused(self, acc, stages, classifier, logits, d) };
        if !self.options.fused_decoder || d.hidden > DEC_MAX_HIDDEN {
            return decode_tail_unfused(self, acc, stages, classifier, logits, d);
        }
        let pixels = d.batch * d.h0 * d.w0;
        check_len("decode acc", pixels * d.hidden, acc.len())?;
        for s in stages {
            check_len("decode stage map", d.batch * s.h * s.w * d.hidden, s.map.len())?;
        }
        check_len("decode classifier", d.hidden * d.labels, classifier.weight.len())?;
        check_len("decode logits", pixels * d.labels, logits.len())?;
        let cfg = LaunchConfig { grid_dim: (pixels.div_ceil(DEC_PIXELS) as u32, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        let [h1, w1, h2, w2, h3, w3] = [s1.h, s1.w, s2.h, s2.w, s3.h, s3.w].map(|v| v as i32);
        let [batch, h0, w0, hidden, labels] = [d.batch as i32, d.h0 as i32, d.w0 as i32, d.hidden as i32, d.labels as i32];
        let (w, b) = (&*classifier.weight, &*classifier.bias);
        launch!(self, &self.ops.decode_tail, cfg, &*acc, s1.map, &h1, &w1, s2.map, &h2, &w2, s3.map, &h3, &w3, w, b, logits, &batch, &h0, &w0, &hidden, &labels)
    }

    fn relu(&self, y: &mut Self::Tensor, len: usize) -> OpResult {
        check_len("relu", len, y.len())?;
        let n = len as i64;
        launch!(self, &self.ops.relu, grid_for(len), y, &n)
    }

    fn recording(&self) -> GraphHandle {
        GraphHandle { id: self.next_recording.fetch_add(1, Ordering::Relaxed), graphs: self.recordings.clone() }
    }

    fn run_recorded<E: From<BackendError>>(&self, recording: &GraphHandle, forward: &mut dyn FnMut() -> Result<(), E>) -> Result<(), E> {
        if !self.options.graphs {
            return self.busy.around(&self.stream, forward);
        }
        {
            let recordings = self.recordings.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(Recording(graph)) = recordings.get(&recording.id) {
                self.busy.around(&self.stream, || graph.launch()).map_err(BackendError::from)?;
                return Ok(());
            }
        }
        // The first run is eager and its results are this call's: module
        // loading, cuBLASLt's heuristics and any lazy initialisation happen
        // outside the capture. The graph is not launched as well: a forward
        // may change its own input (the frame path tints the uploaded frame in
        // place), so it runs exactly once per staged input (seen on an H100:
        // the first frame of each recording came out tinted twice).
        self.busy.around(&self.stream, &mut *forward)?;
        self.stream.synchronize().map_err(BackendError::from)?;
        // Thread-local mode: other workers' streams keep running uncaptured.
        // Capturing records the forward's work without running it.
        self.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(BackendError::from)?;
        let captured = forward();
        // End the capture whatever happened, or the stream stays unusable.
        let graph = self.stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(BackendError::from);
        captured?;
        let graph = graph?.ok_or_else(|| BackendError::from(CudaError::EmptyGraph))?;
        graph.upload().map_err(BackendError::from)?;
        self.recordings.lock().unwrap_or_else(|e| e.into_inner()).insert(recording.id, Recording(graph));
        Ok(())
    }

    fn frame_slot(&self, geometry: FrameGeometry, road_classes: &[usize], pixel_confidence: bool) -> Result<FrameArena, BackendError> {
        Ok(FrameArena::new(&self.stream, geometry, road_classes, pixel_confidence)?)
    }

    fn stage_frame(&self, slot: &mut FrameArena, frame: &FrameRef<'_>, tone: &ToneCurve) -> OpResult {
        slot.upload(&self.stream, frame, tone)
    }

    fn frame_to_input(&self, slot: &mut FrameArena, input: &mut Self::Tensor, image: usize, w: usize, h: usize) -> OpResult {
        let len = w * h * 3;
        check_len("frame input", (image + 1) * len, input.len())?;
        slot.enqueue_in(&self.queue(), &mut input.slice_mut(image * len..(image + 1) * len), w, h)
    }

    fn frame_from_logits(&self, slot: &mut FrameArena, logits: &Self::Tensor, image: usize, d: FrameOutDims) -> OpResult {
        let len = d.logits_w * d.logits_h * d.labels;
        check_len("frame logits", (image + 1) * len, logits.len())?;
        slot.enqueue_out(&self.queue(), &logits.slice(image * len..(image + 1) * len), d)
    }

    fn collect_frame(&self, slot: &mut FrameArena, out: &mut Segmentation) -> Result<Option<HostPhases>, BackendError> {
        self.stream.synchronize()?;
        slot.collect(out);
        // Pre- and postprocessing ran inside the graph.
        Ok(None)
    }

    fn annotates_frames(&self) -> bool {
        true
    }

    fn stage_overlay(&self, slot: &mut FrameArena, overlay: &FrameOverlay) -> OpResult {
        slot.stage_overlay(&self.stream, overlay)
    }

    fn frame_annotate(&self, slot: &mut FrameArena) -> OpResult {
        slot.enqueue_annotate(&self.queue())
    }

    fn collect_annotated(&self, slot: &mut FrameArena, out: &mut Vec<u8>) -> OpResult {
        slot.collect_annotated(out);
        Ok(())
    }

    fn take_device_ms(&self) -> Option<f64> {
        self.busy.take_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::{SPLIT_BK, SPLIT_MAX, SPLIT_MIN_KEYS, SplitPlan, layer_norm_chunks, plan_split};

    #[test]
    fn split_attention_plans_fill_the_gpu_at_segformer_shapes() {
        // Rule: on an H100 (132 SMs) the split planner leaves the big early
        // stages alone and splits the keys of the late ones (few queries, many
        // heads) until the grid has ~3 blocks per SM, in whole 64-key tiles of
        // >= 128 keys; a split is never empty and one split needs no workspace.
        let plan = |q, k, h| {
            let p = plan_split(q, k, h, 132);
            (p.splits, p.tiles_per_split, p.blocks(h))
        };
        // 1024x1024: queries 65536/16384/4096/1024 against 1024 keys, heads 1/2/5/8.
        assert_eq!(plan(65536, 1024, 1), (1, 16, 1024));
        assert_eq!(plan(16384, 1024, 2), (1, 16, 512));
        assert_eq!(plan(4096, 1024, 5), (2, 8, 640));
        assert_eq!(plan(1024, 1024, 8), (4, 4, 512));
        // 1024x576: queries 36864/9216/2304/576 against 576 keys (9 tiles).
        assert_eq!(plan(36864, 576, 1), (1, 9, 576));
        assert_eq!(plan(9216, 576, 2), (2, 5, 576));
        assert_eq!(plan(2304, 576, 5), (3, 3, 540));
        // 576 keys make at most 4 splits of 128; 9 tiles in whole tiles: 3 + 3 + 3.
        assert_eq!(plan(576, 576, 8), (3, 3, 216));
        // Too few keys to split, and tiny shapes.
        assert_eq!(plan(64, 100, 1), (1, 2, 1));
        assert_eq!(plan(1, 1, 1), (1, 1, 1));
        assert_eq!(plan(5, 17, 8), (1, 1, 8));
        assert_eq!(SplitPlan { q_tiles: 16, splits: 1, tiles_per_split: 16 }.workspace_floats(1024, 8, 64), 0);
        assert_eq!(plan_split(1024, 1024, 8, 132).workspace_floats(1024, 8, 64), 4 * 1024 * (512 + 16));

        for sm in [1, 46, 108, 132, 170] {
            for keys in [1, 17, 63, 64, 65, 100, 127, 128, 129, 300, 576, 1000, 1024, 4096] {
                for queries in [1, 63, 64, 65, 576, 1024, 2304, 4096, 65536] {
                    for heads in [1, 2, 5, 8] {
                        let p = plan_split(queries, keys, heads, sm);
                        let key_tiles = keys.div_ceil(SPLIT_BK);
                        let what = format!("sm {sm} queries {queries} keys {keys} heads {heads}: {p:?}");
                        assert!(p.splits >= 1 && p.splits <= SPLIT_MAX, "{what}");
                        assert_eq!(p.q_tiles, queries.div_ceil(64), "{what}");
                        assert!(p.splits * p.tiles_per_split >= key_tiles, "{what}: keys left over");
                        assert!((p.splits - 1) * p.tiles_per_split < key_tiles, "{what}: an empty split");
                        if p.splits > 1 {
                            assert!(p.tiles_per_split * SPLIT_BK >= SPLIT_MIN_KEYS, "{what}: splits too short");
                            assert!(queries.div_ceil(64) * heads < 3 * sm, "{what}: split though the GPU was full");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn layer_norm_rows_pick_the_kernel_that_holds_them() {
        // SegFormer's channel counts in 16-bit storage: whole 8-element chunks, one or two per lane.
        for (dim, chunks) in [(32, Some(1)), (64, Some(1)), (160, Some(1)), (256, Some(1)), (320, Some(2)), (512, Some(2)), (1000, Some(4)), (1024, Some(4)), (2048, None)] {
            assert_eq!(layer_norm_chunks(dim, 2), chunks, "dim {dim}");
        }
        // Not whole chunks, too long, or f32's 4-element chunks.
        assert_eq!(layer_norm_chunks(36, 2), None);
        assert_eq!(layer_norm_chunks(2056, 2), None);
        assert_eq!(layer_norm_chunks(0, 2), None);
        assert_eq!(layer_norm_chunks(36, 4), Some(1));
        assert_eq!(layer_norm_chunks(512, 4), Some(4));
    }
}
