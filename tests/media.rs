//! The GStreamer edges against real GStreamer: sources, MP4 sinks, the RTSP server.
//! Everything runs under timeouts so a broken pipeline fails a test instead of
//! hanging the suite. Outputs are checked with ffprobe, an independent reader.
#![cfg(feature = "video")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use roadseg::video::frame::{DecodedFrame, FrameTiming, VideoInfo};
use roadseg::video::sink::{FileSink, FileSinkSettings};
use roadseg::video::source::{FlowAction, FrameHandler, Source, SourceError, SourceSettings};

// ---------------------------------------------------------------- helpers

/// How a source ended, as seen by its handler.
#[derive(Debug, Clone, PartialEq)]
enum End {
    Eos,
    Error(String),
}

#[derive(Default)]
struct Seen {
    frames: u64,
    pts: Vec<Option<u64>>,
    sizes: Vec<(u32, u32)>,
    end: Option<End>,
    /// Sum of a few bytes per frame: shows the data was really mapped.
    checksum: u64,
}

/// A handler that records what it gets; `stop_after` makes it return Stop.
#[derive(Default)]
struct Collector {
    seen: Mutex<Seen>,
    changed: Condvar,
    stop_after: Option<u64>,
}

impl Collector {
    fn stopping_after(n: u64) -> Arc<Self> {
        Arc::new(Collector { stop_after: Some(n), ..Default::default() })
    }

    /// Waits for the end of the stream; panics (failing the test) on timeout.
    fn wait_end(&self, timeout: Duration) -> End {
        let seen = self.seen.lock().unwrap();
        let (seen, _) = self.changed.wait_timeout_while(seen, timeout, |s| s.end.is_none()).unwrap();
        seen.end.clone().unwrap_or_else(|| panic!("source did not end within {timeout:?} ({} frames so far)", seen.frames))
    }

    fn wait_frames(&self, n: u64, timeout: Duration) -> u64 {
        let seen = self.seen.lock().unwrap();
        let (seen, _) = self.changed.wait_timeout_while(seen, timeout, |s| s.frames < n && s.end.is_none()).unwrap();
        seen.frames
    }
}

impl FrameHandler for Collector {
    fn on_frame(&self, f: DecodedFrame<'_>) -> FlowAction {
        let mut s = self.seen.lock().unwrap();
        s.frames += 1;
        s.pts.push(f.pts);
        s.sizes.push((f.width, f.height));
        assert!(f.stride >= f.width as usize * 4 && f.data.len() >= f.stride * (f.height as usize - 1) + f.width as usize * 4);
        s.checksum += f.data[f.data.len() / 2] as u64;
        self.changed.notify_all();
        match self.stop_after {
            Some(n) if s.frames >= n => FlowAction::Stop,
            _ => FlowAction::Continue,
        }
    }
    fn on_eos(&self) {
        self.seen.lock().unwrap().end = Some(End::Eos);
        self.changed.notify_all();
    }
    fn on_error(&self, err: SourceError) {
        self.seen.lock().unwrap().end = Some(End::Error(err.to_string()));
        self.changed.notify_all();
    }
}

fn file_uri(p: &Path) -> String {
    format!("file://{}", p.canonicalize().unwrap().display())
}

/// Runs a command, killing it after `timeout`; returns (success, stdout, stderr).
fn run(cmd: &mut Command, timeout: Duration) -> (bool, String, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let s = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            return (status.success(), s(out.stdout), s(out.stderr));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{cmd:?} timed out after {timeout:?}; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What ffprobe reads from a file's first video stream, decoding every frame.
#[derive(Debug)]
struct Probe {
    frames: u64,
    rate: String,
    width: u64,
    height: u64,
    /// ffprobe's stderr at -v error: empty for a clean file.
    errors: String,
}

fn ffprobe(target: &str, extra: &[&str]) -> Probe {
    let mut cmd = Command::new("ffprobe");
    cmd.args(["-v", "error"]).args(extra).args([
        "-count_frames",
        "-select_streams",
        "v:0",
        "-show_entries",
        "stream=nb_read_frames,r_frame_rate,width,height",
        "-of",
        "json",
        target,
    ]);
    let (_, out, err) = run(&mut cmd, Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("ffprobe output {out:?}: {e}; {err}"));
    let s = &v["streams"][0];
    let num = |k: &str| s[k].as_u64().or_else(|| s[k].as_str().and_then(|x| x.parse().ok())).unwrap_or(0);
    Probe {
        frames: num("nb_read_frames"),
        rate: s["r_frame_rate"].as_str().unwrap_or("").to_string(),
        width: num("width"),
        height: num("height"),
        errors: err,
    }
}

/// A synthetic RGBA frame: a gradient with a square that moves with `i`, rows
/// padded to `stride` to exercise the stride path.
fn synth_frame(w: u32, h: u32, stride: usize, i: u64) -> Vec<u8> {
    let mut buf = vec![0u8; stride * h as usize];
    for y in 0..h as usize {
        for x in 0..w as usize {
            let p = y * stride + x * 4;
            let in_box = (x as u64).wrapping_sub(i * 4) % w as u64 <= 40 && (40..80).contains(&y);
            buf[p] = (x * 255 / w as usize) as u8;
            buf[p + 1] = (y * 255 / h as usize) as u8;
            buf[p + 2] = if in_box { 255 } else { 64 };
            buf[p + 3] = 255;
        }
    }
    buf
}

const FRAME_NS: u64 = 40_000_000; // 25 fps

fn timing(i: u64) -> FrameTiming {
    FrameTiming { pts: Some(i * FRAME_NS), duration: Some(FRAME_NS) }
}

fn write_frames(sink: &FileSink, w: u32, h: u32, stride: usize, n: u64) {
    for i in 0..n {
        sink.push(&synth_frame(w, h, stride, i), stride, timing(i)).expect("push");
    }
}

// ---------------------------------------------------------------- sources

#[test]
fn shared_clip_decodes_to_every_frame_in_order() {
    // Rule: a file source delivers every frame of the clip, at source size, with increasing PTS.
    let Some(clip) = common::shared("data/dashcam/solidWhiteRight.mp4") else { return };
    let handler = Arc::new(Collector::default());
    let t0 = Instant::now();
    let src = Source::start(SourceSettings::new(file_uri(&clip)), handler.clone()).expect("start");
    assert_eq!(
        src.wait_info(Duration::from_secs(10)),
        Some(VideoInfo { width: 960, height: 540, fps_num: 25, fps_den: 1 })
    );
    assert_eq!(handler.wait_end(Duration::from_secs(30)), End::Eos);
    src.stop();
    let seen = handler.seen.lock().unwrap();
    eprintln!("decoded {} frames in {:?}", seen.frames, t0.elapsed());
    assert_eq!(seen.frames, 221);
    assert!(seen.sizes.iter().all(|s| *s == (960, 540)));
    let pts: Vec<u64> = seen.pts.iter().map(|p| p.expect("every frame has a PTS")).collect();
    assert!(pts.windows(2).all(|w| w[1] > w[0]), "PTS not increasing: {pts:?}");
    assert!(seen.checksum > 0);
}

#[test]
fn stop_from_the_handler_ends_the_stream() {
    // Rule: FlowAction::Stop ends delivery; the source then reports EOS once.
    let handler = Collector::stopping_after(10);
    let src = Source::start(SourceSettings::new("test://ball?width=160&height=120&fps=25"), handler.clone()).unwrap();
    assert_eq!(handler.wait_end(Duration::from_secs(10)), End::Eos);
    src.stop();
    assert_eq!(handler.seen.lock().unwrap().frames, 10);
}

#[test]
fn test_source_is_live_and_sized() {
    // Rule: test:// URIs give frames of the requested size and rate, paced by the clock when live.
    let handler = Arc::new(Collector::default());
    let mut settings = SourceSettings::new("test://smpte?width=176&height=144&fps=50&num-buffers=25");
    settings.live = true;
    let t0 = Instant::now();
    let src = Source::start(settings, handler.clone()).unwrap();
    assert_eq!(src.wait_info(Duration::from_secs(5)), Some(VideoInfo { width: 176, height: 144, fps_num: 50, fps_den: 1 }));
    assert_eq!(handler.wait_end(Duration::from_secs(10)), End::Eos);
    let took = t0.elapsed();
    src.stop();
    assert_eq!(handler.seen.lock().unwrap().frames, 25);
    assert!(took >= Duration::from_millis(400), "25 frames at 50 fps live took only {took:?}");
}

// ---------------------------------------------------------------- file sinks

#[test]
fn file_sink_keeps_every_frame_and_the_rate() {
    // Rule: N frames pushed give an MP4 that an independent reader decodes as N frames at the pushed rate.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.mp4");
    let (w, h) = (320, 240);
    let sink = FileSink::start(FileSinkSettings::new(&path, w, h, (25, 1))).expect("start");
    eprintln!("encoder: {}", sink.encoder());
    write_frames(&sink, w, h, w as usize * 4 + 64, 50);
    let done = sink.finish(Duration::from_secs(20)).expect("finish");
    assert_eq!(done.files, vec![path.clone()]);
    assert_eq!(done.frames, 50);
    let p = ffprobe(path.to_str().unwrap(), &[]);
    assert_eq!((p.frames, p.rate.as_str(), p.width, p.height), (50, "25/1", 320, 240), "{p:?}");
    assert!(p.errors.is_empty(), "{}", p.errors);
}

#[test]
fn segments_cut_every_second_and_each_plays() {
    // Rule: segment mode cuts a new, independently playable file every segment_seconds.
    let dir = tempfile::tempdir().unwrap();
    let mut settings = FileSinkSettings::new(dir.path().join("seg-%03d.mp4"), 320, 240, (25, 1));
    settings.segment_seconds = Some(1);
    let sink = FileSink::start(settings).expect("start");
    write_frames(&sink, 320, 240, 320 * 4, 75);
    let done = sink.finish(Duration::from_secs(20)).expect("finish");
    assert!(done.files.len() >= 3, "{:?}", done.files);
    let mut total = 0;
    for f in &done.files {
        let p = ffprobe(f.to_str().unwrap(), &[]);
        assert!(p.frames > 0 && p.errors.is_empty(), "{}: {p:?}", f.display());
        assert_eq!(p.rate, "25/1");
        total += p.frames;
    }
    assert_eq!(total, 75);
}

#[test]
fn file_sink_rejects_bad_input_without_panicking() {
    // Rule: bad settings and bad frames are errors that name the problem.
    let dir = tempfile::tempdir().unwrap();
    let e = FileSink::start(FileSinkSettings::new(dir.path().join("no/such/dir/x.mp4"), 64, 48, (25, 1))).err().unwrap();
    assert!(e.to_string().contains("does not exist"), "{e}");
    let mut seg = FileSinkSettings::new(dir.path().join("seg.mp4"), 64, 48, (25, 1));
    seg.segment_seconds = Some(2);
    let e = FileSink::start(seg).err().unwrap();
    assert!(e.to_string().contains("%05d"), "{e}");

    let sink = FileSink::start(FileSinkSettings::new(dir.path().join("x.mp4"), 64, 48, (25, 1))).unwrap();
    let e = sink.push(&[0u8; 100], 256, timing(0)).unwrap_err();
    assert!(e.to_string().contains("need"), "{e}");
    sink.push(&vec![0u8; 64 * 48 * 4], 300, timing(0)).unwrap_err();
    sink.push(&vec![0u8; 64 * 48 * 4], 64 * 4, timing(5)).unwrap();
    let e = sink.push(&vec![0u8; 64 * 48 * 4], 64 * 4, timing(5)).unwrap_err();
    assert!(e.to_string().contains("not after"), "{e}");
    sink.finish(Duration::from_secs(10)).unwrap();
}
