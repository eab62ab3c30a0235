//! Letterbox and pillarbox bars: constant dark bands along the frame's edges
//! that are not picture (a 4:3 camera in a 16:9 stream, a cropped export).
//! They are left out of road coverage and masks, and nothing is drawn on them.
//!
//! Per frame, each column near the left and right edges (and each row near
//! the top and bottom) is sampled every few pixels: a bar line is flat (its
//! samples within `RULES.flat` luma levels), dark, and the same as in the previous
//! frame. A line that has been a bar line for `RULES.min_frames` frames in a row
//! counts; the bars are the runs of such lines from each edge inwards. A
//! scene's own dark areas (a tunnel, a night sky) move, grain or change from
//! frame to frame, so they rarely stay flat and still for long, and when they
//! do there is nothing to segment in them either.
//!
//! Pillarbox bars are also made of the picture itself, scaled up and blurred
//! (phone footage exported to 16:9, social-media re-encodes): grey, not flat,
//! changing with the scene, but smooth along every column (gradual ramps, no
//! detail), where picture columns carry edges and grain. Such a column counts
//! as a bar line too, and a run of them counts as a bar only where it ends at
//! sharp picture (a textured column within a few of its end): a scene's
//! smooth edge (fog, a blown-out sky) fades into the picture instead. Rows
//! are never judged this way: a clear sky makes smooth rows.

use std::ops::Range;

use crate::backend::cpu::simd::multiversion;

/// What makes a line (a column near the left or right edge, a row near the
/// top or bottom) a bar line, and a run of them a bar.
struct Rules {
    /// Widest spread of a bar line's luma samples (full-range levels):
    /// decoded black bars are flat to a level or two; picture lines, even
    /// dark ones, carry more texture and grain.
    flat: u8,
    /// Brightest mean luma a bar line may have: bars are black or nearly so.
    dark: f32,
    /// Largest change of a bar line's mean luma between consecutive frames.
    steady: f32,
    /// Frames a line must stay a bar line before it counts.
    min_frames: u16,
    /// Bars narrower than this (pixels) are edge artefacts, not bars.
    min_bar: usize,
    /// A bar never covers this share of the frame's width (height) or more:
    /// that is a dark scene, not framing.
    max_share: f32,
    /// Every `sample`-th pixel of a line is looked at.
    sample: usize,
    /// Largest detail of a blurred bar line (levels): the mean absolute
    /// second difference of its samples (a ramp has none), averaged over
    /// frames (`step_weight`). Blurred fill: medians 0.7-1.0, single frames
    /// up to 1.3 as the codec's noise comes and goes; picture columns at a
    /// frame's edge: medians 2.9 and up (the clips of ../shared), but for
    /// dark night scenes, which `smooth_relative` keeps out.
    smooth: f32,
    /// Largest detail as a share of the line's mean luma: a dark picture is
    /// smooth in levels too (0.07 and up of its level at night), blurred
    /// fill under 0.015.
    smooth_relative: f32,
    /// Weight of each frame in a column's running mean step.
    step_weight: f32,
    /// Detail of the sharp picture a blurred bar must end at, within
    /// `edge_reach` columns of its last one. A real clip's picture edge can
    /// be soft: on the cattle clip of ../shared the detail climbs from the
    /// fill's to the picture's over 2-5 columns (2026-12-02; at 3 its left
    /// bar came and went from frame to frame).
    edge_texture: f32,
    edge_reach: usize,
}

/// 8 frames: 0.3 s at 25 fps.
const RULES: Rules = Rules {
    flat: 6,
    dark: 40.0,
    steady: 1.5,
    min_frames: 8,
    min_bar: 4,
    max_share: 0.3,
    sample: 4,
    smooth: 1.5,
    smooth_relative: 0.03,
    step_weight: 0.25,
    edge_texture: 3.0,
    edge_reach: 6,
};

/// Bars along each edge, in pixels; all zero: the whole frame is picture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bars {
    pub left: u32,
    pub right: u32,
    pub top: u32,
    pub bottom: u32,
}

impl Bars {
    pub const NONE: Bars = Bars { left: 0, right: 0, top: 0, bottom: 0 };

    pub fn is_none(&self) -> bool {
        *self == Bars::NONE
    }

    /// The picture inside the bars of a `width` x `height` frame:
    /// `(x0, y0, x1, y1)`, x1 and y1 exclusive (empty when bars cover all).
    pub fn picture(&self, width: usize, height: usize) -> (usize, usize, usize, usize) {
        let x0 = (self.left as usize).min(width);
        let y0 = (self.top as usize).min(height);
        let x1 = width.saturating_sub(self.right as usize).max(x0);
        let y1 = height.saturating_sub(self.bottom as usize).max(y0);
        (x0, y0, x1, y1)
    }
}

/// Running bar detection for one stream (frames in order).
pub struct BarsEstimator {
    width: usize,
    height: usize,
    /// Per candidate column (the outer `RULES.max_share` on each side): frames in
    /// a row it was a bar line, and its last mean luma.
    col_runs: Vec<u16>,
    col_mean: Vec<f32>,
    /// Per candidate column: its running mean detail (negative before the
    /// first frame), and whether it counted as a bar line this
    /// frame only by being smooth (blurred fill).
    col_step: Vec<f32>,
    col_blurred: Vec<bool>,
    row_runs: Vec<u16>,
    row_mean: Vec<f32>,
    bars: Bars,
    columns: ColumnScan,
}

impl BarsEstimator {
    pub fn new(width: usize, height: usize) -> Self {
        BarsEstimator {
            width,
            height,
            col_runs: vec![0; width],
            col_mean: vec![-1.0; width],
            col_step: vec![-1.0; width],
            col_blurred: vec![false; width],
            row_runs: vec![0; height],
            row_mean: vec![-1.0; height],
            bars: Bars::NONE,
            columns: ColumnScan::default(),
        }
    }

    pub fn bars(&self) -> Bars {
        self.bars
    }

    /// Takes the next frame's full-range luma (`width * height`).
    pub fn observe(&mut self, luma: &[u8]) {
        let (w, h) = (self.width, self.height);
        assert_eq!(luma.len(), w * h, "luma of the estimator's frame size");
        if w == 0 || h == 0 {
            return;
        }
        let reach_x = ((w as f32 * RULES.max_share) as usize).min(w);
        let reach_y = ((h as f32 * RULES.max_share) as usize).min(h);
        let (col_step, col_blurred, col_runs, col_mean) = (&mut self.col_step, &mut self.col_blurred, &mut self.col_runs, &mut self.col_mean);
        self.columns.scan(luma, w, h, edge_ranges(w, reach_x), |x, mut stats| {
            let avg = &mut col_step[x];
            *avg = if *avg < 0.0 { stats.step } else { *avg + RULES.step_weight * (stats.step - *avg) };
            stats.step = *avg;
            col_blurred[x] = update(&mut col_runs[x], &mut col_mean[x], stats, true);
        });
        for y in edge_lines(h, reach_y) {
            let stats = line_stats(luma[y * w..(y + 1) * w].iter().step_by(RULES.sample).copied());
            update(&mut self.row_runs[y], &mut self.row_mean[y], stats, false);
        }
        let (left, right) = {
            let cols = |order: &dyn Fn(usize) -> usize| {
                bar_width(reach_x, |i| self.col_runs[order(i)], |i| self.col_blurred[order(i)], |i| self.col_step[order(i)])
            };
            (cols(&|i| i), cols(&|i| w - 1 - i))
        };
        let rows = |order: &dyn Fn(usize) -> usize| bar_width(reach_y, |i| self.row_runs[order(i)], |_| false, |_| 0.0);
        self.bars = Bars { left, right, top: rows(&|i| i), bottom: rows(&|i| h - 1 - i) };
    }
}

/// The bar along one edge: the run of lines (the `i`th from the edge) that
/// have been bar lines for `RULES.min_frames`, if it is a bar at all.
fn bar_width(reach: usize, runs: impl Fn(usize) -> u16, blurred: impl Fn(usize) -> bool, step: impl Fn(usize) -> f32) -> u32 {
    let n = (0..reach).take_while(|&i| runs(i) >= RULES.min_frames).count();
    // A run that reaches the limit is a dark scene, not framing.
    if n < RULES.min_bar || n >= reach {
        return 0;
    }
    // Blurred fill must end at sharp picture; a scene's smooth edge fades in.
    // Without it, the bar is what the flat, dark lines alone make.
    let sharp_end = || (n..(n + RULES.edge_reach).min(reach)).any(|i| step(i) >= RULES.edge_texture);
    if (0..n).any(&blurred) && !sharp_end() {
        let dark = (0..n).take_while(|&i| !blurred(i)).count();
        return if dark >= RULES.min_bar { dark as u32 } else { 0 };
    }
    n as u32
}

/// The first and last `reach` of `n` lines (each once).
fn edge_lines(n: usize, reach: usize) -> impl Iterator<Item = usize> {
    edge_ranges(n, reach).into_iter().flatten()
}

fn edge_ranges(n: usize, reach: usize) -> [Range<usize>; 2] {
    let far = n.saturating_sub(reach).max(reach);
    [0..reach, far..n]
}

multiversion! {
    /// One sampled row into each column's running [`line_stats`]; `detail`
    /// once two rows came before it.
    #[allow(clippy::too_many_arguments)]
    fn scan_row(samples: &[u8], lo: &mut [u8], hi: &mut [u8], sum: &mut [u32], detail: &mut [u32], before: &mut [u8], last: &mut [u8], with_detail: bool) {
        if with_detail {
            for (((d, &v), &b), &a) in detail.iter_mut().zip(samples).zip(&*last).zip(&*before) {
                *d += (v as i32 - 2 * b as i32 + a as i32).unsigned_abs();
            }
        }
        for (((lo, hi), sum), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(sum.iter_mut()).zip(samples) {
            *lo = (*lo).min(v);
            *hi = (*hi).max(v);
            *sum += v as u32;
        }
        before.copy_from_slice(last);
        last.copy_from_slice(samples);
    }
}

/// [`line_stats`] of many columns at once, each over every
/// `RULES.sample`th row, gathered row by row: column by column, every
/// sample of a 1080p frame's 1,152 candidate columns is another cache miss.
/// Scratch per column, kept between frames.
#[derive(Default)]
struct ColumnScan {
    lo: Vec<u8>,
    hi: Vec<u8>,
    sum: Vec<u32>,
    detail: Vec<u32>,
    before: Vec<u8>,
    last: Vec<u8>,
}

impl ColumnScan {
    /// Calls `each(x, stats)` for every column `x` of `ranges` (in order),
    /// with the stats `line_stats` gives for its samples.
    fn scan(&mut self, luma: &[u8], w: usize, h: usize, ranges: [Range<usize>; 2], mut each: impl FnMut(usize, LineStats)) {
        for (v, start) in [(&mut self.lo, u8::MAX), (&mut self.hi, 0), (&mut self.before, 0), (&mut self.last, 0)] {
            v.clear();
            v.resize(w, start);
        }
        for v in [&mut self.sum, &mut self.detail] {
            v.clear();
            v.resize(w, 0);
        }
        let mut n = 0u32;
        for y in (0..h).step_by(RULES.sample) {
            let row = &luma[y * w..(y + 1) * w];
            for r in ranges.iter().cloned() {
                let ColumnScan { lo, hi, sum, detail, before, last } = self;
                scan_row(&row[r.clone()], &mut lo[r.clone()], &mut hi[r.clone()], &mut sum[r.clone()], &mut detail[r.clone()], &mut before[r.clone()], &mut last[r], n >= 2);
            }
            n += 1;
        }
        for x in ranges.into_iter().flatten() {
            each(
                x,
                LineStats {
                    spread: self.hi[x].saturating_sub(self.lo[x]),
                    mean: self.sum[x] as f32 / n.max(1) as f32,
                    step: self.detail[x] as f32 / n.saturating_sub(2).max(1) as f32,
                },
            );
        }
    }
}

struct LineStats {
    /// Brightest less darkest sample.
    spread: u8,
    mean: f32,
    /// Mean absolute second difference of the samples: detail, not slope.
    step: f32,
}

fn line_stats(samples: impl Iterator<Item = u8>) -> LineStats {
    let (mut lo, mut hi, mut sum, mut detail, mut n) = (u8::MAX, 0u8, 0u32, 0u32, 0u32);
    let (mut before, mut last) = (None::<i32>, None::<i32>);
    for v in samples {
        lo = lo.min(v);
        hi = hi.max(v);
        sum += v as u32;
        if let (Some(a), Some(b)) = (before, last) {
            detail += (v as i32 - 2 * b + a).unsigned_abs();
        }
        (before, last) = (last, Some(v as i32));
        n += 1;
    }
    LineStats {
        spread: hi.saturating_sub(lo),
        mean: sum as f32 / n.max(1) as f32,
        step: detail as f32 / n.saturating_sub(2).max(1) as f32,
    }
}

/// Counts the line's run of bar frames on; true where it is a bar line only
/// by being smooth (`smooth_counts`: columns), not by being flat and dark.
fn update(run: &mut u16, last_mean: &mut f32, stats: LineStats, smooth_counts: bool) -> bool {
    let dark_bar = stats.spread <= RULES.flat && stats.mean <= RULES.dark;
    let blurred = !dark_bar
        && smooth_counts
        && stats.step <= RULES.smooth
        && stats.step <= RULES.smooth_relative * stats.mean;
    // Blurred fill follows the scene's light; only black bars hold still.
    let steady = blurred || (*last_mean >= 0.0 && (stats.mean - *last_mean).abs() <= RULES.steady);
    *run = match (dark_bar || blurred, steady) {
        (true, true) => run.saturating_add(1),
        (true, false) => 1,
        (false, _) => 0,
    };
    *last_mean = stats.mean;
    blurred
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `w` x `h` frame of moving texture (frame `t`) inside black bars.
    fn frame(w: usize, h: usize, bars: Bars, t: usize) -> Vec<u8> {
        let (x0, y0, x1, y1) = bars.picture(w, h);
        (0..w * h)
            .map(|i| {
                let (x, y) = (i % w, i / w);
                if x < x0 || x >= x1 || y < y0 || y >= y1 { 1 } else { ((x * 7 + y * 13 + t * 29) % 200 + 20) as u8 }
            })
            .collect()
    }

    fn run(w: usize, h: usize, bars: Bars, frames: usize) -> Bars {
        let mut est = BarsEstimator::new(w, h);
        for t in 0..frames {
            est.observe(&frame(w, h, bars, t));
        }
        est.bars()
    }

    #[test]
    fn columns_scanned_row_by_row_give_each_column_its_line_stats() {
        for (w, h) in [(1920usize, 1080usize), (321, 7), (50, 3), (9, 1)] {
            let luma: Vec<u8> = (0..w * h).map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8).collect();
            let reach = ((w as f32 * RULES.max_share) as usize).min(w);
            let mut seen = Vec::new();
            ColumnScan::default().scan(&luma, w, h, edge_ranges(w, reach), |x, got| {
                let want = line_stats((0..h).step_by(RULES.sample).map(|y| luma[y * w + x]));
                assert_eq!((got.spread, got.mean, got.step), (want.spread, want.mean, want.step), "{w}x{h} column {x}");
                seen.push(x);
            });
            assert_eq!(seen, edge_lines(w, reach).collect::<Vec<_>>(), "{w}x{h}: every candidate column once, in order");
        }
    }

    #[test]
    fn pillarbox_and_letterbox_are_found_exactly() {
        let pillar = Bars { left: 40, right: 40, ..Bars::NONE };
        assert_eq!(run(320, 180, pillar, 12), pillar);
        let letter = Bars { top: 22, bottom: 22, ..Bars::NONE };
        assert_eq!(run(320, 240, letter, 12), letter);
        let window = Bars { left: 16, right: 20, top: 12, bottom: 8 };
        assert_eq!(run(320, 240, window, 12), window);
    }

    #[test]
    fn a_full_picture_has_no_bars_and_bars_wait_for_enough_frames() {
        assert_eq!(run(320, 180, Bars::NONE, 30), Bars::NONE);
        let pillar = Bars { left: 40, right: 40, ..Bars::NONE };
        assert_eq!(run(320, 180, pillar, (RULES.min_frames - 1) as usize), Bars::NONE, "not before RULES.min_frames");
    }

    #[test]
    fn a_dark_scene_that_changes_is_not_a_bar() {
        // Dark, nearly flat columns whose level drifts each frame (a dim scene
        // brightening): flat and dark but never steady.
        let (w, h) = (64, 48);
        let mut est = BarsEstimator::new(w, h);
        for t in 0..30 {
            let f: Vec<u8> = (0..w * h).map(|i| if i % w < 10 { (t * 2 % 30) as u8 } else { ((i * 31 + t * 7) % 250) as u8 }).collect();
            est.observe(&f);
        }
        assert_eq!(est.bars().left, 0);
    }

    #[test]
    fn bars_wider_than_the_limit_are_a_dark_scene() {
        let huge = Bars { left: 120, right: 0, ..Bars::NONE };
        assert_eq!(run(320, 180, huge, 12).left, 0, "a 37% 'bar' is not framing");
    }

    /// A `w` x `h` frame (frame `t`) of moving texture between bars of
    /// blurred fill `bar` wide: a smooth vertical ramp of grey whose level
    /// jumps with the scene, and on every third frame the codec's ripple (too
    /// rough for a bar line in that frame alone).
    fn blurred_pillarbox(w: usize, h: usize, bar: usize, t: usize) -> Vec<u8> {
        (0..w * h)
            .map(|i| {
                let (x, y) = (i % w, i / w);
                let ripple = if t % 3 == 0 { y / 4 % 2 } else { 0 };
                if x < bar || x >= w - bar {
                    (50 + y * 30 / h + t % 2 * 12 + ripple) as u8
                } else {
                    ((x * 7 + y * 13 + t * 29) % 200 + 20) as u8
                }
            })
            .collect()
    }

    #[test]
    fn a_pillarbox_of_blurred_picture_is_found_exactly() {
        let found = bars_after(424, 192, 12, |t| blurred_pillarbox(424, 192, 38, t));
        assert_eq!(found, Bars { left: 38, right: 38, ..Bars::NONE });
    }

    /// A `w` x `h` frame (frame `t`): `black` black columns at the left, then
    /// fog whose texture grows column by column (no sharp edge anywhere), under
    /// `sky` rows of flat grey.
    fn fog(w: usize, h: usize, black: usize, sky: usize, t: usize) -> Vec<u8> {
        (0..w * h)
            .map(|i| {
                let (x, y) = (i % w, i / w);
                let grain = ((x * 7 + y * 13 + t * 29) % 200) as f32 / 200.0 - 0.5;
                let texture = ((x as f32 - black as f32) / 320.0).clamp(0.0, 1.0) * 120.0 * grain;
                if x < black { 1 } else if y < sky { 124 } else { (120.0 + texture) as u8 }
            })
            .collect()
    }

    /// The bars after `frames` frames made by `frame(t)`.
    fn bars_after(w: usize, h: usize, frames: usize, frame: impl Fn(usize) -> Vec<u8>) -> Bars {
        let mut est = BarsEstimator::new(w, h);
        for t in 0..frames {
            est.observe(&frame(t));
        }
        est.bars()
    }

    #[test]
    fn a_smooth_edge_that_fades_into_the_picture_is_not_a_bar() {
        // Fog at the left: smooth for a few columns, its texture growing
        // column by column (no sharp end), under a flat grey sky's smooth rows.
        assert_eq!(bars_after(320, 180, 30, |t| fog(320, 180, 0, 30, t)), Bars::NONE);
    }

    #[test]
    fn a_black_bar_beside_a_smooth_fading_edge_stays_the_black_bar() {
        // 20 black columns, then fog: the smooth fog joins the run but has no
        // sharp end, so the bar is the black.
        assert_eq!(bars_after(320, 180, 30, |t| fog(320, 180, 20, 0, t)), Bars { left: 20, ..Bars::NONE });
    }

    #[test]
    fn a_dim_smooth_roadside_at_night_is_not_blurred_fill() {
        // Luma about 26, spread 9, detail about 1.0 level: under
        // `RULES.smooth` in levels, but rough for its brightness (0.04 of
        // it); sharp picture beside it.
        let (w, h) = (320, 180);
        let roadside = |t: usize| -> Vec<u8> {
            (0..w * h)
                .map(|i| {
                    let (x, y) = (i % w, i / w);
                    if x < 17 { (22 + (y / 8 + t) % 2 + y / 20) as u8 } else { ((x * 7 + y * 13 + t * 29) % 200 + 20) as u8 }
                })
                .collect()
        };
        assert_eq!(bars_after(w, h, 30, roadside), Bars::NONE);
    }

    #[test]
    fn picture_is_the_frame_less_the_bars() {
        let b = Bars { left: 3, right: 5, top: 2, bottom: 1 };
        assert_eq!(b.picture(20, 10), (3, 2, 15, 9));
        assert_eq!(Bars { left: 30, ..Bars::NONE }.picture(20, 10), (20, 0, 20, 10), "empty, not negative");
    }
}
