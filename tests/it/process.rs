//! Rule: `roadseg process` turns a video into an annotated MP4 holding every
//! input frame, in order, with the input's timestamps, plus one sidecar line
//! per frame; bad inputs fail with a clear message and no panic.


use std::path::Path;

use crate::common::*;

/// A small model and input size so the whole clip runs in seconds.
const MODEL: &str = "tests/data/odd-bf16-203x141";

fn ffprobe_stream(path: &Path) -> serde_json::Value {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries"])
        .arg("stream=nb_read_frames,r_frame_rate,width,height,duration")
        .args(["-of", "json"])
        .arg(path)
        .output()
        .expect("ffprobe runs (apt install ffmpeg)");
    assert!(out.status.success(), "ffprobe failed on {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "ffprobe complained about {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["streams"][0].clone()
}

/// A synthetic 320x180 drive of `frames` frames at 25 fps, in `dir`.
fn synth_drive(dir: &Path, frames: u32) -> std::path::PathBuf {
    let clip = dir.join("drive.mp4");
    let frames = frames.to_string();
    let (code, _, stderr) = roadseg(&["synth", "-o", clip.to_str().unwrap(), "--frames", &frames, "--size", "320x180", "--fps", "25"]);
    assert_eq!(code, 0, "{stderr}");
    clip
}

fn process(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["process", "--model", MODEL, "--device", "cpu", "--size", "224x128"];
    all.extend_from_slice(args);
    roadseg(&all)
}

#[test]
fn every_frame_of_the_dashcam_clip_comes_out_in_order_with_its_timestamps() {
    let Some(clip) = shared("data/dashcam/solidWhiteRight.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.mp4");
    let stats = tmp.path().join("stats.jsonl");
    let (code, stdout, stderr) =
        process(&[clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--stats-out", stats.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("221 frames"), "{stdout}");
    let input = ffprobe_stream(&clip);
    let output = ffprobe_stream(&out);
    assert_eq!(output["nb_read_frames"], "221");
    assert_eq!(output["r_frame_rate"], input["r_frame_rate"]);
    assert_eq!((output["width"].as_u64(), output["height"].as_u64()), (Some(960), Some(540)));
    let (din, dout): (f64, f64) = (input["duration"].as_str().unwrap().parse().unwrap(), output["duration"].as_str().unwrap().parse().unwrap());
    assert!((din - dout).abs() < 0.05, "duration {dout} vs input {din}");
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&stats).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 221);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["frame"].as_u64(), Some(i as u64), "frames in order");
        let pts = line["pts"].as_f64().unwrap();
        assert!((pts - i as f64 * 0.04).abs() < 1e-3, "frame {i} pts {pts}: input timestamps kept");
        for key in ["road_coverage", "hood_pct", "road_cut", "mean_confidence", "exposure_gamma", "inference_ms", "dropped_before"] {
            assert!(!line[key].is_null(), "{key} in {line}");
        }
        assert_eq!(line["exposure_gamma"], 1.0, "a clip by day goes to the model as it came");
        assert_eq!(line["dropped_before"], 0, "a file never drops frames");
    }
}

#[test]
fn a_dark_clip_is_brightened_on_its_way_into_the_model_and_says_so() {
    // Rule: frames darker than the exposure target reach the model through a gamma curve no stronger than 0.7, reported per frame as exposure_gamma; --exposure-target 0 turns it off.
    let tmp = tempfile::tempdir().unwrap();
    let clip = tmp.path().join("dark.mp4");
    let mut gst = std::process::Command::new("gst-launch-1.0");
    gst.args(["-q", "videotestsrc", "num-buffers=8", "pattern=smpte", "!", "video/x-raw,width=320,height=180,framerate=20/1", "!"])
        .args(["videobalance", "brightness=-0.6", "!", "videoconvert", "!", "x264enc", "!", "mp4mux", "!", "filesink"])
        .arg(format!("location={}", clip.display()));
    assert!(crate::common::run_with_timeout(&mut gst, std::time::Duration::from_secs(30)).0, "making the dark clip");
    let gammas = |extra: &[&str]| -> Vec<f64> {
        let (out, stats) = (tmp.path().join("out.mp4"), tmp.path().join("stats.jsonl"));
        let _ = std::fs::remove_file(&stats);
        let mut args = vec![clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--stats-out", stats.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (code, _, stderr) = process(&args);
        assert_eq!(code, 0, "{stderr}");
        let text = std::fs::read_to_string(&stats).unwrap();
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["exposure_gamma"].as_f64().expect("exposure_gamma")).collect()
    };
    let on = gammas(&[]);
    assert_eq!(on.len(), 8);
    assert!(on.iter().all(|&g| (0.7..1.0).contains(&g)), "every dark frame brightened: {on:?}");
    let off = gammas(&["--exposure-target", "0"]);
    assert!(off.iter().all(|&g| g == 1.0), "off: {off:?}");
}

#[test]
fn a_synthetic_clip_goes_through_and_masks_match_the_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let clip = synth_drive(tmp.path(), 20);
    let out = tmp.path().join("out.mp4");
    let masks = tmp.path().join("masks");
    let (code, _, stderr) =
        process(&[clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--masks-out", masks.to_str().unwrap(), "--road-class", "label_0"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ffprobe_stream(&out)["nb_read_frames"], "20");
    let mask = image::open(masks.join("00019.png")).unwrap().to_luma8();
    assert_eq!(mask.dimensions(), (320, 180));
    assert!(mask.pixels().all(|p| p.0[0] == 0 || p.0[0] == 255));
}

#[test]
fn a_file_is_smoothed_by_default_and_off_gives_every_frame_on_its_own() {
    // Rule: `process` smooths a file's logits over time unless told --smooth off (a recording is watched as video); with one worker the default is exactly --smooth on, and off differs from it.
    let tmp = tempfile::tempdir().unwrap();
    let clip = synth_drive(tmp.path(), 12);
    let masks_with = |name: &str, extra: &[&str]| -> Vec<Vec<u8>> {
        let (out, masks) = (tmp.path().join(format!("{name}.mp4")), tmp.path().join(name));
        let mut args = vec![clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--masks-out", masks.to_str().unwrap(), "--workers", "1",
            "--threshold", "0", "--road-class", "label_0", "--road-class", "label_4"];
        args.extend_from_slice(extra);
        let (code, _, stderr) = process(&args);
        assert_eq!(code, 0, "{stderr}");
        (0..12).map(|i| image::open(masks.join(format!("{i:05}.png"))).unwrap().to_luma8().into_raw()).collect()
    };
    let (default, on, off) = (masks_with("default", &[]), masks_with("on", &["--smooth", "on"]), masks_with("off", &["--smooth", "off"]));
    assert_eq!(default[0], off[0], "the first frame has no past to average");
    assert!(default == on, "the default is smoothing on");
    assert!(default != off, "smoothing changed no pixel of 12 frames of a drive");
}

fn assert_clean_failure(args: &[&str], needle: &str) {
    let (code, _, stderr) = process(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("roadseg: error:")).unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert!(line.to_lowercase().contains(needle), "{args:?}: expected '{needle}' in: {line}");
}

#[test]
fn bad_inputs_fail_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.mp4");
    let o = out.to_str().unwrap();
    assert_clean_failure(&["/nonexistent/clip.mp4", "-o", o], "does not exist");

    let garbage = tmp.path().join("garbage.mp4");
    std::fs::write(&garbage, (0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect::<Vec<_>>()).unwrap();
    assert_clean_failure(&[garbage.to_str().unwrap(), "-o", o], "not a media file");

    let audio = tmp.path().join("audio.ogg");
    let made = std::process::Command::new("gst-launch-1.0")
        .args(["-q", "audiotestsrc", "num-buffers=20", "!", "vorbisenc", "!", "oggmux", "!", "filesink"])
        .arg(format!("location={}", audio.display()))
        .status()
        .expect("gst-launch-1.0 runs");
    assert!(made.success());
    assert_clean_failure(&[audio.to_str().unwrap(), "-o", o], "no video stream");

    assert_clean_failure(&["rtsp://127.0.0.1:1/cam", "-o", o], "cannot connect");
}

#[test]
fn a_truncated_clip_keeps_what_could_be_decoded() {
    let Some(clip) = shared("data/dashcam/solidWhiteRight.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&clip).unwrap();
    let cut = tmp.path().join("cut.mp4");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 10]).unwrap();
    let out = tmp.path().join("out.mp4");
    let (code, stdout, stderr) = process(&[cut.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Either a clean end after the readable part or a clear error; the output
    // must hold every frame that was decoded, finalised and playable.
    if code != 0 {
        assert!(stderr.contains("roadseg: error:"), "{stderr}");
    } else {
        assert!(stdout.contains("frames"), "{stdout}");
    }
    let frames: u64 = ffprobe_stream(&out)["nb_read_frames"].as_str().unwrap().parse().unwrap();
    assert!(frames > 10 && frames < 221, "{frames} frames from the first 30% of the clip");
}

/// An 8 s 320x180 H.264 MP4 at 25 fps (200 frames) with its index at the
/// front, as cameras and `-movflags +faststart` write it, and a sine audio
/// track 1.5 s longer than the video.
fn ffmpeg_clip(dir: &Path) -> std::path::PathBuf {
    let clip = dir.join("clip.mp4");
    let mut ffmpeg = std::process::Command::new("ffmpeg");
    ffmpeg.args(["-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=25:duration=8", "-f", "lavfi", "-i", "sine=duration=9.5"]);
    ffmpeg.args(["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-movflags", "+faststart"]).arg(&clip);
    let (ok, _, err) = run_with_timeout(&mut ffmpeg, std::time::Duration::from_secs(60));
    assert!(ok, "ffmpeg: {err}");
    clip
}

#[test]
fn a_truncated_input_is_reported_with_frames_expected_and_read() {
    // Rule: a file that ends before the end its container announces (an MP4 cut short) makes process exit non-zero, saying how many frames were expected and how many read, and where they went; --allow-truncated makes it a warning and exit 0; a whole file whose audio outlasts its video is not truncated.
    let tmp = tempfile::tempdir().unwrap();
    let clip = ffmpeg_clip(tmp.path());
    let out = tmp.path().join("out.mp4");
    let o = out.to_str().unwrap();
    let (code, _, stderr) = process(&[clip.to_str().unwrap(), "-o", o]);
    assert_eq!(code, 0, "the whole clip: {stderr}");
    assert!(!stderr.contains("truncated"), "{stderr}");

    let bytes = std::fs::read(&clip).unwrap();
    let cut = tmp.path().join("cut.mp4");
    std::fs::write(&cut, &bytes[..bytes.len() * 4 / 10]).unwrap();
    let (code, stdout, stderr) = process(&[cut.to_str().unwrap(), "-o", o]);
    assert_ne!(code, 0, "a truncated input must not pass silently: {stdout}{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("roadseg: error:")).unwrap_or_else(|| panic!("no error line: {stderr}"));
    let read: u64 = ffprobe_stream(&out)["nb_read_frames"].as_str().unwrap().parse().unwrap();
    assert!(read > 0 && read < 200, "{read} frames written from 40% of the file");
    assert!(line.contains(&format!("{read} of 200 frames read")), "frames read and expected: {line}");
    assert!(line.contains("8.00 s its container announces") && line.contains(o) && line.contains("--allow-truncated"), "{line}");

    let (code, _, stderr) = process(&[cut.to_str().unwrap(), "-o", o, "--allow-truncated"]);
    assert_eq!(code, 0, "{stderr}");
    let warning = stderr.lines().find(|l| l.contains("WARN") && l.contains("container announces")).unwrap_or_else(|| panic!("no warning: {stderr}"));
    assert!(warning.contains(&format!("{read} of 200 frames read")), "{warning}");
}

#[test]
fn a_clip_trimmed_without_reencoding_is_read_whole_or_the_demuxer_is_named() {
    // Rule: an MP4 cut with `ffmpeg -ss T -c copy` (an edit list starting 3.9 s into a track with 4 s GOPs) is warned of when opened, and is either processed whole (147 frames) or, where GStreamer's MP4 demuxer ends it early (1.22 does), the error says the file is probably whole, names the edit start and gives the re-encode command, never "damaged".
    let tmp = tempfile::tempdir().unwrap();
    let long = tmp.path().join("long.mp4");
    let mut ffmpeg = std::process::Command::new("ffmpeg");
    ffmpeg.args(["-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=25:duration=13.8"]);
    ffmpeg.args(["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-g", "100", "-keyint_min", "100", "-sc_threshold", "0"]).arg(&long);
    let (ok, _, err) = run_with_timeout(&mut ffmpeg, std::time::Duration::from_secs(60));
    assert!(ok, "ffmpeg: {err}");
    let trimmed = tmp.path().join("trimmed.mp4");
    let mut cut = std::process::Command::new("ffmpeg");
    cut.args(["-loglevel", "error", "-y", "-ss", "7.9", "-i"]).arg(&long).args(["-c", "copy"]).arg(&trimmed);
    let (ok, _, err) = run_with_timeout(&mut cut, std::time::Duration::from_secs(60));
    assert!(ok, "ffmpeg trim: {err}");
    let whole: u64 = ffprobe_stream(&trimmed)["nb_read_frames"].as_str().unwrap().parse().unwrap();
    assert!((145..=149).contains(&whole), "ffmpeg reads {whole} frames of the 5.9 s trim");

    let out = tmp.path().join("out.mp4");
    let (code, stdout, stderr) = process(&[trimmed.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(out.exists(), "no output: {stderr}");
    assert!(stderr.contains("s into its track (an edit list") && stderr.contains("WARN"), "warned before reading: {stderr}");
    let written: u64 = ffprobe_stream(&out)["nb_read_frames"].as_str().unwrap().parse().unwrap();
    if code == 0 {
        assert!(written + 2 >= whole, "exit 0 must mean the whole trim: {written} of {whole}\n{stdout}{stderr}");
        return;
    }
    let line = stderr.lines().find(|l| l.starts_with("roadseg: error:")).unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(written > 50 && written < whole, "{written} frames kept");
    assert!(!line.contains("damaged") && line.contains("the file is probably whole"), "{line}");
    let start: f64 = line.split(" s into its track").next().and_then(|h| h.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(-1.0);
    assert!((3.85..=4.05).contains(&start), "the edit start, 3.9 s and the B-frame delay: {line}");
    assert!(line.contains(&format!("ffmpeg -i {} -c:v libx264 -crf 18 trimmed-whole.mp4", trimmed.display())), "{line}");
}

#[test]
fn infer_fps_caps_inference_and_counts_the_rest_as_dropped() {
    // Rule: --infer-fps N sends at most N frames a second (by timestamp) to inference; the rest are dropped and counted, and the output holds only inferred frames.
    let tmp = tempfile::tempdir().unwrap();
    let clip = synth_drive(tmp.path(), 50);
    let out = tmp.path().join("out.mp4");
    let stats = tmp.path().join("stats.jsonl");
    let (code, stdout, stderr) =
        process(&[clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--stats-out", stats.to_str().unwrap(), "--infer-fps", "5"]);
    assert_eq!(code, 0, "{stderr}");
    // 2 s at 25 fps capped at 5 fps: frames at 0, 0.2, ... 1.8 s.
    assert!(stdout.contains(": 10 frames (40 dropped)"), "{stdout}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&stats).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let pts: Vec<f64> = lines.iter().map(|l| l["pts"].as_f64().unwrap()).collect();
    assert!(pts.windows(2).all(|w| (w[1] - w[0] - 0.2).abs() < 1e-6), "evenly spread: {pts:?}");
    assert_eq!(ffprobe_stream(&out)["nb_read_frames"].as_str(), Some("10"));
}

#[test]
fn batched_workers_keep_every_frame_in_order_with_its_timestamps() {
    // Rule: process --batch 4 (two workers) still writes every frame once, in order, with the input's timestamps; a batch outside 1..=16 fails clearly.
    let tmp = tempfile::tempdir().unwrap();
    let clip = synth_drive(tmp.path(), 30);
    let out = tmp.path().join("out.mp4");
    let stats = tmp.path().join("stats.jsonl");
    let args = [clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--stats-out", stats.to_str().unwrap(), "--batch", "4", "--workers", "2"];
    let (code, stdout, stderr) = process(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("30 frames"), "{stdout}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&stats).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 30);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["frame"].as_u64(), Some(i as u64), "frames in order");
        let pts = line["pts"].as_f64().unwrap();
        assert!((pts - i as f64 * 0.04).abs() < 1e-3, "frame {i} pts {pts}: input timestamps kept");
    }
    assert_eq!(ffprobe_stream(&out)["nb_read_frames"].as_str(), Some("30"));
    assert_clean_failure(&[clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--batch", "17"], "--batch");
}

/// `frame` of `clip` as packed RGB (ffmpeg), with its size.
fn decode_rgb(clip: &Path, frame: usize) -> Vec<u8> {
    let out = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(clip)
        .args(["-vf", &format!("select=eq(n\\,{frame})"), "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .output()
        .expect("ffmpeg runs");
    assert!(out.status.success(), "ffmpeg on {}: {}", clip.display(), String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn pillarbox_bars_of_a_real_clip_are_found_left_out_and_left_untouched() {
    // Rule: constant black side bars (a real 960x540 dashcam clip pillarboxed to 1280x540) are found within the first frames; road masks are zero on them, nothing is drawn on them (every class counts as road here, so anything not left out would be tinted), and the summary names them.
    pillarbox_is_left_out("pad=1280:540:160:0:black");
}

#[test]
fn a_pillarbox_of_blurred_picture_is_found_left_out_and_left_untouched() {
    // Rule: side bars filled with the picture itself, stretched and blurred (how phones and social media put a narrow clip in 16:9), are bars like black ones: found, out of the masks, untouched.
    pillarbox_is_left_out("split[fill][clip];[fill]scale=1280:540,boxblur=20:4[bg];[bg][clip]overlay=160:0");
}

#[test]
fn a_blurred_pillarbox_that_meets_a_soft_picture_edge_is_found() {
    // Rule: blurred fill is a bar where sharp picture begins within six columns of its end. The cattle clip of ../shared (848x384, blurred fill about 74 px wide at the left, 70 at the right) has picture edges whose detail climbs over 2-5 columns; with three, the bars came and went from frame to frame (2026-12-02: the left one was none after 3 and 4 s, the right one after 6 s, and road was painted on the fill).
    let Some(clip) = shared("data/clips/Tarun140806__smart-cattle-collision-prevention/videos/day.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    for seconds in 2..=6 {
        let cut = tmp.path().join(format!("first-{seconds}s.mp4"));
        let trimmed = std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-y", "-i"])
            .arg(&clip)
            .args(["-t", &seconds.to_string(), "-an", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"])
            .arg(&cut)
            .status()
            .expect("ffmpeg runs");
        assert!(trimmed.success());
        let out = tmp.path().join("out.mp4");
        let (code, stdout, stderr) = process(&[cut.to_str().unwrap(), "-o", out.to_str().unwrap(), "--hood", "on"]);
        assert_eq!(code, 0, "{stderr}");
        let bars = &stdout[stdout.find("bars left ").unwrap_or_else(|| panic!("no bars in the summary after {seconds} s: {stdout}"))..];
        for side in ["left", "right"] {
            let at = bars.find(&format!("{side} ")).unwrap() + side.len() + 1;
            let px: u32 = bars[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
            assert!((64..=78).contains(&px), "{side} bar {px} px after {seconds} s, about 70-74 of blurred fill: {stdout}");
        }
    }
}

/// The real 960x540 clip put in the middle of 1280x540 by the filter `vf`:
/// 160 px bars each side, found, out of the masks, nothing drawn on them.
fn pillarbox_is_left_out(vf: &str) {
    let Some(src) = shared("data/dashcam/solidWhiteRight.mp4") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let clip = tmp.path().join("pillarbox.mp4");
    let padded = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&src)
        .args(["-vf", vf, "-frames:v", "40", "-c:v", "libx264", "-pix_fmt", "yuv420p"])
        .arg(&clip)
        .status()
        .expect("ffmpeg runs");
    assert!(padded.success());
    let (out, masks) = (tmp.path().join("out.mp4"), tmp.path().join("masks"));
    let mut args = vec![clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--masks-out", masks.to_str().unwrap(), "--threshold", "0", "--hood", "on"];
    let labels = ["label_0", "label_1", "label_2", "label_3", "label_4", "label_5", "label_6"];
    for l in &labels {
        args.extend(["--road-class", l]);
    }
    let (code, stdout, stderr) = process(&args);
    assert_eq!(code, 0, "{stderr}");
    let bars = |side: &str| -> u32 {
        let at = stdout.find(&format!("{side} ")).unwrap_or_else(|| panic!("no bars in the summary: {stdout}"));
        stdout[at + side.len() + 1..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    assert!(stdout.contains("bars left"), "{stdout}");
    for side in ["left", "right"] {
        assert!((156..=164).contains(&bars(side)), "{side} bar {} px, 160 padded: {stdout}", bars(side));
    }
    let mask = image::open(masks.join("00039.png")).unwrap().to_luma8();
    let (w, h) = mask.dimensions();
    assert_eq!((w, h), (1280, 540));
    let road_at = |x: u32| (0..h).filter(|&y| mask.get_pixel(x, y).0[0] == 255).count();
    for x in [0, 80, 150, 1130, 1200, 1279] {
        assert_eq!(road_at(x), 0, "bar column {x} is in the road mask");
    }
    assert!(road_at(640) > 270, "the picture is road (every class is road here)");
    let (input, output) = (decode_rgb(&clip, 39), decode_rgb(&out, 39));
    let px = |buf: &[u8], x: usize, y: usize| -> [i32; 3] { std::array::from_fn(|c| buf[(y * 1280 + x) * 3 + c] as i32) };
    let mut worst_bar = 0;
    for y in (0..540).step_by(7) {
        for x in (0..150).chain(1130..1280).step_by(3) {
            let (a, b) = (px(&input, x, y), px(&output, x, y));
            worst_bar = worst_bar.max((0..3).map(|c| (a[c] - b[c]).abs()).max().unwrap());
        }
    }
    assert!(worst_bar <= 16, "a bar pixel changed by {worst_bar} (tinted?)");
    let tinted = (0..540).step_by(7).filter(|&y| (px(&output, 640, y)[0] - px(&input, 640, y)[0]).abs() > 20 || (px(&output, 640, y)[1] - px(&input, 640, y)[1]).abs() > 20).count();
    assert!(tinted > 40, "the picture is tinted ({tinted} of 78 rows at x=640)");
}
