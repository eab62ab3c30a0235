//! The per-frame engine of one worker, as [`Engine`] (any backend, host pre-
//! and postprocessing, one model instance per scale, logits averaged at the
//! base resolution), and the errors, options and timings that go with it.

use std::sync::Arc;
use std::time::Instant;

use super::batch::Batches;
use super::postprocess::{PostprocessSpec, Postprocessor};
use super::preprocess::preprocess;
use crate::backend::cpu::resize_host;
use crate::backend::{Backend, BackendError, ResizeDims};
use crate::frame::{FrameError, FrameRef, Segmentation};
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

#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Model input width and height (the base scale).
    pub width: usize,
    pub height: usize,
    pub scales: Vec<f32>,
    pub road_classes: Vec<usize>,
    pub confidence_threshold: f32,
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

struct ScaledPass<B: Backend> {
    model: Segformer<B>,
    /// Host staging of this pass's input `[h, w, 3]` and logits.
    input: Vec<f32>,
    logits: Vec<f32>,
}

#[cfg(feature = "cuda")]
pub(crate) struct DevicePass<'a, B: Backend> {
    pub backend: &'a Arc<B>,
    pub model: &'a mut Segformer<B>,
    pub segmentation: &'a mut Segmentation,
    pub timings: &'a mut FrameTimings,
    pub options: &'a EngineOptions,
}

pub struct Engine<B: Backend> {
    pub(super) backend: Arc<B>,
    pub(super) options: EngineOptions,
    passes: Vec<ScaledPass<B>>,
    /// Indices of the passes that run (all but an unrequested base pass).
    pub(super) active: Vec<usize>,
    /// Averaged logits `[lh, lw, labels]` at the base scale's resolution.
    logits: Vec<f32>,
    pub(super) segmentation: Segmentation,
    pub(super) postprocessor: Postprocessor,
    pub(super) timings: FrameTimings,
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
            let model = Segformer::new(weights.clone(), &backend, w, h)?;
            let (lw, lh) = model.logits_size();
            passes.push(ScaledPass { model, input: vec![0.0; w * h * 3], logits: vec![0.0; lw * lh * weights.num_labels()] });
        }
        // Scales without 1.0 still average at the base resolution; the base
        // pass then only provides that size and is not run.
        let active = (usize::from(!base_requested)..passes.len()).collect();
        let logits = vec![0.0; passes[0].logits.len()];
        Ok(Engine { backend, options, passes, active, logits, segmentation: Segmentation::default(), postprocessor: Postprocessor::default(), timings: FrameTimings::default(), batches: Batches::default() })
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    pub fn labels(&self) -> &[String] {
        &self.passes[0].model.weights().labels
    }

    pub fn num_labels(&self) -> usize {
        self.passes[0].model.weights().num_labels()
    }

    /// (width, height) of the logits map.
    pub fn logits_size(&self) -> (usize, usize) {
        self.passes[0].model.logits_size()
    }

    /// Averaged logits `[lh, lw, labels]` of the last frame.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The last frame's segmentation.
    pub fn segmentation(&self) -> &Segmentation {
        &self.segmentation
    }

    pub fn timings(&self) -> FrameTimings {
        self.timings
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The parts a device-side frame path needs, when exactly one pass runs.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_pass(&mut self) -> Option<DevicePass<'_, B>> {
        let [i] = self.active[..] else { return None };
        Some(DevicePass {
            backend: &self.backend,
            model: &mut self.passes[i].model,
            segmentation: &mut self.segmentation,
            timings: &mut self.timings,
            options: &self.options,
        })
    }

    /// Full path for one frame: returns its segmentation at the frame's size.
    pub fn run_frame(&mut self, frame: &FrameRef<'_>) -> Result<&Segmentation, EngineError> {
        self.run_frame_filtered(frame, None)
    }

    /// As [`Engine::run_frame`], with `filter` rewriting the averaged logits
    /// `[lh, lw, labels]` before they become classes (temporal smoothing).
    pub fn run_frame_filtered(&mut self, frame: &FrameRef<'_>, filter: Option<LogitsFilter<'_>>) -> Result<&Segmentation, EngineError> {
        let t0 = Instant::now();
        for &i in &self.active {
            let pass = &mut self.passes[i];
            let (w, h) = pass.model.input_size();
            preprocess(frame, w, h, &mut pass.input)?;
        }
        self.timings.preprocess_ms = ms_since(t0);
        self.infer_prepared()?;
        if let Some(filter) = filter {
            filter(&mut self.logits);
        }
        self.postprocess(frame.width, frame.height);
        Ok(&self.segmentation)
    }

    /// Runs already-normalised input `[h, w, 3]` of the base size (as the
    /// `pixel_values` of HF, channels-last); other scales get it resized.
    pub fn run_normalized(&mut self, hwc: &[f32]) -> Result<&[f32], EngineError> {
        let (bw, bh) = (self.options.width, self.options.height);
        if hwc.len() != bw * bh * 3 {
            return Err(EngineError::Options(format!("input has {} values, {bw}x{bh}x3 expected", hwc.len())));
        }
        for &i in &self.active {
            let pass = &mut self.passes[i];
            let (w, h) = pass.model.input_size();
            // Normalisation is per-channel affine, so resizing normalised values
            // equals normalising resized ones.
            let dims = ResizeDims { batch: 1, src_h: bh, src_w: bw, dst_h: h, dst_w: w, channels: 3 };
            resize_host(hwc, &mut pass.input, dims, false);
        }
        self.infer_prepared()?;
        Ok(&self.logits)
    }

    fn infer_prepared(&mut self) -> Result<(), EngineError> {
        let t0 = Instant::now();
        let b = &*self.backend;
        let (lw, lh) = self.logits_size();
        let labels = self.num_labels();
        self.logits.fill(0.0);
        for &i in &self.active {
            let pass = &mut self.passes[i];
            b.write(pass.model.input_mut(), &pass.input)?;
            let model = &mut pass.model;
            b.run_recorded(i, &mut || model.forward(b))?;
            b.read(pass.model.logits(), &mut pass.logits)?;
            let (sw, sh) = pass.model.logits_size();
            let dims = ResizeDims { batch: 1, src_h: sh, src_w: sw, dst_h: lh, dst_w: lw, channels: labels };
            resize_host(&pass.logits, &mut self.logits, dims, true);
        }
        if self.active.len() > 1 {
            let inv = 1.0 / self.active.len() as f32;
            self.logits.iter_mut().for_each(|v| *v *= inv);
        }
        self.timings.inference_ms = ms_since(t0);
        self.timings.gpu_ms = b.take_device_ms();
        Ok(())
    }

    /// The model instance of the `i`th active pass (the one batches copy).
    pub(super) fn active_model(&self, i: usize) -> &Segformer<B> {
        &self.passes[self.active[i]].model
    }

    fn postprocess(&mut self, width: usize, height: usize) {
        let t0 = Instant::now();
        let (lw, lh) = self.logits_size();
        let spec = PostprocessSpec {
            logits_w: lw,
            logits_h: lh,
            labels: self.num_labels(),
            road_classes: &self.options.road_classes,
            threshold: self.options.confidence_threshold,
        };
        self.postprocessor.run(&self.logits, &spec, width, height, &mut self.segmentation);
        self.timings.postprocess_ms = ms_since(t0);
    }
}

pub(super) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
