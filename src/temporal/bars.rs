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
}

/// 8 frames: 0.3 s at 25 fps.
const RULES: Rules = Rules { flat: 6, dark: 40.0, steady: 1.5, min_frames: 8, min_bar: 4, max_share: 0.3, sample: 4 };

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
    row_runs: Vec<u16>,
    row_mean: Vec<f32>,
    bars: Bars,
}

impl BarsEstimator {
    pub fn new(width: usize, height: usize) -> Self {
        BarsEstimator {
            width,
            height,
            col_runs: vec![0; width],
            col_mean: vec![-1.0; width],
            row_runs: vec![0; height],
            row_mean: vec![-1.0; height],
            bars: Bars::NONE,
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
        for x in edge_lines(w, reach_x) {
            let stats = line_stats((0..h).step_by(RULES.sample).map(|y| luma[y * w + x]));
            update(&mut self.col_runs[x], &mut self.col_mean[x], stats);
        }
        for y in edge_lines(h, reach_y) {
            let stats = line_stats(luma[y * w..(y + 1) * w].iter().step_by(RULES.sample).copied());
            update(&mut self.row_runs[y], &mut self.row_mean[y], stats);
        }
        let bar = |runs: &mut dyn Iterator<Item = &u16>, reach: usize| {
            // A run that reaches the limit is a dark scene, not framing.
            let n = runs.take(reach).take_while(|&&r| r >= RULES.min_frames).count();
            if n >= RULES.min_bar && n < reach { n as u32 } else { 0 }
        };
        self.bars = Bars {
            left: bar(&mut self.col_runs.iter(), reach_x),
            right: bar(&mut self.col_runs.iter().rev(), reach_x),
            top: bar(&mut self.row_runs.iter(), reach_y),
            bottom: bar(&mut self.row_runs.iter().rev(), reach_y),
        };
    }
}

/// The first and last `reach` of `n` lines (each once).
fn edge_lines(n: usize, reach: usize) -> impl Iterator<Item = usize> {
    let far = n.saturating_sub(reach).max(reach);
    (0..reach).chain(far..n)
}

/// (spread, mean) of a line's samples.
fn line_stats(samples: impl Iterator<Item = u8>) -> (u8, f32) {
    let (mut lo, mut hi, mut sum, mut n) = (u8::MAX, 0u8, 0u32, 0u32);
    for v in samples {
        lo = lo.min(v);
        hi = hi.max(v);
        sum += v as u32;
        n += 1;
    }
    (hi.saturating_sub(lo), sum as f32 / n.max(1) as f32)
}

fn update(run: &mut u16, last_mean: &mut f32, (spread, mean): (u8, f32)) {
    let bar_line = spread <= RULES.flat && mean <= RULES.dark;
    let steady = *last_mean >= 0.0 && (mean - *last_mean).abs() <= RULES.steady;
    *run = match (bar_line, steady) {
        (true, true) => run.saturating_add(1),
        (true, false) => 1,
        (false, _) => 0,
    };
    *last_mean = mean;
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

    #[test]
    fn picture_is_the_frame_less_the_bars() {
        let b = Bars { left: 3, right: 5, top: 2, bottom: 1 };
        assert_eq!(b.picture(20, 10), (3, 2, 15, 9));
        assert_eq!(Bars { left: 30, ..Bars::NONE }.picture(20, 10), (20, 0, 20, 10), "empty, not negative");
    }
}
