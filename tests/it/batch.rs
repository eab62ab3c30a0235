//! Rule: a batch of N frames through `run_batch` gives each frame the logits
//! and segmentation its own single-frame run gives, in order, on every
//! backend (the CUDA half lives in cuda.rs and reuses `batch_vs_singles`).

use std::path::Path;

use crate::common::*;
use roadseg::backend::Backend;
use roadseg::engine::{Engine, FrameRef, PixelFormat, Segmentation};
use roadseg::model::{MAX_BATCH, ModelError, Segformer};

/// Three different frames in three formats and sizes (owned pixels).
pub struct TestFrames {
    rgb: Vec<u8>,
    rgba: Vec<u8>,
    nv12: Vec<u8>,
}

impl TestFrames {
    pub fn new() -> Self {
        let pattern = |w: usize, h: usize, ch: usize, seed: usize| -> Vec<u8> {
            (0..w * h * ch).map(|i| ((i / ch % w) * (3 + seed) + (i / ch / w) * (5 + seed) + (i % ch) * 40 * seed) as u8).collect()
        };
        let (nw, nh) = (256, 144);
        let nv12 = (0..nw * nh * 3 / 2).map(|i| ((i * 31 + i / nw * 17) % 256) as u8).collect();
        TestFrames { rgb: pattern(320, 180, 3, 1), rgba: pattern(301, 203, 4, 2), nv12 }
    }

    pub fn frames(&self) -> [FrameRef<'_>; 3] {
        [
            FrameRef::packed(&self.rgb, 320, 180, PixelFormat::Rgb),
            FrameRef::packed(&self.rgba, 301, 203, PixelFormat::Rgba),
            FrameRef::packed(&self.nv12, 256, 144, PixelFormat::Nv12),
        ]
    }
}

/// Each frame's (logits `[lh, lw, labels]`, segmentation): first all of them
/// as one batch, then one at a time, on the same engine.
pub type Outputs = Vec<(Vec<f32>, Segmentation)>;

pub fn batch_vs_singles<B: Backend>(e: &mut Engine<B>, frames: &[FrameRef<'_>]) -> (Outputs, Outputs) {
    let mut logits = vec![Vec::new(); frames.len()];
    let segs = e.run_batch(frames, Some(&mut |i: usize, l: &mut [f32]| logits[i] = l.to_vec())).expect("batch runs").to_vec();
    assert_eq!(segs.len(), frames.len());
    let batched: Outputs = logits.into_iter().zip(segs).collect();
    e.set_keep_logits(true);
    let singles = frames
        .iter()
        .map(|f| {
            let seg = e.run_frame(f).expect("frame runs").clone();
            (e.logits().to_vec(), seg)
        })
        .collect();
    e.set_keep_logits(false);
    (batched, singles)
}

fn cpu_batch_equals_singles(dir: &Path, w: usize, h: usize, scales: Vec<f32>) {
    let owned = TestFrames::new();
    let frames = owned.frames();
    let mut e = engine(cpu_backend(), dir, w, h, scales);
    let (batched, singles) = batch_vs_singles(&mut e, &frames);
    for (i, ((bl, bs), (sl, ss))) in batched.iter().zip(&singles).enumerate() {
        assert!(!bl.is_empty(), "the filter saw frame {i}");
        let (max, _) = diff(bl, sl);
        let bound = 1e-5 * abs_max(sl).max(1.0);
        eprintln!("{} frame {i}: max logit diff {max:.3e} (bound {bound:.3e})", dir.display());
        // The GEMMs see 3x the rows, and the gemm crate may block the
        // reduction differently for a taller matrix: equal up to f32 rounding.
        assert!(max <= bound, "frame {i}: batched logits differ by {max}");
        assert_eq!((bs.width, bs.height), (frames[i].width, frames[i].height), "frame {i} at its own size");
        let same = bs.classes.iter().zip(&ss.classes).filter(|(a, b)| a == b).count();
        assert!(same as f64 >= 0.9999 * ss.classes.len() as f64, "frame {i}: {same} of {} classes agree", ss.classes.len());
    }
    // The frames differ, so a batch that mixed images up could not pass.
    assert_ne!(singles[0].0, singles[1].0);
    // A second batch reuses the instance and its buffers: same answers.
    let again = e.run_batch(&frames, None).expect("batch runs").to_vec();
    let first: Vec<_> = batched.iter().map(|(_, s)| s.classes.clone()).collect();
    assert_eq!(first, again.iter().map(|s| s.classes.clone()).collect::<Vec<_>>());
}

#[test]
fn cpu_batch_of_three_equals_three_single_frames() {
    // Rule: on the CPU, three different frames (RGB, RGBA, NV12; three sizes) as one batch get the logits (within 1e-5 relative, exactly here) and classes of their single-frame runs, in order, on the local fixture and the tiny 1024x576 model.
    cpu_batch_equals_singles(&repo().join("tests/data/odd-bf16-203x141"), 224, 160, vec![1.0]);
    if let Some(dir) = shared("fixtures/segformer/tiny-1024x576") {
        cpu_batch_equals_singles(&dir, 1024, 576, vec![1.0]);
    }
}

#[test]
fn multi_scale_batches_run_frame_by_frame_with_the_same_results() {
    // Rule: a multi-scale engine takes a batch frame by frame and returns what single runs return.
    cpu_batch_equals_singles(&repo().join("tests/data/odd-bf16-203x141"), 224, 160, vec![0.9, 1.0]);
}

#[test]
fn batch_sizes_outside_the_bound_are_errors() {
    // Rule: a model for 0 or more than MAX_BATCH images, or a batch of more frames, is an error, not a panic; an empty batch is empty.
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let b = cpu_backend();
    let weights = load(&dir, &*b);
    for n in [0, MAX_BATCH + 1] {
        assert!(matches!(Segformer::batched(weights.clone(), &*b, 224, 160, n), Err(ModelError::Batch(m)) if m == n));
    }
    let owned = TestFrames::new();
    let frames: Vec<_> = (0..MAX_BATCH + 1).map(|i| owned.frames()[i % 3]).collect();
    let mut e = engine(b, &dir, 224, 160, vec![1.0]);
    assert!(e.run_batch(&frames, None).is_err(), "{} frames are refused", MAX_BATCH + 1);
    assert!(e.run_batch(&[], None).expect("an empty batch").is_empty());
}

#[test]
fn frames_of_one_geometry_share_a_batch_without_sharing_a_slot() {
    // Rule: several frames of the same size and format in one batch (streams of one camera model) each keep their own pixels and results, with a filter or without, batch after batch.
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let (w, h) = (160, 90);
    let owned: Vec<Vec<u8>> = (0..4).map(|s| (0..w * h * 3).map(|i| ((i / 3 % w) * (2 + s) + (i / 3 / w) * (7 - s) + (i % 3) * 50) as u8).collect()).collect();
    let frames: Vec<_> = owned.iter().map(|p| FrameRef::packed(p, w, h, PixelFormat::Rgb)).collect();
    let mut e = engine(cpu_backend(), &dir, 224, 160, vec![1.0]);
    let (batched, singles) = batch_vs_singles(&mut e, &frames);
    for (i, ((bl, bs), (sl, ss))) in batched.iter().zip(&singles).enumerate() {
        let (max, _) = diff(bl, sl);
        assert!(max <= 1e-5 * abs_max(sl).max(1.0), "frame {i}: batched logits differ by {max}");
        assert_eq!(bs.classes, ss.classes, "frame {i}");
    }
    assert_ne!(singles[0].1.classes, singles[1].1.classes, "the frames differ");
    // Without a filter, and again in another order: each frame still gets its own result.
    let reversed: Vec<_> = frames.iter().rev().copied().collect();
    let again: Vec<_> = e.run_batch(&reversed, None).unwrap().iter().map(|s| s.classes.clone()).collect();
    for (i, classes) in again.iter().rev().enumerate() {
        assert_eq!(classes, &singles[i].1.classes, "frame {i} in reverse order");
    }
}
