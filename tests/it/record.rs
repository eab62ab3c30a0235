//! `[streams.output] record`: what a stream's `file` holds. "source" keeps
//! the camera's own H.264 with no encode, "masks" and "none" write no video.
//! The real binary and GStreamer, the small test model; files are checked
//! with ffmpeg/ffprobe.

#![cfg(feature = "video")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::daemon::*;

/// The decoded frames' MD5s, in order, of every file in `files`.
fn frame_md5s(files: &[PathBuf]) -> Vec<String> {
    let mut all = Vec::new();
    for f in files {
        let out = Command::new("ffmpeg").args(["-v", "error", "-i"]).arg(f).args(["-f", "framemd5", "-"]).output().unwrap();
        assert!(out.status.success(), "ffmpeg cannot decode {}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        all.extend(text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.rsplit(',').next()).map(|m| m.trim().to_string()));
    }
    all
}

/// 8 s of 320x240 at 10 fps in H.264 with B-frames and a keyframe every second.
fn h264_clip(dir: &Path) -> PathBuf {
    let clip = dir.join("clip.mp4");
    let status = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=10", "-t", "8"])
        .args(["-c:v", "libx264", "-g", "10", "-bf", "2", "-pix_fmt", "yuv420p"])
        .arg(&clip)
        .status()
        .unwrap();
    assert!(status.success(), "ffmpeg (with libx264) is needed to make the test clip");
    clip
}

fn stage_count(port: u16, stream: &str, stage: &str) -> f64 {
    let (s, st) = (format!("stream=\"{stream}\""), format!("stage=\"{stage}\""));
    labelled_metric(port, "roadseg_stage_seconds_count", &[&s, &st]).unwrap_or(0.0)
}

#[test]
fn record_source_keeps_a_files_own_video_frame_for_frame_with_no_encode() {
    // Rule: with record = "source" the segments hold the source's own H.264 (B-frames included), every frame bit for bit, cut at keyframes near segment_seconds; frames_written counts them and no encode is timed, unlike the annotated recording of the same file.
    let dir = tempfile::tempdir().unwrap();
    let clip = h264_clip(dir.path());
    let (mport, rport) = (free_port(), free_port());
    let stream = |name: &str, record: &str| {
        let rec = dir.path().join(name);
        format!(
            "\n[[streams]]\nname = \"{name}\"\nuri = \"file://{}\"\n\n[streams.output]\nfile = \"{}/{{stream}}.mp4\"\nsegment_seconds = 3\nrecord = \"{record}\"\n",
            clip.display(),
            rec.display()
        )
    };
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &stream("own", "source") + &stream("drawn", "annotated")).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let written = |s: &str| labelled_metric(mport, "roadseg_frames_written_total", &[&format!("stream=\"{s}\""), "sink=\"file\""]).unwrap_or(0.0);
    d.wait_for("both files recorded to their end", Duration::from_secs(90), || written("own") >= 80.0 && written("drawn") >= 80.0);
    assert_eq!(written("own"), 80.0, "every frame of the clip, once");
    assert_eq!(stage_count(mport, "own", "encode"), 0.0, "nothing encoded for the source recording");
    let api = get(mport, "/api/v1/streams");
    assert!(api.contains("\"record\":\"source\"") && api.contains("\"record\":\"annotated\""), "{api}");
    let drawn_encodes = stage_count(mport, "drawn", "encode");
    assert!(drawn_encodes > 40.0, "the annotated recording encodes its frames: {drawn_encodes} timed");
    d.stop_cleanly();

    let own = mp4s(&dir.path().join("own"));
    assert_eq!(own.len(), 3, "8 s in 3 s segments: {own:?}");
    assert_playable(&own);
    let source = frame_md5s(std::slice::from_ref(&clip));
    assert_eq!(source.len(), 80);
    assert_eq!(frame_md5s(&own), source, "the recording decodes to the source's frames, bit for bit");
    let drawn = frame_md5s(&mp4s(&dir.path().join("drawn")));
    assert_eq!(drawn.len(), 80);
    assert_ne!(drawn, source, "the annotated recording is drawn on and re-encoded");
    let log = d.log();
    assert!(log.contains("recording the source's own video (no encode)"), "{log}");
}

#[test]
fn record_source_from_a_live_camera_starts_a_new_segment_after_a_reconnect() {
    // Rule: a live RTSP camera's own H.264 is recorded without an encode; when the camera drops and comes back the recording goes on in a new segment (numbered on, never overwriting), every segment plays; a source with no H.264 (a test pattern) records its annotated frames instead, with a warning.
    let dir = tempfile::tempdir().unwrap();
    let (mut camera, camera_port, camera_config) = start_camera(dir.path());
    let mport = free_port();
    let rec = dir.path().join("rec");
    let remote = format!(
        "\n[[streams]]\nname = \"remote\"\nuri = \"rtsp://127.0.0.1:{camera_port}/cam\"\nlatency_ms = 100\n\
         reconnect_initial_ms = 200\nreconnect_max_ms = 1000\n\n[streams.output]\nfile = \"{}/{{stream}}.mp4\"\nsegment_seconds = 60\nrecord = \"source\"\n",
        rec.display()
    );
    let pattern = test_stream("pattern", &format!("file = \"{}/{{stream}}.mp4\"\nsegment_seconds = 60\nrecord = \"source\"", rec.display()));
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, free_port()) + &remote + &pattern).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let inferred = |s: &str| metric(mport, "roadseg_frames_inferred_total", s);
    let written = |s: &str| labelled_metric(mport, "roadseg_frames_written_total", &[&format!("stream=\"{s}\""), "sink=\"file\""]).unwrap_or(0.0);
    d.wait_for("the camera's frames on disk", Duration::from_secs(40), || written("remote") >= 20.0);
    camera.signal("-KILL");
    assert!(camera.wait(Duration::from_secs(5)).is_some());
    d.wait_for("a reconnect attempt", Duration::from_secs(30), || metric(mport, "roadseg_reconnects_total", "remote") >= 1.0);
    let before = written("remote");
    let camera = Daemon::start(&camera_config, &dir.path().join("camera2.log"));
    d.wait_for("recording again after the camera came back", Duration::from_secs(40), || {
        inferred("remote") > 0.0 && written("remote") > before + 20.0
    });
    camera.signal("-TERM");
    assert_eq!(stage_count(mport, "remote", "encode"), 0.0, "the camera's video is not re-encoded");
    assert!(stage_count(mport, "pattern", "encode") > 0.0, "the test pattern's annotated frames are");
    d.stop_cleanly();

    let files = mp4s(&rec);
    let remote: Vec<PathBuf> = files.iter().filter(|f| f.file_name().unwrap().to_string_lossy().starts_with("remote")).cloned().collect();
    assert!(remote.len() >= 2, "a segment before the drop and one after: {remote:?}");
    assert_playable(&remote);
    let frames: u64 = remote.iter().map(|f| probe_frames(f.to_str().unwrap(), &[]).0).sum();
    assert!(frames >= 40, "{frames} frames in {remote:?}");
    let codec = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name,width,height", "-of", "csv=p=0"])
        .arg(&remote[0])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&codec.stdout).trim(), "h264,320,240");
    let pattern: Vec<&PathBuf> = files.iter().filter(|f| f.file_name().unwrap().to_string_lossy().starts_with("pattern")).collect();
    assert!(!pattern.is_empty() && probe_frames(pattern[0].to_str().unwrap(), &[]).0 > 0, "{files:?}");
    let log = d.log();
    assert!(log.contains("the source gives no H.264 or H.265 to remux") && log.contains("recording the annotated frames instead"), "{log}");
}

#[test]
fn record_masks_and_none_write_no_video() {
    // Rule: record = "masks" writes no video but puts each frame's road mask in its stats line, and each decodes to a frame-sized mask whose road share is that line's road coverage; record = "none" writes neither, though file is set; check-config says so.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let out = |name: &str, record: &str| {
        format!("file = \"{0}/{name}.mp4\"\nstats = \"{0}/{name}.jsonl\"\nrecord = \"{record}\"", dir.path().display())
    };
    let config = dir.path().join("roadseg.toml");
    // The test model reads about a quarter of the SMPTE pattern as label_2: "road" here, so the masks carry some.
    let header = header(mport, rport).replace("road_classes = [\"label_0\"]", "road_classes = [\"label_2\"]");
    std::fs::write(&config, header + &test_stream("masks", &out("masks", "masks")) + &test_stream("none", &out("none", "none"))).unwrap();
    let check = Command::new(BIN).arg("check-config").arg(&config).output().unwrap();
    let summary = String::from_utf8_lossy(&check.stdout).to_string();
    assert!(check.status.success(), "{summary}{}", String::from_utf8_lossy(&check.stderr));
    assert!(summary.contains("not written (record = \"masks\")") && summary.contains("not written (record = \"none\")"), "{summary}");
    assert!(summary.contains("masks.jsonl (with each frame's road mask)"), "{summary}");
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("frames in both", Duration::from_secs(60), || {
        metric(mport, "roadseg_frames_inferred_total", "masks") >= 10.0 && metric(mport, "roadseg_frames_inferred_total", "none") >= 10.0
    });
    let api = get(mport, "/api/v1/streams");
    assert!(api.contains("\"record\":\"masks\"") && api.contains("\"record\":\"none\""), "the API names each stream's record mode: {api}");
    d.stop_cleanly();
    assert!(mp4s(dir.path()).is_empty(), "no video written: {:?}", mp4s(dir.path()));
    let lines = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.path().join(format!("{name}.jsonl"))).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let masks = lines("masks");
    assert!(masks.len() >= 10 && masks.iter().all(|l| l["road_rle"]["counts"].is_array()), "{:?}", masks.first());
    // Each mask decodes: runs covering w x h of the 320x240 frame, whose road
    // share is the line's road coverage (no hood or bars on a test pattern)
    // within the nearest-neighbour downscale's error.
    for l in &masks {
        let rle: roadseg::video::mask_rle::RoadRle = serde_json::from_value(l["road_rle"].clone()).unwrap();
        assert_eq!((rle.w, rle.h), (320, 240), "{l}");
        let mask = rle.decode();
        assert_eq!(mask.len(), 320 * 240, "{l}");
        let share = mask.iter().filter(|&&m| m == 1).count() as f64 / mask.len() as f64;
        let coverage = l["road_coverage"].as_f64().unwrap();
        assert!((share - coverage).abs() <= 0.01, "decoded road share {share:.4}, road_coverage {coverage}: {l}");
    }
    assert!(masks.iter().all(|l| l["road_coverage"].as_f64().unwrap() > 0.05), "the masks carry road: {:?}", masks.first());
    let none = lines("none");
    assert!(none.len() >= 10 && none.iter().all(|l| l.get("road_rle").is_none()), "{:?}", none.first());
}

#[test]
fn each_stream_names_the_decoder_it_uses_and_where_its_frames_arrive() {
    // Rule: once a source's decodebin picks its video decoder, roadseg_stream_decoder{stream, decoder, hardware, memory} is 1 for it (here a software H.264 decoder: hardware="false"), memory says frames reach roadseg in host memory, and the log says the same once.
    let dir = tempfile::tempdir().unwrap();
    let clip = h264_clip(dir.path());
    let (mport, rport) = (free_port(), free_port());
    let stats = dir.path().join("dec.jsonl");
    let stream = format!("\n[[streams]]\nname = \"dec\"\nuri = \"file://{}\"\nlive = true\n\n[streams.output]\nstats = \"{}\"\n", clip.display(), stats.display());
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &stream).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("frames inferred", Duration::from_secs(60), || metric(mport, "roadseg_frames_inferred_total", "dec") >= 5.0);
    let series: Vec<String> = scrape(mport).lines().filter(|l| l.starts_with("roadseg_stream_decoder{") && l.contains("stream=\"dec\"")).map(str::to_string).collect();
    d.stop_cleanly();
    assert_eq!(series.len(), 1, "one decoder for one run of the source: {series:?}");
    let line = &series[0];
    assert!(line.ends_with(" 1") && line.contains("hardware=\"false\"") && line.contains("memory=\"system\""), "{line}");
    let decoder = line.split("decoder=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
    assert!(["avdec_h264", "openh264dec", "libde265dec"].contains(&decoder) || decoder.contains("264"), "an H.264 decoder: {line}");
    let log = d.log();
    assert_eq!(log.lines().filter(|l| l.contains("decoding on the CPU") && l.contains(decoder)).count(), 1, "{log}");
}
