//! The GStreamer edges against real GStreamer: sources, MP4 sinks, the RTSP server.
//! Everything runs under timeouts so a broken pipeline fails a test instead of
//! hanging the suite. Outputs are checked with ffprobe, an independent reader.
#![cfg(feature = "video")]

use crate::common::daemon::free_port;
use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use roadseg::video::frame::{DecodedFrame, FrameTiming, PixelFormat, VideoInfo};
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
        seen.end
            .clone()
            .unwrap_or_else(|| panic!("source did not end within {timeout:?} ({} frames so far)", seen.frames))
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
        // Sources hand over NV12: a Y plane and a half-height interleaved UV plane.
        assert_eq!(f.format, PixelFormat::Nv12);
        let (w, h) = (f.width as usize, f.height as usize);
        assert!(f.stride >= w && f.data.len() >= f.stride * (h - 1) + w);
        let (uv, uv_stride) = f.chroma.expect("NV12 has a UV plane");
        assert!(uv_stride >= w && uv.len() >= uv_stride * (h / 2 - 1) + w);
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
    let (_, out, err) = common::run_with_timeout(&mut cmd, Duration::from_secs(20));
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ffprobe output {out:?}: {e}; {err}"));
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
        Some(VideoInfo { width: 960, height: 540, fps_num: 25, fps_den: 1, format: PixelFormat::Nv12 })
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
    assert_eq!(
        src.wait_info(Duration::from_secs(5)),
        Some(VideoInfo { width: 176, height: 144, fps_num: 50, fps_den: 1, format: PixelFormat::Nv12 })
    );
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

    // Read back through our own source (software decoders only, which also runs
    // the autoplug-select path): same frames, same timestamps.
    let handler = Arc::new(Collector::default());
    let mut settings = SourceSettings::new(file_uri(&path));
    settings.prefer_hardware = false;
    let src = Source::start(settings, handler.clone()).unwrap();
    assert_eq!(handler.wait_end(Duration::from_secs(10)), End::Eos);
    src.stop();
    let pts: Vec<Option<u64>> = (0..50).map(|i| Some(i * FRAME_NS)).collect();
    assert_eq!(handler.seen.lock().unwrap().pts, pts);
}

#[test]
fn live_file_source_is_paced_at_its_frame_rate() {
    // Rule: live = true plays a recorded file at its own frame rate, as a stand-in for a camera.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one-second.mp4");
    let sink = FileSink::start(FileSinkSettings::new(&path, 160, 120, (25, 1))).unwrap();
    write_frames(&sink, 160, 120, 160 * 4, 25);
    sink.finish(Duration::from_secs(10)).unwrap();
    let handler = Arc::new(Collector::default());
    let mut settings = SourceSettings::new(file_uri(&path));
    settings.live = true;
    let t0 = Instant::now();
    let src = Source::start(settings, handler.clone()).unwrap();
    assert_eq!(handler.wait_frames(25, Duration::from_secs(10)), 25);
    let took = t0.elapsed();
    assert_eq!(handler.wait_end(Duration::from_secs(5)), End::Eos);
    src.stop();
    assert!(took >= Duration::from_millis(850), "25 frames at 25 fps arrived in {took:?}");
}

#[test]
fn http_source_decodes_a_served_file() {
    // Rule: http:// URIs decode like files.
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("served.mp4");
    let sink = FileSink::start(FileSinkSettings::new(&path, 160, 120, (25, 1))).unwrap();
    write_frames(&sink, 160, 120, 160 * 4, 30);
    sink.finish(Duration::from_secs(10)).unwrap();
    let body = std::fs::read(&path).unwrap();

    // A minimal HTTP/1.1 server: every request gets the whole file.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut req = Vec::new();
                let mut byte = [0u8; 1];
                while !req.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    req.push(byte[0]);
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).and_then(|_| conn.write_all(&body));
            });
        }
    });

    let handler = Arc::new(Collector::default());
    let src =
        Source::start(SourceSettings::new(format!("http://127.0.0.1:{port}/served.mp4")), handler.clone()).unwrap();
    assert_eq!(handler.wait_end(Duration::from_secs(10)), End::Eos);
    src.stop();
    assert_eq!(handler.seen.lock().unwrap().frames, 30);

    let (m, ..) = source_error(&format!("http://127.0.0.1:{}/x.mp4", free_port()), Duration::from_secs(10));
    assert!(m.contains("cannot connect") || m.contains("cannot open"), "{m}");
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

/// The length ffprobe gives a file (its container's duration), in seconds.
fn duration_of(f: &Path) -> f64 {
    let mut cmd = Command::new("ffprobe");
    cmd.args(["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0"]).arg(f);
    let (_, out, err) = common::run_with_timeout(&mut cmd, Duration::from_secs(20));
    out.trim().parse().unwrap_or_else(|e| panic!("{}: duration {out:?}: {e}; {err}", f.display()))
}

#[test]
fn segments_are_cut_on_timestamps_at_low_output_rates() {
    // Rule: frames reaching a segmented recording at 2 a second (a 25 fps camera inferred at infer_fps = 2) are cut by their timestamps: every segment but the last spans segment_seconds within 10%, and finish reports each segment's own frame count.
    let dir = tempfile::tempdir().unwrap();
    let mut settings = FileSinkSettings::new(dir.path().join("seg-%03d.mp4"), 160, 120, (25, 1));
    settings.segment_seconds = Some(4);
    let sink = FileSink::start(settings).expect("start");
    // 24 s of stream at 2 frames a second; durations left to the sink (as live streams do).
    let (step, n) = (500_000_000u64, 48u64);
    for i in 0..n {
        sink.push(&synth_frame(160, 120, 640, i), 640, FrameTiming { pts: Some(i * step), duration: None }).expect("push");
    }
    let done = sink.finish(Duration::from_secs(20)).expect("finish");
    assert!(done.files.len() >= 5, "24 s in 4 s segments: {:?}", done.files);
    assert_eq!(done.files.len(), done.segment_frames.len(), "one frame count per file");
    let mut total = 0;
    for (i, (f, &reported)) in done.files.iter().zip(&done.segment_frames).enumerate() {
        let p = ffprobe(f.to_str().unwrap(), &[]);
        assert!(p.errors.is_empty(), "{}: {p:?}", f.display());
        assert_eq!(p.frames, reported, "{}: the frame count finish reports is the file's own", f.display());
        // A segment covers its frames' timestamps (one 0.5 s step per frame),
        // and a player shows it as long as that.
        let secs = p.frames as f64 * step as f64 / 1e9;
        let shown = duration_of(f);
        if i + 1 < done.files.len() {
            assert!((secs - 4.0).abs() <= 0.4, "{}: {secs} s of frames, not 4 s +- 10% (all: {:?})", f.display(), done.segment_frames);
            assert!((shown - 4.0).abs() <= 0.4, "{}: plays {shown} s, not 4 s +- 10%", f.display());
        }
        total += p.frames;
    }
    assert_eq!(total, n);
    assert_eq!(done.frames, n);
}

#[test]
fn file_sink_rejects_bad_input_without_panicking() {
    // Rule: bad settings and bad frames are errors that name the problem.
    let dir = tempfile::tempdir().unwrap();
    let e =
        FileSink::start(FileSinkSettings::new(dir.path().join("no/such/dir/x.mp4"), 64, 48, (25, 1))).err().unwrap();
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

    // A disk that is full: pushes fail with the cause instead of blocking forever.
    if Path::new("/dev/full").exists() {
        let sink = FileSink::start(FileSinkSettings::new("/dev/full", 64, 48, (25, 1))).unwrap();
        let frame = synth_frame(64, 48, 256, 0);
        let t0 = Instant::now();
        let e = (0..500).find_map(|i| sink.push(&frame, 256, timing(i)).err()).expect("writing to /dev/full failed");
        eprintln!("/dev/full -> {e} after {:?}", t0.elapsed());
        assert!(e.to_string().contains("cannot write /dev/full"), "{e}");
        assert!(sink.finish(Duration::from_secs(5)).is_err());
    }
}

// ---------------------------------------------------------------- RTSP

mod rtsp_helpers {
    use super::*;
    use roadseg::video::rtsp::RtspFeed;
    pub use roadseg::video::source::RtspTransport;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Pushes a moving pattern into `feed` at 25 fps until dropped.
    pub struct Pump {
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<u64>>,
    }

    impl Pump {
        pub fn start(feed: RtspFeed, w: u32, h: u32) -> Pump {
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let thread = std::thread::spawn(move || {
                let frames: Vec<Vec<u8>> = (0..25).map(|i| synth_frame(w, h, w as usize * 4, i)).collect();
                let (mut i, mut delivered) = (0u64, 0u64);
                let t0 = Instant::now();
                while !s.load(Ordering::Acquire) {
                    if feed.push(&frames[(i % 25) as usize], w as usize * 4, timing(i)).expect("push") {
                        delivered += 1;
                    }
                    i += 1;
                    // Paced on the wall clock, like a camera.
                    let next = t0 + Duration::from_nanos(i * FRAME_NS);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
                delivered
            });
            Pump { stop, thread: Some(thread) }
        }

        pub fn finish(mut self) -> u64 {
            self.stop.store(true, Ordering::Release);
            self.thread.take().unwrap().join().unwrap()
        }
    }

    impl Drop for Pump {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Release);
        }
    }

    /// A GStreamer client (our own Source) that takes `n` frames; returns the end.
    pub fn watch(url: &str, n: u64) -> (u64, End) {
        watch_over(url, n, RtspTransport::Tcp)
    }

    pub fn watch_over(url: &str, n: u64, transport: RtspTransport) -> (u64, End) {
        let handler = Collector::stopping_after(n);
        let mut settings = SourceSettings::new(url);
        settings.rtsp_transport = transport;
        settings.live = true;
        let src = match Source::start(settings, handler.clone()) {
            Ok(s) => s,
            Err(e) => return (0, End::Error(e.to_string())),
        };
        let end = handler.wait_end(Duration::from_secs(15));
        src.stop();
        let frames = handler.seen.lock().unwrap().frames;
        (frames, end)
    }

    pub fn wait_clients(server: &roadseg::video::rtsp::RtspServer, want: usize) -> usize {
        let t0 = Instant::now();
        while server.client_count() != want && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        server.client_count()
    }
}

#[test]
fn rtsp_clients_are_counted_per_mount() {
    // Rule: a client counts for the mount it plays (not for the others) while it plays, and not after it leaves.
    use roadseg::video::rtsp::RtspServer;
    use rtsp_helpers::*;
    let server = RtspServer::start("127.0.0.1:0".parse().unwrap(), None).expect("server");
    let info = VideoInfo { width: 320, height: 240, fps_num: 25, fps_den: 1, format: PixelFormat::Rgba };
    let (a, b) = (server.add_stream("/a", info).expect("mount a"), server.add_stream("/b", info).expect("mount b"));
    let (_pa, _pb) = (Pump::start(a, 320, 240), Pump::start(b, 320, 240));
    let url = server.url("/a");
    let (frames, most_a, most_b) = std::thread::scope(|s| {
        let watcher = s.spawn(|| watch(&url, 25));
        let (mut most_a, mut most_b) = (0, 0);
        while !watcher.is_finished() {
            most_a = most_a.max(server.clients_at("/a"));
            most_b = most_b.max(server.clients_at("/b"));
            std::thread::sleep(Duration::from_millis(10));
        }
        (watcher.join().unwrap().0, most_a, most_b)
    });
    assert_eq!(frames, 25);
    assert_eq!((most_a, most_b), (1, 0), "one client on /a, none on /b");
    assert_eq!(wait_clients(&server, 0), 0);
    assert_eq!(server.clients_at("/a"), 0, "counted after leaving");
}

#[test]
fn rtsp_clients_come_and_go() {
    // Rule: any number of RTSP clients, one after another or together, get video from one mounted feed.
    use roadseg::video::rtsp::RtspServer;
    use rtsp_helpers::*;
    let server = RtspServer::start("127.0.0.1:0".parse().unwrap(), None).expect("server");
    let info = VideoInfo { width: 320, height: 240, fps_num: 25, fps_den: 1, format: PixelFormat::Rgba };
    let feed = server.add_stream("/test", info).expect("mount");
    let pump = Pump::start(feed.clone(), 320, 240);
    let url = server.url("/test");
    assert_eq!(server.client_count(), 0);

    let t0 = Instant::now();
    // A live stream never ends: read 25 packets' worth.
    let p = ffprobe(&url, &["-rtsp_transport", "tcp", "-read_intervals", "%+#25"]);
    eprintln!("ffprobe client: {p:?} in {:?}", t0.elapsed());
    assert_eq!((p.width, p.height), (320, 240), "{p:?}");
    assert!(p.frames > 0, "{p:?}");

    for transport in [RtspTransport::Tcp, RtspTransport::Tcp, RtspTransport::Udp] {
        let t0 = Instant::now();
        let (frames, end) = watch_over(&url, 10, transport);
        eprintln!("{transport:?} client: {frames} frames, {end:?} in {:?}", t0.elapsed());
        assert_eq!((frames, end), (10, End::Eos));
    }
    // Two at once share the media; meanwhile the server counts them. (Earlier
    // clients' connections close asynchronously: wait for them first.)
    assert_eq!(wait_clients(&server, 0), 0);
    let (frames_a, frames_b, most) = std::thread::scope(|s| {
        let a = s.spawn(|| watch(&url, 25));
        let b = s.spawn(|| watch(&url, 25));
        let mut most = 0;
        while !(a.is_finished() && b.is_finished()) {
            most = most.max(server.client_count());
            std::thread::sleep(Duration::from_millis(10));
        }
        (a.join().unwrap().0, b.join().unwrap().0, most)
    });
    assert_eq!((frames_a, frames_b), (25, 25));
    assert_eq!(most, 2, "client_count never showed both clients");

    assert_eq!(wait_clients(&server, 0), 0, "clients still counted after leaving");

    // Shutting down with a client watching disconnects it promptly.
    let watcher = std::thread::spawn({
        let url = url.clone();
        move || watch(&url, 10_000)
    });
    assert_eq!(wait_clients(&server, 1), 1);
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    server.shutdown();
    let (frames, end) = watcher.join().unwrap();
    eprintln!("shutdown took {:?}; the watcher got {frames} frames, then {end:?}", t0.elapsed());
    assert!(frames > 0 && frames < 10_000);
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(pump.finish() > 0);
}

#[test]
fn rtsp_auth_refuses_anonymous_and_admits_the_user() {
    // Rule: with credentials configured, anonymous clients are refused and the configured user is served.
    use roadseg::video::rtsp::RtspServer;
    use rtsp_helpers::*;
    let auth = Some(("viewer".to_string(), "s3cret".to_string()));
    let server = RtspServer::start("127.0.0.1:0".parse().unwrap(), auth).expect("server");
    let info = VideoInfo { width: 160, height: 120, fps_num: 25, fps_den: 1, format: PixelFormat::Rgba };
    let pump = Pump::start(server.add_stream("/cam", info).unwrap(), 160, 120);
    let url = server.url("/cam");

    let (frames, end) = watch(&url, 5);
    assert_eq!(frames, 0);
    let End::Error(msg) = end else { panic!("anonymous client was served: {end:?}") };
    assert!(msg.contains("credentials") && !msg.contains("s3cret"), "{msg}");

    let mut anon = Command::new("ffprobe");
    anon.args(["-v", "error", "-rtsp_transport", "tcp", "-show_entries", "stream=width", "-of", "json", &url]);
    let (ok, _, err) = common::run_with_timeout(&mut anon, Duration::from_secs(20));
    assert!(!ok && err.contains("401"), "ffprobe without credentials: ok={ok} {err}");

    let port = server.local_addr().port();
    let with_user = format!("rtsp://viewer:s3cret@127.0.0.1:{port}/cam");
    assert_eq!(watch(&with_user, 5), (5, End::Eos));
    let p = ffprobe(&with_user, &["-rtsp_transport", "tcp", "-read_intervals", "%+#5"]);
    assert_eq!((p.width, p.height), (160, 120), "{p:?}");
    let wrong = format!("rtsp://viewer:nope@127.0.0.1:{port}/cam");
    assert!(matches!(watch(&wrong, 5), (0, End::Error(_))));

    assert_eq!(wait_clients(&server, 0), 0);
    pump.finish();
    server.shutdown();
}

#[test]
fn rtsp_removed_stream_is_gone() {
    // Rule: remove_stream unmounts a path (clients then get not-found) and its feed drops frames.
    use roadseg::video::rtsp::{RtspError, RtspServer};
    use rtsp_helpers::*;
    let server = RtspServer::start("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let info = VideoInfo { width: 160, height: 120, fps_num: 25, fps_den: 1, format: PixelFormat::Rgba };
    let feed = server.add_stream("/a", info).unwrap();
    assert!(matches!(server.add_stream("/a", info), Err(RtspError::PathInUse { .. })));
    assert!(matches!(server.add_stream("nope", info), Err(RtspError::BadPath { .. })));
    assert!(!feed.has_clients());
    assert!(!feed.push(&synth_frame(160, 120, 640, 0), 640, timing(0)).unwrap(), "no client, frame dropped");
    assert!(feed.push(&[0u8; 10], 640, timing(1)).is_err());
    server.remove_stream("/a").unwrap();
    assert!(matches!(server.remove_stream("/a"), Err(RtspError::NotMounted { .. })));
    let (frames, end) = watch(&server.url("/a"), 5);
    assert_eq!(frames, 0);
    assert!(matches!(&end, End::Error(m) if m.contains("no such file or stream")), "{end:?}");
    server.shutdown();

    let taken = RtspServer::start("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let e = RtspServer::start(taken.local_addr(), None).err().expect("second bind must fail");
    assert!(e.to_string().contains("cannot listen"), "{e}");
}

// ---------------------------------------------------------------- errors

/// Starts a source that must fail; returns the message, whether from start or the handler.
fn source_error(uri: &str, timeout: Duration) -> (String, u64, Duration) {
    let handler = Arc::new(Collector::default());
    let t0 = Instant::now();
    let msg = match Source::start(SourceSettings::new(uri), handler.clone()) {
        Err(e) => e.to_string(),
        Ok(src) => {
            let end = handler.wait_end(timeout);
            src.stop();
            match end {
                End::Error(m) => m,
                End::Eos => "EOS".into(),
            }
        }
    };
    let frames = handler.seen.lock().unwrap().frames;
    eprintln!("{uri} -> {msg} ({frames} frames, {:?})", t0.elapsed());
    (msg, frames, t0.elapsed())
}

#[test]
fn source_errors_are_clear() {
    // Rule: each way a source can fail ends in one clear error (or EOS for a damaged tail), never a panic or a hang.
    let dir = tempfile::tempdir().unwrap();

    let (m, ..) = source_error(&format!("file://{}/missing.mp4", dir.path().display()), Duration::from_secs(5));
    assert!(m.contains("missing.mp4") && m.contains("no such file"), "{m}");

    let garbage = dir.path().join("garbage.mp4");
    std::fs::write(&garbage, (0..20_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect::<Vec<_>>())
        .unwrap();
    let (m, ..) = source_error(&file_uri(&garbage), Duration::from_secs(10));
    assert!(m.contains("garbage.mp4") && m.contains("not a media file"), "{m}");

    let ogg = dir.path().join("audio.ogg");
    let mut make = Command::new("gst-launch-1.0");
    make.args(["-q", "audiotestsrc", "num-buffers=50", "!", "vorbisenc", "!", "oggmux", "!", "filesink"])
        .arg(format!("location={}", ogg.display()));
    assert!(common::run_with_timeout(&mut make, Duration::from_secs(20)).0, "gst-launch could not make an audio-only file");
    let (m, frames, _) = source_error(&file_uri(&ogg), Duration::from_secs(10));
    assert_eq!(frames, 0);
    assert!(m.contains("no video stream in") && m.contains("audio"), "{m}");

    let (m, _, took) = source_error("rtsp://127.0.0.1:1/x", Duration::from_secs(10));
    assert!(m.contains("cannot connect to rtsp://127.0.0.1:1/x"), "{m}");
    assert!(took < Duration::from_secs(6), "unreachable RTSP took {took:?}");

    let (m, ..) = source_error("ftp://example.com/clip.mp4", Duration::from_secs(1));
    assert!(m.contains("unsupported source uri"), "{m}");
    let (m, ..) = source_error("test://smpte ! filesink location=/tmp/x", Duration::from_secs(1));
    assert!(m.contains("bad source uri"), "{m}");
    let (m, ..) = source_error("v4l2:///dev/video-none", Duration::from_secs(5));
    assert!(m.contains("/dev/video-none"), "{m}");
}

#[test]
fn truncated_file_decodes_what_it_can_then_ends() {
    // Rule: a file cut short yields the frames it holds and then ends (EOS or a clear error), without hanging.
    let Some(clip) = common::shared("data/dashcam/solidWhiteRight.mp4") else { return };
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&clip).unwrap();
    let cut = dir.path().join("cut.mp4");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 10]).unwrap();
    let handler = Arc::new(Collector::default());
    let src = Source::start(SourceSettings::new(file_uri(&cut)), handler.clone()).unwrap();
    let end = handler.wait_end(Duration::from_secs(20));
    src.stop();
    let frames = handler.seen.lock().unwrap().frames;
    eprintln!("truncated clip: {frames} frames, then {end:?}");
    assert!(frames > 0 && frames < 221, "{frames}");
    if let End::Error(m) = end {
        assert!(m.contains("cut.mp4"), "{m}");
    }
}

// ---------------------------------------------------------------- crash safety

const CHILD_ENV: &str = "ROADSEG_MEDIA_CRASH_CHILD";

#[test]
fn crash_child() {
    // Rule: none here; this is the writer process the kill -9 test starts (it does nothing without its env var).
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut parts = spec.split('|');
    let (mode, path, frames) =
        (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap().parse::<u64>().unwrap());
    let mut settings = FileSinkSettings::new(path, 320, 240, (25, 1));
    settings.fragment_ms = 500;
    if mode.starts_with("segments") {
        settings.segment_seconds = Some(1);
    }
    let sink = FileSink::start(settings).expect("child sink");
    let pattern: Vec<Vec<u8>> = (0..25).map(|i| synth_frame(320, 240, 320 * 4, i)).collect();
    for i in 0.. {
        sink.push(&pattern[(i % 25) as usize], 320 * 4, timing(i)).expect("child push");
        println!("pushed {i}");
        if i + 1 == frames && mode.ends_with("idle") {
            // Let the pipeline write all it would write, then wait to be killed.
            std::thread::sleep(Duration::from_millis(700));
            println!("ready");
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

/// Starts the writer child and SIGKILLs it once it prints `until`.
fn crash_writer(mode: &str, path: &Path, frames: u64, until: &str) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "media::crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{mode}|{}|{frames}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let want = until.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim() == want {
                let _ = tx.send(());
                return;
            }
        }
    });
    let seen = rx.recv_timeout(Duration::from_secs(30));
    child.kill().unwrap(); // SIGKILL: no EOS, no finalising
    let _ = child.wait();
    assert!(seen.is_ok(), "writer child never printed {until:?}");
}

/// The file cut after its last complete top-level box (and a trailing moof with
/// no mdat), i.e. what was fully written before the crash.
fn complete_boxes(path: &Path) -> PathBuf {
    let data = std::fs::read(path).unwrap();
    let (mut at, mut keep, mut last_moof) = (0usize, 0usize, None);
    while at + 8 <= data.len() {
        let mut size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        if size == 1 && at + 16 <= data.len() {
            size = u64::from_be_bytes(data[at + 8..at + 16].try_into().unwrap()) as usize;
        }
        if size < 8 || at + size > data.len() {
            break;
        }
        last_moof = (&data[at + 4..at + 8] == b"moof").then_some(at);
        at += size;
        keep = at;
    }
    let keep = last_moof.unwrap_or(keep);
    let out = path.with_extension("complete.mp4");
    std::fs::write(&out, &data[..keep]).unwrap();
    out
}

#[test]
fn kill_9_keeps_what_was_written() {
    // Rule: after kill -9 of a writer, finished segments and every complete fragment play without errors.
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("single.mp4");
    let busy = dir.path().join("busy.mp4");
    let segs = dir.path().join("seg-%03d.mp4");
    // 145 frames = 5.8 s: five finished 1 s segments and an open one.
    std::thread::scope(|s| {
        s.spawn(|| crash_writer("file-idle", &single, 145, "ready"));
        s.spawn(|| crash_writer("segments-idle", &segs, 145, "ready"));
        // Killed while still writing flat out: the tail may be half a fragment.
        s.spawn(|| crash_writer("file-busy", &busy, u64::MAX, "pushed 145"));
    });

    let p = ffprobe(single.to_str().unwrap(), &[]);
    eprintln!("killed single file: {p:?}");
    assert!(p.errors.is_empty(), "{}", p.errors);
    assert!((130..=145).contains(&p.frames), "lost more than a fragment (0.5 s): {p:?}");

    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
        .collect();
    names.sort();
    // The open segment shows up once its first GOP is complete (splitmuxsink
    // holds a GOP until the next keyframe), so it may or may not be there yet.
    assert!(names.len() >= 5, "{names:?}");
    let mut total = 0;
    for (i, f) in names.iter().enumerate() {
        let p = ffprobe(f.to_str().unwrap(), &[]);
        eprintln!("killed segments: {} {p:?}", f.display());
        assert!(p.errors.is_empty(), "{}: {}", f.display(), p.errors);
        assert!(p.frames > 0, "{}: {p:?}", f.display());
        if i < 5 {
            assert_eq!(p.frames, 25, "finished segment {}: {p:?}", f.display());
        }
        total += p.frames;
    }
    assert!((130..=145).contains(&total), "lost more than a fragment (0.5 s): {total}");

    let raw = ffprobe(busy.to_str().unwrap(), &[]);
    let complete = complete_boxes(&busy);
    let p = ffprobe(complete.to_str().unwrap(), &[]);
    eprintln!("killed busy file: raw {} frames, complete fragments {p:?}", raw.frames);
    assert!(raw.frames > 0);
    assert!(p.errors.is_empty() && p.frames > 0 && p.frames <= raw.frames, "{p:?}");
}
