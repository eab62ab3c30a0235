//! The CPU's frame path: a frame slot keeps a copy of the frame (the engine
//! borrows frames only for the call), resizes and normalises it into each
//! pass's input, and turns logits into the segmentation, timing both phases
//! because they run inside the engine's "recorded" work.

use std::time::Instant;

use super::postprocess::{PostprocessSpec, Postprocessor};
use super::preprocess::preprocess_toned;
use crate::exposure::ToneCurve;
use crate::backend::{BackendError, FrameOutDims, HostPhases, OpResult};
use crate::frame::{FrameError, FrameGeometry, FrameRef, Segmentation};

pub struct CpuFrameSlot {
    geometry: FrameGeometry,
    /// The staged frame's bytes (up to the end of its last row).
    pixels: Vec<u8>,
    /// The staged frame's tone curve (`crate::exposure`).
    tone: ToneCurve,
    road_classes: Vec<usize>,
    /// Hand the per-pixel confidence out (else it stays in the slot, as
    /// the postprocessing's scratch, and the caller's is left empty).
    pixel_confidence: bool,
    postprocessor: Postprocessor,
    /// Written by `frame_from_logits`, swapped out by `collect`.
    segmentation: Segmentation,
    phases: HostPhases,
}

impl CpuFrameSlot {
    pub(super) fn new(geometry: FrameGeometry, road_classes: &[usize], pixel_confidence: bool) -> Self {
        CpuFrameSlot {
            geometry,
            pixels: Vec::with_capacity(geometry.bytes()),
            tone: ToneCurve::IDENTITY,
            road_classes: road_classes.to_vec(),
            pixel_confidence,
            postprocessor: Postprocessor::default(),
            segmentation: Segmentation::default(),
            phases: HostPhases::default(),
        }
    }

    pub(super) fn stage(&mut self, frame: &FrameRef<'_>, tone: &ToneCurve) -> OpResult {
        frame.validate()?;
        if frame.geometry() != self.geometry {
            return Err(FrameError(format!("frame {:?} staged into a slot for {:?}", frame.geometry(), self.geometry)).into());
        }
        self.pixels.clear();
        self.pixels.extend_from_slice(&frame.data[..frame.data.len().min(self.geometry.bytes())]);
        self.tone.clone_from(tone);
        Ok(())
    }

    fn frame(&self) -> FrameRef<'_> {
        let g = self.geometry;
        FrameRef { data: &self.pixels, width: g.width, height: g.height, stride: g.stride, format: g.format }
    }

    pub(super) fn preprocess_into(&mut self, input: &mut [f32], w: usize, h: usize) -> OpResult {
        let t0 = Instant::now();
        preprocess_toned(&self.frame(), &self.tone, w, h, input)?;
        self.phases.preprocess_ms += ms_since(t0);
        Ok(())
    }

    pub(super) fn postprocess_logits(&mut self, logits: &[f32], d: FrameOutDims) -> OpResult {
        let t0 = Instant::now();
        let needed = d.logits_w * d.logits_h * d.labels;
        super::check("frame logits", needed, logits.len())?;
        let spec = PostprocessSpec {
            logits_w: d.logits_w,
            logits_h: d.logits_h,
            labels: d.labels,
            road_classes: &self.road_classes,
            threshold: d.threshold,
            logit_scale: d.logit_scale,
        };
        let (w, h) = (self.geometry.width, self.geometry.height);
        self.postprocessor.run(&logits[..needed], &spec, w, h, &mut self.segmentation);
        self.phases.postprocess_ms += ms_since(t0);
        Ok(())
    }

    pub(super) fn collect(&mut self, out: &mut Segmentation) -> Result<Option<HostPhases>, BackendError> {
        std::mem::swap(out, &mut self.segmentation);
        if !self.pixel_confidence {
            // This frame's confidence buffer goes back to be written next time.
            std::mem::swap(&mut out.confidence, &mut self.segmentation.confidence);
            out.confidence.clear();
        }
        Ok(Some(std::mem::take(&mut self.phases)))
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
