//! The daemon's HTTP endpoint end to end: the real binary with a live test
//! pattern and the small test model, raw TCP clients (so malformed and idle
//! connections can be made on purpose) and headless Chromium for the status
//! page. Every wait is bounded; a daemon that outlives its test is killed.

#![cfg(feature = "video")]

use crate::common::daemon::free_port;
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_roadseg");

/// A config with the small test model, the HTTP endpoint on `listen`, extra
/// `[metrics]` lines, and one live 320x240 test pattern per name.
fn config(listen: &str, metrics_extra: &str, streams: &[&str]) -> String {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/odd-bf16-203x141");
    let mut c = format!(
        "[model]\npath = {:?}\nwidth = 224\nheight = 128\ndevice = \"cpu\"\nroad_classes = [\"label_0\"]\n\n\
         [metrics]\nlisten = \"{listen}\"\n{metrics_extra}\n\n[rtsp]\nlisten = \"\"\n\n[daemon]\nshutdown_timeout_s = 10\n",
        model.display().to_string()
    );
    for (i, name) in streams.iter().enumerate() {
        let pattern = ["smpte", "ball", "snow"][i % 3];
        c += &format!(
            "\n[[streams]]\nname = \"{name}\"\nuri = \"test://{pattern}?width=320&height=240&fps=10\"\nlive = true\n\n\
             [streams.output]\nstats = \"{name}.jsonl\"\n"
        );
    }
    c
}

/// A running `roadseg run` in its own temporary folder; killed on drop.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Daemon {
    fn start(listen_ip: &str, metrics_extra: &str, streams: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let path = dir.path().join("roadseg.toml");
        std::fs::write(&path, config(&format!("{listen_ip}:{port}"), metrics_extra, streams)).unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&path)
            .current_dir(dir.path())
            .env("ROADSEG_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawning roadseg run");
        let mut d = Daemon { child, dir, port };
        d.wait_for("/healthz", Duration::from_secs(30), |d| d.get("/healthz").0 == 200);
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Panics with the log unless `cond` holds within `timeout`.
    fn wait_for(&mut self, what: &str, timeout: Duration, mut cond: impl FnMut(&Daemon) -> bool) {
        let deadline = Instant::now() + timeout;
        while !cond(self) {
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!("daemon exited ({s}) while waiting for {what}; log:\n{}", self.log());
            }
            if Instant::now() > deadline {
                panic!("timed out after {timeout:?} waiting for {what}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send(&self, request: &[u8]) -> Response {
        send(self.port, request)
    }

    fn get(&self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
    }

    fn api(&self) -> Value {
        let (status, _, body) = self.get("/api/v1/streams");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// (status, head, body); status 0 when nothing answered.
type Response = (u16, String, Vec<u8>);

/// Sends raw bytes, reads until the server closes (or 10 s pass).
fn send(port: u16, request: &[u8]) -> Response {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) else {
        return (0, String::new(), Vec::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").map_or(raw.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head, raw[split..].to_vec())
}

/// The stream's entry, if the daemon lists it yet (none while it still loads its model).
fn listed<'a>(api: &'a Value, name: &str) -> Option<&'a Value> {
    api["streams"].as_array()?.iter().find(|s| s["name"] == name)
}

/// Frames a stream has put out so far; 0 until it is listed.
fn frames_out(api: &Value, name: &str) -> u64 {
    listed(api, name).and_then(|s| s["frames_out"].as_u64()).unwrap_or(0)
}

/// A stream's input frame rate; 0 until it is listed.
fn fps_in(api: &Value, name: &str) -> f64 {
    listed(api, name).and_then(|s| s["fps_in"].as_f64()).unwrap_or(0.0)
}

fn stream<'a>(api: &'a Value, name: &str) -> &'a Value {
    listed(api, name).unwrap_or_else(|| panic!("no stream {name} in {api}"))
}

#[test]
fn healthz_answers_within_a_second_with_100_idle_connections_open() {
    // Rule: with 100 idle connections open to the metrics port (and one trickling a request), /healthz still answers within 1 s, and so do /metrics and /readyz.
    let mut d = Daemon::start("127.0.0.1", "", &["cam"]);
    d.wait_for("ready", Duration::from_secs(30), |d| d.get("/readyz").0 == 200);
    let idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(("127.0.0.1", d.port)).unwrap()).collect();
    let mut trickle = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    trickle.write_all(b"GET /metr").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let (status, _, body) = d.get("/healthz");
    let took = t.elapsed();
    println!("/healthz with {} idle connections open: {:.1} ms", idle.len(), took.as_secs_f64() * 1000.0);
    assert_eq!((status, body.as_slice()), (200, b"ok\n".as_slice()));
    assert!(took < Duration::from_secs(1), "/healthz took {took:?} with 100 idle connections open");
    let (status, head, body) = d.get("/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("roadseg_frames_decoded_total{stream=\"cam\"}"));
    assert_eq!(d.get("/readyz").0, 200);
    // The trickling client is still served once it finishes its request.
    trickle.write_all(b"ics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    trickle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    trickle.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{}", text.lines().next().unwrap_or(""));
    drop(idle);
}

#[test]
fn bad_requests_get_a_4xx_not_a_hang() {
    // Rule: garbage is 400, an oversized head 431, a wrong method 405, an unknown path 404 naming the routes; HEAD has no body.
    let d = Daemon::start("127.0.0.1", "", &["cam"]);
    assert_eq!(d.send(b"hello\r\n\r\n").0, 400);
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 * 1024));
    assert_eq!(d.send(huge.as_bytes()).0, 431);
    let (status, head, _) = d.send(b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    assert_eq!(status, 405, "{head}");
    let (status, _, body) = d.get("/nope");
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("/api/v1/streams"));
    let (status, _, body) = d.send(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!((status, body.len()), (200, 0));
    let (status, _, body) = d.get("/api/v1/streams/nope/snapshot.jpg");
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("'nope'"));
}

#[test]
fn the_api_lists_each_stream_with_moving_numbers_and_serves_its_snapshot() {
    // Rule: /api/v1/streams has every stream with its state, redacted source and numbers that move; snapshot.jpg is the latest annotated frame, a JPEG of the stream's size, different as the stream moves.
    let mut d = Daemon::start("127.0.0.1", "", &["front", "rear"]);
    d.wait_for("frames out and a frame rate", Duration::from_secs(60), |d| {
        let api = d.api();
        ["front", "rear"].iter().all(|n| frames_out(&api, n) > 3 && fps_in(&api, n) > 0.0)
    });
    let first = d.api();
    let front = stream(&first, "front");
    assert_eq!(front["state"], "up", "{front}");
    assert_eq!(front["live"], true);
    assert!(front["source"].as_str().unwrap().starts_with("test://smpte"), "{front}");
    for key in ["ring_full", "inference_error", "decode_error"] {
        assert!(front["frames_dropped"][key].is_u64(), "{key}: {front}");
    }
    assert_eq!(front["reconnects"], 0);
    assert!((0.0..=1.0).contains(&front["road_coverage"].as_f64().unwrap()), "{front}");
    assert!(front["latency_ms"].as_f64().unwrap() > 0.0, "{front}");
    assert!(front["last_frame_age_s"].as_f64().unwrap() < 5.0, "{front}");
    assert!(front["fps_in"].as_f64().unwrap() > 0.0 && front["fps_out"].as_f64().is_some(), "{front}");
    assert_eq!(first["ready"], true, "{first}");
    let out = |api: &Value| stream(api, "front")["frames_out"].as_u64().unwrap();
    let before = out(&first);
    d.wait_for("frames_out rising", Duration::from_secs(20), |d| out(&d.api()) > before);

    let snap = |d: &Daemon| {
        let (status, head, body) = d.get("/api/v1/streams/front/snapshot.jpg");
        assert_eq!(status, 200, "{head}");
        assert!(head.to_ascii_lowercase().contains("content-type: image/jpeg"), "{head}");
        image::load_from_memory_with_format(&body, image::ImageFormat::Jpeg).unwrap().to_rgb8()
    };
    let a = snap(&d);
    assert_eq!(a.dimensions(), (320, 240));
    // The overlay text (time, fps) changes from frame to frame.
    d.wait_for("a different snapshot", Duration::from_secs(20), |d| snap(d).as_raw() != a.as_raw());
}

#[test]
fn basic_auth_guards_everything_but_the_probes_beyond_loopback() {
    // Rule: on a non-loopback listen address every route but /healthz and /readyz needs Basic auth (401 with WWW-Authenticate otherwise); the password never reaches the log.
    let d = Daemon::start("0.0.0.0", "username = \"ops\"\npassword = \"pa55-word\"", &["cam"]);
    for path in ["/", "/metrics", "/api/v1/streams", "/api/v1/streams/cam/snapshot.jpg", "/api/v1/streams/cam/live.mp4"] {
        let (status, head, _) = d.get(path);
        assert_eq!(status, 401, "{path}: {head}");
        assert!(head.contains("www-authenticate: Basic realm=\"roadseg\""), "{path}: {head}");
    }
    let with = |credentials: &str| {
        use base64::Engine;
        let auth = base64::engine::general_purpose::STANDARD.encode(credentials);
        d.send(format!("GET /api/v1/streams HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\nConnection: close\r\n\r\n").as_bytes()).0
    };
    assert_eq!(with("ops:wrong"), 401);
    assert_eq!(with("ops:pa55-word"), 200);
    assert_eq!(d.get("/healthz").0, 200);
    assert!(matches!(d.get("/readyz").0, 200 | 503));
    assert!(!d.log().contains("pa55-word"), "{}", d.log());
}

#[test]
fn the_status_page_renders_every_streams_snapshot_in_headless_chromium() {
    // Rule: a real browser loading / shows one card per stream whose snapshot image decoded (naturalWidth = the stream's width) and the page's screenshot is not blank.
    let Some(chromium) = ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success())) else {
        roadseg::test_skip::skip("no chromium on this machine (tools/install-deps.sh installs it)");
        return;
    };
    let mut d = Daemon::start("127.0.0.1", "", &["front", "rear"]);
    d.wait_for("snapshots", Duration::from_secs(60), |d| {
        ["front", "rear"].iter().all(|n| d.get(&format!("/api/v1/streams/{n}/snapshot.jpg")).0 == 200)
    });
    let url = format!("http://127.0.0.1:{}/", d.port);
    let profile = d.dir.path().join("chromium-profile");
    let browse = |extra: &[&str]| {
        let mut cmd = Command::new(chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,720",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        // Snapshots only: a one-shot dump waits for every fetch, and the live view never ends.
        .arg(format!("{url}?live=0"));
        common::run_with_timeout(&mut cmd, Duration::from_secs(90))
    };
    let (_, dom, err) = browse(&["--dump-dom"]);
    for name in ["front", "rear"] {
        let img = dom
            .split("<img")
            .find(|tag| tag.contains(&format!("id=\"snapshot-{name}\"")))
            .unwrap_or_else(|| panic!("no snapshot image for {name} in the page; DOM:\n{dom}\nstderr:\n{err}"));
        let img = &img[..img.find('>').unwrap_or(img.len())];
        assert!(img.contains("data-loaded=\"1\""), "{name}: image never loaded: {img}");
        assert!(img.contains("data-natural-width=\"320\"") && img.contains("data-natural-height=\"240\""), "{name}: {img}");
    }
    assert!(dom.contains("ready: model loaded"), "{dom}");

    let shot = d.dir.path().join("status-page.png");
    let (_, _, err) = browse(&[&format!("--screenshot={}", shot.display())]);
    let png = image::open(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}); stderr:\n{err}")).to_rgb8();
    let distinct: std::collections::HashSet<[u8; 3]> = png.pixels().step_by(7).map(|p| p.0).collect();
    assert!(distinct.len() > 200, "the screenshot looks blank ({} colours)", distinct.len());
    if let Some(keep) = std::env::var_os("ROADSEG_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, PathBuf::from(keep)).unwrap();
    }
}

/// `roadseg_live_frames_encoded_total` and `roadseg_live_viewers` of `stream`.
/// Headless Chromium through chromedriver, or None with the test counted as skipped.
fn browser_or_skip() -> Option<common::webdriver::Browser> {
    common::webdriver::Browser::start().map_err(|why| roadseg::test_skip::skip(&why)).ok()
}

fn live_counters(d: &Daemon, stream: &str) -> (f64, f64) {
    let (_, _, body) = d.get("/metrics");
    let text = String::from_utf8_lossy(&body);
    let value = |name: &str| {
        let prefix = format!("{name}{{stream=\"{stream}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())?.trim().parse().ok()).unwrap_or(-1.0)
    };
    (value("roadseg_live_frames_encoded_total"), value("roadseg_live_viewers"))
}

#[test]
fn the_status_page_plays_each_stream_live_and_the_encoder_stops_when_the_page_closes() {
    // Rule: in headless Chromium the status page's <video> for each stream plays the annotated stream (live.mp4, fragmented MP4) with its currentTime advancing in real time; nothing is encoded before a viewer comes, and within seconds of the page closing the viewers gauge is 0 and the live encoder stops; an unknown stream is a 404, not a path.
    let Some(mut browser) = browser_or_skip() else { return };
    let mut d = Daemon::start("127.0.0.1", "", &["front", "rear"]);
    d.wait_for("frames out", Duration::from_secs(60), |d| frames_out(&d.api(), "rear") > 5);
    assert_eq!(live_counters(&d, "front"), (0.0, 0.0), "nothing encoded before a viewer");
    assert_eq!(d.get("/api/v1/streams/..%2F..%2Fetc/live.mp4").0, 404);
    assert_eq!(d.get("/api/v1/streams/nope/live.mp4").0, 404);

    browser.open(&format!("http://127.0.0.1:{}/", d.port)).unwrap();
    let probe = "return ['front', 'rear'].map(n => { const v = document.getElementById('live-' + n); \
                 return v ? [v.currentTime, v.readyState, v.videoWidth, v.buffered.length ? v.buffered.end(v.buffered.length - 1) : 0] : null; });";
    let started = Instant::now();
    let mut first: Option<(Instant, Vec<f64>)> = None;
    let mut last = Value::Null;
    while started.elapsed() < Duration::from_secs(40) {
        last = browser.eval(probe).unwrap();
        let times: Vec<f64> = (0..2).map(|i| last[i][0].as_f64().unwrap_or(0.0)).collect();
        match &first {
            None if times.iter().all(|t| *t > 0.0) => first = Some((Instant::now(), times)),
            Some((at, t0)) if at.elapsed() >= Duration::from_secs(4) => {
                let wall = at.elapsed().as_secs_f64();
                for (i, name) in ["front", "rear"].iter().enumerate() {
                    let advanced = times[i] - t0[i];
                    assert!(advanced > 0.5 * wall && advanced < 1.5 * wall, "{name}: currentTime went {advanced:.2} s in {wall:.2} s: {last}");
                    assert_eq!(last[i][2].as_f64(), Some(320.0), "{name}: {last}");
                    // What the player holds beyond the picture shown: its part of the delay.
                    println!("{name}: {advanced:.2} s played in {wall:.2} s; player buffer {:.2} s", last[i][3].as_f64().unwrap_or(0.0) - times[i]);
                }
                break;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(first.is_some(), "the videos never played: {last}\n{}", d.log());
    let (encoded, viewers) = live_counters(&d, "front");
    assert!(encoded > 10.0 && viewers == 1.0, "encoded {encoded}, viewers {viewers}");
    // End to end, decode to the picture on the page, as the card shows it
    // (one machine, one clock): sampled for 3 s (ROADSEG_LIVE_DELAY_SAMPLES,
    // 4 a second, for a longer look: docs/benchmarks.md).
    let samples: usize = std::env::var("ROADSEG_LIVE_DELAY_SAMPLES").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let (mut delays, mut arrivals) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        // The delay, and its part before the player: now - origin - the end of what it has buffered.
        let d = browser
            .eval("return ['front', 'rear'].map(n => { const v = document.getElementById('live-' + n), b = v.buffered; \
                   return [+v.dataset.delayMs, b.length ? Date.now() - (+v.dataset.origin) - 1000 * b.end(b.length - 1) : NaN]; });")
            .unwrap();
        delays.extend((0..2).filter_map(|i| d[i][0].as_f64()).filter(|ms| ms.is_finite()));
        arrivals.extend((0..2).filter_map(|i| d[i][1].as_f64()).filter(|ms| ms.is_finite()));
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(delays.len() >= samples, "the cards show no live delay: {delays:?}");
    delays.sort_by(f64::total_cmp);
    let (median, worst) = (delays[delays.len() / 2], delays[delays.len() - 1]);
    arrivals.sort_by(f64::total_cmp);
    let arrival = arrivals.get(arrivals.len() / 2).copied().unwrap_or(f64::NAN);
    println!("live delay, decode to page: median {median:.0} ms, worst {worst:.0} ms over {} samples; of it before the player (decode to buffered): median {arrival:.0} ms", delays.len());
    assert!(median > 0.0 && worst < 5000.0, "live delay {median} ms median, {worst} ms worst: {delays:?}");
    let png = browser.screenshot().unwrap();
    let shot = image::load_from_memory(&png).unwrap().to_rgb8();
    let distinct: std::collections::HashSet<[u8; 3]> = shot.pixels().step_by(7).map(|p| p.0).collect();
    assert!(distinct.len() > 200, "the screenshot looks blank ({} colours)", distinct.len());
    if let Some(keep) = std::env::var_os("ROADSEG_KEEP_LIVE_SCREENSHOT") {
        std::fs::write(PathBuf::from(keep), &png).unwrap();
    }

    browser.close();
    d.wait_for("the live encoders stopped", Duration::from_secs(10), |d| live_counters(d, "front").1 == 0.0 && live_counters(d, "rear").1 == 0.0);
    let stopped = live_counters(&d, "front").0;
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(live_counters(&d, "front").0, stopped, "frames still encoded with nobody watching");
}

/// Reads `live.mjpeg` parts from a raw connection until `want` JPEGs came
/// (or 10 s passed): the JPEGs, and the response head.
fn read_mjpeg(port: u16, stream: &str, want: usize) -> (String, Vec<Vec<u8>>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET /api/v1/streams/{stream}/live.mjpeg HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let started = Instant::now();
    let jpegs = loop {
        let parts: Vec<Vec<u8>> = raw
            .windows(2)
            .enumerate()
            .filter(|(_, w)| *w == [0xFF, 0xD8])
            .filter_map(|(i, _)| raw[i..].windows(2).position(|w| w == [0xFF, 0xD9]).map(|end| raw[i..i + end + 2].to_vec()))
            .collect();
        if parts.len() >= want || started.elapsed() > Duration::from_secs(10) {
            break parts;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break parts,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0);
    (String::from_utf8_lossy(&raw[..head_end]).into_owned(), jpegs)
}

#[test]
fn browsers_without_h264_get_the_live_view_as_mjpeg_made_only_while_watched() {
    // Rule: live.mjpeg serves the annotated frames as multipart JPEGs that an <img> plays (the page's fallback, forced by /?live=mjpeg); JPEGs are made only while someone reads, and the viewer counts in roadseg_live_viewers.
    let mut d = Daemon::start("127.0.0.1", "", &["front"]);
    d.wait_for("frames out", Duration::from_secs(60), |d| frames_out(&d.api(), "front") > 5);
    assert_eq!(live_counters(&d, "front"), (0.0, 0.0), "nothing made before a viewer");
    assert_eq!(d.get("/api/v1/streams/nope/live.mjpeg").0, 404);

    let (head, jpegs) = read_mjpeg(d.port, "front", 3);
    assert!(head.contains("multipart/x-mixed-replace; boundary=roadseg-frame"), "{head}");
    assert!(jpegs.len() >= 3, "{} JPEGs in 10 s", jpegs.len());
    for j in &jpegs {
        let img = image::load_from_memory(j).unwrap();
        assert_eq!((img.width(), img.height()), (320, 240));
    }
    d.wait_for("the raw viewer to leave", Duration::from_secs(5), |d| live_counters(d, "front").1 == 0.0);

    let Some(mut browser) = browser_or_skip() else { return };
    browser.open(&format!("http://127.0.0.1:{}/?live=mjpeg", d.port)).unwrap();
    let probe = "const m = document.getElementById('mjpeg-front'); return m ? [m.naturalWidth, m.style.display, document.getElementById('live-front').src] : null;";
    let mut last = Value::Null;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        last = browser.eval(probe).unwrap();
        if last[0].as_f64() == Some(320.0) && last[1].as_str() == Some("") {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(last[0].as_f64(), Some(320.0), "the MJPEG <img> never showed a frame: {last}\n{}", d.log());
    assert_eq!(last[2].as_str(), Some(""), "?live=mjpeg must not start the MP4 encoder: {last}");
    let (before, viewers) = live_counters(&d, "front");
    assert_eq!(viewers, 1.0);
    std::thread::sleep(Duration::from_secs(2));
    let made = live_counters(&d, "front").0 - before;
    // 10 fps source, 5 JPEGs/s at most: 10 in 2 s, some slack for a busy machine.
    assert!((3.0..=12.0).contains(&made), "{made} JPEGs in 2 s");
    browser.close();
    d.wait_for("the MJPEG viewer to leave", Duration::from_secs(10), |d| live_counters(d, "front").1 == 0.0);
    let stopped = live_counters(&d, "front").0;
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(live_counters(&d, "front").0, stopped, "JPEGs still made with nobody watching");
}

#[test]
fn the_progressive_mp4_view_still_plays_where_asked() {
    // Rule: the page plays live through Media Source Extensions where the browser has them; /?live=mp4 keeps the plain progressive <video>, which must still play (browsers without MSE get it).
    let Some(browser) = browser_or_skip() else { return };
    let mut d = Daemon::start("127.0.0.1", "", &["front"]);
    d.wait_for("frames out", Duration::from_secs(60), |d| frames_out(&d.api(), "front") > 5);
    for (query, mode) in [("", "mse"), ("?live=mp4", "mp4")] {
        browser.open(&format!("http://127.0.0.1:{}/{query}", d.port)).unwrap();
        let probe = "const v = document.getElementById('live-front'); return v ? [v.currentTime, v.dataset.mode] : null;";
        let started = Instant::now();
        let mut last = Value::Null;
        while started.elapsed() < Duration::from_secs(30) {
            last = browser.eval(probe).unwrap();
            if last[0].as_f64().unwrap_or(0.0) > 1.0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        assert_eq!(last[1].as_str(), Some(mode), "{query}: {last}");
        assert!(last[0].as_f64().unwrap_or(0.0) > 1.0, "{query}: the video did not play: {last}\n{}", d.log());
    }
}
