//! What one frame cannot tell but a stream of them can: the ego vehicle's
//! hood (still while the scene moves), letterbox and pillarbox bars (flat,
//! dark and unchanging), and masks that do not flicker (logits smoothed over
//! time, restarted at scene cuts and reconnects).
//!
//! One [`StreamTemporal`] per stream. The stream's intake calls
//! [`StreamTemporal::observe`] as each frame enters the ring (in order, on
//! the source's thread, off the workers' path); workers call
//! [`StreamTemporal::filter_logits`] on the logits after inference. Both take
//! a short lock, so several workers can serve one stream.

mod bars;
mod edge;
mod ego;
mod hood;
mod luma;
mod reach;
mod smooth;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

pub use bars::{Bars, BarsEstimator};
pub use edge::StillEdge;
pub use ego::{EGO_CLASS_NAMES, EgoClass, LearnedHood, VEHICLE_CLASS_NAMES, ego_class_id, ego_heights};
pub use hood::{HoodEstimator, HoodMask};
pub use luma::{frame_luma, rgba_luma};
pub use reach::{LogitsGrid, keep_grounded_road};
pub use smooth::{DEFAULT_WEIGHT, LogitSmoother};

use crate::frame::{FrameRef, Segmentation, UNKNOWN};

/// Mean per-pixel luma change between consecutive frames above which the
/// second is a new scene (an edit, a camera switched, a lens covered): a
/// moving dashcam stays well under 20.
const CUT_MOTION: f32 = 40.0;
/// A timestamp gap longer than this (or backwards) means the source
/// restarted: the past no longer predicts the present.
const GAP_NS: u64 = 1_000_000_000;
/// Restart points remembered: frames are observed on arrival, up to a ring's
/// worth ahead of the frame being smoothed, so more than one cut can lie
/// between them; far more than any ring holds.
const MAX_CUTS: usize = 64;

/// Per-stream temporal settings (inert data; see the daemon config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TemporalSettings {
    /// Weight of the newest frame in the logit average, (0, 1]; None = off.
    pub smoothing: Option<f32>,
    /// Estimate the hood and the letterbox/pillarbox bars, keep them out
    /// of road coverage and masks; draw the hood, nothing on the bars.
    pub hood: bool,
    /// Keep only road that a path of road joins to the bottom of the picture
    /// (above the hood): blobs in the sky or on walls go to their next class.
    pub connected_road: bool,
}

impl TemporalSettings {
    pub const OFF: TemporalSettings = TemporalSettings { smoothing: None, hood: false, connected_road: false };
}

/// What the workers learn about a frame before inferring it.
#[derive(Clone, Debug)]
pub struct Observation {
    /// The stream's hood estimate as of this frame (empty when off or unsure).
    pub hood: Arc<HoodMask>,
}

pub struct StreamTemporal {
    settings: TemporalSettings,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    hood: Option<HoodEstimator>,
    bars: Option<BarsEstimator>,
    /// The last hood estimate handed out with the bars in it, and what it
    /// was made from (so a frame whose hood and bars are unchanged shares it).
    merged: Option<(Arc<HoodMask>, Bars, Arc<HoodMask>)>,
    smoother: Option<LogitSmoother>,
    /// Newest frame observed, and its timestamp.
    newest: Option<u64>,
    newest_pts: Option<u64>,
    /// Frames at which smoothing restarts (cuts, gaps, size changes),
    /// ascending. A frame is smoothed within the scene of the last one at or
    /// before it.
    restarts: VecDeque<u64>,
    luma: Vec<u8>,
    /// The model's ego vehicle, averaged over the frames filtered so far,
    /// the newest of them, and its mask at the last frame size asked for.
    learned: LearnedHood,
    learned_newest: Option<u64>,
    learned_mask: Option<Arc<HoodMask>>,
    /// Share of the motion estimate's hood that the model reads as road,
    /// averaged over frames (None before both exist).
    motion_road: Option<f32>,
    /// The same over the band just above it.
    motion_road_above: Option<f32>,
    /// The model's ego probability over the motion estimate's hood, per
    /// cell, averaged over frames.
    motion_ego: ego::EgoUnderMotion,
    /// The persistent edge (a reflective bonnet's), and the model's mean
    /// ego probability under and over it, averaged over frames.
    edge: Option<StillEdge>,
    edge_ego: Option<(f32, f32)>,
    /// The mean height of the edge those averages were taken under (a
    /// share of the frame's height, from the top).
    edge_mean_top: Option<f32>,
}

/// Weight of the newest frame in that average.
const MOTION_ROAD_WEIGHT: f32 = 0.1;
/// The motion estimate joins the model's hood only while the model reads
/// under this share of it as road: a bonnet the model does not know is no
/// road either, while the still, dark road at the bottom of a night clip
/// (which the motion estimate took for a hood) is road to the model.
const MOTION_ROAD_MAX: f32 = 0.2;
/// ... and, where the model sees a hood itself, only in the columns where
/// the model's ego probability over what it adds averages at least this
/// (see [`ego::EgoUnderMotion`]: 0.24-0.50 over pasted real bonnets,
/// 0.09-0.12 over the unlit shoulder of tmo324's night.mp4). At 0.2 a
/// wedge of that shoulder next to the bonnet's left end, where the model
/// gives 0.2-0.3, still joined (up to 84% of the height); 0.3 leaves it out
/// and costs the pasted bonnets of tests/it/real_bonnets.rs 0.002 of mean IoU.
const MOTION_EGO_MIN: f32 = 0.3;
/// The still region joins with between [`MOTION_ROAD_SURE`] and
/// [`MOTION_ROAD_MAX`] of road in it only where the model reads the
/// still region as road at most this share as often as the band just over
/// it: a bonnet stands apart from the road above it. On rainy.mp4 (no
/// bonnet; 2026-12-02) the rain-blurred bottom strip, still and read as
/// road on 16-19% of its cells like 20-24% of the band over it (ratio
/// 0.71-0.95), joined as a hood of 1.1-1.25% on 9 frames. The thin bonnet
/// edge of tmo324's night.mp4 joins at 7-19% road under 13-44% over it
/// (ratio 0.31-0.58).
const MOTION_ROAD_CONTRAST: f32 = 0.67;
/// Under this share of road the still region joins whatever lies over it:
/// the cattle clip's dark bonnet (0-10% road, under a dark band the model
/// reads as road on 1-3% of its cells).
const MOTION_ROAD_SURE: f32 = 0.12;

/// A persistent edge joins the hood only where the model's ego probability
/// under it averages at least this much (against a ratio of two near-zero
/// numbers). Measured with `hood decision` traces (2026-12-01): under DAD
/// 000478's white bonnet 0.22-0.24 (the shipped model) and up to 0.34 (run
/// p64); under the edge a straight road's far shoulder leaves a third of
/// the way up the Udacity clip, 0.014-0.026 against 0.010-0.015 over it.
/// At 0.02 that edge joined in the first half second of a cut of the clip
/// (one reading, 0.0207 against 0.0102) and the hood grew from 6% of the
/// frame to 37%, hiding the road ...
const EDGE_EGO_MIN: f32 = 0.1;
/// ... and this many times what it is over it. Measured on ../shared: 3-6x
/// (11x in a Python prototype) under DAD 000478's white bonnet and 1.7x
/// under DAD 000493's (below the bar: its hood stays the model's); 0.4-1.4x
/// on the edges that rain, a horizon or a guard rail leave on hood-less clips.
const EDGE_EGO_RATIO: f32 = 2.0;
/// An edge whose mean height moves more than this share of the frame's
/// height is another edge, and starts its averages afresh: on road2.mp4 (a
/// phone behind a windscreen) the dashboard's edge was confirmed, then a
/// still edge two thirds of the way down took its place and inherited the
/// confirmation: a hood of 33% of the frame over the road for a second.
const EDGE_MOVED: f32 = 0.05;

/// Where the model has a hood of its own, an edge hood may be at most this
/// many times its size: road2.mp4 (a phone behind a windscreen) confirmed a
/// still edge two thirds of the way down, 0.26 ego under it against 0.08
/// over, a hood of 33% of the frame over the road, while the model's own
/// hood, the dashboard, was 3.5%. The edge exists for bonnets the model
/// does not see (DAD 000478's white one, learned hood empty).
const EDGE_OVER_LEARNED: f32 = 2.0;

/// Whether a confirmed edge's hood agrees with the model's own hood: none,
/// or one at least 1/[`EDGE_OVER_LEARNED`] of the edge's size.
fn edge_fits_the_model(edge: &HoodMask, learned: &HoodMask) -> bool {
    learned.is_empty() || edge.coverage() <= EDGE_OVER_LEARNED * learned.coverage()
}

/// What [`StreamTemporal::filter_logits`] made of one frame.
#[derive(Clone, Debug)]
pub struct Filtered {
    /// Share of the logits grid whose road the grounded-road rule cut.
    pub road_cut: f32,
    /// The frame's hood with the model's ego vehicle in it (None when the
    /// model has no ego class or the hood is off: the observed one stands).
    pub hood: Option<Arc<HoodMask>>,
}

impl StreamTemporal {
    pub fn new(settings: TemporalSettings) -> Self {
        let smoother = settings.smoothing.map(LogitSmoother::new);
        StreamTemporal { settings, state: Mutex::new(State { smoother, ..State::default() }) }
    }

    pub fn settings(&self) -> TemporalSettings {
        self.settings
    }

    pub fn smooths(&self) -> bool {
        self.settings.smoothing.is_some()
    }

    /// Whether [`StreamTemporal::filter_logits`] does anything for a model
    /// whose ego-vehicle class is `ego` (the engine then hands the logits to
    /// the host).
    pub fn filters_logits(&self, ego: Option<EgoClass>) -> bool {
        self.smooths() || self.settings.connected_road || (self.settings.hood && ego.is_some())
    }

    /// One frame's averaged logits `grid`, before they become classes:
    /// smoothed over time; the model's ego vehicle (class `ego`) read off
    /// them into the stream's learned hood, which joins the observed one
    /// (`unseen`: motion hood and bars), and ego read outside that hood
    /// handed to its next class; then cut to the road that reaches
    /// the car, whose picture ends at that hood. `Filtered::road_cut` is the
    /// share of the logits grid whose road was cut (0 with the cut off): an
    /// operator's sign that this camera or light confuses the model.
    pub fn filter_logits(&self, seq: u64, logits: &mut [f32], grid: LogitsGrid, road: &[usize], ego: Option<EgoClass>, unseen: &HoodMask) -> Filtered {
        if self.smooths() {
            self.smooth(seq, logits);
        }
        let hood = match ego {
            Some(ego) if self.settings.hood => {
                let hood = self.learn_hood(seq, logits, grid, road, ego, unseen);
                ego::release_ego_outside(logits, grid, ego.id, &hood);
                Some(hood)
            }
            _ => None,
        };
        if !self.settings.connected_road {
            return Filtered { road_cut: 0.0, hood };
        }
        let cut = reach::keep_grounded_road(logits, grid, road, hood.as_deref().unwrap_or(unseen));
        let cells = grid.width * grid.height;
        Filtered { road_cut: if cells == 0 { 0.0 } else { cut as f32 / cells as f32 }, hood }
    }

    /// Folds frame `seq`'s ego vehicle into the learned hood (frames older
    /// than one already folded in only read it) and returns the frame's hood.
    fn learn_hood(&self, seq: u64, logits: &[f32], grid: LogitsGrid, road: &[usize], ego_class: EgoClass, unseen: &HoodMask) -> Arc<HoodMask> {
        let heights = ego::ego_heights(logits, grid, ego_class);
        let ego = ego_class.id;
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let newer = st.learned_newest.is_none_or(|n| seq > n);
        if newer {
            st.learned.observe(&heights, grid.height);
            st.learned_newest = Some(seq);
            st.learned_mask = None;
        }
        let motion = st.motion_hood(unseen.width, unseen.height);
        // The second opinion: how much of the still region at the bottom
        // the model reads as road, averaged over frames.
        if newer && !motion.is_empty() {
            let share = ego::road_share(logits, grid, road, &motion);
            st.motion_road = Some(st.motion_road.map_or(share, |r| r + MOTION_ROAD_WEIGHT * (share - r)));
            let above = ego::road_share_above(logits, grid, road, &motion);
            st.motion_road_above = Some(st.motion_road_above.map_or(above, |r| r + MOTION_ROAD_WEIGHT * (above - r)));
            st.motion_ego.observe(logits, grid, ego, &motion, MOTION_ROAD_WEIGHT);
        }
        // The third: whether the model sees more ego vehicle under the
        // persistent edge than over it.
        if newer && let Some(edge) = st.edge_candidate(unseen.width, unseen.height) {
            let mean_top = edge.top.iter().map(|&t| t as f32).sum::<f32>() / (edge.top.len() * edge.height).max(1) as f32;
            if st.edge_mean_top.is_some_and(|t| (t - mean_top).abs() > EDGE_MOVED) {
                st.edge_ego = None;
            }
            st.edge_mean_top = Some(mean_top);
            let (below, above) = ego::ego_bands(logits, grid, ego, &edge);
            let w = MOTION_ROAD_WEIGHT;
            let was = st.edge_confirmed();
            st.edge_ego = Some(st.edge_ego.map_or((below, above), |(b, a)| (b + w * (below - b), a + w * (above - a))));
            if st.edge_confirmed() != was
                && let Some((below, above)) = st.edge_ego
            {
                let rows = edge.top.iter().min().copied().unwrap_or(0)..edge.top.iter().max().copied().unwrap_or(0) + 1;
                tracing::debug!(?rows, p_ego_under = below, p_ego_over = above, joins = !was, "the persistent edge's hood");
            }
        }
        let hood = st.combined(motion.clone());
        if newer && tracing::enabled!(tracing::Level::TRACE) {
            // What each opinion held when the frame's hood was decided: for
            // reading why a hood came or went (ROADSEG_LOG=roadseg=trace).
            let learned = st.learned_mask_for(motion.width, motion.height);
            let supported = st.motion_ego.supported_columns(&motion, &learned, MOTION_EGO_MIN);
            let edge = st.edge_candidate(motion.width, motion.height);
            let (edge_under, edge_over) = st.edge_ego.unwrap_or((-1.0, -1.0));
            tracing::trace!(
                seq,
                frame_ego = heights.iter().sum::<f32>() / (heights.len() * grid.height).max(1) as f32,
                learned = learned.coverage(),
                motion = motion.coverage(),
                motion_road = st.motion_road.unwrap_or(-1.0),
                motion_road_above = st.motion_road_above.unwrap_or(-1.0),
                motion_joins = st.motion_agrees(),
                motion_columns = supported.iter().filter(|&&s| s).count(),
                edge = edge.as_ref().map_or(0.0, |e| e.coverage()),
                edge_road = edge.as_ref().map_or(-1.0, |e| ego::road_share(logits, grid, road, e)),
                edge_under,
                edge_over,
                edge_joins = st.edge_confirmed(),
                hood = hood.coverage(),
                "hood decision"
            );
        }
        hood
    }

    /// The latest hood estimate, the model's ego vehicle where it has one
    /// (None when off or before the first frame).
    pub fn hood(&self) -> Option<Arc<HoodMask>> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let hood = st.hood.as_ref().filter(|_| self.settings.hood).map(HoodEstimator::estimate)?;
        let bars = st.bars.as_ref().map_or(Bars::NONE, BarsEstimator::bars);
        let motion = if bars.is_none() { hood } else { Arc::new(hood.with_bars(bars)) };
        if st.learned.frames() == 0 {
            return Some(motion);
        }
        Some(st.combined(motion))
    }

    /// Feeds frame `seq` to the hood estimator and the cut detector. Frames
    /// older than one already seen change nothing.
    pub fn observe(&self, seq: u64, pts_ns: Option<u64>, frame: &FrameRef<'_>) -> Observation {
        let (width, height) = (frame.width, frame.height);
        if self.settings == TemporalSettings::OFF {
            return Observation { hood: Arc::new(HoodMask::none(width, height)) };
        }
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let st = &mut *st;
        let late = st.newest.is_some_and(|n| seq <= n);
        let resized = st.hood.as_ref().is_none_or(|h| h.size() != (width, height));
        if resized {
            st.hood = Some(HoodEstimator::new(width, height));
            st.bars = Some(BarsEstimator::new(width, height));
            st.edge = Some(StillEdge::new(width, height));
            st.edge_ego = None;
            st.edge_mean_top = None;
            st.merged = None;
        }
        let estimator = st.hood.as_mut().expect("made above");
        if !late {
            let gap = match (st.newest_pts, pts_ns) {
                (Some(prev), Some(now)) => now < prev || now - prev > GAP_NS,
                _ => false,
            };
            let edge = st.edge.as_mut().expect("made with the hood estimator");
            let interval_ns = match (st.newest_pts, pts_ns) {
                (Some(prev), Some(now)) if !gap => Some(now.saturating_sub(prev)),
                _ => None,
            };
            if gap {
                estimator.restart();
                edge.restart();
            }
            frame_luma(frame, &mut st.luma);
            if self.settings.hood {
                st.bars.as_mut().expect("made with the hood estimator").observe(&st.luma);
                edge.observe(&st.luma, interval_ns);
            }
            // Last: it keeps this frame's luma, handing an older buffer back.
            let motion = estimator.observe(&mut st.luma);
            if resized || gap || motion.is_some_and(|m| m > CUT_MOTION) {
                if st.restarts.len() == MAX_CUTS {
                    st.restarts.pop_front();
                }
                st.restarts.push_back(seq);
            }
            st.newest = Some(seq);
            st.newest_pts = pts_ns.or(st.newest_pts);
        }
        let hood = if self.settings.hood {
            let hood = estimator.estimate();
            let motion = st.with_bars(hood);
            if st.learned.frames() > 0 {
                // Frames entering now carry what the model has seen so far
                // (an annotating GPU draws the hood before inferring).
                st.combined(motion)
            } else {
                motion
            }
        } else {
            Arc::new(HoodMask::none(width, height))
        };
        Observation { hood }
    }

    /// Replaces frame `seq`'s logits with their temporal average (no-op
    /// when smoothing is off).
    pub fn smooth(&self, seq: u64, logits: &mut [f32]) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let st = &mut *st;
        let Some(smoother) = st.smoother.as_mut() else { return };
        let scene_start = st.restarts.iter().rev().find(|&&r| r <= seq).copied().unwrap_or(0);
        let next_scene = st.restarts.iter().find(|&&r| r > seq).copied();
        let newest = smoother.newest();
        if next_scene.is_some_and(|next| newest.is_some_and(|n| n >= next)) {
            return; // a late frame from before a cut: the state is a later scene's
        }
        if newest.is_none_or(|n| n < scene_start) {
            smoother.reset();
        }
        smoother.apply(seq, logits);
    }
}

impl State {
    /// Whether the motion estimate's hood joins the model's (see [`motion_joins`]).
    fn motion_agrees(&self) -> bool {
        self.motion_road.is_some_and(|inside| motion_joins(inside, self.motion_road_above.unwrap_or(0.0)))
    }

    /// The model's hood joined by the motion estimate (`motion`, with the
    /// bars) where it agrees, and by the persistent edge where the model
    /// confirms it.
    fn combined(&mut self, motion: Arc<HoodMask>) -> Arc<HoodMask> {
        let learned = self.learned_mask_for(motion.width, motion.height);
        let columns = self.motion_ego.supported_columns(&motion, &learned, MOTION_EGO_MIN);
        let supported = |x: usize| columns.get(x * columns.len() / motion.width.max(1)).copied().unwrap_or(false);
        let hood = ego::merge(&learned, &motion, self.motion_agrees(), supported);
        let confirmed = self.edge_confirmed();
        match self.edge_candidate(motion.width, motion.height).filter(|e| confirmed && edge_fits_the_model(e, &learned)) {
            Some(edge) => Arc::new(ego::taller(&hood, &edge)),
            None => Arc::new(hood),
        }
    }

    /// Whether the model sees enough more ego vehicle under the persistent edge than over it.
    fn edge_confirmed(&self) -> bool {
        self.edge_ego.is_some_and(|(below, above)| below >= EDGE_EGO_MIN && below >= EDGE_EGO_RATIO * above)
    }

    /// The persistent edge's hood over a `width` x `height` frame, if any.
    fn edge_candidate(&self, width: usize, height: usize) -> Option<Arc<HoodMask>> {
        self.edge.as_ref().filter(|e| e.size() == (width, height)).and_then(StillEdge::candidate)
    }

    /// The motion estimate with the bars in it (empty before one exists).
    fn motion_hood(&mut self, width: usize, height: usize) -> Arc<HoodMask> {
        match self.hood.as_ref().map(HoodEstimator::estimate) {
            Some(h) if (h.width, h.height) == (width, height) => self.with_bars(h),
            _ => Arc::new(HoodMask::none(width, height)),
        }
    }

    /// The learned hood over a `width` x `height` frame, made once per change.
    fn learned_mask_for(&mut self, width: usize, height: usize) -> Arc<HoodMask> {
        if let Some(m) = &self.learned_mask
            && (m.width, m.height) == (width, height)
        {
            return m.clone();
        }
        let m = Arc::new(self.learned.mask(width, height));
        self.learned_mask = Some(m.clone());
        m
    }

    /// `hood` with the current bars in it; unchanged inputs share one mask.
    fn with_bars(&mut self, hood: Arc<HoodMask>) -> Arc<HoodMask> {
        let bars = self.bars.as_ref().map_or(Bars::NONE, BarsEstimator::bars);
        if bars.is_none() {
            return hood;
        }
        if let Some((from, b, merged)) = &self.merged
            && Arc::ptr_eq(from, &hood)
            && *b == bars
        {
            return merged.clone();
        }
        let merged = Arc::new(hood.with_bars(bars));
        self.merged = Some((hood, bars, merged.clone()));
        merged
    }
}

/// Whether the motion estimate's still region joins the hood, given the
/// model's averaged road share inside it and over the band just above it:
/// next to no road, or clearly less road than over it ([`MOTION_ROAD_MAX`],
/// [`MOTION_ROAD_SURE`], [`MOTION_ROAD_CONTRAST`]).
fn motion_joins(inside: f32, above: f32) -> bool {
    inside < MOTION_ROAD_MAX && (inside < MOTION_ROAD_SURE || inside <= MOTION_ROAD_CONTRAST * above)
}

/// Road coverage of the scene: the share of the picture (the frame less its
/// letterbox/pillarbox bars) that is not hood and is confidently classed as
/// road (the hood is the car, not the road ahead). Also returns the hood's
/// share of the frame.
pub fn scene_coverage(seg: &Segmentation, hood: &HoodMask, road_classes: &[usize]) -> (f32, f32) {
    if hood.width != seg.width || hood.height != seg.height || (hood.is_empty() && hood.bars.is_none()) {
        return (seg.road_coverage, 0.0);
    }
    let is_road = |c: u8| c != UNKNOWN && road_classes.contains(&(c as usize));
    if !hood.bars.is_none() {
        let (x0, y0, x1, y1) = hood.bars.picture(seg.width, seg.height);
        let (mut scene, mut road) = (0usize, 0usize);
        for y in y0..y1 {
            for x in x0..x1 {
                if !hood.contains(x, y) {
                    scene += 1;
                    road += usize::from(is_road(seg.classes[y * seg.width + x]));
                }
            }
        }
        return (road as f32 / scene.max(1) as f32, hood.coverage());
    }
    let pixels = seg.width * seg.height;
    let road_total = (seg.road_coverage as f64 * pixels as f64).round() as usize;
    let mut road_in_hood = 0usize;
    hood.for_each_pixel(|i| road_in_hood += usize::from(is_road(seg.classes[i])));
    let scene = (pixels - hood.pixels()).max(1);
    (road_total.saturating_sub(road_in_hood) as f32 / scene as f32, hood.coverage())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_still_region_read_like_the_road_above_it_is_no_hood() {
        // Rule: the motion estimate joins where the model reads next to no road in it, or clearly less than over it; a still strip read as road about as often as the road above it (rain-blurred, rainy.mp4) does not.
        assert!(motion_joins(0.0, 0.0), "a dark bonnet under dark ground");
        assert!(motion_joins(0.10, 0.02), "next to no road joins whatever lies over it");
        assert!(motion_joins(0.18, 0.40), "night.mp4's thin bonnet edge: less than half the road over it");
        assert!(!motion_joins(0.17, 0.22), "rainy.mp4's still strip: as much road as over it");
        assert!(!motion_joins(0.25, 0.90), "road on a quarter of it is road");
    }

    /// Observes an 8x8 frame of one grey `value` at `pts_ns`, then smooths
    /// its one-value logits; returns the smoothed value.
    fn step(t: &StreamTemporal, seq: u64, pts_ns: u64, value: u8, logit: f32) -> f32 {
        let pixels = vec![value; 8 * 8 * 4];
        t.observe(seq, Some(pts_ns), &FrameRef::packed(&pixels, 8, 8, crate::frame::PixelFormat::Rgba));
        let mut logits = [logit];
        t.smooth(seq, &mut logits);
        logits[0]
    }

    #[test]
    fn a_model_with_an_ego_class_gives_the_hood_from_the_first_frame_and_later_frames_carry_it() {
        // Rule: with the hood on and an ego class, the frame's hood is the model's ego vehicle at once (no motion needed), the motion estimate's bars stay, and frames observed afterwards carry the learned hood.
        let grid = LogitsGrid { width: 16, height: 8, labels: 2 };
        // Label 1 is the ego vehicle in the bottom two rows.
        let logits: Vec<f32> = (0..16 * 8).flat_map(|i| if i / 16 >= 6 { [0.0, 1.0] } else { [1.0, 0.0] }).collect();
        let t = StreamTemporal::new(TemporalSettings { smoothing: None, hood: true, connected_road: true });
        assert!(t.filters_logits(Some(EgoClass::alone(1))) && !StreamTemporal::new(TemporalSettings { smoothing: None, hood: true, connected_road: false }).filters_logits(None));
        let pixels = vec![90u8; 64 * 32 * 4];
        let frame = FrameRef::packed(&pixels, 64, 32, crate::frame::PixelFormat::Rgba);
        let first = t.observe(0, Some(0), &frame);
        assert!(first.hood.is_empty(), "nothing known before the first inference");
        let mut l = logits.clone();
        let hood = t.filter_logits(0, &mut l, grid, &[0], Some(EgoClass::alone(1)), &first.hood).hood.expect("a hood from the model");
        assert_eq!(hood.top, vec![24; 64], "2 of 8 grid rows: the bottom quarter of the 32 rows");
        let next = t.observe(1, Some(40_000_000), &frame);
        assert_eq!(next.hood.top, vec![24; 64]);
        // Without an ego class the observed hood stands.
        let plain = StreamTemporal::new(TemporalSettings { smoothing: None, hood: true, connected_road: true });
        let mut l = logits.clone();
        assert!(plain.filter_logits(0, &mut l, grid, &[0], None, &first.hood).hood.is_none());
    }

    /// RGBA frame `t` of a drive with a reflective bonnet from row `edge` down.
    fn reflective_bonnet_frame(w: usize, h: usize, t: usize, edge: usize) -> Vec<u8> {
        edge::drive_luma(w, h, t, Some(edge)).into_iter().flat_map(|v| [v, v, v, 255]).collect()
    }

    #[test]
    fn a_persistent_edge_joins_the_hood_only_where_the_model_sees_more_ego_under_it() {
        // Rule: a reflective bonnet (as busy as the road, so not still) whose edge stays put is hood once the model's ego probability under the edge is clearly above that over it, though the model never makes ego its best class there; the same edge with a flat ego probability is no hood, and neither is one under which the model's ego probability is a near-zero number (however many times the one over it).
        let (w, h) = (320, 180);
        let grid = LogitsGrid { width: 32, height: 18, labels: 2 };
        // Label 1 is the ego vehicle: p = `under` from grid row 16 down (the edge, 162 of 180 rows), `over` above.
        let logit = |p: f32| -((1.0 - p) / p).ln();
        let logits_with = |under: f32, over: f32| -> Vec<f32> {
            (0..32 * 18).flat_map(|i| [0.0, if i / 32 >= 16 { logit(under) } else { logit(over) }]).collect()
        };
        // DAD 000478's white bonnet: 0.22-0.34 under, 0.01-0.02 over; the Udacity clip's far shoulder: 0.02 against 0.01.
        for (under, over, want_hood) in [(0.25, 0.01, true), (0.25, 0.2, false), (0.03, 0.01, false)] {
            let t = StreamTemporal::new(TemporalSettings { smoothing: None, hood: true, connected_road: false });
            for seq in 0..20u64 {
                let pixels = reflective_bonnet_frame(w, h, seq as usize, 162);
                let frame = FrameRef::packed(&pixels, w, h, crate::frame::PixelFormat::Rgba);
                let seen = t.observe(seq, Some(seq * 40_000_000), &frame);
                let mut l = logits_with(under, over);
                t.filter_logits(seq, &mut l, grid, &[0], Some(EgoClass::alone(1)), &seen.hood);
            }
            let hood = t.hood().expect("hood on");
            if want_hood {
                assert!(hood.top.iter().all(|&top| top.abs_diff(162) <= 1), "ego {under} under the edge, {over} over: {:?}", &hood.top[..8]);
            } else {
                assert!(hood.is_empty(), "ego {under} under the edge, {over} over: {:?}", &hood.top[..8]);
            }
        }
    }

    #[test]
    fn an_edge_far_taller_than_the_models_own_hood_is_not_taken() {
        // Rule: a confirmed edge joins the hood when the model has no hood of its own, or one at least half the edge's size; an edge over twice the model's hood (a still line across the road ahead) does not.
        let (w, h) = (100, 100);
        let learned = HoodMask::from_tops(w, h, vec![96; w]);
        assert!(edge_fits_the_model(&HoodMask::from_tops(w, h, vec![93; w]), &learned), "7% against 4%");
        assert!(!edge_fits_the_model(&HoodMask::from_tops(w, h, vec![67; w]), &learned), "33% against 4%");
        assert!(edge_fits_the_model(&HoodMask::from_tops(w, h, vec![67; w]), &HoodMask::none(w, h)), "the model sees no hood: the edge decides");
    }

    #[test]
    fn an_edge_that_moves_must_earn_the_hood_afresh() {
        // Rule: once a persistent edge is confirmed as hood, a still edge at another height (more than 5% of the frame away) that takes its place is not hood on the old edge's evidence: the model must see more ego under it too.
        let (w, h) = (320, 180);
        let grid = LogitsGrid { width: 32, height: 18, labels: 2 };
        let logit = |p: f32| -((1.0 - p) / p).ln();
        // The model's ego (label 1): 0.25 under grid row 16 (the real bonnet, 162 of 180 rows), 0.01 above.
        let logits: Vec<f32> = (0..32 * 18).flat_map(|i| [0.0, if i / 32 >= 16 { logit(0.25) } else { logit(0.01) }]).collect();
        let t = StreamTemporal::new(TemporalSettings { smoothing: None, hood: true, connected_road: false });
        let run = |seqs: std::ops::Range<u64>, edge_row: usize| {
            for seq in seqs {
                let pixels = reflective_bonnet_frame(w, h, seq as usize, edge_row);
                let frame = FrameRef::packed(&pixels, w, h, crate::frame::PixelFormat::Rgba);
                let seen = t.observe(seq, Some(seq * 40_000_000), &frame);
                let mut l = logits.clone();
                t.filter_logits(seq, &mut l, grid, &[0], Some(EgoClass::alone(1)), &seen.hood);
            }
            t.hood().expect("hood on")
        };
        let hood = run(0..20, 162);
        assert!(hood.top.iter().all(|&top| top.abs_diff(162) <= 1), "the bonnet's edge first: {:?}", &hood.top[..8]);
        let hood = run(20..80, 120);
        assert!(hood.top.iter().all(|&top| top >= 150), "an edge at row 120 with no ego under it is not hood: {:?}", &hood.top[..8]);
    }

    #[test]
    fn filter_logits_reports_the_share_of_road_it_cut() {
        // Rule: the filter returns the share of the logits grid whose road it handed to another class, 0 with the grounded-road rule off.
        let grid = LogitsGrid { width: 4, height: 4, labels: 2 };
        // Road (label 1) in the bottom two rows and one island cell in the top row.
        let road_rows = |x: usize, y: usize| y >= 2 || (x, y) == (1, 0);
        let logits: Vec<f32> = (0..16).flat_map(|i| if road_rows(i % 4, i / 4) { [0.0, 1.0] } else { [1.0, 0.0] }).collect();
        let unseen = HoodMask::none(16, 16);
        for (connected_road, want) in [(true, 1.0 / 16.0), (false, 0.0)] {
            let t = StreamTemporal::new(TemporalSettings { smoothing: None, hood: false, connected_road });
            let mut filtered = logits.clone();
            assert_eq!(t.filter_logits(0, &mut filtered, grid, &[1], None, &unseen).road_cut, want, "connected_road {connected_road}");
            assert_eq!(filtered[3] > filtered[2], !connected_road, "the island is cut only with the rule on");
        }
    }

    #[test]
    fn cut_restarts_smoothing() {
        let t = StreamTemporal::new(TemporalSettings { smoothing: Some(0.5), hood: false, connected_road: false });
        step(&t, 0, 0, 10, 4.0);
        assert_eq!(step(&t, 1, 40_000_000, 12, 0.0), 2.0);
        assert_eq!(step(&t, 2, 80_000_000, 200, 0.0), 0.0, "a cut starts the average afresh");
    }

    #[test]
    fn cuts_observed_ahead_of_smoothing_each_restart_it() {
        // Rule: frames are observed on arrival, up to a ring ahead of the frame being smoothed; every cut among them restarts the average at its own frame, not only the latest.
        let t = StreamTemporal::new(TemporalSettings { smoothing: Some(0.5), hood: false, connected_road: false });
        // Cuts at frames 2 (12 -> 200) and 4 (202 -> 20).
        for (seq, value) in [10u8, 12, 200, 202, 20, 22].into_iter().enumerate() {
            let pixels = vec![value; 8 * 8 * 4];
            t.observe(seq as u64, Some(seq as u64 * 40_000_000), &FrameRef::packed(&pixels, 8, 8, crate::frame::PixelFormat::Rgba));
        }
        let smoothed: Vec<f32> = [4.0, 0.0, 4.0, 0.0, 4.0, 0.0]
            .into_iter()
            .enumerate()
            .map(|(seq, logit)| {
                let mut logits = [logit];
                t.smooth(seq as u64, &mut logits);
                logits[0]
            })
            .collect();
        assert_eq!(smoothed, [4.0, 2.0, 4.0, 2.0, 4.0, 2.0]);
    }

    #[test]
    fn timestamp_gap_restarts_smoothing() {
        let t = StreamTemporal::new(TemporalSettings { smoothing: Some(0.5), hood: true, connected_road: false });
        step(&t, 0, 0, 10, 4.0);
        assert_eq!(step(&t, 1, 5_000_000_000, 10, 0.0), 0.0);
    }

    #[test]
    fn coverage_leaves_the_hood_out() {
        let (w, h) = (4, 4);
        // Bottom row road, the rest not; the bottom row is hood.
        let classes: Vec<u8> = (0..w * h).map(|i| u8::from(i >= 12)).collect();
        let seg = Segmentation { width: w, height: h, classes, confidence: vec![1.0; 16], road_coverage: 0.25, mean_confidence: 1.0, brightened: None };
        let hood = HoodMask::from_tops(w, h, vec![3; 4]);
        let (road, hood_share) = scene_coverage(&seg, &hood, &[1]);
        assert_eq!((road, hood_share), (0.0, 0.25));
        let (road, hood_share) = scene_coverage(&seg, &HoodMask::none(w, h), &[1]);
        assert_eq!((road, hood_share), (0.25, 0.0));
    }

    #[test]
    fn coverage_leaves_bars_out_and_a_bar_is_never_a_hood() {
        // 8x4: columns 0 and 7 are pillarbox bars (classed road, as a model may
        // call black), the picture's bottom row is hood, the rest of its
        // bottom-but-one row is road.
        let (w, h) = (8, 4);
        let classes: Vec<u8> = (0..w * h).map(|i| u8::from(i % w == 0 || i % w == 7 || i / w == 2)).collect();
        let road = classes.iter().filter(|&&c| c == 1).count() as f32 / (w * h) as f32;
        let seg = Segmentation { width: w, height: h, classes, confidence: vec![1.0; w * h], road_coverage: road, mean_confidence: 1.0, brightened: None };
        let bars = Bars { left: 1, right: 1, ..Bars::NONE };
        let hood = HoodMask::from_tops(w, h, vec![3; w]).with_bars(bars);
        let (road, hood_share) = scene_coverage(&seg, &hood, &[1]);
        assert_eq!(road, 6.0 / 18.0, "picture 6x4 less its hood row: 18 pixels, 6 road");
        assert_eq!(hood_share, 0.25);
        let mut unseen = Vec::new();
        hood.for_each_unseen_pixel(|i| unseen.push(i));
        unseen.sort();
        let expected: Vec<usize> = (0..w * h).filter(|&i| i % w == 0 || i % w == 7 || i / w == 3).collect();
        assert_eq!(unseen, expected, "bars and hood, each pixel once");
        // A still bottom letterbox bar looks like a hood to the hood
        // estimator; inside the bar it is no hood.
        let letterbox = Bars { bottom: 1, ..Bars::NONE };
        assert!(HoodMask::from_tops(w, h, vec![3; w]).with_bars(letterbox).is_empty());
    }
}
