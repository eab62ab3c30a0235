//! Logits (1/4 resolution, channels-last) -> per-pixel class and confidence at
//! the frame's own resolution. Logits are upsampled bilinearly first (as HF's
//! `post_process_semantic_segmentation` does), then soft-maxed per pixel.

use rayon::prelude::*;

use crate::backend::cpu::bilinear_source;
use crate::backend::cpu::simd::exp;

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

pub fn postprocess(logits: &[f32], spec: &PostprocessSpec<'_>, width: usize, height: usize, out: &mut Segmentation) {
    let l = spec.labels;
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
            let mut scratch = [0.0f32; 256];
            let (y0, y1, ly) = bilinear_source(row, spec.logits_h, height);
            let r0 = &logits[y0 * spec.logits_w * l..];
            let r1 = &logits[y1 * spec.logits_w * l..];
            let (mut road, mut conf_sum) = (0usize, 0.0f64);
            for col in 0..width {
                let (x0, x1, lx) = bilinear_source(col, spec.logits_w, width);
                let v = &mut scratch[..l];
                let (a, b, c, d) = (&r0[x0 * l..], &r0[x1 * l..], &r1[x0 * l..], &r1[x1 * l..]);
                let (mut best, mut best_v) = (0usize, f32::NEG_INFINITY);
                for k in 0..l {
                    v[k] = (1.0 - ly) * ((1.0 - lx) * a[k] + lx * b[k]) + ly * ((1.0 - lx) * c[k] + lx * d[k]);
                    if v[k] > best_v {
                        (best, best_v) = (k, v[k]);
                    }
                }
                let sum: f32 = v.iter().map(|&x| exp(x - best_v)).sum();
                let p = 1.0 / sum;
                confidence[col] = p;
                conf_sum += p as f64;
                if p >= spec.threshold {
                    classes[col] = best as u8;
                    road += usize::from(road_is[best]);
                } else {
                    classes[col] = UNKNOWN;
                }
            }
            (road, conf_sum)
        })
        .reduce(|| (0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    let pixels = (width * height).max(1) as f64;
    out.road_coverage = (road as f64 / pixels) as f32;
    out.mean_confidence = (conf_sum / pixels) as f32;
}
