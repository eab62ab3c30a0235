//! Rule: the hood estimate follows real bonnets. Each bonnet (with its
//! dashboard and windshield reflections) drawn in tools/eval/unseen-road.json
//! is cut from its BDD100K frame along the drawn outline and pasted, still,
//! onto the moving real highway clip, which has no bonnet of its own; the
//! estimate `roadseg process --hood-out` writes must match the pasted outline,
//! after the clip's first two seconds and after all of it (8.8 s), at the
//! model input the daemon uses by default (1024 wide). At 320x192 the
//! product model's ego class reaches up into the road above three of these
//! bonnets (hood IoU 0.41-0.74, 2026-11-30): the hood is held where users
//! run it, not at a size the model was never trained for.

use std::path::Path;

use roadseg::eval::road_polygons::RoadPolygonSet;

use crate::common::*;

/// Issue 20's bar for real bonnets.
const HOOD_IOU_FLOOR: f64 = 0.8;
const CLIP_W: u32 = 960;
const CLIP_H: u32 = 540;

#[test]
fn the_hood_estimate_follows_seven_real_bonnets() {
    let (Some(clip), Some(bdd)) = (
        shared("data/dashcam/solidWhiteRight.mp4"),
        shared("data/dashcam/bdd"),
    ) else {
        return;
    };
    let set = RoadPolygonSet::load(&repo().join("tools/eval/unseen-road.json")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for frame in set.frames.iter().filter(|f| !f.hood.is_empty()) {
        let image = frame.source["image"]
            .as_str()
            .expect("hoods are drawn on stills");
        let still = image::open(bdd.parent().unwrap().join(image))
            .unwrap()
            .to_rgb8();
        let truth = scaled_mask(&frame.hood_mask().unwrap(), frame.size, CLIP_W, CLIP_H);
        let bonnet = tmp.path().join(format!("{}.png", frame.name));
        cut_out(&still, &truth).save(&bonnet).unwrap();
        let early = estimate_on_composite(&clip, &bonnet, &truth, tmp.path(), Some(2));
        let whole = estimate_on_composite(&clip, &bonnet, &truth, tmp.path(), None);
        eprintln!(
            "{}: hood IoU {early:.4} after 2 s, {whole:.4} after the clip (bonnet {:.1}% of the frame; {})",
            frame.name,
            100.0 * share(&truth),
            frame.what
        );
        results.push((frame.name.clone(), early.min(whole)));
    }
    assert_eq!(results.len(), 7);
    let mean = results.iter().map(|(_, iou)| iou).sum::<f64>() / results.len() as f64;
    eprintln!(
        "mean hood IoU (the lower of 2 s and the whole clip) over {} real bonnets: {mean:.4}",
        results.len()
    );
    let below: Vec<_> = results.iter().filter(|(_, iou)| *iou < HOOD_IOU_FLOOR).collect();
    assert!(below.is_empty(), "hood IoU under {HOOD_IOU_FLOOR}: {below:?}");
}

fn share(mask: &[u8]) -> f64 {
    mask.iter().filter(|&&m| m == 1).count() as f64 / mask.len() as f64
}

/// Nearest-neighbour resample of a 0/1 mask drawn at `size`.
fn scaled_mask(mask: &[u8], size: [usize; 2], w: u32, h: u32) -> Vec<u8> {
    let (sw, sh) = (size[0], size[1]);
    let mut out = Vec::with_capacity((w * h) as usize);
    for y in 0..h as usize {
        let sy = ((y as f64 + 0.5) * sh as f64 / h as f64) as usize;
        for x in 0..w as usize {
            let sx = ((x as f64 + 0.5) * sw as f64 / w as f64) as usize;
            out.push(mask[sy.min(sh - 1) * sw + sx.min(sw - 1)]);
        }
    }
    out
}

/// The still at the clip's size, opaque inside the mask, transparent elsewhere.
fn cut_out(still: &image::RgbImage, mask: &[u8]) -> image::RgbaImage {
    let scaled =
        image::imageops::resize(still, CLIP_W, CLIP_H, image::imageops::FilterType::Triangle);
    let mut out = image::RgbaImage::new(CLIP_W, CLIP_H);
    for (i, (px, src)) in out.pixels_mut().zip(scaled.pixels()).enumerate() {
        *px = image::Rgba([src[0], src[1], src[2], if mask[i] == 1 { 255 } else { 0 }]);
    }
    out
}

fn estimate_on_composite(
    clip: &Path,
    bonnet: &Path,
    truth: &[u8],
    dir: &Path,
    seconds: Option<u32>,
) -> f64 {
    let composite = dir.join("with-bonnet.mp4");
    let mut ffmpeg = std::process::Command::new("ffmpeg");
    ffmpeg
        .args(["-loglevel", "error", "-y", "-i"])
        .arg(clip)
        .arg("-i")
        .arg(bonnet);
    if let Some(s) = seconds {
        ffmpeg.args(["-t", &s.to_string()]);
    }
    ffmpeg.args([
        "-filter_complex",
        "[0:v][1:v]overlay=0:0",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-pix_fmt",
        "yuv420p",
    ]);
    let (ok, _, err) =
        run_with_timeout(ffmpeg.arg(&composite), std::time::Duration::from_secs(120));
    assert!(ok, "ffmpeg: {err}");
    let hood_png = dir.join("hood.png");
    let out = dir.join("out.mp4");
    let (code, _, stderr) = roadseg(&[
        "process",
        composite.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--device",
        "cpu",
        "--hood-out",
        hood_png.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let estimate = image::open(&hood_png).unwrap().to_luma8();
    let truth: Vec<u8> = truth.iter().map(|&m| m * 255).collect();
    roadseg::synth::road_iou(estimate.as_raw(), &truth).unwrap()
}
