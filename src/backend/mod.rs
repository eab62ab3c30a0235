//! The operations SegFormer needs, as a trait each backend implements once.
//!
//! Shapes are static per (model, input size): every layer allocates its output
//! buffers when it is built and passes explicit dimensions to each op, so a GPU
//! backend can capture the whole forward into a graph with no allocation inside.
//! All activations are row-major "tokens x channels": NHWC, where a batch of
//! N images is N maps one after another. Row-wise ops (GEMM, layer norm,
//! element-wise) just see N times the rows; ops that look across pixels
//! (convolutions, attention, resize) carry the image count in their dims and
//! never mix images.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

use std::fmt;

use crate::exposure::ToneCurve;
use crate::frame::{FrameError, FrameGeometry, FrameOverlay, FrameRef, Segmentation};

/// Numeric precision a backend computes in. The CPU backend is always `F32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    Fp16,
    Bf16,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        })
    }
}

/// A precision name other than f32, fp16 or bf16 (or their aliases).
#[derive(Debug, thiserror::Error)]
#[error("unknown precision '{0}' (expected f32, fp16 or bf16)")]
pub struct UnknownPrecision(pub String);

impl std::str::FromStr for Precision {
    type Err = UnknownPrecision;
    fn from_str(s: &str) -> Result<Self, UnknownPrecision> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Precision::F32),
            "fp16" | "f16" | "float16" | "half" => Ok(Precision::Fp16),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            other => Err(UnknownPrecision(other.to_string())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("buffer size mismatch in {op}: expected {expected} elements, got {actual}")]
    Size { op: &'static str, expected: usize, actual: usize },
    /// The CUDA driver, cuBLASLt, or setting up the device: kernels (NVRTC),
    /// graphs, a missing GPU.
    #[cfg(feature = "cuda")]
    #[error("device error: {0}")]
    Cuda(#[from] cuda::error::CudaError),
    #[cfg(feature = "cuda")]
    #[error("device error: attention head size {head_dim} is above the CUDA kernels' {max}")]
    HeadDim { head_dim: usize, max: usize },
}

/// A failed driver or cuBLASLt call is a [`cuda::CudaError`] like any other
/// CUDA failure.
#[cfg(feature = "cuda")]
impl From<cudarc::driver::DriverError> for BackendError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        BackendError::Cuda(e.into())
    }
}

#[cfg(feature = "cuda")]
impl From<cudarc::cublaslt::result::CublasError> for BackendError {
    fn from(e: cudarc::cublaslt::result::CublasError) -> Self {
        BackendError::Cuda(e.into())
    }
}

/// `y[rows, n] = x[rows, k] . w[k, n] (+ bias[n])`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmDims {
    pub rows: usize,
    pub k: usize,
    pub n: usize,
}

/// A 2-D convolution over `batch` maps `[h, w, c_in]` with weights laid out
/// `[kernel, kernel, c_in, c_out]`, producing `[batch, out_h, out_w, c_out]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvDims {
    pub batch: usize,
    pub h: usize,
    pub w: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
}

impl ConvDims {
    pub fn out_h(&self) -> usize {
        (self.h + 2 * self.pad).saturating_sub(self.kernel) / self.stride + 1
    }
    pub fn out_w(&self) -> usize {
        (self.w + 2 * self.pad).saturating_sub(self.kernel) / self.stride + 1
    }
    /// Whether the kernel fits at least once; a smaller map is a build-time error.
    pub fn is_valid(&self) -> bool {
        self.h + 2 * self.pad >= self.kernel && self.w + 2 * self.pad >= self.kernel && self.stride > 0
    }
    /// Output rows of all images: `batch * out_h * out_w`.
    pub fn out_rows(&self) -> usize {
        self.batch * self.out_h() * self.out_w()
    }
}

/// Multi-head attention of `queries` tokens against `keys` tokens, per image:
/// `q` is `[batch, queries, heads*head_dim]`; `kv` is `[batch, keys,
/// 2*heads*head_dim]` with all keys' channels first, then all values'
/// channels. Image i's queries only see image i's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    pub batch: usize,
    pub queries: usize,
    pub keys: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl AttnDims {
    /// Elements of one image's queries `[queries, heads*head_dim]` and keys
    /// and values `[keys, 2*heads*head_dim]`, after checking that `q`, `kv`
    /// and `y` (of those lengths) hold the whole batch.
    pub fn image_lens(&self, q: usize, kv: usize, y: usize) -> Result<(usize, usize), BackendError> {
        let channels = self.heads * self.head_dim;
        let (q_len, kv_len) = (self.queries * channels, self.keys * 2 * channels);
        check_len("attention q", self.batch * q_len, q)?;
        check_len("attention kv", self.batch * kv_len, kv)?;
        check_len("attention y", self.batch * q_len, y)?;
        Ok((q_len, kv_len))
    }
}

/// A [`BackendError::Size`] unless `actual` holds `expected` elements.
pub(crate) fn check_len(op: &'static str, expected: usize, actual: usize) -> OpResult {
    if actual < expected { Err(BackendError::Size { op, expected, actual }) } else { Ok(()) }
}

/// Bilinear resize (half-pixel centres, align_corners=False, no antialias) of
/// `batch` maps `[src_h, src_w, channels]` to `[dst_h, dst_w, channels]` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResizeDims {
    pub batch: usize,
    pub src_h: usize,
    pub src_w: usize,
    pub dst_h: usize,
    pub dst_w: usize,
    pub channels: usize,
}

/// The decode head's tail for `batch` images: stage maps of `hidden`
/// channels summed at `[h0, w0]`, then `labels` classifier outputs per pixel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeDims {
    pub batch: usize,
    pub h0: usize,
    pub w0: usize,
    pub hidden: usize,
    pub labels: usize,
}

/// [`Backend::decode_tail`] as separate ops: each stage resized into `acc`
/// and added, ReLU in place, then the classifier.
pub fn decode_tail_unfused<B: Backend>(b: &B, acc: &mut B::Tensor, stages: &[StageMap<'_, B::Tensor>], classifier: &Affine<B::Param>, logits: &mut B::Tensor, d: DecodeDims) -> OpResult {
    for s in stages {
        // [batch, h_i, w_i, D] -> bilinear per image -> += [batch, h0, w0, D]
        let resize = ResizeDims { batch: d.batch, src_h: s.h, src_w: s.w, dst_h: d.h0, dst_w: d.w0, channels: d.hidden };
        b.resize_bilinear(s.map, acc, resize, true)?;
    }
    let rows = d.batch * d.h0 * d.w0;
    b.relu(acc, rows * d.hidden)?;
    b.linear(acc, &classifier.weight, Some(&classifier.bias), logits, GemmDims { rows, k: d.hidden, n: d.labels }, false)
}

/// One stage's projected maps `[batch, h, w, hidden]` for [`Backend::decode_tail`].
pub struct StageMap<'a, T> {
    pub map: &'a T,
    pub h: usize,
    pub w: usize,
}

/// Layer norm of `rows` rows of `dim` channels each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormDims {
    pub rows: usize,
    pub dim: usize,
}

/// Depthwise 3x3 convolution (padding 1) of `batch` maps `[h, w, channels]`
/// with weights laid out `[3, 3, channels]`, producing the same shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DwConvDims {
    pub batch: usize,
    pub h: usize,
    pub w: usize,
    pub channels: usize,
}

/// A weight and the bias added after it: a dense layer's or convolution's,
/// or a layer norm's scale (gamma) and shift (beta). Checkpoints name the pair
/// `<prefix>.weight` and `<prefix>.bias` in every case.
#[derive(Clone, Debug)]
pub struct Affine<P> {
    pub weight: P,
    pub bias: P,
}

pub type OpResult = Result<(), BackendError>;

/// Logits `[logits_h, logits_w, labels]` -> a frame slot's segmentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameOutDims {
    pub logits_w: usize,
    pub logits_h: usize,
    pub labels: usize,
    /// Factor on every logit: 1 / passes, when several passes were summed.
    pub logit_scale: f32,
    /// Confidence below which a pixel is [`crate::frame::UNKNOWN`].
    pub threshold: f32,
}

/// Time a backend spent pre- and postprocessing a frame on the host, which
/// the engine cannot see from outside the recorded work.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostPhases {
    pub preprocess_ms: f64,
    pub postprocess_ms: f64,
}

/// What a backend provides. `Param`s are read-only weights shared by every
/// model instance (and worker) built on this backend; `Tensor`s are activation
/// buffers owned by exactly one model instance.
pub trait Backend: Send + Sync + 'static {
    type Param: Clone + Send + Sync;
    type Tensor: Send;
    /// The buffers for frames of one geometry: the frame as it came, and its
    /// segmentation on the way out.
    type FrameSlot: Send;
    /// A handle to recorded work ([`Backend::run_recorded`]). Whoever owns the
    /// buffers a recording uses owns the handle, and dropping it drops the
    /// recording.
    type Recording: Send;

    fn describe(&self) -> String;
    fn precision(&self) -> Precision;

    fn param(&self, values: &[f32]) -> Result<Self::Param, BackendError>;
    fn tensor(&self, len: usize) -> Result<Self::Tensor, BackendError>;
    fn write(&self, dst: &mut Self::Tensor, src: &[f32]) -> OpResult;
    fn read(&self, src: &Self::Tensor, dst: &mut [f32]) -> OpResult;
    /// Waits until queued work is done (a no-op on synchronous backends).
    fn sync(&self) -> OpResult;

    /// Extra scratch elements `conv2d` needs for these dimensions.
    fn conv2d_workspace(&self, dims: ConvDims) -> usize;
    /// Extra scratch elements `attention` needs for these dimensions.
    fn attention_workspace(&self, dims: AttnDims) -> usize;

    /// `y = x . w (+ bias)`, or `y += ...` when `accumulate`.
    fn linear(&self, x: &Self::Tensor, w: &Self::Param, bias: Option<&Self::Param>, y: &mut Self::Tensor, d: GemmDims, accumulate: bool) -> OpResult;

    /// Convolution with bias; `workspace` holds `conv2d_workspace(d)` elements.
    fn conv2d(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, workspace: &mut Self::Tensor, d: ConvDims) -> OpResult;

    /// Per-row layer norm (eps 1e-5, as HF uses), scaled and shifted by `p`.
    fn layer_norm(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, d: NormDims) -> OpResult;

    /// `y += x` over `len` elements (residual connections).
    fn add_assign(&self, y: &mut Self::Tensor, x: &Self::Tensor, len: usize) -> OpResult;

    /// Softmax attention, scaled by `1/sqrt(head_dim)`, written to `y` `[queries, heads*head_dim]`.
    fn attention(&self, q: &Self::Tensor, kv: &Self::Tensor, y: &mut Self::Tensor, workspace: &mut Self::Tensor, d: AttnDims) -> OpResult;

    /// Depthwise 3x3 convolution (padding 1) + bias + exact GELU.
    fn dwconv3x3_gelu(&self, x: &Self::Tensor, p: &Affine<Self::Param>, y: &mut Self::Tensor, d: DwConvDims) -> OpResult;

    /// `y (+)= resize(x)`.
    fn resize_bilinear(&self, x: &Self::Tensor, y: &mut Self::Tensor, d: ResizeDims, accumulate: bool) -> OpResult;

    /// `y = max(y, 0)` over `len` elements.
    fn relu(&self, y: &mut Self::Tensor, len: usize) -> OpResult;

    /// A new, empty recording handle.
    fn recording(&self) -> Self::Recording;

    /// Runs `forward`, which must only enqueue this backend's ops on buffers
    /// that live as long as `recording`. A backend may record the first run
    /// into `recording` and replay it on later calls instead of calling
    /// `forward` (the CUDA backend's graphs); others just call it. Either
    /// way each call does the forward's work once, so a forward may change
    /// its own inputs (the frame path tints the uploaded frame in place).
    fn run_recorded<E: From<BackendError>>(&self, recording: &Self::Recording, forward: &mut dyn FnMut() -> Result<(), E>) -> Result<(), E>;

    /// Buffers for frames of `geometry`; `road_classes` are counted in the
    /// segmentation's road coverage. Without `pixel_confidence` the
    /// segmentation's per-pixel confidence stays empty (a device backend then
    /// never copies it to the host; the mean is always there).
    fn frame_slot(&self, geometry: FrameGeometry, road_classes: &[usize], pixel_confidence: bool) -> Result<Self::FrameSlot, BackendError>;

    /// Before the recorded work: takes the frame's pixels, which must have
    /// the slot's geometry (a device backend queues their copy to the device,
    /// from where they are when that memory is pinned, else via staging),
    /// and the tone curve its values go through on their way into the model's
    /// input (`crate::exposure`; the identity for most frames).
    fn stage_frame(&self, slot: &mut Self::FrameSlot, frame: &FrameRef<'_>, tone: &ToneCurve) -> OpResult;

    /// Recorded: the frame, each value through the staged tone curve, resized
    /// (bilinear, half-pixel centres) to `w` x `h` and normalised (/255, ImageNet mean and std) into image `image` of
    /// `input` `[batch, h, w, 3]`.
    fn frame_to_input(&self, slot: &mut Self::FrameSlot, input: &mut Self::Tensor, image: usize, w: usize, h: usize) -> OpResult;

    /// Recorded: image `image` of `logits` `[batch, lh, lw, labels]`
    /// upsampled to the frame's size, soft-maxed, and turned into the slot's
    /// class, confidence and road coverage per pixel.
    fn frame_from_logits(&self, slot: &mut Self::FrameSlot, logits: &Self::Tensor, image: usize, d: FrameOutDims) -> OpResult;

    /// Host work after the recorded work (waits for it): the segmentation
    /// into `out`, and the host phases' times where the backend has them.
    fn collect_frame(&self, slot: &mut Self::FrameSlot, out: &mut Segmentation) -> Result<Option<HostPhases>, BackendError>;

    /// Whether this backend draws overlays in its frame path (`stage_overlay`,
    /// `frame_annotate`, `collect_annotated`). The CPU does not: its caller
    /// tints the frame it already holds, in place, which costs no copy.
    fn annotates_frames(&self) -> bool {
        false
    }

    /// Host work before the recorded work: the overlay for the staged frame.
    fn stage_overlay(&self, _slot: &mut Self::FrameSlot, _overlay: &FrameOverlay) -> OpResult {
        Ok(())
    }

    /// Recorded, after `frame_from_logits`: the staged overlay drawn over the
    /// uploaded frame with the slot's classes, the result copied back.
    fn frame_annotate(&self, _slot: &mut Self::FrameSlot) -> OpResult {
        Ok(())
    }

    /// Host work after `collect_frame`: the annotated frame (the slot
    /// geometry's bytes) into `out`.
    fn collect_annotated(&self, _slot: &mut Self::FrameSlot, _out: &mut Vec<u8>) -> OpResult {
        Ok(())
    }

    /// `logits = relu(acc + sum_i resize(stages_i)) W + b` (the decode head after
    /// its projections; `acc` is `[h0, w0, hidden]` and may be overwritten).
    /// A backend may fuse it so the hidden map is never written back.
    fn decode_tail(&self, acc: &mut Self::Tensor, stages: &[StageMap<'_, Self::Tensor>], classifier: &Affine<Self::Param>, logits: &mut Self::Tensor, d: DecodeDims) -> OpResult
    where
        Self: Sized,
    {
        decode_tail_unfused(self, acc, stages, classifier, logits, d)
    }

    /// Milliseconds the device spent in `run_recorded` forwards since the
    /// last call (measured on the device, not the host's wall time), or None
    /// where the backend does not measure it (the CPU: its busy share is the
    /// worker's).
    fn take_device_ms(&self) -> Option<f64> {
        None
    }
}
