//! Batches across streams: N frames (from any streams) through one forward of
//! a model instance built for N images, each frame with its own frame slot.
//!
//! A batch of one is the single-frame path itself. Larger batches keep one
//! model instance per batch size, built when the engine loads (the sizes
//! of `[workers] batch`, [`Engine::prepare_batches`]) and kept for the
//! engine's life: N times one image's activations each (the weights are
//! shared), so a worker that has run every size from 2 to B holds
//! B(B+1)/2 - 1 image activation sets besides its single-frame one. The
//! frames' upload, pre- and postprocessing and the batched forward are one
//! recorded piece of work (one CUDA graph) per batch size and set of frame
//! slots. Presets other than the base scale alone run a batch's frames one
//! at a time.

use std::time::Instant;

use super::pipeline::{Engine, EngineError, FrameTimings, ms_since};
use super::state::{BatchPass, BatchRecording, SlotKey};
use crate::backend::{Backend, FrameOutDims};
use crate::frame::{FrameOverlay, FrameRef, Segmentation};
use crate::model::{MAX_BATCH, Segformer};

/// Rewrites one frame's logits `[lh, lw, labels]` before they become classes:
/// called with the frame's index in the batch (temporal smoothing per stream).
pub type BatchFilter<'a> = &'a mut dyn FnMut(usize, &mut [f32]);

/// Slot sets recorded per batch size; an older one is dropped past this.
const MAX_RECORDINGS: usize = 8;

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
        if n <= 1 || self.active != [0] {
            return self.run_one_by_one(frames, filter);
        }
        for frame in frames {
            frame.validate()?;
        }
        self.annotated_frames = 0;
        let t0 = Instant::now();
        let backend = self.backend.clone();
        let b = &*backend;
        // Frames of one geometry in one batch each need their own slot.
        let keys: Vec<SlotKey> = frames.iter().enumerate().map(|(i, f)| SlotKey::nth(f.geometry(), frames[..i].iter().filter(|o| o.geometry() == f.geometry()).count())).collect();
        let slots = self.slots_for(&keys)?;
        let annotate: Vec<bool> = (0..n).map(|i| self.will_annotate(i)).collect();
        let mut brightened = Vec::with_capacity(n);
        for (i, (frame, &s)) in frames.iter().zip(&slots).enumerate() {
            let tone = self.options.exposure.curve_for(frame);
            b.stage_frame(&mut self.slots[s].slot, frame, &tone)?;
            brightened.push(tone.brightened());
            if annotate[i] {
                let overlay = self.overlays[i].as_ref().expect("will_annotate checked it");
                b.stage_overlay(&mut self.slots[s].slot, overlay)?;
            }
        }
        let stage_ms = ms_since(t0);

        let t1 = Instant::now();
        let host_logits = filter.is_some();
        let out = FrameOutDims { logit_scale: 1.0, ..self.frame_out_dims() };
        self.batch_pass(n)?;
        let pass = self.batches.passes[n - 2].as_mut().expect("built by batch_pass");
        let r = match pass.recordings.iter().position(|r| r.slots == keys && r.annotate == annotate) {
            Some(r) => r,
            None => {
                if pass.recordings.len() >= MAX_RECORDINGS {
                    pass.recordings.remove(0);
                }
                pass.recordings.push(BatchRecording { slots: keys, annotate: annotate.clone(), whole: b.recording(), to_logits: b.recording() });
                pass.recordings.len() - 1
            }
        };
        let BatchPass { model, recordings, logits } = pass;
        let frame_slots = &mut self.slots;
        let recording = if host_logits { &recordings[r].to_logits } else { &recordings[r].whole };
        b.run_recorded(recording, &mut || {
            let (w, h) = model.input_size();
            for (i, &s) in slots.iter().enumerate() {
                b.frame_to_input(&mut frame_slots[s].slot, model.input_mut(), i, w, h)?;
            }
            model.forward(b)?;
            if !host_logits {
                for (i, &s) in slots.iter().enumerate() {
                    b.frame_from_logits(&mut frame_slots[s].slot, model.logits(), i, out)?;
                    if annotate[i] {
                        b.frame_annotate(&mut frame_slots[s].slot)?;
                    }
                }
            }
            Ok::<(), EngineError>(())
        })?;
        if let Some(filter) = filter.as_mut() {
            logits.resize(n * model.logits_len(), 0.0);
            b.read(model.logits(), logits)?;
            for (i, image) in logits.chunks_exact_mut(model.logits_len()).enumerate() {
                filter(i, image);
            }
            b.write(model.logits_mut(), logits)?;
            for (i, &s) in slots.iter().enumerate() {
                b.frame_from_logits(&mut frame_slots[s].slot, model.logits(), i, out)?;
                if annotate[i] {
                    b.frame_annotate(&mut frame_slots[s].slot)?;
                }
            }
        }
        let mut host = None::<(f64, f64)>;
        for ((out, &s), brightened) in self.batches.outputs.iter_mut().zip(&slots).zip(brightened) {
            let phases = b.collect_frame(&mut frame_slots[s].slot, out)?;
            out.brightened = brightened;
            if let Some(p) = phases {
                let (pre, post) = host.get_or_insert((0.0, 0.0));
                *pre += p.preprocess_ms;
                *post += p.postprocess_ms;
            }
        }
        for (i, &s) in slots.iter().enumerate().filter(|&(i, _)| annotate[i]) {
            b.collect_annotated(&mut frame_slots[s].slot, &mut self.annotated[i])?;
        }
        self.annotated_frames = if annotate.iter().all(|&a| a) { n } else { 0 };
        let run_ms = ms_since(t1);
        self.timings = match host {
            Some((pre, post)) => FrameTimings { preprocess_ms: stage_ms + pre, inference_ms: (run_ms - pre - post).max(0.0), postprocess_ms: post, gpu_ms: None },
            None => FrameTimings { preprocess_ms: stage_ms, inference_ms: run_ms, postprocess_ms: 0.0, gpu_ms: None },
        };
        self.timings.gpu_ms = b.take_device_ms();
        self.batches.last = n;
        Ok(&self.batches.outputs[..n])
    }

    /// The segmentations of the last successful `run_batch`, in order.
    pub fn batch_segmentations(&self) -> &[Segmentation] {
        &self.batches.outputs[..self.batches.last]
    }

    /// Builds the model instances of these batch sizes now (1 is the
    /// single-frame path, always there), so a worker holds its memory from
    /// the start and a GPU short of it fails the load, not a busy minute
    /// later. A preset of several scales runs batches one frame at a time:
    /// nothing to build. Sizes over [`MAX_BATCH`] are refused.
    pub fn prepare_batches(&mut self, sizes: &[usize]) -> Result<(), EngineError> {
        if let Some(&n) = sizes.iter().find(|&&n| n > MAX_BATCH) {
            return Err(EngineError::Options(format!("a batch of {n} frames is over {MAX_BATCH}")));
        }
        if self.active != [0] {
            return Ok(());
        }
        for &n in sizes.iter().filter(|&&n| n >= 2) {
            self.batch_pass(n)?;
        }
        Ok(())
    }

    /// The batch sizes whose model instance exists, ascending (1 first).
    pub fn batch_sizes_ready(&self) -> Vec<usize> {
        let built = self.batches.passes.iter().enumerate().filter(|(_, p)| p.is_some()).map(|(slot, _)| slot + 2);
        std::iter::once(1).chain(built).collect()
    }

    /// Builds the instance for `n` >= 2 images, once (at load, or on first
    /// use of a size `prepare_batches` was not given).
    fn batch_pass(&mut self, n: usize) -> Result<(), EngineError> {
        let slot = n - 2;
        if self.batches.passes.len() <= slot {
            self.batches.passes.resize_with(slot + 1, || None);
        }
        if self.batches.passes[slot].is_none() {
            let single = self.active_model(0);
            let (w, h) = single.input_size();
            let model = Segformer::batched(single.weights().clone(), &self.backend, w, h, n)?;
            self.batches.passes[slot] = Some(BatchPass { model, recordings: Vec::new(), logits: Vec::new() });
        }
        Ok(())
    }

    /// Single-frame runs in turn: a batch of one, or a multi-scale preset.
    fn run_one_by_one(&mut self, frames: &[FrameRef<'_>], mut filter: Option<BatchFilter<'_>>) -> Result<&[Segmentation], EngineError> {
        // Each single run draws the first overlay and leaves its frame first:
        // frame i's overlay goes first, and its frame is moved to place i.
        let overlays = std::mem::take(&mut self.overlays);
        let result = self.each_frame(frames, &mut filter, &overlays);
        self.overlays = overlays;
        result?;
        Ok(&self.batches.outputs[..frames.len()])
    }

    fn each_frame(&mut self, frames: &[FrameRef<'_>], filter: &mut Option<BatchFilter<'_>>, overlays: &[Option<FrameOverlay>]) -> Result<(), EngineError> {
        let mut total = FrameTimings::default();
        let mut annotated = 0;
        for (i, frame) in frames.iter().enumerate() {
            self.overlays.clear();
            self.overlays.extend(overlays.get(i).cloned());
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
            if self.annotated_frames == 1 {
                if i > 0 {
                    self.annotated.resize_with(self.annotated.len().max(i + 1), Vec::new);
                    self.annotated.swap(0, i);
                }
                annotated += 1;
            }
        }
        self.timings = total;
        self.batches.last = frames.len();
        self.annotated_frames = if annotated == frames.len() { annotated } else { 0 };
        Ok(())
    }
}
