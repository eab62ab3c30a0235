//! The per-frame engine of one worker, as [`Engine`] (any backend, one model
//! instance per scale, logits averaged at the base resolution), and the
//! errors, options and timings that go with it. The frame path itself is in
//! `frame_path.rs`, batches in `batch.rs`.

use std::sync::Arc;
use std::time::Instant;

use super::state::{Batches, FrameSlot};
use crate::backend::cpu::resize_host;
use crate::backend::{Backend, BackendError, ResizeDims};
use crate::frame::{FrameError, FrameOverlay, Segmentation};
use crate::model::{ModelError, Segformer, SegformerWeights};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("invalid engine options: {0}")]
    Options(String),
}

/// Scale sets offered by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// One pass at the configured size.
    #[default]
    Fast,
    /// Passes at 0.9x, 1x and 1.1x the size, logits averaged.
    Accurate,
}

impl Preset {
    pub fn scales(self) -> Vec<f32> {
        match self {
            Preset::Fast => vec![1.0],
            Preset::Accurate => vec![0.9, 1.0, 1.1],
        }
    }
}

/// Default [`EngineOptions::confidence_threshold`]: pixels whose top class
/// probability is below it are unknown, not road. 0.4, not 0.5 (the first
/// config's guess, never measured): on the shipped model at 0.5 the smooth
/// grey asphalt of a shaken highway frame (highway.mp4 in ../shared) that
/// the model reads as road at 0.38-0.48 came out as holes, and such frames
/// flicker. Road IoU as shown (unknown = not road), 2026-12-02, 0.5 -> 0.4:
/// CamVid val 0.9526 -> 0.9525, held-out IDD 0.8381 -> 0.8453, unseen
/// polygons hood out 0.8684 -> 0.8692 (hood in 0.8414 -> 0.8376: stills'
/// dashboards); highway.mp4 flicker 2.77% -> 1.85%. 0.3 loses CamVid val
/// (0.9519) and the unseen frames (0.8329 / 0.8685) for IDD's 0.0004.
pub const DEFAULT_CONFIDENCE_THRESHOLD: f32 = 0.4;

#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Model input width and height (the base scale).
    pub width: usize,
    pub height: usize,
    pub scales: Vec<f32>,
    pub road_classes: Vec<usize>,
    /// The model's ego-vehicle class, when it has one (found by name:
    /// `temporal::EGO_CLASS_NAMES`, with its vehicle class:
    /// `temporal::VEHICLE_CLASS_NAMES`): the stream's hood is then learnt from it.
    pub ego_class: Option<crate::temporal::EgoClass>,
    pub confidence_threshold: f32,
    /// Dark frames brightened before inference (`crate::exposure`).
    pub exposure: crate::exposure::Exposure,
    /// Fill [`Segmentation::confidence`] per pixel. Nothing the daemon or the
    /// CLI publishes reads it (the mean is always computed), and on a GPU it
    /// is the largest copy back, so the commands leave it off.
    pub pixel_confidence: bool,
}

impl EngineOptions {
    pub fn validate(&self, labels: usize) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::Options(m));
        if self.width < 32 || self.height < 32 {
            return bad(format!("input size {}x{} is below 32x32", self.width, self.height));
        }
        if self.scales.is_empty() || self.scales.iter().any(|s| !(0.25..=4.0).contains(s)) {
            return bad(format!("scales {:?} must be non-empty and within 0.25..=4", self.scales));
        }
        if let Some(c) = self.road_classes.iter().find(|&&c| c >= labels) {
            return bad(format!("road class {c} is not a class of this model ({labels} labels)"));
        }
        if !(0.0..=1.0).contains(&self.confidence_threshold) {
            return bad(format!("confidence threshold {} is outside 0..=1", self.confidence_threshold));
        }
        self.exposure.validate().or_else(bad)?;
        Ok(())
    }
}

/// Input size of a scaled pass: rounded to a multiple of 32 (as the encoder's
/// total stride), never below 32.
pub fn scaled_size(width: usize, height: usize, scale: f32) -> (usize, usize) {
    if scale == 1.0 {
        return (width, height);
    }
    let round = |v: usize| (((v as f32 * scale) / 32.0).round() as usize).max(1) * 32;
    (round(width), round(height))
}

/// Rewrites a frame's logits in place between inference and postprocessing.
pub type LogitsFilter<'a> = &'a mut dyn FnMut(&mut [f32]);

/// Time spent in each part of the last frame, in milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameTimings {
    pub preprocess_ms: f64,
    pub inference_ms: f64,
    pub postprocess_ms: f64,
    /// Time the GPU spent in the frame's forwards, from CUDA events on the
    /// worker's stream (None on the CPU).
    pub gpu_ms: Option<f64>,
}

pub struct Engine<B: Backend> {
    pub(super) backend: Arc<B>,
    pub(super) options: EngineOptions,
    /// One model instance per scale, the base scale first.
    pub(super) passes: Vec<Segformer<B>>,
    /// Indices of the passes that run (all but an unrequested base pass).
    pub(super) active: Vec<usize>,
    /// Sum of the active passes' logits at the base resolution `[lh, lw,
    /// labels]`, on the backend; None when the base pass alone runs (its
    /// logits are the result).
    pub(super) summed: Option<B::Tensor>,
    /// Averaged logits `[lh, lw, labels]` on the host, when asked for.
    pub(super) logits: Vec<f32>,
    /// Keep every frame's averaged logits on the host (`logits()`).
    pub(super) keep_logits: bool,
    /// Frame slots, each with its recordings, and the clock of their use.
    pub(super) slots: Vec<FrameSlot<B>>,
    pub(super) slot_clock: u64,
    /// `run_normalized`'s host staging of one pass input `[h, w, 3]`, and its recording.
    normalized_input: Vec<f32>,
    normalized: B::Recording,
    pub(super) segmentation: Segmentation,
    pub(super) timings: FrameTimings,
    /// Overlays for the next frame (or each frame of the next batch), drawn
    /// in the frame path where the backend does that (CUDA).
    /// Per frame of the next run; None: that frame is not drawn.
    pub(super) overlays: Vec<Option<FrameOverlay>>,
    /// The last frame's (or batch's) annotated frames, the first
    /// `annotated_frames` of them.
    pub(super) annotated: Vec<Vec<u8>>,
    pub(super) annotated_frames: usize,
    /// Batched model instances and their outputs ([`Engine::run_batch`]).
    pub(super) batches: Batches<B>,
}

impl<B: Backend> Engine<B> {
    pub fn new(backend: Arc<B>, weights: Arc<SegformerWeights<B>>, options: EngineOptions) -> Result<Self, EngineError> {
        options.validate(weights.num_labels())?;
        let mut passes = Vec::with_capacity(options.scales.len());
        // The base scale goes first: its logits resolution is the one averaged at.
        let mut scales = vec![1.0f32];
        scales.extend(options.scales.iter().copied().filter(|&s| s != 1.0));
        let base_requested = options.scales.contains(&1.0);
        for &scale in &scales {
            let (w, h) = scaled_size(options.width, options.height, scale);
            passes.push(Segformer::new(weights.clone(), &backend, w, h)?);
        }
        // Scales without 1.0 still average at the base resolution; the base
        // pass then only provides that size and is not run.
        let active: Vec<usize> = (usize::from(!base_requested)..passes.len()).collect();
        let logits_len = passes[0].logits_len();
        let summed = if active == [0] { None } else { Some(backend.tensor(logits_len)?) };
        Ok(Engine {
            normalized: backend.recording(),
            backend,
            options,
            passes,
            active,
            summed,
            logits: vec![0.0; logits_len],
            keep_logits: false,
            slots: Vec::new(),
            slot_clock: 0,
            normalized_input: Vec::new(),
            segmentation: Segmentation::default(),
            timings: FrameTimings::default(),
            overlays: Vec::new(),
            annotated: Vec::new(),
            annotated_frames: 0,
            batches: Batches::default(),
        })
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    pub fn labels(&self) -> &[String] {
        &self.passes[0].weights().labels
    }

    pub fn num_labels(&self) -> usize {
        self.passes[0].weights().num_labels()
    }

    /// (width, height) of the logits map.
    pub fn logits_size(&self) -> (usize, usize) {
        self.passes[0].logits_size()
    }

    /// Averaged logits `[lh, lw, labels]` of the last `run_normalized`, or of
    /// the last frame when `keep_logits` is on or a filter ran.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Keep each frame's averaged logits on the host for `logits()`, at the
    /// cost of a round trip between the model and postprocessing.
    pub fn set_keep_logits(&mut self, keep: bool) {
        self.keep_logits = keep;
    }

    /// The last frame's segmentation.
    pub fn segmentation(&self) -> &Segmentation {
        &self.segmentation
    }

    pub fn timings(&self) -> FrameTimings {
        self.timings
    }

    /// Whether the backend draws overlays itself ([`Engine::set_overlays`]).
    pub fn annotates_frames(&self) -> bool {
        self.backend.annotates_frames()
    }

    /// Overlays for the next `run_frame` (the first) or `run_batch` (one per
    /// frame); empty: none. Backends that draw overlays then hand back each
    /// annotated frame ([`Engine::annotated`]); others ignore them.
    pub fn set_overlays(&mut self, overlays: &[FrameOverlay]) {
        self.overlays.clear();
        self.overlays.extend(overlays.iter().cloned().map(Some));
    }

    /// [`Engine::set_overlays`] where some frames need no drawing (nobody
    /// looks at their pixels): those are neither drawn nor handed back.
    pub fn set_overlays_where(&mut self, overlays: &[Option<FrameOverlay>]) {
        self.overlays.clear();
        self.overlays.extend_from_slice(overlays);
    }

    /// The `i`th frame of the last run drawn with its overlay (the slot
    /// geometry's bytes), where the backend drew it.
    pub fn annotated(&self, i: usize) -> Option<&[u8]> {
        (i < self.annotated_frames).then(|| &self.annotated[i][..])
    }

    /// Whether frame `i` of the next run gets drawn here, and makes room for it.
    pub(super) fn will_annotate(&mut self, i: usize) -> bool {
        let annotate = self.overlays.get(i).is_some_and(Option::is_some) && self.backend.annotates_frames();
        if annotate && self.annotated.len() <= i {
            self.annotated.resize_with(i + 1, Vec::new);
        }
        annotate
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// Runs already-normalised input `[h, w, 3]` of the base size (as the
    /// `pixel_values` of HF, channels-last); other scales get it resized.
    /// Returns the averaged logits `[lh, lw, labels]`.
    pub fn run_normalized(&mut self, hwc: &[f32]) -> Result<&[f32], EngineError> {
        let (bw, bh) = (self.options.width, self.options.height);
        if hwc.len() != bw * bh * 3 {
            return Err(EngineError::Options(format!("input has {} values, {bw}x{bh}x3 expected", hwc.len())));
        }
        let t0 = Instant::now();
        let backend = self.backend.clone();
        let b = &*backend;
        for &i in &self.active {
            let model = &mut self.passes[i];
            let (w, h) = model.input_size();
            // Normalisation is per-channel affine, so resizing normalised values
            // equals normalising resized ones.
            self.normalized_input.resize(w * h * 3, 0.0);
            let dims = ResizeDims { batch: 1, src_h: bh, src_w: bw, dst_h: h, dst_w: w, channels: 3 };
            resize_host(hwc, &mut self.normalized_input, dims, false);
            b.write(model.input_mut(), &self.normalized_input)?;
        }
        let Engine { passes, active, summed, normalized, .. } = self;
        b.run_recorded(normalized, &mut || {
            for &i in active.iter() {
                passes[i].forward(b)?;
            }
            sum_passes(b, passes, active, summed.as_mut())
        })?;
        self.read_logits()?;
        self.timings = FrameTimings { preprocess_ms: 0.0, inference_ms: ms_since(t0), postprocess_ms: 0.0, gpu_ms: b.take_device_ms() };
        Ok(&self.logits)
    }

    /// The summed logits (or the base pass's) into `logits`, averaged.
    pub(super) fn read_logits(&mut self) -> Result<(), EngineError> {
        let tensor = self.summed.as_ref().unwrap_or(self.passes[0].logits());
        self.backend.read(tensor, &mut self.logits)?;
        if self.active.len() > 1 {
            let inv = 1.0 / self.active.len() as f32;
            self.logits.iter_mut().for_each(|v| *v *= inv);
        }
        Ok(())
    }

    /// The model instance of the `i`th active pass (the one batches copy).
    pub(super) fn active_model(&self, i: usize) -> &Segformer<B> {
        &self.passes[self.active[i]]
    }
}

/// The active passes' logits resized (bilinear) to the base resolution and
/// summed into `summed`; nothing when the base pass alone runs.
pub(super) fn sum_passes<B: Backend>(b: &B, passes: &[Segformer<B>], active: &[usize], summed: Option<&mut B::Tensor>) -> Result<(), EngineError> {
    let Some(summed) = summed else { return Ok(()) };
    let (lw, lh) = passes[0].logits_size();
    let labels = passes[0].weights().num_labels();
    for (n, &i) in active.iter().enumerate() {
        let (sw, sh) = passes[i].logits_size();
        // [sh, sw, labels] -> bilinear -> (+)= [lh, lw, labels]
        let dims = ResizeDims { batch: 1, src_h: sh, src_w: sw, dst_h: lh, dst_w: lw, channels: labels };
        b.resize_bilinear(passes[i].logits(), summed, dims, n > 0)?;
    }
    Ok(())
}

pub(super) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
