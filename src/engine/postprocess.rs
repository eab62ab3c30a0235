//! Logits (1/4 resolution, channels-last) -> per-pixel class and confidence at
//! the frame's own resolution. Logits are upsampled bilinearly first (as HF's
//! `post_process_semantic_segmentation` does), then soft-maxed per pixel.

use rayon::prelude::*;

use crate::backend::cpu::bilinear_source;
use crate::backend::cpu::simd::{exp, multiversion, sum_lanes};

/// Class value for pixels whose confidence is under the threshold.
pub const UNKNOWN: u8 = 255;

/// One frame's segmentation, buffers reused from frame to frame.
#[derive(Clone, Debug, Default)]
pub struct Segmentation {
    pub width: usize,
    pub height: usize,
    /// Class index per pixel, or [`UNKNOWN`] where confidence < threshold.
    pub classes: Vec<u8>,
    /// Max softmax probability per pixel.
    pub confidence: Vec<f32>,
    /// Share of all pixels confidently classed as road.
    pub road_coverage: f32,
    pub mean_confidence: f32,
}

impl Segmentation {
    /// 1 where the pixel is (confidently) one of `road_classes`, else 0.
    pub fn road_mask(&self, road_classes: &[usize]) -> Vec<u8> {
        self.classes.iter().map(|&c| u8::from(c != UNKNOWN && road_classes.contains(&(c as usize)))).collect()
    }
}

pub struct PostprocessSpec<'a> {
    pub logits_w: usize,
    pub logits_h: usize,
    pub labels: usize,
    pub road_classes: &'a [usize],
    pub threshold: f32,
}

multiversion! {
    /// One output row: returns (road pixels, sum of confidences).
    fn postprocess_row(
        logits: &[f32],
        spec: &PostprocessSpec<'_>,
        road_is: &[bool; 256],
        classes: &mut [u8],
        confidence: &mut [f32],
        row: usize,
        height: usize,
        out: &mut (usize, f64),
    ) {
        let l = spec.labels;
        let width = classes.len();
        let mut v = [0.0f32; 256];
        let v = &mut v[..l];
        let (y0, y1, ly) = bilinear_source(row, spec.logits_h, height);
        let r0 = &logits[y0 * spec.logits_w * l..];
        let r1 = &logits[y1 * spec.logits_w * l..];
        let (mut road, mut conf_sum) = (0usize, 0.0f64);
        for col in 0..width {
            let (x0, x1, lx) = bilinear_source(col, spec.logits_w, width);
            let (a, b, c, d) = (&r0[x0 * l..x0 * l + l], &r0[x1 * l..x1 * l + l], &r1[x0 * l..x0 * l + l], &r1[x1 * l..x1 * l + l]);
            for k in 0..l {
                v[k] = (1.0 - ly) * ((1.0 - lx) * a[k] + lx * b[k]) + ly * ((1.0 - lx) * c[k] + lx * d[k]);
            }
            let (mut best, mut best_v) = (0usize, v[0]);
            for (k, &x) in v.iter().enumerate().skip(1) {
                if x > best_v {
                    (best, best_v) = (k, x);
                }
            }
            for x in v.iter_mut() {
                *x = exp(*x - best_v);
            }
            let p = 1.0 / sum_lanes(v);
            confidence[col] = p;
            conf_sum += p as f64;
            if p >= spec.threshold {
                classes[col] = best as u8;
                road += usize::from(road_is[best]);
            } else {
                classes[col] = UNKNOWN;
            }
        }
        *out = (road, conf_sum);
    }
}

pub fn postprocess(logits: &[f32], spec: &PostprocessSpec<'_>, width: usize, height: usize, out: &mut Segmentation) {
    out.width = width;
    out.height = height;
    out.classes.resize(width * height, 0);
    out.confidence.resize(width * height, 0.0);
    let mut road_is = [false; 256];
    for &c in spec.road_classes {
        if c < 256 {
            road_is[c] = true;
        }
    }
    let (road, conf_sum) = out
        .classes
        .par_chunks_mut(width)
        .zip(out.confidence.par_chunks_mut(width))
        .enumerate()
        .map(|(row, (classes, confidence))| {
            let mut totals = (0, 0.0);
            postprocess_row(logits, spec, &road_is, classes, confidence, row, height, &mut totals);
            totals
        })
        .reduce(|| (0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    let pixels = (width * height).max(1) as f64;
    out.road_coverage = (road as f64 / pixels) as f32;
    out.mean_confidence = (conf_sum / pixels) as f32;
}
