//! Faults a camera fleet meets, each against the real daemon: recording
//! folders that turn read-only or fill up, RTSP viewers that stall or come
//! and go by the hundred, cameras that send damaged H.264 or change
//! resolution mid-stream. In every case the fault stays in its own output or
//! stream, is logged and counted, and the daemon recovers when it clears.

#![cfg(feature = "video")]


use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::daemon::*;

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A recording stream `cam` (1 s segments into `rec`, stats beside) and a second stream `other`.
fn recording_config(dir: &Path, mport: u16, rec: &Path, pattern: &str, extra: &str) -> PathBuf {
    let output = format!(
        "file = \"{}/{{stream}}.mp4\"\nsegment_seconds = 1\nstats = \"{}/cam.jsonl\"{extra}",
        rec.display(),
        dir.display()
    );
    let other = format!("stats = \"{}/other.jsonl\"", dir.display());
    let config = dir.join("roadseg.toml");
    let cam = test_stream("cam", &output).replace("test://smpte", &format!("test://{pattern}"));
    std::fs::write(&config, header(mport, free_port()) + &cam + &test_stream("other", &other)).unwrap();
    config
}

/// Shared by the read-only and full-disk tests: `fault` breaks the recording
/// folder, `clear` mends it. Checks the output pauses with a counted error
/// while the stats output and the other stream go on, and that recording
/// resumes with playable segments.
fn recording_survives(name: &str, pattern: &str, extra: &str, fault: impl FnOnce(&Daemon, &Path), clear: impl FnOnce(&Daemon, &Path)) {
    let dir = tempfile::tempdir().unwrap();
    let mport = free_port();
    let rec = dir.path().join("rec");
    let config = recording_config(dir.path(), mport, &rec, pattern, extra);
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("two segments", Duration::from_secs(40), || mp4s(&rec).len() >= 2);
    fault(&d, &rec);
    let errors = || labelled_metric(mport, "roadseg_sink_errors_total", &["stream=\"cam\"", "sink=\"file\""]).unwrap_or(0.0);
    d.wait_for(&format!("file errors counted ({name})"), Duration::from_secs(20), || errors() > 0.0);
    let lines = |f: &str| std::fs::read_to_string(dir.path().join(f)).map_or(0, |t| t.lines().count());
    let (cam, other) = (lines("cam.jsonl"), lines("other.jsonl"));
    d.wait_for("the stats output and the other stream go on", Duration::from_secs(20), || {
        lines("cam.jsonl") > cam + 5 && lines("other.jsonl") > other + 5
    });
    assert!(d.log().contains("recording paused"), "{}", d.log());
    let before: Vec<PathBuf> = mp4s(&rec);
    clear(&d, &rec);
    d.wait_for("recording resumed with new segments", Duration::from_secs(30), || {
        mp4s(&rec).iter().filter(|f| !before.contains(f)).count() >= 2
    });
    d.stop_cleanly();
    assert!(d.log().contains("recording resumed"), "{}", d.log());
    let resumed: Vec<PathBuf> = mp4s(&rec).into_iter().filter(|f| !before.contains(f)).collect();
    assert_playable(&resumed);
}

/// Whether `dir` refuses new files (probed, then tidied).
fn refuses_new_files(dir: &Path) -> bool {
    let probe = dir.join(".probe");
    let refused = std::fs::write(&probe, b"x").is_err();
    let _ = std::fs::remove_file(&probe);
    refused
}

/// Makes `dir` refuse new files: chmod for a normal user; root ignores
/// permissions, so the immutable attribute then (None if neither works here).
fn make_read_only(dir: &Path) -> Option<&'static str> {
    if euid() != 0 {
        let ok = Command::new("chmod").arg("0555").arg(dir).status().is_ok_and(|s| s.success());
        return (ok && refuses_new_files(dir)).then_some("chmod");
    }
    let ok = Command::new("chattr").arg("+i").arg(dir).status().is_ok_and(|s| s.success());
    (ok && refuses_new_files(dir)).then_some("chattr")
}

fn undo_read_only(dir: &Path, how: &str) {
    let ok = match how {
        "chmod" => Command::new("chmod").arg("0755").arg(dir).status(),
        _ => Command::new("chattr").arg("-i").arg(dir).status(),
    };
    assert!(ok.is_ok_and(|s| s.success()), "could not make {} writable again", dir.display());
}

fn euid() -> u32 {
    let out = Command::new("id").arg("-u").output().expect("id -u");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

#[test]
fn a_read_only_recording_folder_pauses_recording_and_it_resumes() {
    // Rule: when the recording folder turns read-only mid-run the file output pauses with a logged error and a metric while the stream's stats and the other stream go on; once writable again, recording resumes with playable segments.
    let probe = tempfile::tempdir().unwrap();
    if make_read_only(probe.path()).map(|how| undo_read_only(probe.path(), how)).is_none() {
        roadseg::test_skip::skip("cannot make a folder read-only here (chmod is ignored for root and chattr +i is refused)");
        return;
    }
    let how = std::sync::Mutex::new(None);
    recording_survives(
        "read-only folder",
        "smpte",
        "",
        |_, rec| *how.lock().unwrap() = Some(make_read_only(rec).expect("read-only worked on the probe folder")),
        |_, rec| undo_read_only(rec, how.lock().unwrap().take().unwrap()),
    );
}

#[test]
fn a_full_disk_pauses_recording_and_it_resumes() {
    // Rule: when writes to a recording fail for space (the daemon's file-size limit lowered under it, as a quota or a full disk does) the file output pauses with a logged error and a metric, the daemon is not killed by SIGXFSZ, the stats output and the other stream go on, and recording resumes once space is back.
    if Command::new("prlimit").arg("--version").output().is_err() {
        roadseg::test_skip::skip("prlimit (util-linux) is not installed");
        return;
    }
    // Noise at a high bitrate makes each segment far larger than the limit
    // below, which leaves the small stats files room to grow for the test's length.
    let limit = |d: &Daemon, value: &str| {
        let ok = Command::new("prlimit")
            .args(["--pid", &d.child.id().to_string(), &format!("--fsize={value}:unlimited")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "prlimit --fsize={value} failed");
    };
    recording_survives(
        "file-size limit",
        "snow",
        "\nbitrate_kbps = 4000",
        |d, rec| {
            let stats = rec.parent().unwrap().join("cam.jsonl");
            let size = std::fs::metadata(&stats).map_or(0, |m| m.len());
            limit(d, &(size + 128 * 1024).to_string())
        },
        |d, _| limit(d, "unlimited"),
    );
}

/// A minimal RTSP client over TCP, enough to play a stream and then
/// misbehave (stop reading, or vanish) the way broken viewers do.
struct RtspViewer {
    socket: TcpStream,
    cseq: u32,
    session: Option<String>,
}

impl RtspViewer {
    /// DESCRIBE, SETUP (RTP interleaved over this connection), PLAY.
    fn play(url: &str) -> std::io::Result<RtspViewer> {
        let addr = url.trim_start_matches("rtsp://").split('/').next().unwrap().to_string();
        let socket = TcpStream::connect(addr)?;
        socket.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut v = RtspViewer { socket, cseq: 0, session: None };
        let sdp = v.request("DESCRIBE", url, "Accept: application/sdp\r\n")?;
        let control = sdp.lines().find_map(|l| l.trim().strip_prefix("a=control:")).filter(|c| *c != "*").unwrap_or("stream=0").to_string();
        let track = if control.starts_with("rtsp://") { control } else { format!("{url}/{control}") };
        let setup = v.request("SETUP", &track, "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n")?;
        v.session = setup
            .lines()
            .find_map(|l| l.strip_prefix("Session:").or_else(|| l.strip_prefix("session:")))
            .map(|s| s.split(';').next().unwrap().trim().to_string());
        v.request("PLAY", url, "Range: npt=0.000-\r\n")?;
        Ok(v)
    }

    /// Sends a request; returns the response (head and body) or an error for a non-200.
    fn request(&mut self, method: &str, url: &str, headers: &str) -> std::io::Result<String> {
        self.cseq += 1;
        let session = self.session.as_ref().map(|s| format!("Session: {s}\r\n")).unwrap_or_default();
        let req = format!("{method} {url} RTSP/1.0\r\nCSeq: {}\r\n{session}{headers}User-Agent: roadseg-test\r\n\r\n", self.cseq);
        self.socket.write_all(req.as_bytes())?;
        // Media already flowing on this connection comes first, as `$` frames.
        let mut byte = [0u8; 1];
        self.socket.read_exact(&mut byte)?;
        while byte[0] == b'$' {
            let mut frame = [0u8; 3];
            self.socket.read_exact(&mut frame)?;
            let mut skip = vec![0u8; u16::from_be_bytes([frame[1], frame[2]]) as usize];
            self.socket.read_exact(&mut skip)?;
            self.socket.read_exact(&mut byte)?;
        }
        let mut head = vec![byte[0]];
        while !head.ends_with(b"\r\n\r\n") {
            self.socket.read_exact(&mut byte)?;
            head.push(byte[0]);
            if head.len() > 64 * 1024 {
                return Err(std::io::Error::other("response head too long"));
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        self.socket.read_exact(&mut body)?;
        if !head.starts_with("RTSP/1.0 200") {
            return Err(std::io::Error::other(format!("{method}: {}", head.lines().next().unwrap_or(""))));
        }
        Ok(head + &String::from_utf8_lossy(&body))
    }

    /// Reads at least `bytes` of the interleaved media.
    fn read_media(&mut self, bytes: usize) -> std::io::Result<()> {
        let mut buf = [0u8; 16 * 1024];
        let mut got = 0;
        while got < bytes {
            let n = self.socket.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::Error::other("closed"));
            }
            got += n;
        }
        Ok(())
    }
}

/// One live stream `cam` served over RTSP (and recorded into `rec`); its URL.
fn served(dir: &Path, mport: u16, uri: &str, extra: &str) -> (PathBuf, String) {
    let rport = free_port();
    let rec = dir.join("rec");
    let stream = format!(
        "\n[[streams]]\nname = \"cam\"\nuri = \"{uri}\"\nlive = true\n\n[streams.output]\n\
         rtsp = \"{{stream}}\"\nfile = \"{}/{{stream}}.mp4\"\nsegment_seconds = 2\n{extra}\n",
        rec.display()
    );
    let config = dir.join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &stream).unwrap();
    (config, format!("rtsp://127.0.0.1:{rport}/cam"))
}

/// Frames another viewer (ffprobe) decodes from `url` in 4 seconds.
fn frames_seen_by_another_viewer(url: &str) -> u64 {
    probe_frames(url, &["-rtsp_transport", "tcp", "-read_intervals", "%+4"]).0
}

#[test]
fn a_viewer_that_stops_reading_holds_up_nothing() {
    // Rule: an RTSP viewer that plays and then stops reading does not slow other viewers or the recording, and the daemon's memory stays bounded while it hangs there.
    let dir = tempfile::tempdir().unwrap();
    let mport = free_port();
    // Noise at a high bitrate: incompressible, so the stalled socket fills fast.
    let (config, url) = served(dir.path(), mport, "test://snow?width=320&height=240&fps=25", "bitrate_kbps = 3000");
    let rec = dir.path().join("rec");
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("recording", Duration::from_secs(40), || !mp4s(&rec).is_empty());
    let healthy = frames_seen_by_another_viewer(&url);
    assert!(healthy >= 25, "a normal viewer saw only {healthy} frames in 4 s; log:\n{}", d.log());

    let stalled = RtspViewer::play(&url).expect("the stalled viewer starts playing");
    std::thread::sleep(Duration::from_secs(10));
    let (rss_then, segments_then) = (rss_kib(d.child.id()), mp4s(&rec).len());
    let seen = frames_seen_by_another_viewer(&url);
    std::thread::sleep(Duration::from_secs(12));
    let rss_now = rss_kib(d.child.id());
    // A server blocked by the stalled socket would give ~0; 25 of 100 leaves room for a busy 2-core machine.
    assert!(seen >= 25, "with a stalled viewer another saw {seen} frames in 4 s (alone: {healthy})");
    assert!(mp4s(&rec).len() >= segments_then + 4, "recording slowed: {} segments then, {} now", segments_then, mp4s(&rec).len());
    let growth_mib = (rss_now as f64 - rss_then as f64) / 1024.0;
    assert!(growth_mib < 16.0, "memory grew {growth_mib:.1} MiB in 16 s of a stalled viewer ({rss_then} -> {rss_now} KiB)");
    eprintln!("stalled viewer: another saw {seen}/{healthy} frames; RSS {rss_then} -> {rss_now} KiB");
    drop(stalled);
    d.stop_cleanly();
    assert_playable(&mp4s(&rec));
}

#[test]
fn hundreds_of_viewers_coming_and_going_leave_nothing_behind() {
    // Rule: 400 RTSP viewers that play and leave (half tearing down, half just hanging up), ten at a time, leave the client count at 0, file descriptors at their baseline, memory flat after the first 200, and the stream still served and recorded.
    let dir = tempfile::tempdir().unwrap();
    let mport = free_port();
    let (config, url) = served(dir.path(), mport, "test://smpte?width=320&height=240&fps=25", "");
    let rec = dir.path().join("rec");
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("recording", Duration::from_secs(40), || !mp4s(&rec).is_empty());
    // Warm the server's per-client machinery once before taking the baseline.
    RtspViewer::play(&url).and_then(|mut v| v.read_media(4096)).expect("a first viewer plays");
    let clients = || metric(mport, "roadseg_rtsp_clients", "cam");
    d.wait_for("the first viewer gone", Duration::from_secs(20), || clients() == 0.0);
    let pid = d.child.id();
    let (fds0, rss0) = (open_fds(pid), rss_kib(pid));

    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut rss_half_way = 0;
    for round in 0..40 {
        if round == 20 {
            d.wait_for("the first 200 gone", Duration::from_secs(30), || clients() == 0.0);
            rss_half_way = rss_kib(pid);
        }
        let threads: Vec<_> = (0..10)
            .map(|i| {
                let (url, failures) = (url.clone(), failures.clone());
                std::thread::spawn(move || {
                    let played = RtspViewer::play(&url).and_then(|mut v| {
                        v.read_media(8 * 1024)?;
                        if i % 2 == 0 {
                            let u = url.clone();
                            let _ = v.request("TEARDOWN", &u, "");
                        }
                        Ok(())
                    });
                    if let Err(e) = played {
                        failures.lock().unwrap().push(format!("round {round} viewer {i}: {e}"));
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
    }
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "viewers failed: {failures:?}");
    d.wait_for("every viewer gone", Duration::from_secs(30), || clients() == 0.0);
    let settle = Instant::now() + Duration::from_secs(15);
    while open_fds(pid) > fds0 && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (fds1, rss1) = (open_fds(pid), rss_kib(pid));
    assert!(fds1 <= fds0, "file descriptors: {fds0} before 100 viewers, {fds1} after");
    // The first 200 warm the allocator's arenas and the server's thread pool
    // (measured: +12 MiB, then +6, then flat to 600 viewers); a leak shows as
    // the next 200 growing memory by as much again.
    let growth_mib = (rss1 as f64 - rss_half_way as f64) / 1024.0;
    eprintln!("400 viewers: fds {fds0} -> {fds1}, RSS {rss0} -> {rss_half_way} (200) -> {rss1} KiB (400)");
    assert!(growth_mib < 6.0, "memory grew {growth_mib:.1} MiB over the second 200 viewers ({rss0} -> {rss_half_way} -> {rss1} KiB)");
    assert!(frames_seen_by_another_viewer(&url) >= 40, "the stream is no longer served well");
    d.stop_cleanly();
    assert_playable(&mp4s(&rec));
}

/// An MPEG-TS H.264 clip made by ffmpeg: `seconds` of a test pattern at
/// `size` (WxH), 10 fps, timestamps starting at `offset_s`.
fn ts_clip(path: &Path, size: &str, seconds: u32, offset_s: u32) {
    let ok = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=size={size}:rate=10:duration={seconds}"))
        .args(["-c:v", "libx264", "-g", "10", "-pix_fmt", "yuv420p", "-output_ts_offset", &offset_s.to_string()])
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ffmpeg could not make {}", path.display());
}

/// An HTTP camera: serves `bytes` as an MPEG-TS stream to each client,
/// paced at `bytes_per_s`, then hangs up (the camera "restarts"). Stops when
/// dropped. Returns its URL.
struct HttpCamera {
    url: String,
    stop: Arc<AtomicBool>,
}

impl HttpCamera {
    fn serve(bytes: Vec<u8>, bytes_per_s: usize) -> HttpCamera {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/cam.ts", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let (bytes, halt) = (Arc::new(bytes), stop.clone());
        std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let Ok((mut client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let (bytes, halt) = (bytes.clone(), halt.clone());
                std::thread::spawn(move || {
                    let _ = client.set_nonblocking(false);
                    let mut req = [0u8; 4096];
                    let _ = client.read(&mut req);
                    if client.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: video/mp2t\r\nConnection: close\r\n\r\n").is_err() {
                        return;
                    }
                    let started = Instant::now();
                    for (i, chunk) in bytes.chunks(1880).enumerate() {
                        if halt.load(Ordering::Relaxed) || client.write_all(chunk).is_err() {
                            return;
                        }
                        let due = Duration::from_secs_f64((i + 1) as f64 * 1880.0 / bytes_per_s as f64);
                        if let Some(wait) = due.checked_sub(started.elapsed()) {
                            std::thread::sleep(wait);
                        }
                    }
                });
            }
        });
        HttpCamera { url, stop }
    }
}

impl Drop for HttpCamera {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A stream from `camera` recorded in 2 s segments, with its stats sidecar.
fn camera_config(dir: &Path, mport: u16, camera: &HttpCamera) -> PathBuf {
    let stream = format!(
        "\n[[streams]]\nname = \"cam\"\nuri = \"{}\"\nlive = true\nreconnect_initial_ms = 200\nreconnect_max_ms = 1000\n\n\
         [streams.output]\nfile = \"{}/rec/{{stream}}.mp4\"\nsegment_seconds = 2\nstats = \"{}/cam.jsonl\"\n",
        camera.url,
        dir.display(),
        dir.display()
    );
    let config = dir.join("roadseg.toml");
    std::fs::write(&config, header(mport, free_port()) + &stream).unwrap();
    config
}

#[test]
fn a_camera_sending_damaged_h264_is_counted_and_the_stream_goes_on() {
    // Rule: a camera whose H.264 arrives with bytes flipped has its damage counted (roadseg_decode_errors_total) and logged without flooding, frames keep being inferred (the stream continues or reconnects), and every recorded segment plays.
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.ts");
    ts_clip(&clip, "320x240", 30, 0);
    let mut bytes = std::fs::read(&clip).unwrap();
    let clean_len = bytes.len();
    // One bit flipped per 500 bytes on average, seeded, past the first second
    // so the stream starts. Most land in slice data, which the decoder conceals
    // silently; what gets counted is the transport damage and the frames lost.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..clean_len / 500 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = clean_len / 30 + (seed as usize % (clean_len - clean_len / 30));
        bytes[at] ^= 1 << (seed >> 60) % 8;
    }
    let camera = HttpCamera::serve(bytes, clean_len / 30);
    let mport = free_port();
    let config = camera_config(dir.path(), mport, &camera);
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let inferred = || metric(mport, "roadseg_frames_inferred_total", "cam");
    d.wait_for("damage counted", Duration::from_secs(40), || metric(mport, "roadseg_decode_errors_total", "cam") >= 3.0);
    let now = inferred();
    d.wait_for("frames still inferred", Duration::from_secs(20), || inferred() >= now + 50.0);
    let damage = metric(mport, "roadseg_decode_errors_total", "cam");
    d.stop_cleanly();
    let warnings = d.log().lines().filter(|l| l.contains("WARN") && l.contains("cam.ts")).count();
    assert!((warnings as f64) < damage, "{warnings} warning lines for {damage} counted errors: logging is not rate-limited");
    let rec = mp4s(&dir.path().join("rec"));
    assert!(!rec.is_empty(), "nothing recorded");
    assert_playable(&rec);
    eprintln!("damaged H.264: {damage} decode errors counted, {warnings} log lines, {} segments", rec.len());
}

#[test]
fn a_camera_changing_resolution_mid_stream_keeps_its_outputs() {
    // Rule: when a camera switches resolution mid-stream the change is logged, frames keep flowing scaled to the size the outputs were opened at, and every recorded segment plays at that size.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.ts"), dir.path().join("b.ts"));
    ts_clip(&a, "320x240", 6, 0);
    ts_clip(&b, "480x270", 24, 6);
    let mut bytes = std::fs::read(&a).unwrap();
    let first_len = bytes.len();
    bytes.extend(std::fs::read(&b).unwrap());
    let per_s = bytes.len() / 30;
    let camera = HttpCamera::serve(bytes, per_s);
    let mport = free_port();
    let config = camera_config(dir.path(), mport, &camera);
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    // Past the switch (at about first_len / per_s seconds) and 6 s into the new size.
    let switch_s = first_len as f64 / per_s as f64;
    let inferred = || metric(mport, "roadseg_frames_inferred_total", "cam");
    d.wait_for("frames after the switch", Duration::from_secs(60), || inferred() >= (switch_s + 6.0) * 10.0);
    assert!(d.log().contains("changed resolution mid-stream to 480x270"), "{}", d.log());
    d.stop_cleanly();
    assert_eq!(losses_in_log(&d), 0, "the change was treated as a failure:\n{}", d.log());
    let rec = mp4s(&dir.path().join("rec"));
    assert!(rec.len() >= 3, "{rec:?}");
    assert_playable(&rec);
    for f in &rec {
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0"])
            .arg(f)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "320,240", "{}", f.display());
    }
}

/// "source lost" lines in the log (a resolution change must not cause one).
fn losses_in_log(d: &Daemon) -> usize {
    d.log().lines().filter(|l| l.contains("source lost")).count()
}
