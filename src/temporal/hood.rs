//! The ego vehicle's hood (bonnet): the region attached to the bottom of the
//! frame that stays the same while the scene moves past it.
//!
//! Per cell of a coarse grid the estimator keeps a running mean of the
//! per-pixel luma change between consecutive frames. Scene pixels change as the
//! car drives (texture, grain, lighting); hood pixels do not. Each column's
//! hood is the run of still cells rising from the bottom row; a median across
//! columns removes the odd column where still road in front of the car
//! extends the run, since a real hood's edge is smooth.

use std::sync::Arc;

use super::bars::Bars;
use super::luma::{add_abs_diff, sum_cells};

/// Grid cells are at most this many per row / column: enough to place the
/// hood edge within a pixel or two at 720p while keeping the per-frame work
/// to one pass over the luma.
const MAX_COLUMNS: usize = 320;
const MAX_ROWS: usize = 360;
/// Moving frames needed before a hood is reported (0.4 s at 25 fps).
const MIN_SAMPLES: u32 = 10;
/// After the first `HORIZON` samples the motion mean becomes an exponential
/// moving average with this horizon, so the estimate keeps refining (camera
/// knocked, lighting change) without forgetting within a few frames.
const HORIZON: u32 = 150;
/// A cell is still when its motion is below this share of the frame's typical
/// (median) cell motion, or below `STILL_FLOOR` luma levels, whichever is higher.
const STILL_SHARE: f32 = 0.2;
const STILL_FLOOR: f32 = 0.6;
/// The scene just above a hood's edge moves at least this many times as
/// much as the hood itself (measured: 7x to 100x on real footage, ~1.2x for
/// sensor noise over a fixed camera's still road).
const EDGE_CONTRAST: f32 = 3.0;
/// Cells on each side of a candidate edge when looking for the biggest step.
const STEP_CELLS: usize = 2;
/// The hood never covers more than this share of the frame height: a longer
/// still run is a stopped scene or a static camera, not a bonnet.
const MAX_HEIGHT_SHARE: f32 = 0.4;
/// Frames that move much less than typical (the car stopped, a repeated
/// frame) would make the road look still: they are not used.
const MOVING_SHARE: f32 = 0.5;

/// What of a frame is not the scene: the hood, at frame resolution (column
/// `x` is hood from row `top[x]` down to the bottom), and the letterbox or
/// pillarbox `bars` around the picture. No hood: `top` empty (so "none"
/// costs no allocation on the frame path) or every `top[x] == height`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HoodMask {
    pub width: usize,
    pub height: usize,
    pub top: Vec<u32>,
    pixels: usize,
    pub bars: Bars,
}

impl HoodMask {
    /// No hood over a `width` x `height` frame.
    pub fn none(width: usize, height: usize) -> Self {
        HoodMask { width, height, top: Vec::new(), pixels: 0, bars: Bars::NONE }
    }

    /// From each column's first hood row (clamped to the frame).
    pub fn from_tops(width: usize, height: usize, top: Vec<u32>) -> Self {
        assert_eq!(top.len(), width, "one top per column");
        let top: Vec<u32> = top.into_iter().map(|t| t.min(height as u32)).collect();
        let pixels = top.iter().map(|&t| height - t as usize).sum();
        HoodMask { width, height, top, pixels, bars: Bars::NONE }
    }

    /// This hood inside `bars`. A hood column that starts inside the bottom
    /// bar is that bar seen as still, not a bonnet: no hood there.
    pub fn with_bars(&self, bars: Bars) -> Self {
        let (_, _, _, y1) = bars.picture(self.width, self.height);
        let mut inside = if self.top.iter().any(|&t| t as usize >= y1 && (t as usize) < self.height) {
            let tops = self.top.iter().map(|&t| if t as usize >= y1 { self.height as u32 } else { t }).collect();
            HoodMask::from_tops(self.width, self.height, tops)
        } else {
            self.clone()
        };
        inside.bars = bars;
        inside
    }

    /// Whether (x, y) is picture, not bar.
    pub fn in_picture(&self, x: usize, y: usize) -> bool {
        let (x0, y0, x1, y1) = self.bars.picture(self.width, self.height);
        (x0..x1).contains(&x) && (y0..y1).contains(&y)
    }

    /// Calls `f` with the row-major index of every pixel that is not the
    /// scene: hood or bar (each once).
    pub fn for_each_unseen_pixel(&self, mut f: impl FnMut(usize)) {
        let (w, h) = (self.width, self.height);
        if !self.bars.is_none() {
            for y in 0..h {
                for x in 0..w {
                    if !self.in_picture(x, y) {
                        f(y * w + x);
                    }
                }
            }
        }
        for (x, &top) in self.top.iter().enumerate() {
            for y in top as usize..h {
                if self.in_picture(x, y) {
                    f(y * w + x);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pixels == 0
    }

    /// Hood pixels.
    pub fn pixels(&self) -> usize {
        self.pixels
    }

    /// Share of the frame that is hood.
    pub fn coverage(&self) -> f32 {
        self.pixels as f32 / (self.width * self.height).max(1) as f32
    }

    pub fn contains(&self, x: usize, y: usize) -> bool {
        self.top.get(x).is_some_and(|&top| y >= top as usize)
    }

    /// 1 per hood pixel, row-major.
    pub fn to_mask(&self) -> Vec<u8> {
        let mut mask = vec![0u8; self.width * self.height];
        for (x, &top) in self.top.iter().enumerate() {
            for y in top as usize..self.height {
                mask[y * self.width + x] = 1;
            }
        }
        mask
    }

    /// Calls `f` with the row-major index of every hood pixel.
    pub fn for_each_pixel(&self, mut f: impl FnMut(usize)) {
        for (x, &top) in self.top.iter().enumerate() {
            for y in top as usize..self.height {
                f(y * self.width + x);
            }
        }
    }
}

/// Running estimate for one stream; frames must arrive in order (callers
/// drop late ones).
pub struct HoodEstimator {
    width: usize,
    height: usize,
    cell_w: usize,
    cell_h: usize,
    /// Grid size: `cols` cells across; `rows` cells counted up from the bottom.
    cols: usize,
    rows: usize,
    /// Luma of the previous frame (full resolution).
    prev_luma: Vec<u8>,
    have_prev: bool,
    /// Mean per-pixel |luma change| per cell, bottom row first.
    motion: Vec<f32>,
    /// Scratch for one frame's per-cell change sums.
    change: Vec<u32>,
    /// Scratch: one grid row's per-column change, summed down its cell rows.
    column_change: Vec<u16>,
    /// Pixels per cell (edge cells may be smaller).
    cell_pixels: Vec<u32>,
    samples: u32,
    /// Running mean of whole-frame motion over the frames used.
    typical_motion: f32,
    estimate: Arc<HoodMask>,
}

impl HoodEstimator {
    pub fn new(width: usize, height: usize) -> Self {
        let cell_w = width.div_ceil(MAX_COLUMNS).max(1);
        let cell_h = height.div_ceil(MAX_ROWS).max(1);
        let cols = width.div_ceil(cell_w);
        let rows = height / cell_h;
        let mut cell_pixels = vec![0u32; cols * rows];
        for r in 0..rows {
            for c in 0..cols {
                let w = (width - c * cell_w).min(cell_w);
                cell_pixels[r * cols + c] = (w * cell_h) as u32;
            }
        }
        HoodEstimator {
            width,
            height,
            cell_w,
            cell_h,
            cols,
            rows,
            prev_luma: vec![0; width * height],
            have_prev: false,
            motion: vec![0.0; cols * rows],
            change: vec![0; cols * rows],
            column_change: vec![0; width],
            cell_pixels,
            samples: 0,
            typical_motion: 0.0,
            estimate: Arc::new(HoodMask::none(width, height)),
        }
    }

    pub fn size(&self) -> (usize, usize) {
        (self.width, self.height)
    }

    /// The next frame follows a gap (reconnect, seek): it is not compared
    /// with the last one. What was learnt stays.
    pub fn restart(&mut self) {
        self.have_prev = false;
    }

    /// The current estimate (empty until enough moving frames were seen).
    pub fn estimate(&self) -> Arc<HoodMask> {
        self.estimate.clone()
    }

    /// Takes the next frame's luma (`width * height`); returns the mean
    /// per-pixel change from the previous frame (None for the first frame),
    /// which callers also use to spot scene cuts.
    ///
    /// `luma` is kept as the previous frame by swapping buffers rather than
    /// copying the frame (2 MB at 1080p, on every frame of every stream): it
    /// comes back holding an older frame of the same size, to be overwritten.
    pub fn observe(&mut self, luma: &mut Vec<u8>) -> Option<f32> {
        let motion = self.compare(luma);
        std::mem::swap(&mut self.prev_luma, luma);
        motion
    }

    /// Everything `observe` does but keep the frame.
    fn compare(&mut self, luma: &[u8]) -> Option<f32> {
        assert_eq!(luma.len(), self.width * self.height, "luma of the estimator's frame size");
        if !self.have_prev {
            self.have_prev = true;
            return None;
        }
        let (w, h, cols, cell_h) = (self.width, self.height, self.cols, self.cell_h);
        let row = |y: usize| (&luma[y * w..(y + 1) * w], &self.prev_luma[y * w..(y + 1) * w]);
        // Rows above the grid (height not a multiple of the cell) count only
        // towards the frame total.
        let first_grid_row = h - self.rows * cell_h;
        let mut total: u64 = (0..first_grid_row)
            .map(|y| {
                let (cur, prev) = row(y);
                cur.iter().zip(prev).map(|(&a, &b)| a.abs_diff(b) as u64).sum::<u64>()
            })
            .sum();
        // Per grid row (counted up from the bottom): the change summed down
        // its pixel rows per column first (a flat loop that vectorises), then
        // across each cell's columns. `cell_h * 255` fits a u16 (cell_h <= 257
        // for any frame under 92,000 rows).
        for grid_row in 0..self.rows {
            let top = h - (grid_row + 1) * cell_h;
            self.column_change.fill(0);
            for y in top..top + cell_h {
                let (cur, prev) = row(y);
                add_abs_diff(&mut self.column_change, cur, prev);
            }
            let cells = &mut self.change[grid_row * cols..(grid_row + 1) * cols];
            sum_cells(cells, &self.column_change, self.cell_w);
            total += cells.iter().map(|&c| c as u64).sum::<u64>();
        }
        let frame_motion = total as f32 / (w * h) as f32;
        if self.samples > 0 && frame_motion < MOVING_SHARE * self.typical_motion {
            return Some(frame_motion);
        }
        self.samples = self.samples.saturating_add(1);
        let rate = 1.0 / self.samples.min(HORIZON) as f32;
        self.typical_motion += rate * (frame_motion - self.typical_motion);
        for ((m, &s), &n) in self.motion.iter_mut().zip(&self.change).zip(&self.cell_pixels) {
            *m += rate * (s as f32 / n as f32 - *m);
        }
        if self.samples >= MIN_SAMPLES {
            self.estimate = Arc::new(self.current_mask());
        }
        Some(frame_motion)
    }

    /// Still-cell runs from the bottom, median-smoothed across columns.
    fn current_mask(&self) -> HoodMask {
        // The middle value, without sorting all 115,000 cells on every moving frame.
        let mut cells = self.motion.clone();
        let middle = cells.len() / 2;
        let median = *cells.select_nth_unstable_by(middle, f32::total_cmp).1;
        let still = (STILL_SHARE * median).max(STILL_FLOOR);
        let max_rows = ((MAX_HEIGHT_SHARE * self.height as f32) as usize / self.cell_h).min(self.rows);
        // A bonnet's edge is a step from still to clearly moving scene. A run
        // that reaches the cap, or ends where the cells above move hardly more
        // than those below (noise over a fixed camera's still road), is not one.
        let above = (self.rows / 20).max(2);
        let motion_at = |r: usize, c: usize| self.motion[r * self.cols + c];
        // Per column: Some(run) where the column shows a clear edge (or no
        // still cells at all: no hood there), None where it cannot tell.
        let runs: Vec<Option<usize>> = (0..self.cols)
            .map(|c| {
                let mean = |rows: std::ops::Range<usize>| rows.clone().map(|r| motion_at(r, c)).sum::<f32>() / rows.len().max(1) as f32;
                let still_run = (0..max_rows).take_while(|&r| motion_at(r, c) < still).count();
                if still_run == 0 || still_run >= max_rows {
                    return (still_run == 0).then_some(0);
                }
                // Still-looking asphalt right above a bonnet joins the run; the
                // edge is the biggest step in motion within it.
                let step = |r: usize| (mean(r..(r + STEP_CELLS).min(self.rows)) + 0.01) / (mean(r.saturating_sub(STEP_CELLS)..r) + 0.01);
                let run = (1..=still_run).max_by(|&a, &b| step(a).total_cmp(&step(b))).unwrap_or(still_run);
                let (inside, scene) = (mean(0..run), mean(run..(run + above).min(self.rows)));
                (scene >= EDGE_CONTRAST * inside).then_some(run)
            })
            .collect();
        // Median of the columns that can tell, over a window; a column whose
        // window is mostly undecided has no hood (a bonnet spans its neighbours).
        let radius = (self.cols / 40).max(2);
        let smoothed: Vec<usize> = (0..self.cols)
            .map(|c| {
                let span = &runs[c.saturating_sub(radius)..(c + radius + 1).min(self.cols)];
                let mut known: Vec<usize> = span.iter().flatten().copied().collect();
                if known.len() * 2 < span.len() {
                    return 0;
                }
                known.sort_unstable();
                known[known.len() / 2]
            })
            .collect();
        // A bonnet is one piece: a stretch of "no hood" between hood columns
        // is a mount, a wiper or codec shimmer on static high-contrast
        // content, not a hole down to the road.
        let mut smoothed = smoothed;
        fill_interior_gaps(&mut smoothed, self.cols / MAX_GAP_DIVISOR);
        // A bonnet's edge is a smooth curve: the medians' steps are averaged
        // out (Gaussian-weighted over the hood's own columns, so its sides
        // stay where they are), and pixels between cell centres interpolated.
        let sigma = (self.cols as f32 / 48.0).max(1.0);
        let reach = (3.0 * sigma) as usize;
        let heights: Vec<f32> = (0..self.cols)
            .map(|c| {
                if smoothed[c] == 0 {
                    return 0.0;
                }
                let (mut sum, mut weight) = (0.0f32, 0.0f32);
                let near = smoothed.iter().enumerate().take((c + reach + 1).min(self.cols)).skip(c.saturating_sub(reach));
                for (n, &run) in near.filter(|&(_, &run)| run > 0) {
                    let d = (n as f32 - c as f32) / sigma;
                    let g = (-0.5 * d * d).exp();
                    sum += g * run as f32;
                    weight += g;
                }
                sum / weight
            })
            .collect();
        let cell_w = self.cell_w as f32;
        let top = (0..self.width)
            .map(|x| {
                let c = x / self.cell_w;
                let h = if heights[c] == 0.0 {
                    0.0
                } else {
                    // Between this cell's centre and its neighbour's, where both are hood.
                    let at = (x as f32 + 0.5) / cell_w - 0.5;
                    let (a, b) = (at.floor().max(0.0) as usize, (at.floor().max(0.0) as usize + 1).min(self.cols - 1));
                    let t = (at - a as f32).clamp(0.0, 1.0);
                    if heights[a] > 0.0 && heights[b] > 0.0 { heights[a] * (1.0 - t) + heights[b] * t } else { heights[c] }
                };
                self.height.saturating_sub((h * self.cell_h as f32).round() as usize) as u32
            })
            .collect();
        HoodMask::from_tops(self.width, self.height, top)
    }
}

/// Luma (BT.601-ish, integer) of packed RGBA into `out` (`width * height`).
/// Interior gaps up to `cols / MAX_GAP_DIVISOR` wide are filled; wider ones
/// are real (a camera that sees only the mirror housings at its corners).
const MAX_GAP_DIVISOR: usize = 4;

/// Fills each run of zeros that has hood (non-zero) on both sides and is at
/// most `max_gap` long by interpolating between its two neighbours.
fn fill_interior_gaps(heights: &mut [usize], max_gap: usize) {
    let mut c = 0;
    while c < heights.len() {
        if heights[c] != 0 {
            c += 1;
            continue;
        }
        let start = c;
        while c < heights.len() && heights[c] == 0 {
            c += 1;
        }
        let len = c - start;
        if start == 0 || c == heights.len() || len > max_gap {
            continue;
        }
        let (left, right) = (heights[start - 1] as f32, heights[c] as f32);
        for (i, h) in heights[start..c].iter_mut().enumerate() {
            let t = (i + 1) as f32 / (len + 1) as f32;
            *h = (left + (right - left) * t).round().max(1.0) as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{SynthDrive, SynthSpec};

    fn iou(a: &[u8], b: &[u8]) -> f64 {
        let inter = a.iter().zip(b).filter(|&(&x, &y)| x != 0 && y != 0).count();
        let union = a.iter().zip(b).filter(|&(&x, &y)| x != 0 || y != 0).count();
        inter as f64 / union.max(1) as f64
    }

    fn run_drive(hood: bool, frames: u32) -> (HoodMask, SynthDrive) {
        let spec = SynthSpec { width: 320, height: 180, frames, seed: 5, fps: 25, hood };
        let drive = SynthDrive::new(spec).unwrap();
        let (mut rgb, mut mask, mut luma) = (vec![0; 320 * 180 * 3], vec![0; 320 * 180], Vec::new());
        let mut est = HoodEstimator::new(320, 180);
        for i in 0..frames {
            drive.render(i, &mut rgb, &mut mask).unwrap();
            let rgba: Vec<u8> = rgb.chunks(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect();
            crate::temporal::rgba_luma(&rgba, &mut luma);
            est.observe(&mut luma);
        }
        (est.estimate().as_ref().clone(), drive)
    }

    #[test]
    fn finds_the_synthetic_hood() {
        let (est, _) = run_drive(true, 40);
        let truth = crate::synth::hood_mask(320, 180);
        let score = iou(&est.to_mask(), &truth);
        eprintln!("hood IoU on the rendered drive: {score:.4}");
        assert!(score >= 0.9, "hood IoU {score:.3}");
    }

    #[test]
    fn no_hood_when_there_is_none() {
        let (est, _) = run_drive(false, 40);
        assert!(est.coverage() < 0.01, "hood coverage {} without a hood", est.coverage());
    }

    /// Frames from a fixed camera: still road below, something moving in
    /// the top third (traffic far away), sensor noise everywhere.
    fn fixed_camera_frames(n: usize) -> Vec<Vec<u8>> {
        let (w, h) = (160, 90);
        let mut seed = 7u32;
        (0..n)
            .map(|i| {
                (0..w * h)
                    .map(|p| {
                        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        let noise = (seed >> 31) as u8;
                        let (x, y) = (p % w, p / w);
                        let moving = y < h / 3 && (x + i * 7) % 40 < 20;
                        noise + if moving { 200 } else { 90 }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_fixed_camera_has_no_hood() {
        let mut est = HoodEstimator::new(160, 90);
        for mut luma in fixed_camera_frames(60) {
            est.observe(&mut luma);
        }
        assert!(est.estimate().is_empty(), "still road of a fixed camera taken for a hood: {:.3}", est.estimate().coverage());
        let mut frozen = HoodEstimator::new(160, 90);
        for _ in 0..30 {
            frozen.observe(&mut vec![120u8; 160 * 90]);
        }
        assert!(frozen.estimate().is_empty(), "a frozen picture taken for a hood");
    }

    #[test]
    fn nothing_reported_before_enough_frames() {
        let (est, _) = run_drive(true, MIN_SAMPLES);
        assert!(est.is_empty());
    }

    #[test]
    fn a_narrow_gap_inside_the_hood_is_filled_and_a_wide_one_or_an_edge_is_not() {
        let mut h = vec![10, 10, 0, 0, 14, 14];
        fill_interior_gaps(&mut h, 2);
        assert_eq!(h, vec![10, 10, 11, 13, 14, 14]);
        let mut wide = vec![10, 0, 0, 0, 10];
        fill_interior_gaps(&mut wide, 2);
        assert_eq!(wide, vec![10, 0, 0, 0, 10]);
        let mut edges = vec![0, 10, 10, 0];
        fill_interior_gaps(&mut edges, 2);
        assert_eq!(edges, vec![0, 10, 10, 0]);
    }

    #[test]
    fn mask_geometry() {
        let m = HoodMask::from_tops(4, 10, vec![10, 8, 7, 12]);
        assert_eq!(m.pixels(), 5);
        assert!(m.contains(2, 7) && !m.contains(2, 6));
        assert_eq!(m.to_mask().iter().filter(|&&v| v == 1).count(), 5);
        assert!(HoodMask::none(4, 10).is_empty());
    }
}
