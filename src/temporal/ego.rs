//! The hood as the model sees it: a model with an ego-vehicle class
//! (`ego_vehicle`, the bundled model since issue 35) marks the camera car's
//! bonnet and dashboard in every frame, from the first one, moving or not.
//! Per column of the logits grid, the ego run rising from the bottom gives
//! the hood's height; its edge is placed between the last ego cell and the
//! first other one where the ego logit's lead crosses zero, as the
//! upsampled mask would place it. A running median over the last second of
//! frames steadies it, and a running median across columns smooths the edge.
//!
//! The motion estimate (`hood.rs`) stays as the second opinion: where the
//! model sees no ego vehicle, a still bonnet that moves past no class the
//! model knows is still found by its stillness.

use std::collections::VecDeque;

use super::hood::HoodMask;
use super::reach::LogitsGrid;

/// Class names taken for the ego vehicle (case-insensitive).
pub const EGO_CLASS_NAMES: [&str; 4] = ["ego_vehicle", "ego", "hood", "bonnet"];
/// A hood smaller than this share of the frame is reported as none: the
/// model's stray ego cells along the bottom of a hood-less clip are not one.
const MIN_COVERAGE: f32 = 0.01;
/// Never more of the height than this (as the motion estimate).
const MAX_HEIGHT_SHARE: f32 = 0.45;
/// A bonnet seen from inside the car lies under the middle of the picture:
/// a learned hood must cover at least this share of the middle third's
/// columns. On highway.mp4 (no bonnet; 2026-12-01) the shipped model read
/// ego in the bottom corners, under a dark seam across the near road, on
/// half the frames of an 8 s cut: a hood of up to 2.5% with nothing in the
/// middle third. The real bonnets of ../shared (Udacity's strip, the white
/// DAD bonnets, the dark cattle-clip one) all span it.
const MIN_MIDDLE_SHARE: f32 = 0.5;
/// No column of a learned hood rises higher than this times the median
/// height over the middle third's columns. A bonnet's edge is a gentle
/// curve: over the real bonnets of ../shared the tallest column is at most
/// 1.22 times that median (the seven drawn BDD bonnets at most 1.13; the
/// Udacity, cattle-clip, road2 and Berlin bonnets 1.05-1.22, 2026-12-02).
/// On tmo324's night.mp4 the model read ego in a block of the dark road just
/// ahead, 55 columns wide and 19% of the height tall, over a bonnet edge of
/// 2-4%, and the hood hid that road.
const MAX_OVER_MIDDLE: f32 = 1.5;

/// Class names taken for other vehicles (case-insensitive).
pub const VEHICLE_CLASS_NAMES: [&str; 2] = ["vehicle", "car"];

/// The first of `labels` that names the ego vehicle.
pub fn ego_class_id(labels: &[String]) -> Option<usize> {
    labels.iter().position(|l| EGO_CLASS_NAMES.iter().any(|n| l.eq_ignore_ascii_case(n)))
}

/// A model's ego-vehicle class, and its class for other vehicles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EgoClass {
    pub id: usize,
    /// The model reads the shadowed lower part of a dark bonnet, and the
    /// dashboard under it, as some vehicle (the cattle clip of ../shared:
    /// the bottom fifth of the frame, "vehicle" ahead of "ego" by under one
    /// logit); under cells it reads as the ego vehicle, such cells are the
    /// ego vehicle's too.
    pub vehicle: Option<usize>,
}

impl EgoClass {
    /// The classes among `labels` (None without an ego class).
    pub fn from_labels(labels: &[String]) -> Option<Self> {
        let vehicle = labels.iter().position(|l| VEHICLE_CLASS_NAMES.iter().any(|n| l.eq_ignore_ascii_case(n)));
        ego_class_id(labels).map(|id| EgoClass { id, vehicle })
    }

    /// Only the ego class itself (no vehicle class to carry it).
    pub fn alone(id: usize) -> Self {
        EgoClass { id, vehicle: None }
    }
}

/// Per grid column, the height (in grid rows, fractional) of the ego
/// vehicle rising from the bottom row of `logits` (`[height, width,
/// labels]`): the run of cells from the bottom that read as the ego vehicle,
/// or as some vehicle under a cell that reads as the ego vehicle, up to its
/// highest ego cell. A run of vehicle cells with no ego cell above them in
/// it (a truck close ahead) is no hood.
pub fn ego_heights(logits: &[f32], grid: LogitsGrid, ego: EgoClass) -> Vec<f32> {
    let LogitsGrid { width: w, height: h, labels } = grid;
    assert_eq!(logits.len(), w * h * labels, "logits are [{h}, {w}, {labels}]");
    // How far class `class`'s logit leads the best other class (negative: behind).
    let lead = |class: usize, x: usize, y: usize| {
        let px = &logits[(y * w + x) * labels..][..labels];
        let other = px.iter().enumerate().filter(|&(c, _)| c != class).map(|(_, &v)| v).fold(f32::NEG_INFINITY, f32::max);
        px[class] - other
    };
    let ego_lead = |x: usize, y: usize| lead(ego.id, x, y);
    let carries = |x: usize, y: usize| ego_lead(x, y) >= 0.0 || ego.vehicle.is_some_and(|v| v < labels && lead(v, x, y) >= 0.0);
    (0..w)
        .map(|x| {
            // The highest ego cell of the run from the bottom.
            let mut top_ego = None;
            let mut y = h;
            while y > 0 && carries(x, y - 1) {
                y -= 1;
                if ego_lead(x, y) >= 0.0 {
                    top_ego = Some(y);
                }
            }
            let Some(y) = top_ego else { return 0.0 };
            if y == 0 {
                return h as f32;
            }
            // Cell centres at y + 0.5 (ego) and y - 0.5 (not): the lead
            // crosses zero between them.
            let (inside, outside) = (ego_lead(x, y), ego_lead(x, y - 1));
            let t = inside / (inside - outside).max(f32::EPSILON);
            h as f32 - (y as f32 + 0.5 - t)
        })
        .collect()
}

/// The ego-vehicle heights of one stream: per column, the median over the
/// last [`WINDOW`] frames. The bonnet does not move in the picture, while
/// the model's reading of the road just over it does: on the Udacity clip
/// it rose from 5.8% to 8.3% of the frame over six frames of shadowed
/// road, and a running mean (weight 0.15) followed it into the hood.
#[derive(Clone, Debug, Default)]
pub struct LearnedHood {
    grid: Option<(usize, usize)>,
    /// The last frames' column heights, oldest first.
    recent: VecDeque<Vec<f32>>,
    heights: Vec<f32>,
    frames: u32,
}

/// Frames in the median: about a second of video.
const WINDOW: usize = 25;

impl LearnedHood {
    /// Adds one frame's column heights (grid `width` x `height`). A new grid
    /// size starts over.
    pub fn observe(&mut self, heights: &[f32], grid_height: usize) {
        let size = (heights.len(), grid_height);
        if self.grid != Some(size) {
            self.grid = Some(size);
            self.recent.clear();
            self.frames = 0;
        }
        let mut oldest = if self.recent.len() >= WINDOW { self.recent.pop_front().unwrap_or_default() } else { Vec::new() };
        oldest.clear();
        oldest.extend_from_slice(heights);
        self.recent.push_back(oldest);
        self.frames += 1;
        let n = self.recent.len();
        let mut column = [0.0f32; WINDOW];
        self.heights.resize(heights.len(), 0.0);
        for (c, median) in self.heights.iter_mut().enumerate() {
            for (slot, frame) in column.iter_mut().zip(&self.recent) {
                *slot = frame[c];
            }
            let column = &mut column[..n];
            column.sort_by(f32::total_cmp);
            *median = if n % 2 == 1 { column[n / 2] } else { 0.5 * (column[n / 2 - 1] + column[n / 2]) };
        }
    }

    /// Frames averaged so far.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// The hood over a `width` x `height` frame (none before any frame, or
    /// under [`MIN_COVERAGE`]).
    pub fn mask(&self, width: usize, height: usize) -> HoodMask {
        let Some((gw, gh)) = self.grid else { return HoodMask::none(width, height) };
        if gw == 0 || gh == 0 || width == 0 || height == 0 {
            return HoodMask::none(width, height);
        }
        // Running median across columns: a one-column slip is not the edge.
        let k = (gw / 32).max(1);
        let mut smoothed: Vec<f32> = (0..gw)
            .map(|c| {
                let mut near: Vec<f32> = self.heights[c.saturating_sub(k)..(c + k + 1).min(gw)].to_vec();
                near.sort_by(f32::total_cmp);
                near[near.len() / 2]
            })
            .collect();
        cap_at_the_middle(&mut smoothed);
        let row_px = height as f32 / gh as f32;
        let max_px = MAX_HEIGHT_SHARE * height as f32;
        let top: Vec<u32> = (0..width)
            .map(|x| {
                // Between the two nearest column centres.
                let at = ((x as f32 + 0.5) * gw as f32 / width as f32 - 0.5).clamp(0.0, (gw - 1) as f32);
                let (a, b) = (at.floor() as usize, (at.floor() as usize + 1).min(gw - 1));
                let t = at - a as f32;
                let rows = smoothed[a] * (1.0 - t) + smoothed[b] * t;
                // Under half a grid row is no hood in that column.
                let px = if rows < 0.5 { 0.0 } else { (rows * row_px).min(max_px) };
                height.saturating_sub(px.round() as usize) as u32
            })
            .collect();
        let mask = HoodMask::from_tops(width, height, top);
        if mask.coverage() < MIN_COVERAGE || !spans_the_middle(&mask) { HoodMask::none(width, height) } else { mask }
    }
}

/// Caps each column height at [`MAX_OVER_MIDDLE`] times the median over
/// the middle third's columns.
fn cap_at_the_middle(heights: &mut [f32]) {
    let n = heights.len();
    let mut middle = heights[n / 3..n - n / 3].to_vec();
    if middle.is_empty() {
        return;
    }
    middle.sort_by(f32::total_cmp);
    let cap = MAX_OVER_MIDDLE * middle[middle.len() / 2];
    for h in heights {
        *h = h.min(cap);
    }
}

/// Whether `hood` covers at least [`MIN_MIDDLE_SHARE`] of the columns in
/// the middle third of its frame.
fn spans_the_middle(hood: &HoodMask) -> bool {
    let Some(middle) = hood.top.get(hood.width / 3..hood.width - hood.width / 3) else { return false };
    let covered = middle.iter().filter(|&&t| (t as usize) < hood.height).count();
    !middle.is_empty() && covered as f32 >= MIN_MIDDLE_SHARE * middle.len() as f32
}

/// The frame's hood for a model with an ego class: the model's, joined
/// (column by column, the taller of the two) by the motion estimate's when
/// `motion_agrees` (the model reads next to none of it as road), with the
/// bars of `motion`. Alone, the motion estimate claimed 2-6% of the frame
/// on two hood-less clips of ../shared (a dark, still road at night, which
/// the model reads as road) and found neither of two real bonnets (white
/// and mirror-like ones reflect the passing scene); a still bonnet the model
/// has never seen, it finds. Where the model sees a hood of its own,
/// `column_supported(x)` says whether it also sees enough ego vehicle in
/// what motion adds to column `x` (see [`EgoUnderMotion`]); a column
/// without it keeps the model's hood.
pub fn merge(learned: &HoodMask, motion: &HoodMask, motion_agrees: bool, column_supported: impl Fn(usize) -> bool) -> HoodMask {
    if learned.width != motion.width || learned.height != motion.height {
        return motion.clone();
    }
    if !motion_agrees || motion.is_empty() {
        return learned.with_bars(motion.bars);
    }
    if learned.is_empty() {
        return capped_at_the_middle(motion);
    }
    let none = motion.height as u32;
    let supported = motion.top.iter().enumerate().map(|(x, &t)| if column_supported(x) { t } else { none }).collect();
    let supported = HoodMask::from_tops(motion.width, motion.height, supported).with_bars(motion.bars);
    if supported.is_empty() {
        return learned.with_bars(motion.bars);
    }
    capped_at_the_middle(&taller(&supported, learned))
}

/// `hood` with no column taller than [`MAX_OVER_MIDDLE`] times the median
/// of its middle third's columns, the rule the model's own hood keeps, now
/// kept by what the motion estimate adds too. On tmo324's night.mp4 (a
/// bonnet edge of 2-4%) the motion estimate, joined while the model's hood
/// was empty, climbed both dark shoulders: 5-6% of the frame, 628 of 1080
/// frames at 1% or more, wedges up to two fifths of the height at the
/// frame's sides. A hood whose middle is empty is none.
fn capped_at_the_middle(hood: &HoodMask) -> HoodMask {
    if hood.top.is_empty() {
        return hood.clone();
    }
    let height = hood.height as u32;
    let mut heights: Vec<f32> = hood.top.iter().map(|&t| height.saturating_sub(t) as f32).collect();
    cap_at_the_middle(&mut heights);
    let top = heights.iter().map(|&h| height.saturating_sub(h.floor() as u32)).collect();
    HoodMask::from_tops(hood.width, hood.height, top).with_bars(hood.bars)
}

/// The model's probability of class `ego` per cell of the logits grid,
/// averaged over the frames in which the cell lay inside the motion
/// estimate's hood (negative: never). Kept per cell, not per column, so that
/// a column is judged on the cells motion adds now: on tmo324's night.mp4
/// what motion adds first lies along the bonnet and later climbs the
/// shoulder, and a column's running mean kept the bonnet's vote.
#[derive(Clone, Debug, Default)]
pub struct EgoUnderMotion {
    grid: (usize, usize),
    cells: Vec<f32>,
}

impl EgoUnderMotion {
    /// Folds in one frame's logits over the cells inside `motion`.
    pub fn observe(&mut self, logits: &[f32], grid: LogitsGrid, ego: usize, motion: &HoodMask, weight: f32) {
        let LogitsGrid { width: w, height: h, labels } = grid;
        if self.grid != (w, h) {
            self.grid = (w, h);
            self.cells = vec![-1.0; w * h];
        }
        for_each_cell_in(grid, motion, None, |cell| {
            let p = p_class(&logits[cell * labels..][..labels], ego);
            let avg = &mut self.cells[cell];
            *avg = if *avg < 0.0 { p } else { *avg + weight * (p - *avg) };
        });
    }

    /// Per column of the logits grid, whether the averaged probability over
    /// the cells `motion` holds and `learned` does not reaches `min`
    /// (false where there are none). Measured (2026-11-27, shipped model):
    /// 0.24-0.50 over pasted real bonnets (the model reads them as
    /// "vehicle"), 0.09-0.12 over the unlit shoulder of night.mp4 ("other").
    pub fn supported_columns(&self, motion: &HoodMask, learned: &HoodMask, min: f32) -> Vec<bool> {
        let (w, h) = self.grid;
        let mut sums = vec![(0.0f32, 0u32); w];
        let grid = LogitsGrid { width: w, height: h, labels: 1 };
        for_each_cell_in(grid, motion, Some(learned), |cell| {
            let (sum, n) = &mut sums[cell % w];
            *sum += self.cells[cell].max(0.0);
            *n += 1;
        });
        sums.into_iter().map(|(sum, n)| n > 0 && sum >= min * n as f32).collect()
    }
}

/// Calls `f` with the index of each grid cell whose centre lies inside
/// `hood` and outside `except`.
fn for_each_cell_in(grid: LogitsGrid, hood: &HoodMask, except: Option<&HoodMask>, mut f: impl FnMut(usize)) {
    let LogitsGrid { width: w, height: h, .. } = grid;
    let Some(&highest) = hood.top.iter().min() else { return };
    for gy in 0..h {
        let y = ((gy as f32 + 0.5) * hood.height as f32 / h as f32) as usize;
        if y < highest as usize {
            continue; // above every column's hood
        }
        for gx in 0..w {
            let x = ((gx as f32 + 0.5) * hood.width as f32 / w as f32) as usize;
            if hood.contains(x, y) && !except.is_some_and(|e| e.contains(x, y)) {
                f(gy * w + gx);
            }
        }
    }
}

/// How far under a cell's lowest logit a released ego logit is put (as
/// `reach`'s cut road: just under the next class would let the upsampled
/// mix keep the released cell's outline).
const RELEASE_MARGIN: f32 = 1.0;

/// Hands each logits cell whose best class is `ego` but whose centre lies
/// outside `hood` (frame resolution) to its best other class, and returns
/// how many. The stream's hood is the model's ego reading steadied over a
/// second and checked against the picture (its middle, its size): ego read
/// elsewhere in one frame is a misreading, and left as ego it is painted
/// as no road at all (a dark seam across highway.mp4's near road: a strip
/// of the road unpainted on half the frames of the shipped model).
pub fn release_ego_outside(logits: &mut [f32], grid: LogitsGrid, ego: usize, hood: &HoodMask) -> usize {
    let LogitsGrid { width: w, height: h, labels } = grid;
    assert_eq!(logits.len(), w * h * labels, "logits are [{h}, {w}, {labels}]");
    if ego >= labels || labels < 2 || hood.width == 0 || hood.height == 0 {
        return 0;
    }
    let mut released = 0;
    for gy in 0..h {
        let y = (((gy as f32 + 0.5) * hood.height as f32 / h as f32) as usize).min(hood.height - 1);
        for gx in 0..w {
            let x = (((gx as f32 + 0.5) * hood.width as f32 / w as f32) as usize).min(hood.width - 1);
            let px = &mut logits[(gy * w + gx) * labels..][..labels];
            let best = (0..labels).max_by(|&a, &b| px[a].total_cmp(&px[b])).unwrap_or(0);
            if best == ego && !hood.contains(x, y) {
                px[ego] = px.iter().copied().fold(f32::INFINITY, f32::min) - RELEASE_MARGIN;
                released += 1;
            }
        }
    }
    released
}

/// Softmax probability of class `class` in one cell's logits.
fn p_class(px: &[f32], class: usize) -> f32 {
    let max = px.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = px.iter().map(|&v| (v - max).exp()).sum();
    (px[class] - max).exp() / sum
}

/// Column by column, the taller of `hood` and `other`, with `hood`'s bars.
pub fn taller(hood: &HoodMask, other: &HoodMask) -> HoodMask {
    if (hood.width, hood.height) != (other.width, other.height) || other.is_empty() {
        return hood.clone();
    }
    let top = if hood.top.is_empty() { other.top.clone() } else { hood.top.iter().zip(&other.top).map(|(&a, &b)| a.min(b)).collect() };
    HoodMask::from_tops(hood.width, hood.height, top).with_bars(hood.bars)
}

/// Mean probability of class `ego` over the band of grid rows just under
/// `edge`'s top, and over the band of as many rows just above it (each
/// 1/20 of the grid's height, at least a row): how much more the model sees
/// the ego vehicle under a candidate edge than over it.
pub fn ego_bands(logits: &[f32], grid: LogitsGrid, ego: usize, edge: &HoodMask) -> (f32, f32) {
    let LogitsGrid { width: w, height: h, labels } = grid;
    if edge.top.is_empty() || w == 0 || h == 0 {
        return (0.0, 0.0);
    }
    let band = (h / 20).max(1);
    let p_ego = |x: usize, y: usize| p_class(&logits[(y * w + x) * labels..][..labels], ego);
    let (mut below, mut above, mut n_below, mut n_above) = (0.0f32, 0.0f32, 0u32, 0u32);
    for gx in 0..w {
        let x = (((gx as f32 + 0.5) * edge.width as f32 / w as f32) as usize).min(edge.width - 1);
        // The first grid row whose centre lies under the edge.
        let first = ((edge.top[x] as f32 * h as f32 / edge.height as f32).round() as usize).min(h);
        for y in first..(first + band).min(h) {
            below += p_ego(gx, y);
            n_below += 1;
        }
        for y in first.saturating_sub(band)..first {
            above += p_ego(gx, y);
            n_above += 1;
        }
    }
    (below / n_below.max(1) as f32, above / n_above.max(1) as f32)
}

/// Share of the logits cells inside `hood` (at frame resolution) whose best
/// class is a road class (0 when the hood covers no cell centre).
pub fn road_share(logits: &[f32], grid: LogitsGrid, road: &[usize], hood: &HoodMask) -> f32 {
    road_share_in(logits, grid, road, hood, None)
}

/// Share of road (as [`road_share`]) over the band just above `hood`, 1/20
/// of the frame's height tall, in the columns `hood` covers: what the model
/// reads right over a candidate bonnet's edge.
pub fn road_share_above(logits: &[f32], grid: LogitsGrid, road: &[usize], hood: &HoodMask) -> f32 {
    if hood.top.is_empty() {
        return 0.0;
    }
    let band = (hood.height / 20).max(1) as u32;
    let none = hood.height as u32;
    let raised = hood.top.iter().map(|&t| if t < none { t.saturating_sub(band) } else { none }).collect();
    let raised = HoodMask::from_tops(hood.width, hood.height, raised);
    road_share_in(logits, grid, road, &raised, Some(hood))
}

fn road_share_in(logits: &[f32], grid: LogitsGrid, road: &[usize], hood: &HoodMask, except: Option<&HoodMask>) -> f32 {
    let labels = grid.labels;
    let (mut inside, mut roads) = (0u32, 0u32);
    for_each_cell_in(grid, hood, except, |cell| {
        let px = &logits[cell * labels..][..labels];
        let best = (0..labels).max_by(|&a, &b| px[a].total_cmp(&px[b])).unwrap_or(0);
        inside += 1;
        roads += u32::from(road.contains(&best));
    });
    if inside == 0 { 0.0 } else { roads as f32 / inside as f32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits of a `w` x `h` grid with 3 labels; ego is label 2, with a lead
    /// of `lead(x, y)` over the others (which are 0).
    fn grid(w: usize, h: usize, lead: impl Fn(usize, usize) -> f32) -> (Vec<f32>, LogitsGrid) {
        let mut logits = vec![0.0; w * h * 3];
        for y in 0..h {
            for x in 0..w {
                logits[(y * w + x) * 3 + 2] = lead(x, y);
            }
        }
        (logits, LogitsGrid { width: w, height: h, labels: 3 })
    }

    #[test]
    fn road_above_a_hood_is_read_over_its_band_only() {
        // Rule: the road share over a hood is read on the band just above it, in the columns it covers, not inside it nor higher up.
        // 8x20 grid, 2 labels (0 road, 1 other): road in grid rows 16-17 only, the hood rows 18-19 (frame 80x200: tops at 180, band 10 px).
        let grid = LogitsGrid { width: 8, height: 20, labels: 2 };
        let logits: Vec<f32> = (0..8 * 20).flat_map(|i| if (16..18).contains(&(i / 8)) { [1.0, 0.0] } else { [0.0, 1.0] }).collect();
        let hood = HoodMask::from_tops(80, 200, vec![180; 80]);
        assert_eq!(road_share(&logits, grid, &[0], &hood), 0.0);
        assert_eq!(road_share_above(&logits, grid, &[0], &hood), 1.0);
        let half = HoodMask::from_tops(80, 200, (0..80).map(|x| if x < 40 { 180 } else { 200 }).collect());
        assert_eq!(road_share_above(&logits, grid, &[0], &half), 1.0, "columns without a hood have no band");
        assert_eq!(road_share_above(&logits, grid, &[0], &HoodMask::none(80, 200)), 0.0);
    }

    #[test]
    fn the_edge_falls_where_the_ego_lead_crosses_zero() {
        // Rows 6 and 7 of 8 are ego (lead +1), row 5 is not (lead -1): the
        // crossing is halfway between their centres (5.5, 6.5), at 6.0, so 2 rows high.
        let (logits, g) = grid(4, 8, |_, y| if y >= 6 { 1.0 } else { -1.0 });
        assert_eq!(ego_heights(&logits, g, EgoClass::alone(2)), vec![2.0; 4]);
        // A lead of +3 against -1 puts the crossing a quarter of a row above row 6's centre.
        let (logits, g) = grid(1, 8, |_, y| if y >= 6 { 3.0 } else { -1.0 });
        assert!((ego_heights(&logits, g, EgoClass::alone(2))[0] - 2.25).abs() < 1e-6);
    }

    #[test]
    fn only_runs_from_the_bottom_count() {
        // Ego in the middle of the column (a grey truck the model confuses) is no hood.
        let (logits, g) = grid(2, 8, |x, y| if x == 0 && (2..4).contains(&y) { 1.0 } else { -1.0 });
        assert_eq!(ego_heights(&logits, g, EgoClass::alone(2)), vec![0.0, 0.0]);
    }

    #[test]
    fn vehicle_cells_under_the_ego_vehicle_carry_it_and_vehicle_alone_is_none() {
        // Labels: 0 other, 1 vehicle, 2 ego. Column 0: rows 6-7 vehicle,
        // rows 4-5 ego, row 3 vehicle again, the rest other. Column 1: rows
        // 5-7 vehicle only (a truck close ahead). Column 2: ego on 7, other
        // on 6, ego on 5 (the run stops at the other cell).
        let (w, h) = (3, 8);
        // Every cell "other" by 1 unless set; a set class leads by 1.
        let mut logits: Vec<f32> = (0..w * h * 3).map(|i| if i % 3 == 0 { 1.0 } else { 0.0 }).collect();
        let mut set = |x: usize, y: usize, class: usize| logits[(y * w + x) * 3 + class] = 2.0;
        for y in [3, 6, 7] {
            set(0, y, 1);
        }
        for y in [4, 5] {
            set(0, y, 2);
        }
        for y in 5..8 {
            set(1, y, 1);
        }
        set(2, 7, 2);
        set(2, 5, 2);
        let g = LogitsGrid { width: w, height: h, labels: 3 };
        // Column 0: the ego lead crosses zero a third of the way from ego
        // row 4 (+1) to vehicle row 3 (-2), at 4 + 1/6: 3 5/6 rows high.
        // Column 2: between row 7 (+1) and row 6 (-1), 1 row.
        let heights = ego_heights(&logits, g, EgoClass { id: 2, vehicle: Some(1) });
        assert!((heights[0] - (4.0 - 1.0 / 6.0)).abs() < 1e-5 && heights[1..] == [0.0, 1.0], "{heights:?}");
        // Without the vehicle class, column 0's run never starts.
        assert_eq!(ego_heights(&logits, g, EgoClass::alone(2)), vec![0.0, 0.0, 1.0]);
        let labels: Vec<String> = ["road", "Vehicle", "ego_vehicle"].iter().map(|s| s.to_string()).collect();
        assert_eq!(EgoClass::from_labels(&labels), Some(EgoClass { id: 2, vehicle: Some(1) }));
        assert_eq!(EgoClass::from_labels(&labels[..2]), None);
    }

    #[test]
    fn a_burst_of_taller_readings_shorter_than_half_the_window_leaves_the_hood() {
        let mut hood = LearnedHood::default();
        for _ in 0..WINDOW {
            hood.observe(&vec![2.0; 64], 16);
        }
        for _ in 0..WINDOW / 2 {
            hood.observe(&vec![5.0; 64], 16);
        }
        assert_eq!(hood.mask(320, 160).top, vec![140; 320], "the burst is outvoted");
        hood.observe(&vec![5.0; 64], 16);
        assert_eq!(hood.mask(320, 160).top, vec![110; 320], "a reading that lasts half the window is the hood");
        hood.observe(&vec![2.0; 64], 32);
        assert_eq!(hood.mask(320, 160).top, vec![150; 320], "a new grid starts over");
        assert_eq!(hood.frames(), 1);
    }

    #[test]
    fn the_mask_is_the_median_height_at_frame_resolution_and_small_ones_are_none() {
        let mut hood = LearnedHood::default();
        hood.observe(&vec![2.0; 64], 16); // 2 of 16 rows: 1/8 of the frame
        let m = hood.mask(320, 160);
        assert_eq!(m.top, vec![140; 320]);
        assert!((m.coverage() - 0.125).abs() < 1e-6);
        // With two frames, halfway between them.
        hood.observe(&vec![4.0; 64], 16);
        let t = hood.mask(320, 160).top[0];
        assert!(t < 140 && t > 120, "{t}");
        // Under 1% of the frame: none.
        let mut tiny = LearnedHood::default();
        tiny.observe(&vec![0.1; 64], 16);
        assert!(tiny.mask(320, 160).is_empty());
        let mut stray = LearnedHood::default();
        let mut few = vec![0.0; 64];
        few[3] = 1.0; // one column's stray cell, which the median across columns removes
        stray.observe(&few, 16);
        assert!(stray.mask(320, 160).is_empty());
    }

    #[test]
    fn ego_read_outside_the_hood_goes_to_its_next_class() {
        // 4x4 grid over a 40x40 frame, labels [road, other, ego]: ego in the
        // bottom row, and one stray ego cell at (1, 1) whose next class is road.
        let (mut logits, g) = grid(4, 4, |x, y| if y == 3 || (x, y) == (1, 1) { 4.0 } else { -4.0 });
        let stray = (4 + 1) * 3;
        logits[stray] = 1.0; // road second
        let hood = HoodMask::from_tops(40, 40, vec![30; 40]); // the bottom grid row
        assert_eq!(release_ego_outside(&mut logits, g, 2, &hood), 1);
        let best = |i: usize| (0..3).max_by(|&a, &b| logits[i * 3 + a].total_cmp(&logits[i * 3 + b])).unwrap();
        assert_eq!(best(5), 0, "the stray cell is road");
        assert!((12..16).all(|i| best(i) == 2), "the hood stays ego");
        assert_eq!(release_ego_outside(&mut logits, g, 2, &HoodMask::none(40, 40)), 4, "no hood: no ego anywhere");
    }

    #[test]
    fn a_hood_in_the_corners_alone_is_none() {
        // 64 grid columns over 320 px: 3 of 16 rows high in the outer 16
        // columns on each side (the middle third bare), then in the middle.
        let mut corners = vec![0.0; 64];
        corners[..16].fill(3.0);
        corners[48..].fill(3.0);
        let mut hood = LearnedHood::default();
        hood.observe(&corners, 16);
        assert!(hood.mask(320, 160).is_empty(), "road read as ego under a seam, at the corners");
        let mut middle = vec![0.0; 64];
        middle[20..44].fill(3.0);
        let mut hood = LearnedHood::default();
        hood.observe(&middle, 16);
        let m = hood.mask(320, 160);
        assert!(!m.is_empty() && m.top[160] == 130, "a bonnet's crown, under the middle only");
    }

    #[test]
    fn a_block_rising_over_the_bonnet_edge_is_cut_to_the_edge() {
        // Rule: no column of a learned hood rises over 1.5 times the middle third's median height: a bonnet's edge is a gentle curve, while ego read in the dark road just ahead rose as a block (night.mp4).
        // 64 grid columns over 320 px, 16 rows over 160 px: an edge 2 rows high, with a block 8 rows high over columns 28-35.
        let mut heights = vec![2.0; 64];
        heights[28..36].fill(8.0);
        let mut hood = LearnedHood::default();
        hood.observe(&heights, 16);
        let m = hood.mask(320, 160);
        assert_eq!(*m.top.iter().min().unwrap(), 130, "the block is cut to 3 rows (30 px)");
        assert_eq!(m.top[20], 140, "the edge stays");
        // A curved bonnet, taller in the middle by under 1.5x, is left as it is.
        let curve: Vec<f32> = (0..64).map(|c| 4.0 - (c as f32 - 31.5).abs() / 31.5).collect();
        let mut bonnet = LearnedHood::default();
        bonnet.observe(&curve, 16);
        assert_eq!(*bonnet.mask(320, 160).top.iter().min().unwrap(), 120);
    }

    #[test]
    fn the_model_decides_and_motion_joins_only_where_the_model_sees_no_road() {
        let mut motion_top = vec![8; 10];
        motion_top[0] = 6; // one column where the still region reaches higher
        let motion = HoodMask::from_tops(10, 10, motion_top);
        let learned = HoodMask::from_tops(10, 10, vec![7; 10]);
        let mut union = vec![7; 10];
        union[0] = 6;
        let all = |_: usize| true;
        assert_eq!(merge(&learned, &motion, true, all).top, union);
        assert_eq!(merge(&learned, &motion, false, all).top, vec![7; 10]);
        assert_eq!(merge(&learned, &motion, true, |x| x != 0).top, vec![7; 10], "column 0 adds nothing the model sees as ego");
        let none = |_: usize| false;
        let mut alone = vec![8; 10];
        alone[0] = 7; // 1.5x the middle's 2 rows
        assert_eq!(merge(&HoodMask::none(10, 10), &motion, true, none).top, alone, "a bonnet the model does not know");
        assert!(merge(&HoodMask::none(10, 10), &motion, false, all).is_empty(), "still road is no hood");
    }

    #[test]
    fn ego_under_motion_judges_each_column_on_the_cells_motion_adds_now() {
        // 4x8 grid over a 40x40 frame; P(ego) is high in grid column 1 only.
        let (logits, g) = grid(4, 8, |x, _| if x == 1 { 4.0 } else { -4.0 });
        let learned = HoodMask::from_tops(40, 40, vec![35; 40]); // the bottom grid row
        let mut tops = vec![30; 40]; // the bottom two grid rows ...
        tops[30..].fill(40); // ... and none in grid column 3
        let motion = HoodMask::from_tops(40, 40, tops);
        let mut cells = EgoUnderMotion::default();
        cells.observe(&logits, g, 2, &motion, 0.1);
        assert_eq!(cells.supported_columns(&motion, &learned, 0.2), [false, true, false, false]);
        assert_eq!(cells.supported_columns(&learned, &learned, 0.2), [false; 4], "motion adds nothing");
        // Motion climbs the whole height into cells the model reads as
        // something else: column 1 is judged on all it adds now.
        let (other, _) = grid(4, 8, |_, _| -4.0);
        let taller = HoodMask::from_tops(40, 40, vec![0; 40]);
        cells.observe(&other, g, 2, &taller, 0.1);
        assert_eq!(cells.supported_columns(&taller, &learned, 0.2), [false; 4]);
        assert_eq!(cells.supported_columns(&motion, &learned, 0.2), [false, true, false, false], "its lowest added cell still is ego");
    }

    #[test]
    fn road_share_counts_the_cells_inside_the_hood() {
        // 4x4 grid over a 40x40 frame; the hood is the bottom half; road (label 0) in the bottom row only.
        let grid = LogitsGrid { width: 4, height: 4, labels: 2 };
        let logits: Vec<f32> = (0..16).flat_map(|i| if i / 4 == 3 { [1.0, 0.0] } else { [0.0, 1.0] }).collect();
        let hood = HoodMask::from_tops(40, 40, vec![20; 40]);
        assert_eq!(road_share(&logits, grid, &[0], &hood), 0.5);
        assert_eq!(road_share(&logits, grid, &[0], &HoodMask::none(40, 40)), 0.0);
    }

    #[test]
    fn the_bands_under_and_over_an_edge_read_the_ego_probability() {
        // 2 labels, 1x40 grid over a 10x40 frame: ego (label 1) leads by
        // ln(9) (p = 0.9) from row 30 down, trails by ln(9) (p = 0.1) above.
        let grid = LogitsGrid { width: 1, height: 40, labels: 2 };
        let lead = 9f32.ln();
        let logits: Vec<f32> = (0..40).flat_map(|y| if y >= 30 { [0.0, lead] } else { [0.0, -lead] }).collect();
        let edge = HoodMask::from_tops(10, 40, vec![30; 10]);
        let (below, above) = ego_bands(&logits, grid, 1, &edge);
        assert!((below - 0.9).abs() < 1e-4 && (above - 0.1).abs() < 1e-4, "{below} {above}");
        assert_eq!(ego_bands(&logits, grid, 1, &HoodMask::none(10, 40)), (0.0, 0.0));
    }

    #[test]
    fn what_motion_adds_is_capped_at_the_middles_height() {
        // Rule: the merged hood (motion alone, or motion joined to the model's) has no column taller than 1.5x the median of its middle third; a motion hood with an empty middle third is no hood.
        let (w, h) = (9, 100);
        // Shoulder wedges of 40 rows at the sides over a 4-row bonnet edge.
        let wedges = HoodMask::from_tops(w, h, vec![60, 70, 96, 96, 96, 96, 96, 70, 60]);
        let alone = merge(&HoodMask::none(w, h), &wedges, true, |_| true);
        assert_eq!(alone.top, vec![94, 94, 96, 96, 96, 96, 96, 94, 94], "the sides capped at 1.5 x 4 rows");
        let learned = HoodMask::from_tops(w, h, vec![97, 97, 96, 96, 96, 96, 96, 97, 97]);
        let joined = merge(&learned, &wedges, true, |_| true);
        assert_eq!(joined.top, vec![94, 94, 96, 96, 96, 96, 96, 94, 94]);
        let corners = HoodMask::from_tops(w, h, vec![60, 70, 100, 100, 100, 100, 100, 70, 60]);
        assert!(merge(&HoodMask::none(w, h), &corners, true, |_| true).is_empty());
        // A bonnet that rises to the middle keeps its shape.
        let bonnet = HoodMask::from_tops(w, h, vec![92, 88, 85, 84, 84, 84, 85, 88, 92]);
        assert_eq!(merge(&HoodMask::none(w, h), &bonnet, true, |_| true).top, bonnet.top);
    }

    #[test]
    fn taller_keeps_the_higher_top_per_column() {
        let a = HoodMask::from_tops(4, 10, vec![8, 8, 9, 10]);
        let b = HoodMask::from_tops(4, 10, vec![9, 7, 9, 8]);
        assert_eq!(taller(&a, &b).top, vec![8, 7, 9, 8]);
        assert_eq!(taller(&HoodMask::none(4, 10), &b).top, b.top);
        assert_eq!(taller(&a, &HoodMask::none(4, 10)).top, a.top);
    }

    #[test]
    fn the_class_is_found_by_name() {
        let labels: Vec<String> = ["road", "sky", "Ego_Vehicle"].iter().map(|s| s.to_string()).collect();
        assert_eq!(ego_class_id(&labels), Some(2));
        assert_eq!(ego_class_id(&labels[..2]), None);
    }
}
