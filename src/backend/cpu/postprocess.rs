//! Logits (1/4 resolution, channels-last) -> per-pixel class and confidence at
//! the frame's own resolution. Logits are upsampled bilinearly first (as HF's
//! `post_process_semantic_segmentation` does), then soft-maxed per pixel.
//!
//! Work is row by row: the two source rows are blended once per output row,
//! then spread to a class-major row (`[labels, width]`) so that max, exp and
//! the sums all run along contiguous pixels and vectorise.

use rayon::prelude::*;

use crate::backend::cpu::bilinear_source;
use crate::backend::cpu::simd::{exp, multiversion};
use crate::frame::{Segmentation, UNKNOWN};

pub struct PostprocessSpec<'a> {
    pub logits_w: usize,
    pub logits_h: usize,
    pub labels: usize,
    pub road_classes: &'a [usize],
    pub threshold: f32,
    /// Factor on every logit (1 / passes averaged, when the passes were summed).
    pub logit_scale: f32,
}

/// Scratch kept between frames; sized on the first frame of a given size.
#[derive(Default)]
pub struct Postprocessor {
    /// Per output column: left source column, right source column, weight of right.
    columns: Vec<(usize, usize, f32)>,
    /// Per lane: blended source row `[logits_w, labels]`, class-major row
    /// `[labels, width]`, running max, best class and exp-sum `[width]` each.
    lanes: Vec<Vec<f32>>,
    key: (usize, usize, usize, usize),
}

struct RowTotals {
    road: usize,
    confidence: f64,
}

multiversion! {
    fn postprocess_row(
        logits: &[f32],
        spec: &PostprocessSpec<'_>,
        columns: &[(usize, usize, f32)],
        road_is: &[bool; 256],
        scratch: &mut [f32],
        classes: &mut [u8],
        confidence: &mut [f32],
        row: usize,
        height: usize,
        totals: &mut RowTotals,
    ) {
        let (l, lw, width) = (spec.labels, spec.logits_w, classes.len());
        let (blend, rest) = scratch.split_at_mut(lw * l);
        let (planes, rest) = rest.split_at_mut(l * width);
        let (max, rest) = rest.split_at_mut(width);
        let (best, rest) = rest.split_at_mut(width);
        let sum = &mut rest[..width];

        // vertical: blend[lw, L] = (1-ly) r0 + ly r1
        let (y0, y1, ly) = bilinear_source(row, spec.logits_h, height);
        let r0 = &logits[y0 * lw * l..(y0 + 1) * lw * l];
        let r1 = &logits[y1 * lw * l..(y1 + 1) * lw * l];
        for i in 0..lw * l {
            blend[i] = (1.0 - ly) * r0[i] + ly * r1[i];
        }
        if spec.logit_scale != 1.0 {
            blend.iter_mut().for_each(|v| *v *= spec.logit_scale);
        }
        // horizontal, into class-major planes[L, width]
        // Column by column: each column's source pair and weight are read
        // once and its two source cells' labels are contiguous (label by
        // label, each column's tuple was re-read and the cells gathered
        // `labels` apart: most of this function's time).
        for (x, &(x0, x1, lx)) in columns.iter().enumerate() {
            let (a, b) = (&blend[x0 * l..(x0 + 1) * l], &blend[x1 * l..(x1 + 1) * l]);
            for (k, (&a, &b)) in a.iter().zip(b).enumerate() {
                planes[k * width + x] = (1.0 - lx) * a + lx * b;
            }
        }
        max.copy_from_slice(&planes[..width]);
        best.fill(0.0);
        for k in 1..l {
            let plane = &planes[k * width..(k + 1) * width];
            for x in 0..width {
                let better = plane[x] > max[x];
                max[x] = if better { plane[x] } else { max[x] };
                best[x] = if better { k as f32 } else { best[x] };
            }
        }
        sum.fill(0.0);
        for k in 0..l {
            let plane = &planes[k * width..(k + 1) * width];
            for x in 0..width {
                sum[x] += exp(plane[x] - max[x]);
            }
        }
        let (mut road, mut conf_sum) = (0usize, 0.0f64);
        for x in 0..width {
            let p = 1.0 / sum[x];
            confidence[x] = p;
            conf_sum += p as f64;
            let class = best[x] as usize;
            if p >= spec.threshold {
                classes[x] = class as u8;
                road += usize::from(road_is[class]);
            } else {
                classes[x] = UNKNOWN;
            }
        }
        *totals = RowTotals { road, confidence: conf_sum };
    }
}

impl Postprocessor {
    fn prepare(&mut self, spec: &PostprocessSpec<'_>, width: usize) {
        let key = (spec.logits_w, spec.labels, width, rayon::current_num_threads());
        if self.key == key && !self.lanes.is_empty() {
            return;
        }
        self.key = key;
        self.columns = (0..width).map(|x| bilinear_source(x, spec.logits_w, width)).collect();
        let per_lane = spec.logits_w * spec.labels + spec.labels * width + 3 * width;
        self.lanes = (0..rayon::current_num_threads() * 4).map(|_| vec![0.0; per_lane]).collect();
    }

    pub fn run(&mut self, logits: &[f32], spec: &PostprocessSpec<'_>, width: usize, height: usize, out: &mut Segmentation) {
        self.prepare(spec, width);
        out.width = width;
        out.height = height;
        out.classes.resize(width * height, 0);
        out.confidence.resize(width * height, 0.0);
        let mut road_is = [false; 256];
        for &c in spec.road_classes.iter().filter(|&&c| c < 256) {
            road_is[c] = true;
        }
        let rows_per_lane = height.div_ceil(self.lanes.len());
        let columns = &self.columns;
        let (road, conf_sum) = out
            .classes
            .par_chunks_mut(rows_per_lane * width)
            .zip(out.confidence.par_chunks_mut(rows_per_lane * width))
            .zip(self.lanes.par_iter_mut())
            .enumerate()
            .map(|(lane, ((classes, confidence), scratch))| {
                let mut lane_totals = (0usize, 0.0f64);
                for (i, (c_row, p_row)) in classes.chunks_mut(width).zip(confidence.chunks_mut(width)).enumerate() {
                    let mut t = RowTotals { road: 0, confidence: 0.0 };
                    let row = lane * rows_per_lane + i;
                    postprocess_row(logits, spec, columns, &road_is, scratch, c_row, p_row, row, height, &mut t);
                    lane_totals.0 += t.road;
                    lane_totals.1 += t.confidence;
                }
                lane_totals
            })
            .reduce(|| (0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
        let pixels = (width * height).max(1) as f64;
        out.road_coverage = (road as f64 / pixels) as f32;
        out.mean_confidence = (conf_sum / pixels) as f32;
    }
}
