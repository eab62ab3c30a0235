//! Frame -> model input: bilinear resize with half-pixel centres and no
//! antialias (PyTorch `interpolate(..., align_corners=False)` on the uint8
//! values as float), then /255 and ImageNet mean/std. Output is channels-last.
//! Each source value first goes through the frame's tone curve
//! (`crate::exposure`: the identity unless the frame is dark).

use rayon::prelude::*;

use crate::backend::cpu::bilinear_source;
use crate::backend::cpu::simd::multiversion;
use crate::exposure::ToneCurve;
use crate::frame::{FrameError, FrameRef, PixelFormat};

pub const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const STD: [f32; 3] = [0.229, 0.224, 0.225];

multiversion! {
    fn preprocess_row(frame: FrameRef<'_>, tone: &ToneCurve, out_row: &mut [f32], row: usize, dst_w: usize, dst_h: usize) {
        let inv_std = [1.0 / STD[0], 1.0 / STD[1], 1.0 / STD[2]];
        let (y0, y1, ly) = bilinear_source(row, frame.height, dst_h);
        for col in 0..dst_w {
            let (x0, x1, lx) = bilinear_source(col, frame.width, dst_w);
            let rgb = |x, y| frame.rgb(x, y).map(|v| tone.map(v));
            let (a, b) = (rgb(x0, y0), rgb(x1, y0));
            let (c, d) = (rgb(x0, y1), rgb(x1, y1));
            for ch in 0..3 {
                let v = (1.0 - ly) * ((1.0 - lx) * a[ch] + lx * b[ch]) + ly * ((1.0 - lx) * c[ch] + lx * d[ch]);
                out_row[col * 3 + ch] = (v / 255.0 - MEAN[ch]) * inv_std[ch];
            }
        }
    }
}

multiversion! {
    /// One source row as RGB floats (NV12's conversion done once per source
    /// pixel, not once per bilinear tap: the same values, about half the work).
    fn source_row_rgb(frame: FrameRef<'_>, tone: &ToneCurve, y: usize, out: &mut Vec<f32>) {
        out.clear();
        for x in 0..frame.width {
            out.extend(frame.rgb(x, y).map(|v| tone.map(v)));
        }
    }
}

multiversion! {
    fn preprocess_row_from_rgb(out_row: &mut [f32], top: &[f32], bottom: &[f32], ly: f32, src_w: usize, dst_w: usize) {
        let inv_std = [1.0 / STD[0], 1.0 / STD[1], 1.0 / STD[2]];
        for col in 0..dst_w {
            let (x0, x1, lx) = bilinear_source(col, src_w, dst_w);
            for ch in 0..3 {
                let (a, b, c, d) = (top[x0 * 3 + ch], top[x1 * 3 + ch], bottom[x0 * 3 + ch], bottom[x1 * 3 + ch]);
                let v = (1.0 - ly) * ((1.0 - lx) * a + lx * b) + ly * ((1.0 - lx) * c + lx * d);
                out_row[col * 3 + ch] = (v / 255.0 - MEAN[ch]) * inv_std[ch];
            }
        }
    }
}

/// Writes the normalised `[dst_h, dst_w, 3]` model input for `frame`, as it came.
pub fn preprocess(frame: &FrameRef<'_>, dst_w: usize, dst_h: usize, out: &mut [f32]) -> Result<(), FrameError> {
    preprocess_toned(frame, &ToneCurve::IDENTITY, dst_w, dst_h, out)
}

/// As [`preprocess`], each source value through `tone` first.
pub fn preprocess_toned(frame: &FrameRef<'_>, tone: &ToneCurve, dst_w: usize, dst_h: usize, out: &mut [f32]) -> Result<(), FrameError> {
    frame.validate()?;
    if out.len() < dst_w * dst_h * 3 {
        return Err(FrameError(format!("output buffer too small for {dst_w}x{dst_h}")));
    }
    let frame = *frame;
    let rows = out[..dst_w * dst_h * 3].par_chunks_mut(dst_w * 3).enumerate();
    if frame.format != PixelFormat::Nv12 {
        rows.for_each(|(row, out_row)| preprocess_row(frame, tone, out_row, row, dst_w, dst_h));
        return Ok(());
    }
    // Each worker thread keeps its two converted source rows (the pair
    // changes every row or two when scaling near 1:1).
    rows.for_each_init(
        || (usize::MAX, Vec::new(), usize::MAX, Vec::new()),
        |(at0, rgb0, at1, rgb1), (row, out_row)| {
            let (y0, y1, ly) = bilinear_source(row, frame.height, dst_h);
            for (at, rgb, y) in [(&mut *at0, &mut *rgb0, y0), (&mut *at1, &mut *rgb1, y1)] {
                if *at != y {
                    source_row_rgb(frame, tone, y, rgb);
                    *at = y;
                }
            }
            preprocess_row_from_rgb(out_row, rgb0, rgb1, ly, frame.width, dst_w);
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nv12_rows_converted_once_give_the_per_tap_values_exactly() {
        // Rule: NV12 input converted once per source row equals converting at every bilinear tap, bit for bit, up- and downscaling.
        let (w, h) = (38, 22);
        let nv12: Vec<u8> = (0..w * h * 3 / 2).map(|i| ((i * 37 + i / w * 11) % 256) as u8).collect();
        let frame = FrameRef::packed(&nv12, w, h, PixelFormat::Nv12);
        for (dw, dh) in [(64, 40), (17, 9), (38, 22)] {
            let mut cached = vec![0.0; dw * dh * 3];
            preprocess(&frame, dw, dh, &mut cached).unwrap();
            let mut per_tap = vec![0.0; dw * dh * 3];
            for (row, out_row) in per_tap.chunks_mut(dw * 3).enumerate() {
                preprocess_row(frame, &ToneCurve::IDENTITY, out_row, row, dw, dh);
            }
            assert_eq!(cached, per_tap, "{dw}x{dh}");
        }
    }

    #[test]
    fn a_tone_curve_is_the_frame_with_its_values_mapped_first() {
        // Rule: toned preprocessing equals plain preprocessing of the frame whose bytes went through the curve, RGB and NV12.
        let tone = ToneCurve::gamma(0.7);
        let (w, h) = (30, 18);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| ((i * 53 + i / w * 7) % 90) as u8).collect();
        let mapped: Vec<u8> = rgb.iter().map(|&v| tone.map(v as f32) as u8).collect();
        let (mut a, mut b) = (vec![0.0; 20 * 12 * 3], vec![0.0; 20 * 12 * 3]);
        preprocess_toned(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb), &tone, 20, 12, &mut a).unwrap();
        preprocess(&FrameRef::packed(&mapped, w, h, PixelFormat::Rgb), 20, 12, &mut b).unwrap();
        assert_eq!(a, b);
        let nv12: Vec<u8> = (0..w * h * 3 / 2).map(|i| (16 + (i * 37) % 60) as u8).collect();
        let frame = FrameRef::packed(&nv12, w, h, PixelFormat::Nv12);
        preprocess_toned(&frame, &tone, 20, 12, &mut a).unwrap();
        preprocess(&frame, 20, 12, &mut b).unwrap();
        assert_ne!(a, b, "a dark NV12 frame is brightened");
        let mut per_tap = vec![0.0; 20 * 12 * 3];
        for (row, out_row) in per_tap.chunks_mut(20 * 3).enumerate() {
            preprocess_row(frame, &tone, out_row, row, 20, 12);
        }
        assert_eq!(a, per_tap, "NV12 rows converted once agree with the per-tap path under a curve too");
    }
}
