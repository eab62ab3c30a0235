//! Rule: the frame path is one path on every backend: keeping the logits on
//! the host or filtering them changes where they go, not the segmentation;
//! a filter's rewrite reaches the classes; the kept logits are those of the
//! preprocessed frame; frames of many geometries each get their own slot;
//! a dark frame reaches the model through its tone curve, alone or in a
//! batch, and says so; leaving the per-pixel confidence out (the commands'
//! setting) empties it and changes nothing else. One body per rule, run on the CPU and, where present, on the GPU.

use std::sync::Arc;

use crate::common::*;
use roadseg::backend::Backend;
use roadseg::backend::cpu::{preprocess, preprocess_toned};
use roadseg::exposure::Exposure;
use roadseg::engine::{Engine, EngineOptions, FrameRef, PixelFormat, UNKNOWN};

/// A 150x94 RGB frame with structure at every scale.
fn frame_pixels() -> (Vec<u8>, usize, usize) {
    let (w, h) = (150, 94);
    let rgb = (0..w * h * 3).map(|i| ((i * 37 + (i / (w * 3)) * 11) % 256) as u8).collect();
    (rgb, w, h)
}

fn new_engine<B: Backend>(b: &Arc<B>, scales: Vec<f32>) -> Engine<B> {
    engine(b.clone(), &repo().join("tests/data/odd-bf16-203x141"), 96, 64, scales)
}

/// `confidence_tolerance`: 0 where the backend keeps f32 logits (the CPU).
fn keeping_or_filtering_logits_changes_nothing<B: Backend>(b: Arc<B>, confidence_tolerance: f32) {
    let (rgb, w, h) = frame_pixels();
    let frame = FrameRef::packed(&rgb, w, h, PixelFormat::Rgb);
    for scales in [vec![1.0], vec![0.9, 1.0, 1.1]] {
        let mut e = new_engine(&b, scales.clone());
        let plain = e.run_frame(&frame).unwrap().clone();
        e.set_keep_logits(true);
        let kept = e.run_frame(&frame).unwrap().clone();
        let mut calls = 0;
        let filtered = e.run_frame_filtered(&frame, Some(&mut |_: &mut [f32]| calls += 1)).unwrap().clone();
        assert_eq!(calls, 1, "the filter ran once");
        for (name, other) in [("kept logits", &kept), ("identity filter", &filtered)] {
            let agree = plain.classes.iter().zip(&other.classes).filter(|(a, b)| a == b).count() as f64 / plain.classes.len() as f64;
            let (max, _) = diff(&plain.confidence, &other.confidence);
            assert!(agree >= 0.999, "{scales:?} {name}: class agreement {agree}");
            assert!(max <= confidence_tolerance.max(1e-5), "{scales:?} {name}: confidence differs by {max}");
        }
        assert_eq!((plain.width, plain.height), (w, h));
    }
}

fn a_filter_rewrites_the_classes<B: Backend>(b: Arc<B>) {
    let (rgb, w, h) = frame_pixels();
    let frame = FrameRef::packed(&rgb, w, h, PixelFormat::Rgb);
    for scales in [vec![1.0], vec![0.9, 1.1]] {
        let mut e = new_engine(&b, scales.clone());
        let labels = e.num_labels();
        // Class 2 wins everywhere, by far.
        let mut favour_two = |logits: &mut [f32]| logits.chunks_mut(labels).for_each(|px| px.iter_mut().enumerate().for_each(|(k, v)| *v = if k == 2 { 20.0 } else { 0.0 }));
        let seg = e.run_frame_filtered(&frame, Some(&mut favour_two)).unwrap();
        assert!(seg.classes.iter().all(|&c| c == 2), "{scales:?}: every pixel took the filter's class");
        assert!(seg.classes.iter().all(|&c| c != UNKNOWN));
        // The next unfiltered frame is the model's own again.
        let seg = e.run_frame(&frame).unwrap();
        assert!(seg.classes.iter().any(|&c| c != 2), "{scales:?}: the rewrite did not stick");
    }
}

fn kept_logits_are_the_preprocessed_frames<B: Backend>(b: Arc<B>, tolerance: f32) {
    let (rgb, w, h) = frame_pixels();
    let frame = FrameRef::packed(&rgb, w, h, PixelFormat::Rgb);
    let mut e = new_engine(&b, vec![1.0]);
    e.set_keep_logits(true);
    e.run_frame(&frame).unwrap();
    let from_frame = e.logits().to_vec();
    let mut hwc = vec![0.0; 96 * 64 * 3];
    preprocess(&frame, 96, 64, &mut hwc).unwrap();
    let normalized = e.run_normalized(&hwc).unwrap();
    let (max, _) = diff(&from_frame, normalized);
    assert!(max <= tolerance, "logits of the frame path and of its preprocessed input differ by {max}");
}

fn many_geometries_each_get_a_slot<B: Backend>(b: Arc<B>) {
    let mut e = new_engine(&b, vec![1.0]);
    let (rgb, w, h) = frame_pixels();
    let reference = e.run_frame(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb)).unwrap().clone();
    for i in 0..roadseg::model::MAX_BATCH + 10 {
        let (fw, fh) = (40 + 2 * i, 30 + 2 * i);
        let nv12 = vec![(i * 19) as u8; fw * fh * 3 / 2];
        let seg = e.run_frame(&FrameRef::packed(&nv12, fw, fh, PixelFormat::Nv12)).unwrap();
        assert_eq!((seg.width, seg.height, seg.classes.len()), (fw, fh, fw * fh));
    }
    // The first geometry's slot was evicted and is made again: same result.
    let again = e.run_frame(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb)).unwrap();
    assert_eq!(again.classes, reference.classes);
}

/// `tolerance`: of the logits, 0 where the backend keeps f32 logits (the CPU).
fn dark_frames_reach_the_model_brightened<B: Backend>(b: Arc<B>, tolerance: f32) {
    let (w, h) = (150, 94);
    let dark: Vec<u8> = (0..w * h * 3).map(|i| ((i * 37 + (i / (w * 3)) * 11) % 50) as u8).collect();
    let (bright, _, _) = frame_pixels();
    let frame = FrameRef::packed(&dark, w, h, PixelFormat::Rgb);
    let tone = Exposure::DEFAULT.curve_for(&frame);
    assert!(!tone.is_identity(), "the test frame is dark");
    let mut e = engine_exposed(b.clone(), &repo().join("tests/data/odd-bf16-203x141"), 96, 64, vec![1.0], Exposure::DEFAULT);
    e.set_keep_logits(true);
    assert_eq!(e.run_frame(&frame).unwrap().brightened, Some(tone.gamma_value()));
    let from_frame = e.logits().to_vec();
    let mut hwc = vec![0.0; 96 * 64 * 3];
    preprocess_toned(&frame, &tone, 96, 64, &mut hwc).unwrap();
    let (max, _) = diff(&from_frame, e.run_normalized(&hwc).unwrap());
    assert!(max <= tolerance, "logits of the dark frame and of its brightened input differ by {max}");
    preprocess(&frame, 96, 64, &mut hwc).unwrap();
    let (max, _) = diff(&from_frame, e.run_normalized(&hwc).unwrap());
    assert!(max > 10.0 * tolerance.max(1e-3), "the curve changed the logits (by {max})");
    // A bright frame after it goes in as it came (the device's table is reset).
    e.set_keep_logits(false);
    let mut plain = new_engine(&b, vec![1.0]);
    let bright_frame = FrameRef::packed(&bright, w, h, PixelFormat::Rgb);
    let expected = plain.run_frame(&bright_frame).unwrap().clone();
    let seg = e.run_frame(&bright_frame).unwrap();
    assert_eq!(seg.brightened, None);
    assert_eq!(seg.classes, expected.classes);
    // In a batch, each frame by its own light.
    e.prepare_batches(&[2]).unwrap();
    let segs = e.run_batch(&[frame, bright_frame], None).unwrap();
    assert_eq!(segs[0].brightened, Some(tone.gamma_value()));
    assert_eq!(segs[1].brightened, None);
}

/// `tolerance`: of the mean confidence, between the engines' separate runs.
fn pixel_confidence_is_only_there_when_asked<B: Backend>(b: Arc<B>, tolerance: f32) {
    let (rgb, w, h) = frame_pixels();
    let (dark, _, _) = frame_pixels();
    let dark: Vec<u8> = dark.iter().map(|v| v / 5).collect();
    let frames = [FrameRef::packed(&rgb, w, h, PixelFormat::Rgb), FrameRef::packed(&dark, w, h, PixelFormat::Rgb)];
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let options = |pixel_confidence| EngineOptions {
        width: 96,
        height: 64,
        scales: vec![1.0],
        road_classes: vec![1],
        ego_class: None,
        confidence_threshold: 0.4,
        exposure: Exposure::OFF,
        pixel_confidence,
    };
    let mut with = Engine::new(b.clone(), load(&dir, &*b), options(true)).unwrap();
    let mut without = Engine::new(b.clone(), load(&dir, &*b), options(false)).unwrap();
    with.prepare_batches(&[2]).unwrap();
    without.prepare_batches(&[2]).unwrap();
    // Twice each, so a reused buffer cannot bring the confidence back.
    for round in 0..2 {
        for frame in &frames {
            let full = with.run_frame(frame).unwrap().clone();
            let lean = without.run_frame(frame).unwrap().clone();
            assert_eq!(full.confidence.len(), w * h, "round {round}: asked for, it is there");
            assert!(lean.confidence.is_empty(), "round {round}: not asked for, it stays empty");
            assert_eq!(lean.classes, full.classes, "round {round}: the classes (and their threshold) are the same");
            assert_eq!(lean.road_coverage, full.road_coverage);
            assert!((lean.mean_confidence - full.mean_confidence).abs() <= tolerance, "the mean is always there: {} vs {}", lean.mean_confidence, full.mean_confidence);
        }
        let full: Vec<_> = with.run_batch(&frames, None).unwrap().to_vec();
        let lean = without.run_batch(&frames, None).unwrap();
        for (l, f) in lean.iter().zip(&full) {
            assert!(l.confidence.is_empty() && f.confidence.len() == w * h, "round {round}: in a batch too");
            assert_eq!(l.classes, f.classes);
        }
    }
}

#[test]
fn cpu_frame_path() {
    let b = cpu_backend();
    // The CPU leaves overlays to its caller, who tints the frame it holds in place.
    let mut e = new_engine(&b, vec![1.0]);
    assert!(!e.annotates_frames());
    let (rgb, w, h) = frame_pixels();
    let style = roadseg::images::OverlayStyle::default();
    e.set_overlays(&[roadseg::images::frame_overlay(&style, None, w, h)]);
    e.run_frame(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb)).unwrap();
    assert!(e.annotated(0).is_none());
    keeping_or_filtering_logits_changes_nothing(b.clone(), 0.0);
    a_filter_rewrites_the_classes(b.clone());
    kept_logits_are_the_preprocessed_frames(b.clone(), 0.0);
    dark_frames_reach_the_model_brightened(b.clone(), 0.0);
    pixel_confidence_is_only_there_when_asked(b.clone(), 0.0);
    many_geometries_each_get_a_slot(b);
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_frame_path() {
    use roadseg::backend::cuda::{CudaBackend, CudaDevice, CudaOptions, first_gpu};
    let (gpu, info) = match first_gpu() {
        Ok(found) => found,
        Err(why) => return roadseg::test_skip::skip(&format!("no usable CUDA GPU here ({why})")),
    };
    let d = CudaDevice::open(&gpu, &info, CudaOptions::DEFAULT.sync_wait).unwrap_or_else(|e| panic!("GPU {} is usable but did not open: {e}", gpu.name));
    let b = Arc::new(CudaBackend::<half::f16>::new(d, CudaOptions::default()).expect("CUDA backend"));
    // The round trip stores the averaged logits back in fp16.
    keeping_or_filtering_logits_changes_nothing(b.clone(), 2e-3);
    a_filter_rewrites_the_classes(b.clone());
    // Pre-processing on the GPU vs the CPU's, through an fp16 model.
    kept_logits_are_the_preprocessed_frames(b.clone(), 5e-2);
    dark_frames_reach_the_model_brightened(b.clone(), 5e-2);
    // Two engines, two graphs: the device's atomics may sum in another order.
    pixel_confidence_is_only_there_when_asked(b.clone(), 1e-4);
    many_geometries_each_get_a_slot(b);
}
