//! Rule: on real clips whose bonnet never trained the bundled model (the
//! "eval" outlines of tools/teacher/ego-outlines.json: the Udacity clip, a
//! white bonnet, and DAD sequence 000478, another white bonnet with a
//! timestamp printed on it), the daemon's hood (`roadseg process
//! --hood-out`, default settings) keeps the hood IoU the model card records
//! after the first second and after the whole clip, and never claims more of
//! the frame than the drawn bonnet (a false hood would hide road).
//! Issue 35 asks for IoU >= 0.8 on every clip from the first second; since
//! 2026-11-28 both clips reach it (the floors below are what the daemon
//! measures, less a margin).

use std::path::{Path, PathBuf};

use crate::common::*;

/// Issue 35's target, printed beside each measurement.
const HOOD_IOU_TARGET: f64 = 0.8;
/// Per clip: the least hood IoU after 1 s and after the whole clip. Measured
/// 2026-11-27 with the shipped model (the WiSE-FT interpolation of p2, model
/// card) and the learned hood's per-column median over the last 25 frames:
/// udacity-clip 0.914 / 0.824 (0.739 / 0.812 with the running mean before
/// it); dad-000478 0.000 / 0.970. The model reads DAD's white bonnet as
/// road; its edge, which stays put while the reflections on it move
/// (`temporal::edge`), is confirmed by the model's ego probability. It was
/// proposed after 10 moving frames, so not within the first second of a
/// 6 fps sequence; since 2026-11-28 a slow camera's 4 moving frames do once
/// they span half a second: dad-000478 0.970 / 0.970 (udacity-clip 0.920 /
/// 0.855 by tools/eval/hood.py, unchanged).
const HOOD_IOU_FLOORS: [(&str, f64, f64); 2] = [("udacity-clip", 0.87, 0.79), ("dad-000478", 0.90, 0.90)];
/// How much more of the frame than the drawn bonnet a hood may cover (the
/// Udacity clip over the whole clip: 7.2% against 6.2% drawn; after 1 s it
/// was 8.3% before the median, 6.2% since).
const OVERREACH: f64 = 0.03;

struct Outline {
    name: String,
    frames: String,
    /// The top edge, (x, y) in percent of the frame, left to right.
    edge: Vec<(f64, f64)>,
}

fn eval_outlines() -> Vec<Outline> {
    outlines("eval")
}

/// The drawn outlines of one split ("train" or "eval") of tools/teacher/ego-outlines.json.
fn outlines(split: &str) -> Vec<Outline> {
    let text = std::fs::read_to_string(repo().join("tools/teacher/ego-outlines.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json[split]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, o)| Outline {
            name: name.clone(),
            frames: o["frames"].as_str().unwrap().to_string(),
            edge: o["edge"].as_array().unwrap().iter().map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap())).collect(),
        })
        .collect()
}

/// 1 below the edge (linear between its points, at each column's centre).
fn rasterise(edge: &[(f64, f64)], w: usize, h: usize) -> Vec<u8> {
    let mut mask = vec![0u8; w * h];
    for x in 0..w {
        let px = (x as f64 + 0.5) / w as f64 * 100.0;
        let Some(i) = edge.windows(2).position(|p| px >= p[0].0 && px <= p[1].0) else { continue };
        let ((x0, y0), (x1, y1)) = (edge[i], edge[i + 1]);
        let y = y0 + (y1 - y0) * (px - x0) / (x1 - x0).max(1e-9);
        let top = (y / 100.0 * h as f64).round() as usize;
        for row in top.min(h)..h {
            mask[row * w + x] = 1;
        }
    }
    mask
}

/// The source as a video: a clip as it is, stills as H.264 at 6 fps (they are every 5th frame of 30 fps).
fn as_video(shared_root: &Path, frames: &str, dir: &Path, seconds: Option<u32>) -> PathBuf {
    let out = dir.join(format!("source-{}.mp4", seconds.unwrap_or(0)));
    let mut ffmpeg = std::process::Command::new("ffmpeg");
    ffmpeg.args(["-loglevel", "error", "-y"]);
    if frames.ends_with(".mp4") {
        ffmpeg.arg("-i").arg(shared_root.join(frames));
    } else {
        ffmpeg.args(["-framerate", "6", "-pattern_type", "glob", "-i"]).arg(shared_root.join(frames));
    }
    if let Some(s) = seconds {
        ffmpeg.args(["-t", &s.to_string()]);
    }
    ffmpeg.args(["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]).arg(&out);
    let (ok, _, err) = run_with_timeout(&mut ffmpeg, std::time::Duration::from_secs(120));
    assert!(ok, "ffmpeg: {err}");
    out
}

fn hood_iou(video: &Path, edge: &[(f64, f64)], dir: &Path) -> (f64, f64) {
    let estimate = hood_estimate(video, dir);
    let (w, h) = (estimate.width() as usize, estimate.height() as usize);
    let truth: Vec<u8> = rasterise(edge, w, h).iter().map(|&m| m * 255).collect();
    (roadseg::synth::road_iou(estimate.as_raw(), &truth).unwrap_or(0.0), hood_share(&estimate))
}

/// Share of the frame a hood image marks.
fn hood_share(hood: &image::GrayImage) -> f64 {
    hood.as_raw().iter().filter(|&&v| v > 127).count() as f64 / hood.as_raw().len() as f64
}

/// The hood `roadseg process --hood-out` writes for `video` (default settings).
fn hood_estimate(video: &Path, dir: &Path) -> image::GrayImage {
    let hood_png = dir.join("hood.png");
    let _ = std::fs::remove_file(&hood_png);
    let out = dir.join("out.mp4");
    let (code, _, stderr) = roadseg(&[
        "process",
        video.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--device",
        "cpu",
        "--hood-out",
        hood_png.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    image::open(&hood_png).unwrap().to_luma8()
}

/// By the names the engine looks for.
fn bundled_model_has_an_ego_class() -> bool {
    let text = std::fs::read_to_string(repo().join("models/roadseg-camvid/config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    let labels: Vec<String> = config["id2label"]
        .as_object()
        .map(|labels| labels.values().filter_map(|l| l.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    roadseg::temporal::ego_class_id(&labels).is_some()
}

#[test]
fn the_hood_matches_held_out_real_bonnets_from_the_first_second() {
    let Some(data) = shared("data") else { return };
    if !bundled_model_has_an_ego_class() {
        // The motion estimate alone needs the car to move and reads white bonnets as road; the
        // rule holds for a model that learned the ego vehicle (issue 35 stays open until one ships).
        roadseg::test_skip::skip("the bundled model (models/roadseg-camvid) has no ego-vehicle class; the learned hood this test holds is not shipped");
        return;
    }
    let shared_root = data.parent().unwrap().to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for o in eval_outlines() {
        let (_, floor_first, floor_whole) = *HOOD_IOU_FLOORS
            .iter()
            .find(|(name, ..)| *name == o.name)
            .unwrap_or_else(|| panic!("{}: an eval outline with no floor here; measure it and add one", o.name));
        let first = hood_iou(&as_video(&shared_root, &o.frames, tmp.path(), Some(1)), &o.edge, tmp.path());
        let whole = hood_iou(&as_video(&shared_root, &o.frames, tmp.path(), None), &o.edge, tmp.path());
        let drawn = rasterise(&o.edge, 100, 100).iter().filter(|&&m| m != 0).count() as f64 / 1e4;
        eprintln!(
            "{}: hood IoU {:.4} after 1 s, {:.4} after the clip (target {HOOD_IOU_TARGET}); hood {:.1}% of the frame, drawn {:.1}%",
            o.name,
            first.0,
            whole.0,
            100.0 * whole.1,
            100.0 * drawn
        );
        for (when, (iou, share), floor) in [("1 s", first, floor_first), ("the whole clip", whole, floor_whole)] {
            if iou < floor {
                failures.push(format!("{} after {when}: IoU {iou:.4} < {floor}", o.name));
            }
            if share > drawn + OVERREACH {
                failures.push(format!("{} after {when}: hood {:.1}% of the frame, drawn {:.1}%", o.name, 100.0 * share, 100.0 * drawn));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn the_hood_does_not_climb_the_unlit_roadside_at_night() {
    // Rule: where the model sees a hood, the motion estimate adds to it only
    // where the model also sees the ego vehicle: on tmo324's night.mp4 (a
    // bonnet edge at about 97% of the height) the unlit shoulder on the left,
    // as still as the bonnet and read as "other", is not hood. Before that
    // rule, its first 8 s gave a 7.8% hood reaching 63% of the height at
    // the frame's left edge; measured after it (2026-11-28): 2.6%, its top
    // in the left fifth at 95% (the bonnet's edge is at about 97%). Nor
    // does it rise over the bonnet edge anywhere else: from about 6 s on the
    // model read ego in a block of the dark road just ahead, up to 81% of
    // the height (2026-12-02, re-encoded as tools/eval/hood.py does); a
    // learned hood's columns are now held to 1.5 times the middle third's
    // median (93% measured).
    let Some(night) = shared("data/clips/tmo324__lane_detecting/videos/night.mp4") else { return };
    if !bundled_model_has_an_ego_class() {
        roadseg::test_skip::skip("the bundled model (models/roadseg-camvid) has no ego-vehicle class; the rule is about joining the model's hood");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let video = as_video(night.parent().unwrap(), "night.mp4", tmp.path(), Some(8));
    let hood = hood_estimate(&video, tmp.path());
    let (w, h) = (hood.width() as usize, hood.height() as usize);
    let share = hood_share(&hood);
    let is_hood = |x: usize, y: usize| hood.get_pixel(x as u32, y as u32)[0] > 127;
    let highest_on_the_left = (0..w / 5).filter_map(|x| (0..h).find(|&y| is_hood(x, y))).min().unwrap_or(h);
    let highest = (0..w).filter_map(|x| (0..h).find(|&y| is_hood(x, y))).min().unwrap_or(h);
    eprintln!(
        "night.mp4, first 8 s: hood {:.1}% of the frame, its top in the left fifth at {:.0}% of the height, anywhere at {:.0}%",
        100.0 * share,
        100.0 * highest_on_the_left as f64 / h as f64,
        100.0 * highest as f64 / h as f64
    );
    assert!(share <= 0.05, "hood {:.1}% of the frame against a bonnet of about 3%", 100.0 * share);
    assert!(highest_on_the_left as f64 >= 0.9 * h as f64, "the hood climbs the left roadside to row {highest_on_the_left} of {h}");
    assert!(highest as f64 >= 0.9 * h as f64, "the hood rises into the road ahead to row {highest} of {h}");
}

#[test]
fn a_dark_bonnet_the_model_reads_partly_as_another_vehicle_is_hood_from_the_first_second() {
    // Rule: the cells a model reads as "vehicle" under those it reads as the
    // ego vehicle are the ego vehicle's too. On the Indian cattle clip the
    // model reads the shadowed lower fifth of the dark bonnet as some vehicle
    // (ahead of "ego_vehicle" by under one logit), so the ego run from the
    // bottom never started in those columns, and the hood was in blocks: IoU
    // 0.585 after 1 s, 0.730 after 4 s (2026-11-28); with the rule 0.895 and
    // 0.856. This clip's outline trained the model (it is in "train"): the
    // test holds the daemon's reading of the model, not the model's reach.
    let Some(data) = shared("data") else { return };
    if !bundled_model_has_an_ego_class() {
        roadseg::test_skip::skip("the bundled model (models/roadseg-camvid) has no ego-vehicle class; the rule is about reading it");
        return;
    }
    let cattle = outlines("train").into_iter().find(|o| o.name == "india-cattle").expect("the cattle clip's outline");
    let tmp = tempfile::tempdir().unwrap();
    let video = as_video(data.parent().unwrap(), &cattle.frames, tmp.path(), Some(1));
    let (iou, share) = hood_iou(&video, &cattle.edge, tmp.path());
    let drawn = rasterise(&cattle.edge, 100, 100).iter().filter(|&&m| m != 0).count() as f64 / 1e4;
    eprintln!("india-cattle after 1 s: hood IoU {iou:.4}, hood {:.1}% of the frame, drawn {:.1}%", 100.0 * share, 100.0 * drawn);
    assert!(iou >= 0.85, "hood IoU {iou:.4} after 1 s (0.895 measured, 0.585 before the rule)");
    assert!(share <= drawn + OVERREACH, "hood {:.1}% of the frame, drawn {:.1}%", 100.0 * share, 100.0 * drawn);
}

#[test]
fn a_slow_camera_without_a_bonnet_claims_no_hood() {
    // Rule: the persistent edge is proposed sooner on a slow camera (4 moving
    // frames over half a second), and still no hood-less clip gets one: the
    // rain clip (drops on the windscreen, the one that came nearest: 0.23%
    // of the frame on 2026-11-28) at 6 fps for 8 s stays under the 1% below
    // which the daemon reports none.
    let Some(rainy) = shared("data/clips/tmo324__lane_detecting/videos/rainy.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let video = first_seconds(&rainy, 8, &["-vf", "fps=6", "-preset", "veryfast"], tmp.path());
    let share = hood_share(&hood_estimate(&video, tmp.path()));
    eprintln!("rainy.mp4 at 6 fps, first 8 s: hood {:.2}% of the frame", 100.0 * share);
    assert!(share < 0.01, "hood {:.2}% of a frame with no bonnet", 100.0 * share);
}

#[test]
fn ego_read_in_the_bottom_corners_alone_is_no_hood_in_any_frame() {
    // Rule: a hood-less clip gets no hood frame by frame, not only at the
    // end. On highway.mp4 (2026-12-01) the bundled model read ego in the two
    // bottom corners, beside a dark seam across the near road, and the
    // daemon drew a hood of 1-2.5% of the frame on 115 of the first 240
    // frames (from frame 56 to 165), hiding that road; a learned hood must
    // now span the middle third, as every real bonnet does.
    let Some(highway) = shared("data/clips/akin-oladejo__hough-lane-detection/highway.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let video = first_seconds(&highway, 6, &["-preset", "veryfast"], tmp.path());
    let hoods = hood_pct_per_frame(&video, tmp.path());
    let with_hood: Vec<(usize, f64)> = hoods.iter().copied().enumerate().filter(|&(_, pct)| pct >= 1.0).collect();
    eprintln!("highway.mp4, first 6 s: {} frames, {} with a hood of 1% or more", hoods.len(), with_hood.len());
    assert!(hoods.len() >= 170, "{} frames of stats for 6 s at 30 fps", hoods.len());
    assert!(with_hood.is_empty(), "hood (frame, % of the frame) on a clip with no bonnet: {with_hood:?}");
}

#[test]
fn a_still_strip_read_like_the_road_above_it_is_no_hood_in_any_frame() {
    // Rule: the motion estimate's still region joins the hood only where the
    // model reads clearly less road in it than just over it. On rainy.mp4
    // (2026-12-02; no bonnet) the rain-blurred bottom strip, still, and read
    // as road about as often as the road over it (16-19% against 20-24%),
    // joined as a hood of 1.1-1.25% of the frame on frames 136-144 of the
    // first 240 (encoded as tools/eval/hood.py does).
    let Some(rainy) = shared("data/clips/tmo324__lane_detecting/videos/rainy.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let video = first_seconds(&rainy, 8, &[], tmp.path());
    let hoods = hood_pct_per_frame(&video, tmp.path());
    let with_hood: Vec<(usize, f64)> = hoods.iter().copied().enumerate().filter(|&(_, pct)| pct >= 1.0).collect();
    eprintln!("rainy.mp4, first 8 s: {} frames, {} with a hood of 1% or more", hoods.len(), with_hood.len());
    assert!(hoods.len() >= 230, "{} frames of stats for 8 s at 30 fps", hoods.len());
    assert!(with_hood.is_empty(), "hood (frame, % of the frame) on a clip with no bonnet: {with_hood:?}");
}

/// The first `seconds` of `clip`, re-encoded as H.264 (with `args` before the codec's).
fn first_seconds(clip: &Path, seconds: u32, args: &[&str], dir: &Path) -> PathBuf {
    let video = dir.join(format!("first-{seconds}s.mp4"));
    let mut ffmpeg = std::process::Command::new("ffmpeg");
    ffmpeg.args(["-loglevel", "error", "-y", "-i"]).arg(clip).args(["-t", &seconds.to_string()]).args(args);
    ffmpeg.args(["-c:v", "libx264", "-pix_fmt", "yuv420p"]).arg(&video);
    let (ok, _, err) = run_with_timeout(&mut ffmpeg, std::time::Duration::from_secs(120));
    assert!(ok, "ffmpeg: {err}");
    video
}

/// The daemon's hood, as a percentage of the frame, frame by frame (`--stats-out`).
fn hood_pct_per_frame(video: &Path, dir: &Path) -> Vec<f64> {
    let stats = dir.join("stats.jsonl");
    let out = dir.join("out.mp4");
    let (code, _, stderr) =
        roadseg(&["process", video.to_str().unwrap(), "-o", out.to_str().unwrap(), "--device", "cpu", "--stats-out", stats.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    std::fs::read_to_string(&stats)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["hood_pct"].as_f64().unwrap())
        .collect()
}

#[test]
fn the_outline_rasterises_below_its_edge() {
    // Rule: the drawn edge is read as the outline's top, linear between points, everything below it ego.
    let m = rasterise(&[(0.0, 50.0), (100.0, 50.0)], 4, 4);
    assert_eq!(m, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
    // A slope: column centres at 25% and 75% of the width, edge rows 0.5 and 1.5, rounded to 1 and 2.
    let m = rasterise(&[(0.0, 0.0), (100.0, 100.0)], 2, 2);
    assert_eq!(m, [0, 0, 1, 0]);
}
