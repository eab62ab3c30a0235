//! Rule: the bundled default model finds the road: a synthetic drive pushed
//! through the whole pipeline (render -> H.264 -> decode -> infer -> masks)
//! keeps a high road IoU against the renderer's ground truth, with and without
//! temporal smoothing; the hood estimate matches the drawn bonnet; smoothing
//! at least halves the mask flicker on real dashcam footage; its CamVid val
//! figures and its road IoU on hand-labelled unseen frames stay where the
//! model card puts them.


use std::path::{Path, PathBuf};

use crate::common::*;

/// Floor for the bundled model on the synthetic drive, smoothing off. History:
/// 0.817 (preliminary checkpoint), 0.7514 (CPU-trained, CamVid road 0.90);
/// the GPU-trained run 5 measured 0.9588; run 7 (road-scene augmentation)
/// 0.9810; run 11 0.9765; run 15 0.9752; run 16 0.9752; run 17 0.9805; the soup of
/// run 17 and the H100 fine-tune (shipped now) 0.9794.
const ROAD_IOU_FLOOR: f64 = 0.94;
/// The hood estimate against the bonnet the renderer draws (measured 0.98).
const HOOD_IOU_FLOOR: f64 = 0.9;
/// `roadseg eval` of the bundled model on every 4th CamVid val frame (26) at
/// 1024x768, fast preset: road IoU and mIoU as measured for the model card
/// (2026-12-02, scored as painted, unknown below the 0.4 confidence
/// threshold counted as not road: 0.9535; before, plain argmax: grounded
/// road from 65% of the picture down: 0.9526;
/// 2026-12-01, run p58's WiSE-FT of its averaged decode head with p27's:
/// road 0.9523; 2026-11-30, run p27's WiSE-FT of its averaged decode head with the
/// product model before it: road 0.9519; 2026-11-27, the product model, a
/// WiSE-FT interpolation of p2 and the soup below: road 0.9510; 2026-11-26, the soup of run 17 and the H100 fine-tune: 0.9488 and
/// 0.5095; run 17 had 0.9345 and 0.4877, run 16 0.9178 and 0.4791,
/// run 15 0.9240 and 0.4931, run 11 0.9237 and 0.4766, run 7 0.9190 and
/// 0.4706, run 5 0.9478 and 0.4853), and how far a change may move them.
const CAMVID_SUBSET_ROAD: f64 = 0.9535;
const CAMVID_TOLERANCE: f64 = 0.01;
/// The same on every 4th frame of the IDD drives held out from training
/// (scored as painted at the 0.4 confidence threshold, 2026-12-02: 0.8566;
/// plain argmax: grounded road from 65% of the picture down: 0.8570; p58's
/// WiSE-FT, shipped since 2026-12-01: 0.8564; p27's before it: 0.8533; the product model
/// before it 0.8461, 0.8463 since dark frames are brightened for the model,
/// docs/exposure.md; the CamVid soup before it 0.7349).
const IDD_SUBSET_ROAD: f64 = 0.8566;

/// Renders the drive; returns the clip's path.
fn synth(dir: &Path, frames: u32, size: &str, seed: u32, truth: Option<&Path>) -> String {
    let clip = dir.join(format!("drive-{frames}-{size}-{seed}.mp4"));
    let (frames, seed) = (frames.to_string(), seed.to_string());
    let mut args = vec!["synth", "-o", clip.to_str().unwrap(), "--frames", &frames, "--size", size, "--seed", &seed];
    if let Some(t) = truth {
        args.extend(["--masks-out", t.to_str().unwrap()]);
    }
    let (code, _, stderr) = roadseg(&args);
    assert_eq!(code, 0, "{stderr}");
    clip.to_str().unwrap().to_string()
}

/// `roadseg process` on the CPU; returns its summary line.
fn process(clip: &str, out_dir: &Path, extra: &[&str]) -> String {
    let out = out_dir.join("out.mp4");
    let mut args = vec!["process", clip, "-o", out.to_str().unwrap(), "--device", "cpu", "--threshold", "0"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = roadseg(&args);
    assert_eq!(code, 0, "{stderr}");
    stdout
}

fn load_masks(dir: &Path, frames: u32) -> Vec<u8> {
    let mut all = Vec::new();
    for i in 0..frames {
        let m = image::open(dir.join(format!("{i:05}.png"))).unwrap().to_luma8();
        all.extend_from_slice(m.as_raw());
    }
    all
}

/// "road flicker 1.234%" of the process summary, as a share.
fn flicker(summary: &str) -> f64 {
    let after = summary.split("road flicker ").nth(1).unwrap_or_else(|| panic!("no flicker in: {summary}"));
    after.split('%').next().unwrap().parse::<f64>().unwrap() / 100.0
}

#[test]
fn synthetic_drive_road_iou_stays_high_with_and_without_smoothing() {
    let tmp = tempfile::tempdir().unwrap();
    let truth = tmp.path().join("truth");
    let clip = synth(tmp.path(), 12, "640x360", 7, Some(&truth));
    let truth = load_masks(&truth, 12);
    let mut ious = Vec::new();
    for smooth in ["off", "on"] {
        let predicted = tmp.path().join(format!("pred-{smooth}"));
        process(&clip, tmp.path(), &["--smooth", smooth, "--masks-out", predicted.to_str().unwrap()]);
        let iou = roadseg::synth::road_iou(&load_masks(&predicted, 12), &truth).expect("the drive has road");
        eprintln!("synthetic road IoU of the bundled model, smoothing {smooth}: {iou:.4}");
        ious.push(iou);
    }
    assert!(ious[0] >= ROAD_IOU_FLOOR, "road IoU {:.4} < {ROAD_IOU_FLOOR}", ious[0]);
    assert!(ious[1] >= ious[0], "smoothing lowered road IoU: {:.4} < {:.4}", ious[1], ious[0]);
}

#[test]
fn hood_estimate_matches_the_synthetic_bonnet() {
    let tmp = tempfile::tempdir().unwrap();
    let clip = synth(tmp.path(), 40, "640x360", 3, None);
    let hood_png = tmp.path().join("hood.png");
    let stats = tmp.path().join("stats.jsonl");
    // The model size does not matter to the hood: a small one keeps this quick.
    let summary = process(
        &clip,
        tmp.path(),
        &["--size", "320x192", "--hood-out", hood_png.to_str().unwrap(), "--stats-out", stats.to_str().unwrap()],
    );
    let estimate = image::open(&hood_png).unwrap().to_luma8();
    let truth = roadseg::synth::hood_mask(640, 360);
    let iou = roadseg::synth::road_iou(estimate.as_raw(), &truth).unwrap();
    eprintln!("hood IoU through H.264 and the pipeline: {iou:.4} ({summary})");
    assert!(iou >= HOOD_IOU_FLOOR, "hood IoU {iou:.4} < {HOOD_IOU_FLOOR}");

    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&stats).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 40);
    let truth_pct = truth.iter().filter(|&&m| m != 0).count() as f64 / truth.len() as f64 * 100.0;
    let last = lines.last().unwrap()["hood_pct"].as_f64().expect("hood_pct in every line");
    assert!((last - truth_pct).abs() < 1.5, "hood_pct {last} vs drawn {truth_pct:.2}");
    // The model's ego-vehicle class gives the hood from the first frame (issue 35); a model
    // without one has only the motion estimate, which claims nothing before motion is seen.
    let first = lines[0]["hood_pct"].as_f64().expect("hood_pct in every line");
    assert!(first == 0.0 || (first - truth_pct).abs() < 3.0, "first frame: hood_pct {first} vs drawn {truth_pct:.2}");
}

#[test]
fn no_hood_is_claimed_without_one() {
    let tmp = tempfile::tempdir().unwrap();
    let clip = tmp.path().join("nohood.mp4");
    let (code, _, stderr) =
        roadseg(&["synth", "-o", clip.to_str().unwrap(), "--frames", "30", "--size", "480x270", "--seed", "4", "--no-hood"]);
    assert_eq!(code, 0, "{stderr}");
    let summary = process(clip.to_str().unwrap(), tmp.path(), &["--size", "320x192"]);
    assert!(!summary.contains("of the frame"), "a hood was claimed: {summary}");
}

#[test]
fn smoothing_halves_flicker_on_real_dashcam_footage() {
    let Some(clip) = shared("data/dashcam/solidWhiteRight.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let clip = clip.to_str().unwrap();
    let (plain, smoothed) = (process(clip, tmp.path(), &["--smooth", "off"]), process(clip, tmp.path(), &["--smooth", "on"]));
    assert!(!plain.contains("of the frame"), "the clip has no bonnet, yet: {plain}");
    let (plain, smoothed) = (flicker(&plain), flicker(&smoothed));
    eprintln!("road flicker on {clip}: {:.3}% plain, {:.3}% smoothed", plain * 100.0, smoothed * 100.0);
    assert!(smoothed <= 0.5 * plain, "smoothing cut flicker only from {plain:.5} to {smoothed:.5}");
}

#[test]
fn hood_estimate_on_real_footage_with_a_real_bonnet() {
    let (Some(clip), Some(bonnet)) = (shared("data/dashcam/solidWhiteRight.mp4"), shared("data/dashcam/bdd/cc97fab0-f9a08d07.jpg"))
    else {
        return;
    };
    // The real clip has no bonnet of its own: give it the bottom 64 rows of a
    // real BDD100K frame (a white bonnet), still while the highway moves.
    let tmp = tempfile::tempdir().unwrap();
    let composite = tmp.path().join("with-bonnet.mp4");
    let mut ffmpeg = std::process::Command::new("ffmpeg");
    ffmpeg.args(["-loglevel", "error", "-y", "-i"]).arg(&clip).arg("-i").arg(&bonnet).args([
        "-filter_complex",
        "[1:v]scale=960:540,crop=960:64:0:476[strip];[0:v][strip]overlay=0:476",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-pix_fmt",
        "yuv420p",
    ]);
    let (ok, _, err) = run_with_timeout(ffmpeg.arg(&composite), std::time::Duration::from_secs(120));
    assert!(ok, "ffmpeg: {err}");
    let hood_png = tmp.path().join("hood.png");
    let summary = process(composite.to_str().unwrap(), tmp.path(), &["--size", "320x192", "--hood-out", hood_png.to_str().unwrap()]);
    let estimate = image::open(&hood_png).unwrap().to_luma8();
    let truth: Vec<u8> = (0..960 * 540).map(|i| u8::from(i / 960 >= 476)).collect();
    let iou = roadseg::synth::road_iou(estimate.as_raw(), &truth).unwrap();
    eprintln!("hood IoU on real footage with a composited real bonnet: {iou:.4} ({summary})");
    // Measured 0.92: the still, uniform asphalt just above the bonnet joins it in places.
    assert!(iou >= 0.85, "hood IoU {iou:.4}");
}

/// Frame `n` of `clip` as RGB, decoded by ffmpeg.
fn rgb_frame(clip: &Path, n: u32, png: &Path) -> image::RgbImage {
    let status = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-i"])
        .arg(clip)
        .args(["-vf", &format!("select=eq(n\\,{n})"), "-frames:v", "1"])
        .arg(png)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success(), "ffmpeg could not take frame {n} of {}", clip.display());
    image::open(png).unwrap().to_rgb8()
}

#[test]
fn the_recording_shows_the_road_tinted_and_the_rest_as_it_was() {
    // Rule: through NV12 decode, annotation and encode, road pixels of the recording move towards the road tint (magenta: red and blue up, green down) and other pixels keep their colour (within H.264's error).
    let tmp = tempfile::tempdir().unwrap();
    let clip = tmp.path().join("synth.mp4");
    let (code, _, stderr) = roadseg(&["synth", "-o", clip.to_str().unwrap(), "--frames", "12", "--size", "320x180", "--no-hood"]);
    assert_eq!(code, 0, "{stderr}");
    let masks = tmp.path().join("masks");
    process(clip.to_str().unwrap(), tmp.path(), &["--masks-out", masks.to_str().unwrap()]);
    let out = tmp.path().join("out.mp4");
    let mask = image::open(masks.join("00011.png")).unwrap().to_luma8();
    let (before, after) = (rgb_frame(&clip, 11, &tmp.path().join("in.png")), rgb_frame(&out, 11, &tmp.path().join("out.png")));
    let (mut road, mut rest) = ([0f64; 3], [0f64; 3]);
    let (mut n_road, mut n_rest) = (0f64, 0f64);
    // Below the status line and clear of the edges, where chroma blocks straddle the mask's border.
    for (x, y, m) in mask.enumerate_pixels().filter(|(x, y, _)| *y >= 40 && *x >= 4 && *x < 316 && *y < 176) {
        let (a, b) = (before.get_pixel(x, y).0, after.get_pixel(x, y).0);
        let (sum, n) = if m.0[0] == 255 { (&mut road, &mut n_road) } else { (&mut rest, &mut n_rest) };
        for c in 0..3 {
            sum[c] += f64::from(b[c]) - f64::from(a[c]);
        }
        *n += 1.0;
    }
    assert!(n_road > 1000.0 && n_rest > 1000.0, "road {n_road} px, rest {n_rest} px");
    let [r, g, b] = road.map(|v| v / n_road);
    eprintln!("road ({n_road} px) moved by RGB ({r:.1}, {g:.1}, {b:.1}); the rest ({n_rest} px) by {:?}", rest.map(|v| (v / n_rest * 10.0).round() / 10.0));
    assert!(r > 8.0 && b > 8.0 && g < -8.0, "road moved by RGB ({r:.1}, {g:.1}, {b:.1}), not towards magenta");
    let rest = rest.map(|v| v / n_rest);
    assert!(rest.iter().all(|d| d.abs() < 6.0), "untinted pixels moved by {rest:?}");
}

/// Every `step`th frame of `images` (sorted) and its label map, linked into `dir`.
fn subset(images: &Path, labels: &Path, dir: &Path, keep: impl Fn(&str) -> bool, step: usize) -> (PathBuf, PathBuf) {
    let (img_dir, lab_dir) = (dir.join("img"), dir.join("lab"));
    std::fs::create_dir_all(&img_dir).unwrap();
    std::fs::create_dir_all(&lab_dir).unwrap();
    let mut frames: Vec<_> = std::fs::read_dir(images).unwrap().map(|e| e.unwrap().path()).collect();
    frames.sort();
    let frames: Vec<_> = frames.into_iter().filter(|f| keep(f.file_name().unwrap().to_str().unwrap())).collect();
    for frame in frames.iter().step_by(step) {
        let stem = frame.file_stem().unwrap().to_str().unwrap();
        std::os::unix::fs::symlink(frame, img_dir.join(frame.file_name().unwrap())).unwrap();
        std::os::unix::fs::symlink(labels.join(format!("{stem}.png")), lab_dir.join(format!("{stem}.png"))).unwrap();
    }
    (img_dir, lab_dir)
}

/// Pooled road IoU of the bundled model on a labelled folder (`roadseg eval --road-labels`).
fn road_iou(img_dir: &Path, lab_dir: &Path, road: &str, ignore: &str) -> (f64, u64) {
    let (code, stdout, stderr) = roadseg(&[
        "eval", "--model", "models/roadseg-camvid", "--images", img_dir.to_str().unwrap(), "--labels", lab_dir.to_str().unwrap(),
        "--road-labels", road, "--ignore-index", ignore, "--device", "cpu", "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (json["road_iou"].as_f64().unwrap(), json["images"].as_u64().unwrap())
}

#[test]
fn the_bundled_model_keeps_its_camvid_val_figure() {
    // Rule: `roadseg eval --road-labels 3` of the bundled model on every 4th CamVid val frame stays within 0.01 of the road IoU in the model card (a retrained or converted model must not quietly lose it; the road labels work whatever the model's label set).
    let (Some(images), Some(labels)) = (shared("data/camvid/val"), shared("data/camvid/valannot")) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (img_dir, lab_dir) = subset(&images, &labels, tmp.path(), |_| true, 4);
    let (road, frames) = road_iou(&img_dir, &lab_dir, "3", "11");
    eprintln!("CamVid val subset: road IoU {road:.4} on {frames} frames");
    assert_eq!(frames, 26);
    assert!((road - CAMVID_SUBSET_ROAD).abs() <= CAMVID_TOLERANCE, "road IoU {road:.4}, model card {CAMVID_SUBSET_ROAD}");
}

#[test]
fn the_bundled_model_keeps_its_held_out_idd_figure() {
    // Rule: on every 4th frame of the IDD Lite drives held out from training (drive number a multiple of 7, tools/train/splits.py), the bundled model's road (IDD's drivable) IoU stays within 0.01 of the model card's.
    let Some(idd) = shared("data/idd-lite/train") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let held_out = |name: &str| name.split('_').next().and_then(|d| d.parse::<u32>().ok()).is_some_and(|d| d % 7 == 0);
    let (img_dir, lab_dir) = subset(&idd.join("images"), &idd.join("labels"), tmp.path(), held_out, 4);
    let (road, frames) = road_iou(&img_dir, &lab_dir, "0", "255");
    eprintln!("held-out IDD subset: road IoU {road:.4} on {frames} frames");
    assert_eq!(frames, 58);
    assert!((road - IDD_SUBSET_ROAD).abs() <= CAMVID_TOLERANCE, "road IoU {road:.4}, model card {IDD_SUBSET_ROAD}");
}

/// `roadseg eval --road-polygons tools/eval/unseen-road.json` of the bundled
/// model, fast preset: pooled road IoU on ten hand-labelled frames it never
/// trained on (BDD100K stills, solidWhiteRight frames), as in the model card;
/// since run 8 they are also the adoption gate between candidates. Issue 20
/// asks for 0.90; this records where the model is (scored as painted at the
/// 0.4 confidence threshold, 2026-12-02: 0.8376; plain argmax: grounded
/// road from 65% of the picture down: 0.8323; p58's WiSE-FT, shipped
/// since 2026-12-01: 0.8315; p27's before it 0.8244; the product model before that 0.8214, 0.8222
/// since dark frames are brightened for the model, docs/exposure.md).
const UNSEEN_ROAD: f64 = 0.8376;

#[test]
fn the_bundled_model_keeps_its_unseen_road_figure() {
    // Rule: the bundled model's road IoU on the hand-labelled unseen frames stays within 0.01 of the model card's figure (any change to the model, its preprocessing or the road mask shows here).
    let Some(dashcam) = shared("data/dashcam/bdd") else {
        return;
    };
    let shared_root = dashcam
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let staged = std::process::Command::new(repo().join("tools/eval/stage-unseen-road.sh"))
        .arg(tmp.path())
        .env("ROADSEG_SHARED", &shared_root)
        .output()
        .expect("tools/eval/stage-unseen-road.sh runs");
    assert!(
        staged.status.success(),
        "staging the unseen frames: {}",
        String::from_utf8_lossy(&staged.stderr)
    );
    let (code, stdout, stderr) = roadseg(&[
        "eval",
        "--model",
        "models/roadseg-camvid",
        "--images",
        tmp.path().to_str().unwrap(),
        "--road-polygons",
        "tools/eval/unseen-road.json",
        "--device",
        "cpu",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(json["images"], 10, "{stdout}");
    let road = json["road_iou"].as_f64().unwrap();
    eprintln!("{stdout}");
    assert!(
        (road - UNSEEN_ROAD).abs() <= 0.01,
        "unseen road IoU {road:.4}, model card {UNSEEN_ROAD}"
    );
}
