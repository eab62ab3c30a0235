//! The frame path on the GPU: a uint8 frame is staged in pinned host memory,
//! copied up, resized and normalised into the model input, and after the
//! forward the logits become per-pixel class and confidence at frame size,
//! copied back into pinned memory, all on the worker's stream, so the whole
//! sequence records into the same CUDA graph as the model.
//!
//! A [`FrameArena`] (the backend's frame slot) holds every buffer for one
//! frame geometry (size, stride, pixel format); a graph recorded with it is
//! valid as long as it lives, and its owner holds that graph's handle.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceRepr, PinnedHostSlice, PushKernelArg, ValidAsZeroBits, result};

use super::error::CudaError;
use super::launch::{Queue, grid_for, launch};
use crate::backend::{BackendError, FrameOutDims};
use crate::exposure::ToneCurve;
use crate::frame::{FrameError, FrameGeometry, FrameOverlay, FrameRef, PixelFormat, Segmentation};

/// Buffers for one frame geometry; pinned ends for asynchronous copies.
pub struct FrameArena {
    geometry: FrameGeometry,
    /// Bytes of one frame (NV12: luma plus the interleaved chroma plane).
    bytes: usize,
    /// Frame in, write-combined: the CPU only writes it, the GPU reads it fast.
    staging: Pinned<u8>,
    frame: CudaSlice<u8>,
    /// The frame's tone curve (kernels/frame.cu's `tone`, 256 floats), its
    /// pinned staging, and the gamma of the table on the device: a new table
    /// goes up only when the curve changes (most frames keep the identity).
    tone: CudaSlice<f32>,
    tone_in: Pinned<f32>,
    tone_on_device: f32,
    road_is: CudaSlice<u8>,
    classes: CudaSlice<u8>,
    confidence: CudaSlice<f32>,
    road_total: CudaSlice<u32>,
    confidence_total: CudaSlice<f32>,
    // Results out, cached pinned memory (the CPU reads them). The per-pixel
    // confidence only when asked: 4 bytes a pixel (8.3 MB a 1080p frame) that
    // nothing in the daemon reads, against 1 for the classes.
    classes_out: Pinned<u8>,
    confidence_out: Option<Pinned<f32>>,
    totals_out: Pinned<u32>,
    /// Made by the first frame drawn with an overlay (before its graph is recorded).
    overlay: Option<OverlayBuffers>,
}

/// kernels/overlay.cu's inputs and the annotated frame on its way back.
struct OverlayBuffers {
    /// `ov` (OVERLAY_FLOATS: tints, picture, edge, road flags), then per column the first hood row.
    tints_in: Pinned<f32>,
    tops_in: Pinned<u32>,
    tints: CudaSlice<f32>,
    tops: CudaSlice<u32>,
    frame_out: Pinned<u8>,
}

/// Pinned host memory and a raw pointer into it, taken once: cudarc's
/// accessors synchronise the stream on every call.
pub(super) struct Pinned<T> {
    _slice: PinnedHostSlice<T>,
    pub(super) ptr: *mut T,
    pub(super) len: usize,
}

// SAFETY: the pointer is into the allocation this value owns; whoever holds
// it (one worker's arena or backend) uses it from one thread at a time.
unsafe impl<T> Send for Pinned<T> {}

impl<T: DeviceRepr + ValidAsZeroBits> Pinned<T> {
    /// `len` elements (at least one), write-combined where only the CPU
    /// writes and the GPU reads, cached where the CPU reads.
    pub(super) fn new(stream: &Arc<CudaStream>, len: usize, write_combined: bool) -> Result<Self, CudaError> {
        let ctx = stream.context();
        let len = len.max(1);
        // SAFETY: pinned allocations are written before they are read.
        let mut slice = unsafe { if write_combined { ctx.alloc_pinned::<T>(len)? } else { ctx.alloc_pinned_with_flags::<T>(len, 0)? } };
        Ok(Pinned { ptr: slice.as_mut_ptr()?, _slice: slice, len })
    }
}

/// Floats of kernels/overlay.cu's `ov`: 256 class tints, unknown, hood (4
/// each), the picture rectangle x0, y0, x1, y1 (exact as floats: frame sides
/// are far below 2^24), the road edge's tint, then 256 road flags (1: the
/// class is road).
const OVERLAY_FLOATS: usize = 260 * 4 + 256;

// SAFETY: the raw pointers point into the pinned allocations this arena owns;
// the arena is used by one worker thread at a time.
unsafe impl Send for FrameArena {}

fn format_code(format: PixelFormat) -> i32 {
    // kernels/frame.cu: FMT_RGB 0, FMT_RGBA 1, FMT_NV12 2
    match format {
        PixelFormat::Rgb => 0,
        PixelFormat::Rgba => 1,
        PixelFormat::Nv12 => 2,
    }
}

impl FrameArena {
    /// Where the frame's bytes are copied up from: the frame itself when it
    /// lies in pinned memory (the ring's buffers, where a CUDA engine made
    /// them pinned), else pinned staging after a host copy.
    fn stage(&mut self, frame: &FrameRef<'_>) -> Result<*const u8, FrameError> {
        frame.validate()?;
        if frame.geometry() != self.geometry {
            return Err(FrameError(format!("frame {:?} staged into a slot for {:?}", frame.geometry(), self.geometry)));
        }
        let n = self.bytes.min(frame.data.len());
        if n == self.bytes && crate::host_memory::is_pinned(&frame.data[..n]) {
            return Ok(frame.data.as_ptr());
        }
        // SAFETY: staging holds `bytes` >= n bytes and no copy from it is in
        // flight (the previous frame's work was synchronised).
        unsafe { std::ptr::copy_nonoverlapping(frame.data.as_ptr(), self.staging.ptr, n) };
        Ok(self.staging.ptr)
    }

    /// The annotated frame (after the stream is synchronised) into `out`.
    pub(super) fn collect_annotated(&self, out: &mut Vec<u8>) {
        out.clear();
        if let Some(ov) = &self.overlay {
            // SAFETY: the out buffer holds `bytes` bytes written by the finished copy.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(ov.frame_out.ptr, self.bytes) });
        }
    }

    /// Reads the results (after the stream is synchronised) into `out`.
    pub(super) fn collect(&self, out: &mut Segmentation) {
        let (width, height) = (self.geometry.width, self.geometry.height);
        let pixels = width * height;
        out.width = width;
        out.height = height;
        out.classes.resize(pixels, 0);
        out.confidence.clear();
        // SAFETY: the out buffers hold `pixels` elements, written by the
        // finished copies; nothing writes them concurrently.
        unsafe {
            out.classes.copy_from_slice(std::slice::from_raw_parts(self.classes_out.ptr, pixels));
            if let Some(confidence) = &self.confidence_out {
                out.confidence.extend_from_slice(std::slice::from_raw_parts(confidence.ptr, pixels));
            }
            let totals = std::slice::from_raw_parts(self.totals_out.ptr, 2);
            let p = pixels.max(1) as f64;
            out.road_coverage = (totals[0] as f64 / p) as f32;
            out.mean_confidence = (f32::from_bits(totals[1]) as f64 / p) as f32;
        }
    }
}

impl FrameArena {
    /// Writes `overlay` into the arena's pinned staging (host work, before
    /// the replay), making the overlay buffers on first use.
    pub(super) fn stage_overlay(&mut self, stream: &Arc<CudaStream>, overlay: &FrameOverlay) -> Result<(), BackendError> {
        let arena = self;
        if overlay.class_tints.len() != 256 {
            return Err(BackendError::Size { op: "overlay class tints", expected: 256, actual: overlay.class_tints.len() });
        }
        let width = arena.geometry.width;
        if arena.overlay.is_none() {
            arena.overlay = Some(overlay_buffers(stream, width, arena.bytes)?);
        }
        let buffers = arena.overlay.as_mut().expect("made above");
        // SAFETY: the staging buffers hold OVERLAY_FLOATS floats and `width`
        // u32s, and no copy from them is in flight (the last frame was synchronised).
        let (tints, tops) = unsafe {
            (std::slice::from_raw_parts_mut(buffers.tints_in.ptr, OVERLAY_FLOATS), std::slice::from_raw_parts_mut(buffers.tops_in.ptr, width))
        };
        let unknown = overlay.unknown.unwrap_or(([0; 3], 0.0));
        let entries = overlay.class_tints.iter().chain([&unknown, &overlay.hood]);
        for (dst, (colour, alpha)) in tints.chunks_exact_mut(4).zip(entries) {
            dst.copy_from_slice(&[colour[0] as f32, colour[1] as f32, colour[2] as f32, *alpha]);
        }
        if overlay.road.len() != 256 {
            return Err(BackendError::Size { op: "overlay road classes", expected: 256, actual: overlay.road.len() });
        }
        tints[258 * 4..259 * 4].copy_from_slice(&overlay.picture.map(|v| v as f32));
        let (colour, alpha) = overlay.edge.unwrap_or(([0; 3], 0.0));
        tints[259 * 4..260 * 4].copy_from_slice(&[colour[0] as f32, colour[1] as f32, colour[2] as f32, alpha]);
        for (dst, &road) in tints[260 * 4..].iter_mut().zip(&overlay.road) {
            *dst = f32::from(u8::from(road));
        }
        // u32::MAX: no row is at or below it, so no hood in that column.
        match overlay.hood_tops.len() {
            0 => tops.fill(u32::MAX),
            n if n == width => tops.copy_from_slice(&overlay.hood_tops),
            n => return Err(BackendError::Size { op: "overlay hood tops", expected: width, actual: n }),
        }
        Ok(())
    }

    /// Enqueues: overlay up, the uploaded frame tinted with the slot's
    /// classes (after `enqueue_frame_out` wrote them), the frame back down.
    pub(super) fn enqueue_annotate(&mut self, q: &Queue<'_>) -> Result<(), BackendError> {
        let arena = self;
        let g = arena.geometry;
        let Some(ov) = arena.overlay.as_mut() else {
            return Err(BackendError::Frame(FrameError("a frame was annotated without an overlay staged".into())));
        };
        let cu = q.stream.cu_stream();
        // SAFETY: the pinned staging and out buffers hold what the copies
        // move (OVERLAY_FLOATS, width, the frame's bytes) and are only
        // rewritten or read once the stream is synchronised.
        unsafe {
            let (tints, _) = ov.tints.device_ptr(q.stream);
            result::memcpy_htod_async(tints, std::slice::from_raw_parts(ov.tints_in.ptr as *const f32, OVERLAY_FLOATS), cu)?;
            let (tops, _) = ov.tops.device_ptr(q.stream);
            result::memcpy_htod_async(tops, std::slice::from_raw_parts(ov.tops_in.ptr as *const u32, g.width), cu)?;
        }
        let (fw, fh, stride, fmt) = (g.width as i32, g.height as i32, g.stride as i32, format_code(g.format));
        let ov = arena.overlay.as_ref().expect("checked above");
        launch!(q, &q.ops.annotate_frame, grid_for(g.width * g.height), &mut arena.frame, &fw, &fh, &stride, &fmt, &arena.classes, &ov.tints, &ov.tops)?;
        // SAFETY: as above.
        unsafe {
            let (frame, _) = arena.frame.device_ptr(q.stream);
            result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(ov.frame_out.ptr, arena.bytes), frame, cu)?;
        }
        Ok(())
    }

    /// Allocates the buffers for frames of `geometry`.
    pub(super) fn new(stream: &Arc<CudaStream>, geometry: FrameGeometry, road_classes: &[usize], pixel_confidence: bool) -> Result<FrameArena, CudaError> {
        let bytes = geometry.bytes();
        let pixels = geometry.width * geometry.height;
        let mut road = vec![0u8; 256];
        for &c in road_classes.iter().filter(|&&c| c < 256) {
            road[c] = 1;
        }
        Ok(FrameArena {
            geometry,
            bytes,
            staging: Pinned::new(stream, bytes, true)?,
            classes_out: Pinned::new(stream, pixels, false)?,
            confidence_out: if pixel_confidence { Some(Pinned::new(stream, pixels, false)?) } else { None },
            totals_out: Pinned::new(stream, 2, false)?,
            overlay: None,
            frame: stream.alloc_zeros::<u8>(bytes.max(1))?,
            tone: stream.clone_htod(&ToneCurve::IDENTITY.table()[..])?,
            tone_in: Pinned::new(stream, 256, true)?,
            tone_on_device: ToneCurve::IDENTITY.gamma_value(),
            road_is: stream.clone_htod(&road)?,
            classes: stream.alloc_zeros::<u8>(pixels.max(1))?,
            confidence: stream.alloc_zeros::<f32>(pixels.max(1))?,
            road_total: stream.alloc_zeros::<u32>(1)?,
            confidence_total: stream.alloc_zeros::<f32>(1)?,
        })
    }

    /// Takes the frame and queues its copy to the device (outside any graph:
    /// the source address changes from frame to frame when it is the ring's
    /// pinned buffer), and its tone curve's when that changed. The caller's
    /// frame must stay untouched until the frame's work is synchronised, as
    /// the engine's does.
    pub(super) fn upload(&mut self, stream: &Arc<CudaStream>, frame: &FrameRef<'_>, tone: &ToneCurve) -> Result<(), BackendError> {
        let arena = self;
        let src = arena.stage(frame)?;
        let cu = stream.cu_stream();
        let (dst, _) = arena.frame.device_ptr(stream);
        // SAFETY: `src` is pinned and holds the frame's `bytes` (checked in
        // `stage`), as does the device buffer.
        unsafe { result::memcpy_htod_async(dst, std::slice::from_raw_parts(src, arena.bytes), cu)? };
        if tone.gamma_value() != arena.tone_on_device {
            // SAFETY: tone_in holds 256 floats and no copy from it is in
            // flight (the previous frame's work was synchronised); the
            // device table holds 256 floats.
            unsafe {
                std::slice::from_raw_parts_mut(arena.tone_in.ptr, 256).copy_from_slice(tone.table());
                let (table, _) = arena.tone.device_ptr(stream);
                result::memcpy_htod_async(table, std::slice::from_raw_parts(arena.tone_in.ptr as *const f32, 256), cu)?;
            }
            arena.tone_on_device = tone.gamma_value();
        }
        Ok(())
    }

    /// Enqueues: uploaded frame, through its tone curve -> model input `[h, w, 3]`.
    pub(super) fn enqueue_in<T: DeviceRepr>(&self, q: &Queue<'_>, input: &mut CudaViewMut<'_, T>, w: usize, h: usize) -> Result<(), BackendError> {
        let arena = self;
        if input.len() < w * h * 3 {
            return Err(BackendError::Size { op: "frame input", expected: w * h * 3, actual: input.len() });
        }
        let g = arena.geometry;
        let (fw, fh, stride, fmt, w_i, h_i) = (g.width as i32, g.height as i32, g.stride as i32, format_code(g.format), w as i32, h as i32);
        launch!(q, &q.ops.preprocess, grid_for(w * h), &arena.frame, &fw, &fh, &stride, &fmt, &arena.tone, input, &w_i, &h_i)
    }

    /// Enqueues: logits `[lh, lw, labels]` -> classes/confidence at frame
    /// size and road/confidence totals -> pinned host buffers.
    pub(super) fn enqueue_out<T: DeviceRepr>(&mut self, q: &Queue<'_>, logits: &CudaView<'_, T>, d: FrameOutDims) -> Result<(), BackendError> {
        let arena = self;
        let (lw, lh, labels) = (d.logits_w, d.logits_h, d.labels);
        if logits.len() < lw * lh * labels {
            return Err(BackendError::Size { op: "frame logits", expected: lw * lh * labels, actual: logits.len() });
        }
        q.stream.memset_zeros(&mut arena.road_total)?;
        q.stream.memset_zeros(&mut arena.confidence_total)?;
        let (width, height) = (arena.geometry.width, arena.geometry.height);
        let pixels = width * height;
        let (lw_i, lh_i, labels_i, fw, fh) = (lw as i32, lh as i32, labels as i32, width as i32, height as i32);
        let cfg = grid_for(pixels);
        {
            let a = &mut *arena;
            launch!(
                q, &q.ops.postprocess, cfg, logits, &lw_i, &lh_i, &labels_i, &d.logit_scale, &fw, &fh, &a.road_is, &d.threshold,
                &mut a.classes, &mut a.confidence, &mut a.road_total, &mut a.confidence_total
            )?;
        }
        let cu = q.stream.cu_stream();
        // SAFETY: the pinned out buffers hold `pixels` (and 2) elements and are
        // only read after the stream is synchronised.
        unsafe {
            let (classes, _) = arena.classes.device_ptr(q.stream);
            result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(arena.classes_out.ptr, pixels), classes, cu)?;
            if let Some(confidence_out) = &arena.confidence_out {
                let (confidence, _) = arena.confidence.device_ptr(q.stream);
                result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(confidence_out.ptr, pixels), confidence, cu)?;
            }
            let (road, _) = arena.road_total.device_ptr(q.stream);
            result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(arena.totals_out.ptr, 1), road, cu)?;
            let (conf, _) = arena.confidence_total.device_ptr(q.stream);
            result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(arena.totals_out.ptr.add(1) as *mut f32, 1), conf, cu)?;
        }
        Ok(())
    }
}

fn overlay_buffers(stream: &Arc<CudaStream>, width: usize, bytes: usize) -> Result<OverlayBuffers, CudaError> {
    Ok(OverlayBuffers {
        tints_in: Pinned::new(stream, OVERLAY_FLOATS, true)?,
        tops_in: Pinned::new(stream, width, true)?,
        frame_out: Pinned::new(stream, bytes, false)?,
        tints: stream.alloc_zeros::<f32>(OVERLAY_FLOATS)?,
        tops: stream.alloc_zeros::<u32>(width.max(1))?,
    })
}
