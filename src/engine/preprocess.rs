//! Frame -> model input: bilinear resize with half-pixel centres and no
//! antialias (PyTorch `interpolate(..., align_corners=False)` on the uint8
//! values as float), then /255 and ImageNet mean/std. Output is channels-last.

use rayon::prelude::*;

use crate::backend::cpu::bilinear_source;
use crate::backend::cpu::simd::multiversion;

pub const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const STD: [f32; 3] = [0.229, 0.224, 0.225];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    Rgb,
    Rgba,
    /// 4:2:0, a full-resolution Y plane then interleaved UV at half resolution
    /// (BT.601 limited range, what decoders hand out for SD/HD H.264).
    Nv12,
}

impl PixelFormat {
    fn bytes_per_pixel(self) -> usize {
        match self {
            PixelFormat::Rgb => 3,
            PixelFormat::Rgba => 4,
            PixelFormat::Nv12 => 1,
        }
    }
}

/// A borrowed video frame or image. `stride` is bytes per row (of the Y plane
/// for NV12, whose UV plane follows at `stride * height`).
#[derive(Clone, Copy, Debug)]
pub struct FrameRef<'a> {
    pub data: &'a [u8],
    pub width: usize,
    pub height: usize,
    pub stride: usize,
    pub format: PixelFormat,
}

#[derive(Debug, thiserror::Error)]
#[error("bad frame: {0}")]
pub struct FrameError(pub String);

impl<'a> FrameRef<'a> {
    pub fn packed(data: &'a [u8], width: usize, height: usize, format: PixelFormat) -> Self {
        FrameRef { data, width, height, stride: width * format.bytes_per_pixel(), format }
    }

    pub fn validate(&self) -> Result<(), FrameError> {
        if self.width == 0 || self.height == 0 {
            return Err(FrameError(format!("empty frame {}x{}", self.width, self.height)));
        }
        if self.stride < self.width * self.format.bytes_per_pixel() {
            return Err(FrameError(format!("stride {} too small for width {}", self.stride, self.width)));
        }
        let needed = match self.format {
            PixelFormat::Nv12 => {
                if self.width % 2 != 0 || self.height % 2 != 0 {
                    return Err(FrameError(format!("NV12 frame {}x{} must have even sides", self.width, self.height)));
                }
                self.stride * self.height * 3 / 2
            }
            _ => self.stride * (self.height - 1) + self.width * self.format.bytes_per_pixel(),
        };
        if self.data.len() < needed {
            return Err(FrameError(format!("{} bytes, a {}x{} {:?} frame needs {needed}", self.data.len(), self.width, self.height, self.format)));
        }
        Ok(())
    }

    /// RGB of pixel (x, y) as floats 0..=255.
    #[inline(always)]
    fn rgb(&self, x: usize, y: usize) -> [f32; 3] {
        match self.format {
            PixelFormat::Rgb | PixelFormat::Rgba => {
                let i = y * self.stride + x * self.format.bytes_per_pixel();
                [self.data[i] as f32, self.data[i + 1] as f32, self.data[i + 2] as f32]
            }
            PixelFormat::Nv12 => {
                let luma = self.data[y * self.stride + x] as f32;
                let uv = self.stride * self.height + (y / 2) * self.stride + (x / 2) * 2;
                let (u, v) = (self.data[uv] as f32 - 128.0, self.data[uv + 1] as f32 - 128.0);
                let c = 1.164_383_6 * (luma - 16.0);
                let clamp = |v: f32| v.clamp(0.0, 255.0).round();
                [clamp(c + 1.596_026_8 * v), clamp(c - 0.391_762_3 * u - 0.812_968 * v), clamp(c + 2.017_232_2 * u)]
            }
        }
    }
}

multiversion! {
    fn preprocess_row(frame: FrameRef<'_>, out_row: &mut [f32], row: usize, dst_w: usize, dst_h: usize) {
        let inv_std = [1.0 / STD[0], 1.0 / STD[1], 1.0 / STD[2]];
        let (y0, y1, ly) = bilinear_source(row, frame.height, dst_h);
        for col in 0..dst_w {
            let (x0, x1, lx) = bilinear_source(col, frame.width, dst_w);
            let (a, b) = (frame.rgb(x0, y0), frame.rgb(x1, y0));
            let (c, d) = (frame.rgb(x0, y1), frame.rgb(x1, y1));
            for ch in 0..3 {
                let v = (1.0 - ly) * ((1.0 - lx) * a[ch] + lx * b[ch]) + ly * ((1.0 - lx) * c[ch] + lx * d[ch]);
                out_row[col * 3 + ch] = (v / 255.0 - MEAN[ch]) * inv_std[ch];
            }
        }
    }
}

/// Writes the normalised `[dst_h, dst_w, 3]` model input for `frame`.
pub fn preprocess(frame: &FrameRef<'_>, dst_w: usize, dst_h: usize, out: &mut [f32]) -> Result<(), FrameError> {
    frame.validate()?;
    if out.len() < dst_w * dst_h * 3 {
        return Err(FrameError(format!("output buffer too small for {dst_w}x{dst_h}")));
    }
    let frame = *frame;
    out[..dst_w * dst_h * 3]
        .par_chunks_mut(dst_w * 3)
        .enumerate()
        .for_each(|(row, out_row)| preprocess_row(frame, out_row, row, dst_w, dst_h));
    Ok(())
}

/// `[3, h, w]` (PyTorch pixel_values) -> `[h, w, 3]`.
pub fn chw_to_hwc(chw: &[f32], h: usize, w: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0; h * w * c];
    for ch in 0..c {
        for i in 0..h * w {
            out[i * c + ch] = chw[ch * h * w + i];
        }
    }
    out
}

/// `[h, w, c]` -> `[c, h, w]`.
pub fn hwc_to_chw(hwc: &[f32], h: usize, w: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0; h * w * c];
    for i in 0..h * w {
        for ch in 0..c {
            out[ch * h * w + i] = hwc[i * c + ch];
        }
    }
    out
}
