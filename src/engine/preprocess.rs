//! Frame -> model input: bilinear resize with half-pixel centres and no
//! antialias (PyTorch `interpolate(..., align_corners=False)` on the uint8
//! values as float), then /255 and ImageNet mean/std. Output is channels-last.

use rayon::prelude::*;

use crate::backend::cpu::bilinear_source;
use crate::backend::cpu::simd::multiversion;
use crate::frame::{FrameError, FrameRef};

pub const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const STD: [f32; 3] = [0.229, 0.224, 0.225];

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
