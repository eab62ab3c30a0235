//! Rule: a frame drawn in the GPU frame path (road, full palette, unknown
//! checker, hood; RGBA and NV12; single frames, batches, and the smoothing
//! round trip) equals the CPU annotator's tint of the same segmentation byte
//! for byte. The annotator has no GStreamer in it, so this builds (and runs
//! on a GPU machine) in the engine-only device build.

#![cfg(feature = "cuda")]

use half::f16;
use roadseg::annotate::{Annotator, FrameStats, Origin};
use roadseg::backend::cuda::CudaOptions;
use roadseg::engine::{Engine, EngineOptions, FrameRef, PixelFormat};
use roadseg::images::OverlayStyle;
use roadseg::temporal::HoodMask;

use crate::common::gpu::{backend, gpu_or_skip, test_frames};
use crate::common::*;

#[test]
fn gpu_overlays_equal_the_cpu_annotator_bit_for_bit() {
    let Some(d) = gpu_or_skip() else { return };
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let b = backend::<f16>(&d, CudaOptions::default());
    let (rgba, nv12, fw, fh, _) = test_frames();
    let rgba: Vec<u8> = rgba.chunks(fw * 4 + 16).flat_map(|row| row[..fw * 4].to_vec()).collect();
    let frames = [FrameRef::packed(&rgba, fw, fh, PixelFormat::Rgba), FrameRef::packed(&nv12, fw, fh, PixelFormat::Nv12)];
    // The median confidence as the threshold leaves about half the pixels unknown.
    let mut confidence = engine(b.clone(), &dir, 224, 160, vec![1.0]).run_frame(&frames[0]).unwrap().confidence.clone();
    confidence.sort_by(f32::total_cmp);
    let threshold = confidence[confidence.len() / 2];
    let options = EngineOptions { width: 224, height: 160, scales: vec![1.0], road_classes: vec![1], ego_class: None, confidence_threshold: threshold, exposure: roadseg::exposure::Exposure::OFF, pixel_confidence: true };
    let mut e = Engine::new(b.clone(), load(&dir, &*b), options).unwrap();
    assert!(e.annotates_frames());
    let hood = HoodMask::from_tops(fw, fh, (0..fw).map(|x| (fh - 20 + x % 7) as u32).collect());
    for full_palette in [None, Some(vec![[10, 200, 30], [200, 10, 30], [30, 10, 200]])] {
        let a = Annotator { style: OverlayStyle { road_classes: vec![1], full_palette, ..OverlayStyle::default() }, show_text: false, show_origin: false };
        let check = |what: &str, frame: &FrameRef<'_>, seg: &roadseg::engine::Segmentation, gpu: &[u8]| {
            if frame.format == PixelFormat::Rgba {
                assert!(seg.classes.contains(&roadseg::engine::UNKNOWN), "{what}: some pixels are unknown");
            }
            let mut cpu = frame.data.to_vec();
            a.draw(&mut cpu, frame.format, seg, &hood, &FrameStats::default(), Origin { stream: "cam", decoded_at: std::time::SystemTime::UNIX_EPOCH });
            let differ = cpu.iter().zip(gpu).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "{what} {:?}: {differ} bytes differ", frame.format);
            assert_ne!(gpu, frame.data, "{what}: the overlay drew something");
        };
        for frame in &frames {
            let overlay = a.overlay(&hood, fw, fh);
            e.set_overlays(std::slice::from_ref(&overlay));
            let seg = e.run_frame(frame).unwrap().clone();
            check("single", frame, &seg, e.annotated(0).expect("drawn on the GPU"));
            let seg = e.run_frame_filtered(frame, Some(&mut |_: &mut [f32]| {})).unwrap().clone();
            check("filtered", frame, &seg, e.annotated(0).expect("drawn on the GPU"));
        }
        let overlays = vec![a.overlay(&hood, fw, fh); 2];
        e.set_overlays(&overlays);
        let segs = e.run_batch(&frames, None).unwrap().to_vec();
        for (i, frame) in frames.iter().enumerate() {
            check("batch", frame, &segs[i], e.annotated(i).expect("drawn on the GPU"));
        }
    }
}
