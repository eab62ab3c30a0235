//! An engine on a CUDA backend that runs the whole frame on the GPU: staged
//! uint8 frame in, classes and confidence out, recorded with the model into
//! one CUDA graph per frame geometry. Multi-scale presets and callers that
//! need the logits on the host take the generic (host pre/post) path.

use std::ops::{Deref, DerefMut};
use std::time::Instant;

use cudarc::cublaslt::{CudaBlasLT, Matmul};

use super::pipeline::{Engine, EngineError, LogitsFilter};
use crate::backend::Backend;
use crate::backend::cuda::{CudaBackend, FrameArena, GemmElem};
use crate::frame::{FrameRef, Segmentation};

/// Recording keys of frame arenas start here (model passes use 0..).
const FRAME_KEY_BASE: usize = 1 << 32;
/// Frame geometries kept at once; a stream of new sizes evicts the oldest.
const MAX_ARENAS: usize = 8;

pub struct CudaEngine<T: GemmElem>
where
    CudaBlasLT: Matmul<T>,
{
    engine: Engine<CudaBackend<T>>,
    arenas: Vec<FrameArena>,
    next_key: usize,
    /// Run frames through the host path so `logits()` holds them (infer --logits-out).
    pub keep_logits: bool,
    /// Off: frames always take the host path (debugging, `ROADSEG_CUDA_HOST_FRAMES=1`).
    pub device_frames: bool,
}

impl<T: GemmElem> CudaEngine<T>
where
    CudaBlasLT: Matmul<T>,
{
    pub fn new(engine: Engine<CudaBackend<T>>, device_frames: bool) -> Self {
        CudaEngine { engine, arenas: Vec::new(), next_key: FRAME_KEY_BASE, keep_logits: false, device_frames }
    }

    /// A logits filter needs the logits on the host, so it takes the host path.
    pub fn run_frame_filtered(&mut self, frame: &FrameRef<'_>, filter: Option<LogitsFilter<'_>>) -> Result<&Segmentation, EngineError> {
        if filter.is_some() || self.keep_logits || !self.device_frames || self.engine.device_pass().is_none() {
            return self.engine.run_frame_filtered(frame, filter);
        }
        frame.validate()?;
        let t0 = Instant::now();
        let idx = self.arena_for(frame)?;
        let pass = self.engine.device_pass().expect("checked above");
        let arena = &mut self.arenas[idx];
        arena.stage(frame)?;
        let b = pass.backend.clone();
        let model = pass.model;
        let (w, h) = model.input_size();
        let (lw, lh) = model.logits_size();
        let labels = model.weights().num_labels();
        let threshold = pass.options.confidence_threshold;
        b.run_recorded(arena.key, &mut || {
            b.enqueue_frame_in(arena, model.input_mut(), w, h)?;
            model.forward(&b)?;
            b.enqueue_frame_out(arena, model.logits(), (lw, lh, labels), threshold)?;
            Ok::<(), EngineError>(())
        })?;
        b.sync()?;
        arena.collect(pass.segmentation);
        // One graph: the split between pre/post and the model is not observable.
        pass.timings.preprocess_ms = 0.0;
        pass.timings.inference_ms = t0.elapsed().as_secs_f64() * 1e3;
        pass.timings.postprocess_ms = 0.0;
        pass.timings.gpu_ms = b.take_device_ms();
        Ok(pass.segmentation)
    }

    pub fn run_frame(&mut self, frame: &FrameRef<'_>) -> Result<&Segmentation, EngineError> {
        self.run_frame_filtered(frame, None)
    }

    fn arena_for(&mut self, frame: &FrameRef<'_>) -> Result<usize, EngineError> {
        if let Some(i) = self.arenas.iter().position(|a| a.fits(frame)) {
            return Ok(i);
        }
        if self.arenas.len() >= MAX_ARENAS {
            let old = self.arenas.remove(0);
            self.engine.backend().forget_recording(old.key);
        }
        let key = self.next_key;
        self.next_key += 1;
        let road = self.engine.options().road_classes.clone();
        let arena = self.engine.backend().frame_arena(frame, &road, key).map_err(|e| EngineError::Backend(e.into()))?;
        self.arenas.push(arena);
        Ok(self.arenas.len() - 1)
    }
}

impl<T: GemmElem> Deref for CudaEngine<T>
where
    CudaBlasLT: Matmul<T>,
{
    type Target = Engine<CudaBackend<T>>;
    fn deref(&self) -> &Self::Target {
        &self.engine
    }
}

impl<T: GemmElem> DerefMut for CudaEngine<T>
where
    CudaBlasLT: Matmul<T>,
{
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.engine
    }
}

