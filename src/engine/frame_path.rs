//! One frame through the engine, the same way on every backend: the frame is
//! staged into the slot for its geometry (on CUDA: its copy to the device
//! queued), then one recorded piece of work (a CUDA graph, or plain calls on
//! the CPU) resizes and normalises it into each scale's input, runs the model at each scale, sums
//! the logits at the base resolution and turns them into class and
//! confidence per pixel at the frame's size; then the result is collected.
//!
//! A logits filter (temporal smoothing) or `keep_logits` needs the logits on
//! the host: the recorded work then stops at the summed logits, which make a
//! round trip through the host before they are postprocessed.

use std::time::Instant;

use super::pipeline::{Engine, EngineError, LogitsFilter, ms_since, sum_passes};
use super::state::{FrameSlot, SlotKey};
use crate::backend::{Backend, FrameOutDims};
use crate::frame::{FrameRef, Segmentation};
use crate::model::MAX_BATCH;

/// Frame slots kept at once: every frame of a full batch, plus a few
/// geometries. A stream of new sizes evicts the least recently used.
const MAX_SLOTS: usize = MAX_BATCH + 8;

impl<B: Backend> Engine<B> {
    /// Full path for one frame: returns its segmentation at the frame's size.
    pub fn run_frame(&mut self, frame: &FrameRef<'_>) -> Result<&Segmentation, EngineError> {
        self.run_frame_filtered(frame, None)
    }

    /// As [`Engine::run_frame`], with `filter` rewriting the averaged logits
    /// `[lh, lw, labels]` before they become classes (temporal smoothing).
    pub fn run_frame_filtered(&mut self, frame: &FrameRef<'_>, mut filter: Option<LogitsFilter<'_>>) -> Result<&Segmentation, EngineError> {
        frame.validate()?;
        self.annotated_frames = 0;
        let t0 = Instant::now();
        let backend = self.backend.clone();
        let b = &*backend;
        let host_logits = filter.is_some() || self.keep_logits;
        let [s] = self.slots_for(&[SlotKey::nth(frame.geometry(), 0)])?[..] else { unreachable!("one key, one slot") };
        let tone = self.options.exposure.curve_for(frame);
        b.stage_frame(&mut self.slots[s].slot, frame, &tone)?;
        let annotate = self.will_annotate(0);
        if annotate {
            let overlay = self.overlays[0].as_ref().expect("will_annotate checked it");
            b.stage_overlay(&mut self.slots[s].slot, overlay)?;
        }
        let stage_ms = ms_since(t0);

        let t1 = Instant::now();
        let out = self.frame_out_dims();
        let Engine { passes, active, summed, slots, .. } = self;
        let FrameSlot { slot, whole, annotated, to_logits, .. } = &mut slots[s];
        let recording = match (host_logits, annotate) {
            (true, _) => &*to_logits,
            (false, true) => &*annotated,
            (false, false) => &*whole,
        };
        b.run_recorded(recording, &mut || {
            for &i in active.iter() {
                let model = &mut passes[i];
                let (w, h) = model.input_size();
                b.frame_to_input(slot, model.input_mut(), 0, w, h)?;
                model.forward(b)?;
            }
            sum_passes(b, passes, active, summed.as_mut())?;
            if !host_logits {
                let logits = summed.as_ref().unwrap_or(passes[0].logits());
                b.frame_from_logits(slot, logits, 0, out)?;
                if annotate {
                    b.frame_annotate(slot)?;
                }
            }
            Ok::<(), EngineError>(())
        })?;
        if host_logits {
            self.read_logits()?;
            if let Some(filter) = filter.as_mut() {
                filter(&mut self.logits);
            }
            // Back as the averaged logits: postprocessing then takes them as they are.
            let tensor = match self.summed.as_mut() {
                Some(t) => t,
                None => self.passes[0].logits_mut(),
            };
            b.write(tensor, &self.logits)?;
            let logits = self.summed.as_ref().unwrap_or(self.passes[0].logits());
            b.frame_from_logits(&mut self.slots[s].slot, logits, 0, FrameOutDims { logit_scale: 1.0, ..out })?;
            if annotate {
                b.frame_annotate(&mut self.slots[s].slot)?;
            }
        }
        let phases = b.collect_frame(&mut self.slots[s].slot, &mut self.segmentation)?;
        self.segmentation.brightened = tone.brightened();
        self.annotated_frames = 0;
        if annotate {
            b.collect_annotated(&mut self.slots[s].slot, &mut self.annotated[0])?;
            self.annotated_frames = 1;
        }
        let run_ms = ms_since(t1);
        let t = &mut self.timings;
        match phases {
            Some(p) => {
                t.preprocess_ms = stage_ms + p.preprocess_ms;
                t.postprocess_ms = p.postprocess_ms;
                t.inference_ms = (run_ms - p.preprocess_ms - p.postprocess_ms).max(0.0);
            }
            // Pre- and postprocessing ran with the model, out of the host's sight.
            None => (t.preprocess_ms, t.inference_ms, t.postprocess_ms) = (stage_ms, run_ms, 0.0),
        }
        t.gpu_ms = b.take_device_ms();
        Ok(&self.segmentation)
    }

    pub(super) fn frame_out_dims(&self) -> FrameOutDims {
        let (logits_w, logits_h) = self.logits_size();
        FrameOutDims {
            logits_w,
            logits_h,
            labels: self.num_labels(),
            logit_scale: 1.0 / self.active.len() as f32,
            threshold: self.options.confidence_threshold,
        }
    }

    /// The indices of the slots for `keys` (distinct), each made when new; the
    /// least recently used slots (and the recordings using them) make room.
    pub(super) fn slots_for(&mut self, keys: &[SlotKey]) -> Result<Vec<usize>, EngineError> {
        // Mark the slots already there first, so making room never evicts one of them.
        self.slot_clock += 1;
        let now = self.slot_clock;
        self.slots.iter_mut().filter(|s| keys.contains(&s.key)).for_each(|s| s.used = now);
        for &key in keys {
            if self.slots.iter().any(|s| s.key == key) {
                continue;
            }
            if self.slots.len() >= MAX_SLOTS {
                // There are fewer keys than MAX_SLOTS, so the oldest is none of them.
                let oldest = (0..self.slots.len()).min_by_key(|&i| self.slots[i].used).expect("slots are full");
                let gone = self.slots.remove(oldest);
                self.batches.forget_slot(gone.key);
            }
            let b = &*self.backend;
            let slot = b.frame_slot(key.geometry, &self.options.road_classes, self.options.pixel_confidence)?;
            self.slots.push(FrameSlot { key, used: now, slot, whole: b.recording(), annotated: b.recording(), to_logits: b.recording() });
        }
        Ok(keys.iter().map(|k| self.slots.iter().position(|s| s.key == *k).expect("made above")).collect())
    }
}
