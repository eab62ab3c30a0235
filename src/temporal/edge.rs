//! The hood's edge as the one horizontal edge that stays put: a white or
//! mirror-like bonnet reflects the passing trees and sky, so its pixels
//! change as much as the road's and the motion estimate (`hood.rs`) finds no
//! still region; but the line where bonnet meets road stays on the same rows
//! while every scene edge drifts past. Per cell of a coarse grid this keeps
//! the sum of the signed vertical luma step over moving frames and the sum of
//! its size: where they agree (the step has the same sign and size in frame
//! after frame) the edge is persistent. The hood's edge is the smooth path
//! across the picture (one row up or down per column at most) through the
//! most persistent steps of the bottom 40%, found by dynamic programming.
//!
//! This is only a candidate: a straight road's horizon, a guard rail or rain
//! on the windscreen persist too. The model confirms it (`mod.rs`): the
//! band under the edge must look more like the ego vehicle to it than the
//! band above. Measured on ../shared (2026-11-27): most clips, with a
//! bonnet or without, give a candidate of some kind; of those, only the
//! white bonnet of DAD 000478 passes both tests (DAD 000493's, also white,
//! falls short of the model's confirmation, 1.7x against 2x).

use std::sync::Arc;

use super::hood::HoodMask;
use super::luma::{add_row, sum_cells};

/// Grid cells at most this many across / down: a 720p or 1080p frame gives
/// 320 x 180 cells, enough to place the edge within a few pixels.
const MAX_COLUMNS: usize = 320;
const MAX_ROWS: usize = 180;
/// A frame whose cells changed by less than this (mean luma levels) from the
/// last frame used shows a stopped car: every edge would look persistent.
const MOVING_LUMA: f32 = 1.0;
/// Moving frames before an edge is proposed (as the motion estimate) ...
const MIN_SAMPLES: u32 = 10;
/// ... or, on a slow camera, at least this many moving frames once they
/// span this much time. Persistence is judged against the scene's drift,
/// and a 6 fps camera's 4 frames drift further than a 30 fps camera's 10
/// (DAD 000478 at 6 fps: no edge within the first second at 10 frames).
/// At 20 fps and over, the 10 frames come first, so nothing changes there.
const MIN_SAMPLES_SLOW: u32 = 4;
const MIN_MOVING_NS: u64 = 500_000_000;
/// After this many samples the sums become exponential averages, so a
/// knocked camera is followed.
const HORIZON: u32 = 150;
/// A step is persistent when |sum of signed steps| is at least this share
/// of the sum of their sizes.
const PERSISTENT_SHARE: f32 = 0.7;
/// ... and strong when it averages at least this many luma levels per grid
/// row (a bonnet's edge: 15-20 on ../shared's clips at 320 x 180).
const STRONG_STEP: f32 = 6.0;
/// No single cell carries a path: its score is capped at this many strong steps.
const SCORE_CAP: f32 = 3.0;
/// Share of the columns whose path cell must be persistent and strong.
const MIN_COVER: f32 = 0.95;
/// Moving frames between two searches for the path.
const PATH_EVERY: u32 = 4;
/// The hood's edge is never above this share of the height (as elsewhere).
const MAX_HEIGHT_SHARE: f32 = 0.4;

/// Running persistent-edge statistics for one stream; frames in order.
pub struct StillEdge {
    width: usize,
    height: usize,
    cell_w: usize,
    cell_h: usize,
    cols: usize,
    rows: usize,
    /// Grid rows above the grid's first: the frame height not a multiple of the cell.
    offset: usize,
    /// Cell means of the grid rows from `first_step` down (the only ones an
    /// edge can lie between) of the frame being built, and of the last frame used.
    means: Vec<f32>,
    last: Vec<f32>,
    have_last: bool,
    /// Per step between grid rows `first_step + i` and the next, per column
    /// (`means` row i and i + 1):
    /// running mean of the signed step and of its size.
    signed: Vec<f32>,
    size: Vec<f32>,
    first_step: usize,
    samples: u32,
    /// Time between the moving frames and the frames before them, summed.
    moving_ns: u64,
    /// The sample at which the edge was first ready to be proposed.
    ready_at: Option<u32>,
    /// The path found after the last moving frame.
    candidate: Option<Arc<HoodMask>>,
    /// Scratch: one grid row's luma summed down its pixel rows, per pixel
    /// column (`cell_h * 255` fits a u16: cell_h <= 257 for any frame
    /// under 46,000 rows).
    column_sums: Vec<u16>,
    /// Scratch: one grid row's cell sums.
    cell_sums: Vec<u32>,
}

impl StillEdge {
    pub fn new(width: usize, height: usize) -> Self {
        let cell_w = width.div_ceil(MAX_COLUMNS).max(1);
        let cell_h = height.div_ceil(MAX_ROWS).max(1);
        let (cols, rows) = (width / cell_w, height / cell_h);
        // Steps that can be a hood's edge: those below the cap.
        let first_step = (((1.0 - MAX_HEIGHT_SHARE) * rows as f32).ceil() as usize).saturating_sub(1).min(rows.saturating_sub(1));
        let band_rows = rows - first_step.min(rows);
        let steps = band_rows.saturating_sub(1);
        StillEdge {
            width,
            height,
            cell_w,
            cell_h,
            cols,
            rows,
            offset: height - rows * cell_h,
            means: vec![0.0; cols * band_rows],
            last: vec![0.0; cols * band_rows],
            have_last: false,
            signed: vec![0.0; steps * cols],
            size: vec![0.0; steps * cols],
            first_step,
            samples: 0,
            moving_ns: 0,
            ready_at: None,
            candidate: None,
            column_sums: vec![0; cols * cell_w],
            cell_sums: vec![0; cols],
        }
    }

    pub fn size(&self) -> (usize, usize) {
        (self.width, self.height)
    }

    /// After a gap: the next frame is not compared with the last. What was learnt stays.
    pub fn restart(&mut self) {
        self.have_last = false;
    }

    /// Takes the next frame's luma (`width * height`) and the time since
    /// the frame before it, when the frames have timestamps.
    pub fn observe(&mut self, luma: &[u8], interval_ns: Option<u64>) {
        assert_eq!(luma.len(), self.width * self.height, "luma of the estimator's frame size");
        if self.signed.is_empty() {
            return;
        }
        self.cell_means(luma);
        if !self.have_last {
            self.last.copy_from_slice(&self.means);
            self.have_last = true;
            return;
        }
        let change = self.means.iter().zip(&self.last).map(|(a, b)| (a - b).abs()).sum::<f32>() / self.means.len() as f32;
        if change < MOVING_LUMA {
            return;
        }
        self.last.copy_from_slice(&self.means);
        self.samples = self.samples.saturating_add(1);
        self.moving_ns = self.moving_ns.saturating_add(interval_ns.unwrap_or(0));
        let rate = 1.0 / self.samples.min(HORIZON) as f32;
        let cols = self.cols;
        for (i, (signed, size)) in self.signed.chunks_mut(cols).zip(self.size.chunks_mut(cols)).enumerate() {
            let (upper, lower) = (&self.means[i * cols..(i + 1) * cols], &self.means[(i + 1) * cols..(i + 2) * cols]);
            for c in 0..cols {
                let step = lower[c] - upper[c];
                signed[c] += rate * (step - signed[c]);
                size[c] += rate * (step.abs() - size[c]);
            }
        }
        if self.ready_at.is_none() && self.enough_seen() {
            self.ready_at = Some(self.samples);
        }
        // The path moves slowly; every few samples is enough.
        if self.ready_at.is_some_and(|first| (self.samples - first) % PATH_EVERY == 0) {
            self.candidate = self.find_path().map(Arc::new);
        }
    }

    /// Enough moving frames, or on a slow camera enough moving time, to tell a persistent step from the scene's.
    fn enough_seen(&self) -> bool {
        self.samples >= MIN_SAMPLES || (self.samples >= MIN_SAMPLES_SLOW && self.moving_ns >= MIN_MOVING_NS)
    }

    /// The hood under the persistent edge, at frame resolution, when there
    /// is one; before enough moving frames, or where no smooth path of
    /// persistent, strong steps crosses the picture, None.
    pub fn candidate(&self) -> Option<Arc<HoodMask>> {
        self.candidate.clone()
    }

    fn cell_means(&mut self, luma: &[u8]) {
        let (w, cw, ch, cols) = (self.width, self.cell_w, self.cell_h, self.cols);
        let scale = 1.0 / (cw * ch) as f32;
        let span = cols * cw;
        let sums = &mut self.column_sums;
        for r in 0..self.rows - self.first_step {
            // Down each pixel column first (a flat loop that vectorises),
            // then across each cell's columns: the same integer sums as cell
            // by cell, at a fraction of the cost.
            sums.fill(0);
            let top = self.offset + (self.first_step + r) * ch;
            for y in top..top + ch {
                add_row(sums, &luma[y * w..y * w + span]);
            }
            sum_cells(&mut self.cell_sums, sums, cw);
            for (m, &cell) in self.means[r * cols..(r + 1) * cols].iter_mut().zip(&self.cell_sums) {
                *m = cell as f32 * scale;
            }
        }
    }

    fn find_path(&self) -> Option<HoodMask> {
        let steps = self.signed.len() / self.cols.max(1);
        if !self.enough_seen() || steps == 0 {
            return None;
        }
        let cols = self.cols;
        // Strength of each step: its mean size where persistent, else 0.
        let strength: Vec<f32> = self.signed.iter().zip(&self.size).map(|(&s, &a)| if s.abs() >= PERSISTENT_SHARE * a { s.abs() } else { 0.0 }).collect();
        let at = |i: usize, c: usize| strength[i * cols + c];
        let score_of = |i: usize, c: usize| at(i, c).min(SCORE_CAP * STRONG_STEP);
        // Best path ending at each step in column c; `from[c][i]` its step in column c - 1.
        let mut score: Vec<f32> = (0..steps).map(|i| score_of(i, 0)).collect();
        let mut from = vec![0u16; steps * cols];
        let mut next = vec![0.0f32; steps];
        for c in 1..cols {
            for i in 0..steps {
                let lo = i.saturating_sub(1);
                let hi = (i + 1).min(steps - 1);
                let best = (lo..=hi).max_by(|&a, &b| score[a].total_cmp(&score[b])).unwrap_or(i);
                next[i] = score[best] + score_of(i, c);
                from[c * steps + i] = best as u16;
            }
            std::mem::swap(&mut score, &mut next);
        }
        let mut i = (0..steps).max_by(|&a, &b| score[a].total_cmp(&score[b]))?;
        let mut path = vec![0usize; cols];
        for c in (0..cols).rev() {
            path[c] = i;
            i = from[c * steps + i] as usize;
        }
        let strong = path.iter().enumerate().filter(|&(c, &i)| at(i, c) >= STRONG_STEP).count();
        if (strong as f32) < MIN_COVER * cols as f32 {
            return None;
        }
        // Frame row of the first hood row below each step, median over a few
        // columns against a one-column jog.
        let k = 4;
        let rows: Vec<usize> = (0..cols)
            .map(|c| {
                let mut near: Vec<usize> = path[c.saturating_sub(k)..(c + k + 1).min(cols)].to_vec();
                near.sort_unstable();
                self.offset + (self.first_step + near[near.len() / 2] + 1) * self.cell_h
            })
            .collect();
        let top = (0..self.width).map(|x| rows[(x / self.cell_w).min(cols - 1)] as u32).collect();
        Some(HoodMask::from_tops(self.width, self.height, top))
    }
}

/// Luma of frame `t` of a drive: a scene of random blobs that shifts with
/// `t`, and (when `edge_row` is Some) a bright bonnet from that row down
/// whose texture (reflections) also changes every frame.
#[cfg(test)]
pub(super) fn drive_luma(w: usize, h: usize, t: usize, edge_row: Option<usize>) -> Vec<u8> {
    let noise = |x: usize, y: usize, s: usize| -> u8 {
        let v = (x / 7 + s * 13).wrapping_mul(2_654_435_761) ^ (y / 5 + s * 7).wrapping_mul(40_503);
        (v >> 7) as u8 % 90
    };
    let mut luma = vec![0u8; w * h];
    for y in 0..h {
        for x in 0..w {
            luma[y * w + x] = match edge_row {
                Some(e) if y >= e => 150 + noise(x + t * 3, y, t) / 3,
                _ => 40 + noise(x + t * 11, y + t * 5, t / 2),
            };
        }
    }
    luma
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME_30FPS: u64 = 33_333_333;
    const FRAME_6FPS: u64 = 166_666_667;

    #[test]
    fn cell_means_are_the_plain_mean_of_each_cell() {
        // Sizes that leave rows above the grid and columns right of it.
        for (w, h) in [(1283usize, 721usize), (1920, 1080), (97, 61)] {
            let luma: Vec<u8> = (0..w * h).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
            let mut edge = StillEdge::new(w, h);
            edge.cell_means(&luma);
            let (cw, ch, cols) = (edge.cell_w, edge.cell_h, edge.cols);
            for r in 0..edge.rows - edge.first_step {
                let top = edge.offset + (edge.first_step + r) * ch;
                for c in 0..cols {
                    let sum: u32 = (top..top + ch).flat_map(|y| &luma[y * w + c * cw..y * w + (c + 1) * cw]).map(|&v| v as u32).sum();
                    assert_eq!(edge.means[r * cols + c], sum as f32 * (1.0 / (cw * ch) as f32), "{w}x{h} cell ({r}, {c})");
                }
            }
        }
    }

    #[test]
    fn a_slow_camera_proposes_the_edge_after_half_a_second_of_moving_frames() {
        let (w, h) = (640, 360);
        // 6 fps: the reference frame and 3 moving ones (0.5 s) are not enough frames ...
        let mut slow = StillEdge::new(w, h);
        for t in 0..4 {
            slow.observe(&drive_luma(w, h, t, Some(330)), Some(FRAME_6FPS));
        }
        assert!(slow.candidate().is_none(), "3 moving frames");
        // ... the 4th moving frame (0.67 s) is.
        slow.observe(&drive_luma(w, h, 4, Some(330)), Some(FRAME_6FPS));
        let hood = slow.candidate().expect("4 moving frames over 0.67 s");
        assert!(hood.top.iter().all(|&t| t.abs_diff(330) <= 2), "{:?}", &hood.top[..8]);
        // 30 fps: 4 moving frames span 0.13 s, and 9 still do not make half a second.
        let mut fast = StillEdge::new(w, h);
        for t in 0..10 {
            fast.observe(&drive_luma(w, h, t, Some(330)), Some(FRAME_30FPS));
        }
        assert!(fast.candidate().is_none(), "9 moving frames at 30 fps");
        // Without timestamps, frames alone count.
        let mut untimed = StillEdge::new(w, h);
        for t in 0..8 {
            untimed.observe(&drive_luma(w, h, t, Some(330)), None);
        }
        assert!(untimed.candidate().is_none());
    }

    #[test]
    fn a_reflective_bonnet_edge_is_found_where_it_stays() {
        let (w, h) = (320, 180);
        let mut edge = StillEdge::new(w, h);
        for t in 0..30 {
            edge.observe(&drive_luma(w, h, t, Some(162)), None);
        }
        let hood = edge.candidate().expect("a persistent edge across the picture");
        assert!(hood.top.iter().all(|&t| t.abs_diff(162) <= 1), "{:?}", &hood.top[..8]);
    }

    #[test]
    fn a_moving_scene_has_no_candidate_nor_does_a_stopped_car() {
        let (w, h) = (320, 180);
        let mut moving = StillEdge::new(w, h);
        for t in 0..30 {
            moving.observe(&drive_luma(w, h, t, None), None);
        }
        assert!(moving.candidate().is_none());
        // The same frame over and over: nothing moves, nothing is learnt.
        let mut stopped = StillEdge::new(w, h);
        let still = drive_luma(w, h, 0, Some(162));
        for _ in 0..30 {
            stopped.observe(&still, Some(FRAME_30FPS));
        }
        assert!(stopped.candidate().is_none());
    }

    #[test]
    fn too_few_frames_or_an_edge_above_the_cap_are_no_candidate() {
        let (w, h) = (640, 360);
        let mut early = StillEdge::new(w, h);
        for t in 0..(MIN_SAMPLES as usize) {
            early.observe(&drive_luma(w, h, t, Some(330)), Some(FRAME_30FPS));
        }
        assert!(early.candidate().is_none(), "the first frame is only the reference");
        early.observe(&drive_luma(w, h, 99, Some(330)), Some(FRAME_30FPS));
        let hood = early.candidate().expect("enough moving frames now");
        assert!(hood.top.iter().all(|&t| t.abs_diff(330) <= 2), "{:?}", &hood.top[..8]);
        // An edge at half the height is a horizon, not a bonnet.
        let mut high = StillEdge::new(w, h);
        for t in 0..30 {
            high.observe(&drive_luma(w, h, t, Some(180)), None);
        }
        assert!(high.candidate().is_none());
    }
}
