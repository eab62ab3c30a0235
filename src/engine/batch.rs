//! Batches across streams: N frames (from any streams) through one forward of
//! a model instance built for N images, each frame then postprocessed alone.
//!
//! A batch of one is the single-frame path itself (same numerics, and on CUDA
//! the device frame path). Larger batches keep one model instance per batch
//! size used, built on first use and kept for the engine's life: N times one
//! image's activations each (the weights are shared), so a worker that has run
//! every size from 2 to B holds B(B+1)/2 - 1 image activation sets besides its
//! single-frame one. Pre- and postprocessing of batched frames run on the
//! host; on CUDA the batched forward is one graph per batch size. Multi-scale
//! presets run the frames of a batch one at a time.

use std::time::Instant;

use super::pipeline::{Engine, EngineError, ms_since};
use crate::backend::cpu::{PostprocessSpec, Postprocessor, preprocess, resize_host};
use crate::backend::{Backend, ResizeDims};
use crate::frame::{FrameRef, Segmentation};
use crate::model::{MAX_BATCH, Segformer};

/// Rewrites one frame's logits `[lh, lw, labels]` before they become classes:
/// called with the frame's index in the batch (temporal smoothing per stream).
pub type BatchFilter<'a> = &'a mut dyn FnMut(usize, &mut [f32]);

struct BatchPass<B: Backend> {
    model: Segformer<B>,
    /// The batched forward, recorded on first use.
    recording: B::Recording,
    /// Host staging of the input `[N, h, w, 3]` and the logits `[N, sh, sw, labels]`.
    input: Vec<f32>,
    logits: Vec<f32>,
}

pub(crate) struct Batches<B: Backend> {
    /// Index N - 2 holds the instance for N images, once built.
    passes: Vec<Option<BatchPass<B>>>,
    /// One frame's logits at the base resolution `[lh, lw, labels]`.
    logits: Vec<f32>,
    /// The last batch's segmentations (the first `last` of them), buffers reused.
    outputs: Vec<Segmentation>,
    /// Frames in the last batch.
    last: usize,
    postprocessor: Postprocessor,
}

impl<B: Backend> Default for Batches<B> {
    fn default() -> Self {
        Batches { passes: Vec::new(), logits: Vec::new(), outputs: Vec::new(), last: 0, postprocessor: Postprocessor::default() }
    }
}

impl<B: Backend> Engine<B> {
    /// Runs up to [`MAX_BATCH`] frames, of any sizes, as one batch and returns
    /// their segmentations in order. A frame that fails validation fails the
    /// whole batch. `segmentation()` and `logits()` describe single-frame runs
    /// only; `timings()` is the whole batch's.
    pub fn run_batch(&mut self, frames: &[FrameRef<'_>], mut filter: Option<BatchFilter<'_>>) -> Result<&[Segmentation], EngineError> {
        let n = frames.len();
        if n > MAX_BATCH {
            return Err(EngineError::Options(format!("a batch of {n} frames is over {MAX_BATCH}")));
        }
        if self.batches.outputs.len() < n {
            self.batches.outputs.resize_with(n, Segmentation::default);
        }
        if n <= 1 || self.active.len() != 1 {
            return self.run_one_by_one(frames, filter);
        }
        let t0 = Instant::now();
        let pass = self.batch_pass(n)?;
        let (w, h) = pass.model.input_size();
        for (frame, input) in frames.iter().zip(pass.input.chunks_exact_mut(pass.model.input_len())) {
            preprocess(frame, w, h, input)?;
        }
        let preprocess_ms = ms_since(t0);
        let t1 = Instant::now();
        let b = &*self.backend;
        let pass = self.batches.passes[n - 2].as_mut().expect("built by batch_pass");
        b.write(pass.model.input_mut(), &pass.input)?;
        let model = &mut pass.model;
        b.run_recorded(&pass.recording, &mut || model.forward(b))?;
        b.read(pass.model.logits(), &mut pass.logits)?;
        self.timings.preprocess_ms = preprocess_ms;
        self.timings.inference_ms = ms_since(t1);
        self.timings.gpu_ms = b.take_device_ms();

        let t2 = Instant::now();
        let (sw, sh) = pass.model.logits_size();
        let labels = pass.model.weights().num_labels();
        let (lw, lh) = self.logits_size();
        let spec = PostprocessSpec {
            logits_w: lw,
            logits_h: lh,
            labels,
            road_classes: &self.options.road_classes,
            threshold: self.options.confidence_threshold,
            logit_scale: 1.0,
        };
        // As the single-frame path: logits resized (an exact copy when the
        // pass is the base scale) onto zeros at the base resolution.
        let resize = ResizeDims { batch: 1, src_h: sh, src_w: sw, dst_h: lh, dst_w: lw, channels: labels };
        let Batches { passes, logits, outputs, postprocessor, .. } = &mut self.batches;
        let pass = passes[n - 2].as_ref().expect("built by batch_pass");
        logits.resize(lw * lh * labels, 0.0);
        for (i, (frame, image_logits)) in frames.iter().zip(pass.logits.chunks_exact(pass.model.logits_len())).enumerate() {
            logits.fill(0.0);
            resize_host(image_logits, logits, resize, true);
            if let Some(f) = filter.as_mut() {
                f(i, logits);
            }
            postprocessor.run(logits, &spec, frame.width, frame.height, &mut outputs[i]);
        }
        self.timings.postprocess_ms = ms_since(t2);
        self.batches.last = n;
        Ok(&self.batches.outputs[..n])
    }

    /// The segmentations of the last successful `run_batch`, in order.
    pub fn batch_segmentations(&self) -> &[Segmentation] {
        &self.batches.outputs[..self.batches.last]
    }

    /// The instance for `n` >= 2 images, built on first use.
    fn batch_pass(&mut self, n: usize) -> Result<&mut BatchPass<B>, EngineError> {
        let slot = n - 2;
        if self.batches.passes.len() <= slot {
            self.batches.passes.resize_with(slot + 1, || None);
        }
        if self.batches.passes[slot].is_none() {
            let single = self.active_model(0);
            let (w, h) = single.input_size();
            let model = Segformer::batched(single.weights().clone(), &self.backend, w, h, n)?;
            let (input, logits) = (vec![0.0; n * model.input_len()], vec![0.0; n * model.logits_len()]);
            let recording = self.backend.recording();
            self.batches.passes[slot] = Some(BatchPass { model, recording, input, logits });
        }
        Ok(self.batches.passes[slot].as_mut().expect("built above"))
    }

    /// Single-frame runs in turn: a batch of one, or a multi-scale preset.
    fn run_one_by_one(&mut self, frames: &[FrameRef<'_>], mut filter: Option<BatchFilter<'_>>) -> Result<&[Segmentation], EngineError> {
        let mut total = super::pipeline::FrameTimings::default();
        for (i, frame) in frames.iter().enumerate() {
            match filter.as_mut() {
                Some(f) => self.run_frame_filtered(frame, Some(&mut |logits: &mut [f32]| f(i, logits)))?,
                None => self.run_frame(frame)?,
            };
            total.preprocess_ms += self.timings.preprocess_ms;
            total.inference_ms += self.timings.inference_ms;
            total.postprocess_ms += self.timings.postprocess_ms;
            if let Some(ms) = self.timings.gpu_ms {
                *total.gpu_ms.get_or_insert(0.0) += ms;
            }
            self.batches.outputs[i].clone_from(&self.segmentation);
        }
        self.timings = total;
        self.batches.last = frames.len();
        Ok(&self.batches.outputs[..frames.len()])
    }
}
