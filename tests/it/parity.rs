//! Rule: the engine reproduces HF transformers' SegFormer logits (float32
//! reference) on every backend, for the shared fixtures and for odd shapes.


use std::path::Path;
use std::sync::Arc;

use crate::common::*;
use roadseg::backend::Backend;
use roadseg::backend::cpu::preprocess;
use roadseg::engine::{FrameRef, PixelFormat};
use roadseg::npy;


/// The bar: max |ours-ref| <= 1e-3 * max(1, max|ref|), mean <= 1e-4.
fn check_against_reference<B: Backend>(b: Arc<B>, dir: &Path) {
    let reference = npy::read_f32(dir.join("logits.npy")).unwrap();
    let (ours, shape) = fixture_logits(b, dir);
    assert_eq!(shape, reference.shape, "{}: logits shape", dir.display());
    let (max, mean) = diff(&ours, &reference.data);
    let bound = 1e-3 * abs_max(&reference.data).max(1.0);
    eprintln!("{}: max diff {max:.3e} (bound {bound:.3e}), mean diff {mean:.3e}", dir.display());
    assert!(max <= bound, "{}: max diff {max} > {bound}", dir.display());
    assert!(mean <= 1e-4, "{}: mean diff {mean} > 1e-4", dir.display());
}

fn all_cases<B: Backend>(b: Arc<B>) {
    for case in LOCAL_CASES {
        check_against_reference(b.clone(), &repo().join("tests/data").join(case));
    }
    for case in SHARED_CASES {
        if let Some(dir) = shared(&format!("fixtures/segformer/{case}")) {
            check_against_reference(b.clone(), &dir);
        }
    }
}

#[test]
fn cpu_matches_hf_reference_on_all_fixtures() {
    all_cases(cpu_backend());
}

#[test]
fn image_preprocessing_matches_reference_pixel_values() {
    let Some(dir) = shared("fixtures/segformer/b0-image-1024x576") else { return };
    let img = roadseg::images::load_rgb(&dir.join("input.png")).unwrap();
    let reference = npy::read_f32(dir.join("pixel_values.npy")).unwrap();
    let (h, w) = (reference.shape[2], reference.shape[3]);
    let frame = FrameRef::packed(img.as_raw(), img.width() as usize, img.height() as usize, PixelFormat::Rgb);
    let mut hwc = vec![0.0; h * w * 3];
    preprocess(&frame, w, h, &mut hwc).unwrap();
    let ours = roadseg::engine::hwc_to_chw(&hwc, h, w, 3);
    let (max, mean) = diff(&ours, &reference.data);
    eprintln!("pixel_values: max diff {max:.3e}, mean {mean:.3e}");
    assert!(max <= 1e-4, "pixel_values max diff {max}");

    // RGBA input with row padding gives the same values.
    let (iw, ih) = (img.width() as usize, img.height() as usize);
    let stride = iw * 4 + 12;
    let mut rgba = vec![0u8; stride * ih];
    for y in 0..ih {
        for x in 0..iw {
            let p = img.get_pixel(x as u32, y as u32).0;
            rgba[y * stride + x * 4..y * stride + x * 4 + 4].copy_from_slice(&[p[0], p[1], p[2], 255]);
        }
    }
    let frame = FrameRef { data: &rgba, width: iw, height: ih, stride, format: PixelFormat::Rgba };
    let mut hwc2 = vec![0.0; h * w * 3];
    preprocess(&frame, w, h, &mut hwc2).unwrap();
    assert_eq!(hwc, hwc2);
}

#[test]
fn image_frame_path_matches_reference_logits() {
    let Some(dir) = shared("fixtures/segformer/b0-image-1024x576") else { return };
    let img = roadseg::images::load_rgb(&dir.join("input.png")).unwrap();
    let reference = npy::read_f32(dir.join("logits.npy")).unwrap();
    let mut e = engine(cpu_backend(), &dir, 1024, 576, vec![1.0]);
    e.set_keep_logits(true);
    let frame = FrameRef::packed(img.as_raw(), img.width() as usize, img.height() as usize, PixelFormat::Rgb);
    let seg = e.run_frame(&frame).unwrap().clone();
    assert_eq!((seg.width, seg.height), (1280, 720), "classes at the frame's own resolution");
    let (lw, lh) = e.logits_size();
    let ours = roadseg::engine::hwc_to_chw(e.logits(), lh, lw, e.num_labels());
    let (max, _) = diff(&ours, &reference.data);
    assert!(max <= 1e-3 * abs_max(&reference.data).max(1.0), "frame path max diff {max}");
    assert!(seg.confidence.iter().all(|&p| (0.0..=1.0 + 1e-6).contains(&p)));
    assert!(seg.mean_confidence > 0.0);
}

#[test]
fn multi_scale_averages_logits_at_base_resolution() {
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let pv = npy::read_f32(dir.join("pixel_values.npy")).unwrap();
    let (h, w) = (pv.shape[2], pv.shape[3]);
    let hwc = roadseg::engine::chw_to_hwc(&pv.data, h, w, 3);
    let mut single = engine(cpu_backend(), &dir, w, h, vec![1.0]);
    let mut multi = engine(cpu_backend(), &dir, w, h, vec![0.9, 1.0, 1.1]);
    let a = single.run_normalized(&hwc).unwrap().to_vec();
    let b = multi.run_normalized(&hwc).unwrap().to_vec();
    assert_eq!(single.logits_size(), multi.logits_size());
    assert_eq!(a.len(), b.len());
    assert!(b.iter().all(|v| v.is_finite()));
    let (max, _) = diff(&a, &b);
    assert!(max > 1e-4, "other scales must contribute");
    // The same frame twice gives the same logits: buffers are reused, not leaked into.
    let again = multi.run_normalized(&hwc).unwrap().to_vec();
    assert_eq!(b, again);
}
