//! `roadseg run` and `roadseg check-config` end to end: the real binary, real
//! GStreamer sources and sinks, the small test model (224x128 input so CPU
//! inference is quick). Outputs are checked with ffprobe; every wait is
//! bounded and a daemon that outlives its test is killed.

#![cfg(feature = "video")]

use crate::common;

use std::path::{Path, PathBuf};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::*;

#[test]
fn live_stream_is_inferred_served_recorded_and_stops_cleanly() {
    // Rule: a live stream is inferred (metrics rise, every stage of a frame's latency is timed), served over RTSP and recorded in segments; SIGTERM exits 0, every segment plays to its end, and each `recording finalised` line gives its own segment's frame count.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let rec = dir.path().join("rec");
    let output = format!(
        "file = \"{}/{{stream}}-{{start}}.mp4\"\nsegment_seconds = 2\nrtsp = \"{{stream}}\"\nstats = \"{}/{{stream}}.jsonl\"",
        rec.display(),
        rec.display()
    );
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &test_stream("cam", &output)).unwrap();
    // A previous run's line: the sidecar is appended to, never truncated.
    std::fs::create_dir_all(&rec).unwrap();
    std::fs::write(rec.join("cam.jsonl"), "{\"previous_run\":true}\n").unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));

    d.wait_for("frames_inferred > 5", Duration::from_secs(30), || {
        metric(mport, "roadseg_frames_inferred_total", "cam") > 5.0
    });
    let first = metric(mport, "roadseg_frames_inferred_total", "cam");
    d.wait_for("frames_inferred rising", Duration::from_secs(10), || {
        metric(mport, "roadseg_frames_inferred_total", "cam") > first
    });
    // A test pattern has no bonnet: the hood gauge is exported and stays 0.
    assert_eq!(metric(mport, "roadseg_hood_coverage_ratio", "cam"), 0.0, "hood gauge\n{}", scrape(mport));
    assert!((0.0..=1.0).contains(&metric(mport, "roadseg_road_coverage_ratio", "cam")));
    let cut = metric(mport, "roadseg_road_cut_ratio", "cam");
    assert!((0.0..=1.0).contains(&cut), "road cut gauge {cut}\n{}", scrape(mport));
    // Where the latency goes: every stage, the recording's encoder included.
    for stage in ["decode_to_ring", "ring_wait", "inference", "annotate", "reorder", "encode"] {
        let stage_label = format!("stage=\"{stage}\"");
        let count = labelled_metric(mport, "roadseg_stage_seconds_count", &["stream=\"cam\"", &stage_label]);
        assert!(count.is_some_and(|n| n > 0.0), "stage {stage} not timed: {count:?}\n{}", scrape(mport));
    }
    let url = format!("rtsp://127.0.0.1:{rport}/cam");
    let (frames, err) = probe_frames(&url, &["-rtsp_transport", "tcp", "-read_intervals", "%+3"]);
    assert!(
        frames > 0,
        "RTSP client got no frames from {url}: {err}\nlog:\n{}",
        d.log()
    );
    // At least one segment boundary passed.
    d.wait_for("a second segment", Duration::from_secs(15), || mp4s(&rec).len() >= 2);

    d.signal("-TERM");
    let status = d
        .wait(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no exit within 15 s of SIGTERM; log:\n{}", d.log()));
    assert!(status.success(), "exit {status}; log:\n{}", d.log());
    let files = mp4s(&rec);
    assert!(files.len() >= 2, "{files:?}");
    assert_playable(&files);
    let finalised = finalised_counts(&d.log());
    assert_eq!(finalised.len(), files.len(), "one line per segment:\n{}", d.log());
    for (file, frames) in finalised {
        assert_eq!(probe_frames(&file, &[]).0, frames, "{file}: the logged count is the segment's own\n{}", d.log());
    }
    let stats = std::fs::read_to_string(rec.join("cam.jsonl")).unwrap();
    assert!(stats.lines().count() > 5, "{stats}");
    assert_eq!(stats.lines().next(), Some("{\"previous_run\":true}"), "appended, not truncated");
    for line in stats.lines().skip(1) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["hood_pct"].is_number(), "hood_pct in every line: {line}");
        assert!(v["road_cut"].as_f64().is_some_and(|c| (0.0..=1.0).contains(&c)), "road_cut in every line: {line}");
        assert_eq!(v["stream"], "cam", "{line}");
        let time = v["time"].as_str().unwrap_or_default();
        assert!(time.len() == 24 && time.starts_with("20") && time.ends_with('Z'), "wall-clock time: {line}");
    }
}

/// (file, frames) of each `recording finalised` line of a text log.
fn finalised_counts(log: &str) -> Vec<(String, u64)> {
    let field = |line: &str, key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key)).map(str::to_string);
    log.lines()
        .filter(|l| l.contains("recording finalised"))
        .map(|l| {
            let file = field(l, "file=").unwrap_or_else(|| panic!("no file= in {l}"));
            let frames = field(l, "frames=").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no frames= in {l}"));
            (file, frames)
        })
        .collect()
}

#[test]
fn kill_9_leaves_every_completed_segment_playable() {
    // Rule: after kill -9 mid-recording, every completed segment plays (frames > 0, no errors).
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let rec = dir.path().join("rec");
    let output = format!("file = \"{}/{{stream}}.mp4\"\nsegment_seconds = 1", rec.display());
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &test_stream("cam", &output)).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("three segments started", Duration::from_secs(40), || {
        mp4s(&rec).len() >= 4
    });
    d.signal("-KILL");
    assert!(
        d.wait(Duration::from_secs(5)).is_some(),
        "kill -9 did not end the daemon"
    );
    let files = mp4s(&rec);
    // The newest file was open at the kill; every one before it was complete.
    assert_playable(&files[..files.len() - 1]);
}

#[test]
fn a_lost_camera_is_reconnected_while_other_streams_keep_running() {
    // Rule: when an RTSP camera goes away the stream reconnects with backoff (reconnects counted) while other streams keep inferring; when it comes back, frames flow again.
    let dir = tempfile::tempdir().unwrap();
    let (mut camera, camera_port, camera_config) = start_camera(dir.path());

    let mport = free_port();
    let remote = format!(
        "\n[[streams]]\nname = \"remote\"\nuri = \"rtsp://127.0.0.1:{camera_port}/cam\"\nlatency_ms = 100\n\
         reconnect_initial_ms = 200\nreconnect_max_ms = 1000\n\n[streams.output]\nstats = \"{}/remote.jsonl\"\n",
        dir.path().display()
    );
    let local = test_stream("local", &format!("stats = \"{}/local.jsonl\"", dir.path().display()));
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, free_port()) + &remote + &local).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let inferred = |s: &str| metric(mport, "roadseg_frames_inferred_total", s);

    d.wait_for("remote frames inferred", Duration::from_secs(40), || {
        inferred("remote") > 5.0
    });
    camera.signal("-KILL");
    assert!(camera.wait(Duration::from_secs(5)).is_some());
    d.wait_for("reconnect attempts", Duration::from_secs(30), || {
        metric(mport, "roadseg_reconnects_total", "remote") >= 2.0
    });
    let local_before = inferred("local");
    d.wait_for("local stream still inferring", Duration::from_secs(10), || {
        inferred("local") > local_before + 5.0
    });
    assert!(d.log().contains("reconnecting"), "{}", d.log());

    let before = inferred("remote");
    let camera = Daemon::start(&camera_config, &dir.path().join("camera2.log"));
    d.wait_for(
        "remote frames again after the camera came back",
        Duration::from_secs(40),
        || inferred("remote") > before + 5.0,
    );
    camera.signal("-TERM");
    d.stop_cleanly();
}

#[test]
fn a_stalled_camera_is_detected_by_silence_and_reconnected() {
    // Rule: a live source that keeps its connection but sends nothing for max(5 s, 3 * latency) is restarted; frames flow again once it resumes.
    let dir = tempfile::tempdir().unwrap();
    let (camera, camera_port, _) = start_camera(dir.path());
    let mport = free_port();
    let remote = format!(
        "\n[[streams]]\nname = \"remote\"\nuri = \"rtsp://127.0.0.1:{camera_port}/cam\"\nlatency_ms = 100\n\
         reconnect_initial_ms = 200\nreconnect_max_ms = 1000\n\n[streams.output]\nstats = \"{}/remote.jsonl\"\n",
        dir.path().display()
    );
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, free_port()) + &remote).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let inferred = || metric(mport, "roadseg_frames_inferred_total", "remote");
    d.wait_for("remote frames inferred", Duration::from_secs(40), || inferred() > 5.0);

    camera.signal("-STOP");
    let log = d.log.clone();
    d.wait_for("the silence noticed", Duration::from_secs(15), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("no frame for")
    });
    assert_eq!(metric(mport, "roadseg_stream_up", "remote"), 0.0);
    camera.signal("-CONT");
    let before = inferred();
    d.wait_for("frames again after the camera resumed", Duration::from_secs(30), || {
        inferred() > before + 5.0
    });
    assert!(metric(mport, "roadseg_reconnects_total", "remote") >= 1.0);
    camera.signal("-TERM");
    d.stop_cleanly();
}

#[test]
fn systemd_is_told_ready_watchdog_reloading_and_stopping() {
    // Rule: under a notify service the daemon sends READY=1 once running, WATCHDOG=1 at half of WATCHDOG_USEC, RELOADING=1 then READY=1 on SIGHUP, and STOPPING=1 on SIGTERM.
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let config = dir.path().join("roadseg.toml");
    let stream = test_stream("cam", &format!("stats = \"{}/cam.jsonl\"", dir.path().display()));
    std::fs::write(&config, header(0, free_port()) + &stream).unwrap();
    let mut d = Daemon::start_notified(&config, &socket_path, &dir.path().join("log"), &[]);
    // Appends datagrams to `seen` until one holds `what`.
    let receive_until = |d: &mut Daemon, seen: &mut String, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 4096];
        while !seen.contains(what) {
            // Checked before reading, so a datagram sent just before a (failing) exit is still read.
            let exited = d.child.try_wait().unwrap();
            if let Ok(n) = socket.recv(&mut buf) {
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                seen.push('\n');
                continue;
            }
            assert!(exited.is_none(), "daemon exited; got {seen:?}; log:\n{}", d.log());
            assert!(
                Instant::now() < deadline,
                "no {what} from the daemon; got {seen:?}; log:\n{}",
                d.log()
            );
        }
    };
    let mut seen = String::new();
    receive_until(&mut d, &mut seen, "READY=1");
    receive_until(&mut d, &mut seen, "WATCHDOG=1");
    seen.clear();
    d.signal("-HUP");
    receive_until(&mut d, &mut seen, "RELOADING=1");
    receive_until(&mut d, &mut seen, "READY=1");
    seen.clear();
    d.signal("-TERM");
    receive_until(&mut d, &mut seen, "STOPPING=1");
    let status = d.wait(Duration::from_secs(15)).expect("exit after SIGTERM");
    assert!(status.success(), "exit {status}; log:\n{}", d.log());
}

/// A mosquitto broker on `port` (killed on drop), and a subscriber to
/// `roadseg/#` writing "topic payload" lines to `out`.
struct Broker(Child, Child);

impl Broker {
    fn start(port: u16, out: &Path) -> Option<Broker> {
        let (Ok(mosquitto), Ok(sub)) = (which_any(&["mosquitto", "/usr/sbin/mosquitto"]), which("mosquitto_sub")) else {
            return None;
        };
        let broker = Command::new(mosquitto).args(["-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(out).unwrap();
        let subscriber = Command::new(sub)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "roadseg/#", "-v"])
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(Broker(broker, subscriber))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        for c in [&mut self.1, &mut self.0] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn which_any(names: &[&str]) -> Result<PathBuf, ()> {
    names.iter().find_map(|n| if n.starts_with('/') { Path::new(n).is_file().then(|| PathBuf::from(n)) } else { which(n).ok() }).ok_or(())
}

#[test]
fn mqtt_status_stats_and_events_survive_the_broker_going_away() {
    // Rule: with [mqtt] set, the daemon publishes retained online statuses, per-stream stats (the recording's state among them) at the configured rate and up/reconnect events; a broker that goes away and comes back loses the daemon nothing, and statuses are published again.
    let dir = tempfile::tempdir().unwrap();
    let (mport, bport) = (free_port(), free_port());
    let seen = dir.path().join("mqtt.txt");
    let Some(broker) = Broker::start(bport, &seen) else {
        roadseg::test_skip::skip("mosquitto / mosquitto_sub are not installed (Debian packages mosquitto, mosquitto-clients)");
        return;
    };
    let mqtt = format!("\n[mqtt]\nurl = \"mqtt://127.0.0.1:{bport}\"\nstats_interval_s = 1\ncoverage_threshold = 0.0\n");
    let config = dir.path().join("roadseg.toml");
    let output = format!("stats = \"{0}/cam.jsonl\"\nfile = \"{0}/cam.mp4\"", dir.path().display());
    std::fs::write(&config, header(mport, free_port()) + &mqtt + &test_stream("cam", &output)).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let text = || std::fs::read_to_string(&seen).unwrap_or_default();
    let stats = || -> Vec<serde_json::Value> {
        text().lines().filter_map(|l| l.strip_prefix("roadseg/streams/cam/stats ")).filter_map(|j| serde_json::from_str(j).ok()).collect()
    };
    d.wait_for("online statuses and stats of inferred frames over MQTT", Duration::from_secs(40), || {
        let t = text();
        t.contains("roadseg/status online")
            && t.contains("roadseg/streams/cam/status online")
            && stats().iter().any(|s| s["mean_confidence"].is_number() && s["road_coverage"].is_number())
            // Issue 39: the recording's state travels with the stats.
            && stats().iter().any(|s| s["recording"] == "recording")
    });
    let last = stats().pop().unwrap();
    assert_eq!(last["stream"], "cam");
    assert!(last["frames_inferred"].as_u64().is_some_and(|n| n > 0) && last["time"].is_string(), "{last}");

    drop(broker);
    std::thread::sleep(Duration::from_secs(3));
    let before = metric(mport, "roadseg_frames_inferred_total", "cam");
    d.wait_for("inference goes on without the broker", Duration::from_secs(20), || {
        metric(mport, "roadseg_frames_inferred_total", "cam") > before
    });
    std::fs::write(&seen, "").unwrap();
    let _broker = Broker::start(bport, &seen).expect("the broker restarts");
    d.wait_for("statuses and stats again after the broker returns", Duration::from_secs(40), || {
        let t = text();
        t.contains("roadseg/streams/cam/status online") && t.contains("roadseg/streams/cam/stats {")
    });
    d.stop_cleanly();
    std::thread::sleep(Duration::from_millis(300));
    assert!(text().contains("roadseg/status offline"), "offline said on the way out: {}", text());
}

#[test]
fn a_deleted_recording_folder_pauses_recording_and_it_resumes() {
    // Rule: when the recording folder disappears mid-run the file output logs an error and counts it while the stream's other outputs and other streams go on; once the folder is back, recording resumes with new, playable segments and nothing is overwritten.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let rec = dir.path().join("rec");
    let output = format!("file = \"{}/{{stream}}.mp4\"\nsegment_seconds = 1\nstats = \"{}/cam.jsonl\"", rec.display(), dir.path().display());
    let other = format!("stats = \"{}/other.jsonl\"", dir.path().display());
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &test_stream("cam", &output) + &test_stream("other", &other)).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("two segments", Duration::from_secs(40), || mp4s(&rec).len() >= 2);
    std::fs::remove_dir_all(&rec).unwrap();
    let errors = || labelled_metric(mport, "roadseg_sink_errors_total", &["stream=\"cam\"", "sink=\"file\""]);
    d.wait_for("file errors counted", Duration::from_secs(20), || errors().is_some_and(|n| n > 0.0));
    let lines = |name: &str| std::fs::read_to_string(dir.path().join(name)).map_or(0, |t| t.lines().count());
    let (cam, other) = (lines("cam.jsonl"), lines("other.jsonl"));
    d.wait_for("the stats output and the other stream go on", Duration::from_secs(20), || lines("cam.jsonl") > cam + 5 && lines("other.jsonl") > other + 5);
    assert!(d.log().contains("recording paused"), "{}", d.log());
    std::fs::create_dir_all(&rec).unwrap();
    d.wait_for("recording resumed with new segments", Duration::from_secs(30), || mp4s(&rec).len() >= 2);
    d.signal("-TERM");
    assert!(d.wait(Duration::from_secs(15)).is_some(), "{}", d.log());
    assert!(d.log().contains("recording resumed"), "{}", d.log());
    let files = mp4s(&rec);
    assert!(!files.contains(&rec.join("cam-00000.mp4")), "numbering went on instead of starting over: {files:?}");
    assert_playable(&files);
}

#[test]
fn segments_are_named_for_their_utc_start_time() {
    // Rule: a file template with strftime conversions names each segment for its UTC start (folders made as needed), and every segment plays.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let rec = dir.path().join("rec");
    let output = format!("file = \"{}/{{stream}}/%Y-%m-%d/%H-%M-%S.mp4\"\nsegment_seconds = 1", rec.display());
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &test_stream("cam", &output)).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let day_dirs = || std::fs::read_dir(rec.join("cam")).map(|r| r.filter_map(Result::ok).map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();
    d.wait_for("three segments", Duration::from_secs(40), || day_dirs().iter().map(|d| mp4s(d).len()).sum::<usize>() >= 3);
    d.signal("-TERM");
    assert!(d.wait(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", d.log());
    let today = roadseg::clock::strftime("%Y-%m-%d", std::time::SystemTime::now());
    let files: Vec<PathBuf> = day_dirs().iter().flat_map(|d| mp4s(d)).collect();
    assert!(day_dirs().iter().any(|d| d.ends_with(&today)), "a folder for today ({today}): {:?}", day_dirs());
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        // Two cuts within one wall-clock second (1 s segments on a loaded
        // machine) give the second one a `-1` suffix rather than overwrite.
        let stem = name.strip_suffix(".mp4").unwrap_or(name);
        let unsuffixed = match stem.rsplit_once('-') {
            Some((base, n)) if stem.len() > 8 && n.chars().all(|c| c.is_ascii_digit()) => format!("{base}.mp4"),
            _ => name.to_string(),
        };
        assert!(roadseg::clock::matches("%H-%M-%S.mp4", &unsuffixed), "{name}");
    }
    assert_playable(&files);
}

#[test]
fn old_recording_segments_are_deleted_and_the_newest_kept() {
    // Rule: segments older than retain_hours are deleted (counted with reason "age"), files that are not the stream's segments are never touched, the newest segment stays, and free space is exported.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let rec = dir.path().join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let bystander = rec.join("cam-notes.mp4");
    std::fs::write(&bystander, b"not a segment").unwrap();
    // 0.0006 h = 2.16 s; segments of 1 s.
    let output = format!("file = \"{}/{{stream}}.mp4\"\nsegment_seconds = 1\nretain_hours = 0.0006", rec.display());
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, rport) + &test_stream("cam", &output)).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let deleted = || labelled_metric(mport, "roadseg_segments_deleted_total", &["stream=\"cam\"", "reason=\"age\""]);
    d.wait_for("segments deleted for age", Duration::from_secs(40), || deleted().is_some_and(|n| n >= 2.0));
    let first_left = mp4s(&rec).into_iter().filter(|p| p != &bystander).min().expect("the newest segment stays");
    assert!(!rec.join("cam-00000.mp4").exists(), "the first segment is long past 2 s: {:?}", mp4s(&rec));
    assert!(first_left > rec.join("cam-00001.mp4"), "{:?}", mp4s(&rec));
    assert!(bystander.exists(), "a file that is not a segment was deleted");
    assert!(metric(mport, "roadseg_storage_free_bytes", "cam") > 0.0, "{}", scrape(mport));
    d.signal("-TERM");
    assert!(d.wait(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", d.log());
}

#[test]
fn a_stalled_worker_fails_readiness_and_starves_the_watchdog() {
    // Rule: when a stream's source delivers frames but nothing is inferred for daemon.stall_timeout_s, /readyz answers 503 naming the stream, the systemd watchdog is no longer fed, and the last-inferred gauge stops moving.
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mport = free_port();
    let config = dir.path().join("roadseg.toml");
    let head = header(mport, free_port()).replace("shutdown_timeout_s = 10", "shutdown_timeout_s = 10\nstall_timeout_s = 2");
    std::fs::write(&config, head + &test_stream("cam", &format!("stats = \"{}/cam.jsonl\"", dir.path().display()))).unwrap();
    let stall = [("ROADSEG_TEST_STALL_AFTER_FRAMES", "5")];
    let mut d = Daemon::start_notified(&config, &socket_path, &dir.path().join("log"), &stall);
    let mut buf = [0u8; 4096];
    let mut datagrams = |window: Duration| {
        let (end, mut seen) = (Instant::now() + window, String::new());
        while Instant::now() < end {
            if let Ok(n) = socket.recv(&mut buf) {
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
        seen
    };
    assert!(datagrams(Duration::from_secs(10)).contains("WATCHDOG=1"), "fed while healthy; log:\n{}", d.log());
    d.wait_for("5 frames inferred", Duration::from_secs(30), || metric(mport, "roadseg_frames_inferred_total", "cam") >= 5.0);
    d.wait_for("/readyz 503 naming the stalled stream", Duration::from_secs(20), || {
        let r = get(mport, "/readyz");
        r.starts_with("HTTP/1.1 503") && r.contains("stalled: cam")
    });
    let last = metric(mport, "roadseg_last_inferred_timestamp_seconds", "cam");
    assert!(last > 1.7e9, "last-inferred gauge is Unix time: {last}");
    let after = datagrams(Duration::from_millis(1500));
    assert!(!after.contains("WATCHDOG=1"), "watchdog still fed while stalled: {after:?}; log:\n{}", d.log());
    assert_eq!(metric(mport, "roadseg_last_inferred_timestamp_seconds", "cam"), last, "nothing inferred");
    assert!(d.log().contains("inference stalled"), "{}", d.log());
    d.signal("-KILL");
}

#[test]
fn a_shutdown_past_its_deadline_is_logged_and_exits_non_zero() {
    // Rule: when outputs cannot be finalised within daemon.shutdown_timeout_s, SIGTERM still ends the daemon by then, with an error and a non-zero exit.
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    // The first segment is a FIFO nobody reads: the file sink blocks for ever.
    let fifo = rec.join("cam-00000.mp4");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let config = dir.path().join("roadseg.toml");
    let text = header(0, free_port()).replace("shutdown_timeout_s = 10", "shutdown_timeout_s = 1")
        + &test_stream("cam", &format!("file = \"{}/{{stream}}.mp4\"", rec.display()));
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let log = d.log.clone();
    d.wait_for("the recording started", Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("recording stream=cam")
    });
    let t = Instant::now();
    d.signal("-TERM");
    let status = d
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit after SIGTERM; log:\n{}", d.log()));
    assert!(!status.success(), "exit {status}; log:\n{}", d.log());
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    assert!(d.log().contains("shutdown timed out after 1 s"), "{}", d.log());
}

#[test]
fn bad_configs_are_reported_clearly_without_panicking() {
    // Rule: check-config and run reject an unknown key, a wrongly typed value and a missing model folder with a message naming the problem, a failing exit status and no panic.
    let dir = tempfile::tempdir().unwrap();
    let good_stream = test_stream("cam", "stats = \"/tmp/x.jsonl\"");
    let head = header(0, free_port());
    let cases = [
        ("unknown key", head.replace("width = 224", "widht = 224"), "widht"),
        ("bad type", head.replace("width = 224", "width = \"wide\""), "width"),
        (
            "missing model",
            head.replace(
                &format!("{:?}", model().display().to_string()),
                "\"/nonexistent/model\"",
            ),
            "/nonexistent/model",
        ),
    ];
    for (what, text, needle) in cases {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text + &good_stream).unwrap();
        for args in [
            vec!["check-config", path.to_str().unwrap()],
            vec!["run", "--config", path.to_str().unwrap()],
        ] {
            let (ok, _, err) = common::run_with_timeout(
                Command::new(BIN).args(&args).env_remove("NOTIFY_SOCKET"),
                Duration::from_secs(20),
            );
            assert!(!ok, "{what}: {args:?} succeeded");
            assert!(
                err.contains(needle),
                "{what}: {args:?}: message does not name {needle:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{what}: {args:?} panicked: {err}");
        }
    }
    // And a good one passes check-config with its summary.
    let path = dir.path().join("good.toml");
    std::fs::write(&path, head + &good_stream).unwrap();
    let (ok, out, err) = common::run_with_timeout(
        Command::new(BIN).args(["check-config", path.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert!(ok && out.contains("cam: test://smpte"), "{out}{err}");
}

#[test]
fn config_errors_name_the_line_and_the_key_meant() {
    // Rule: a misspelt key is named with its file, line and whole path, and the known key closest to it (`segment_second`: did you mean `segment_seconds`?); a value validation refuses is named with its file and line too; check-config and run exit 78.
    let dir = tempfile::tempdir().unwrap();
    let good = header(0, free_port()) + &test_stream("cam", "stats = \"/tmp/x.jsonl\"\nsegment_seconds = 20");
    let line_of = |text: &str, start: &str| text.lines().position(|l| l.starts_with(start)).unwrap() + 1;
    let misspelt = good.replace("segment_seconds = 20", "segment_second = 20");
    let bad_value = good.replace("live = true", "live = true\nring_capacity = 0");
    let cases = [
        ("misspelt.toml", &misspelt, "segment_second", "unknown key `streams[0].output.segment_second`: did you mean `segment_seconds`?"),
        ("bad-value.toml", &bad_value, "ring_capacity", "streams[0].ring_capacity: 0 is outside 1..=1024"),
    ];
    for (name, text, key, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let at = format!("{}, line {}: ", path.display(), line_of(text, key));
        for args in [vec!["check-config", path.to_str().unwrap()], vec!["run", "--config", path.to_str().unwrap()]] {
            let out = Command::new(BIN).args(&args).env_remove("NOTIFY_SOCKET").output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
            assert!(err.contains(&format!("{at}{says}")), "{args:?}: expected {at}{says} in: {err}");
        }
    }
}

#[test]
fn metrics_pass_promtool() {
    // Rule: /metrics passes `promtool check metrics` with nothing reported (names with units, _total on counters, help texts).
    let Ok(promtool) = which("promtool") else {
        roadseg::test_skip::skip("promtool is not installed (Debian package prometheus)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let config = dir.path().join("roadseg.toml");
    let output = format!("rtsp = \"{{stream}}\"\nstats = \"{}/cam.jsonl\"", dir.path().display());
    std::fs::write(&config, header(mport, rport) + &test_stream("cam", &output)).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("frames inferred", Duration::from_secs(30), || metric(mport, "roadseg_frames_inferred_total", "cam") > 2.0);
    let text = scrape(mport);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or(&text).to_string();
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && report.trim().is_empty(), "promtool: {report}\n{body}");
}

#[test]
fn a_bad_config_exits_78_so_systemd_does_not_restart_it() {
    // Rule: a bad config makes check-config and run exit 78 (EX_CONFIG, the unit's RestartPreventExitStatus); check-config takes the file positionally or as --config, like run.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, header(0, free_port()).replace("width = 224", "widht = 224") + &test_stream("cam", "stats = \"/tmp/x.jsonl\"")).unwrap();
    let no_streams = dir.path().join("empty.toml");
    std::fs::write(&no_streams, header(0, free_port())).unwrap();
    let cases: [&[&str]; 4] = [
        &["check-config", bad.to_str().unwrap()],
        &["check-config", "--config", bad.to_str().unwrap()],
        &["run", "--config", bad.to_str().unwrap()],
        &["run", "--config", no_streams.to_str().unwrap()],
    ];
    for args in cases {
        let out = Command::new(BIN).args(args).env_remove("NOTIFY_SOCKET").output().unwrap();
        assert_eq!(out.status.code(), Some(78), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let good = dir.path().join("good.toml");
    std::fs::write(&good, header(0, free_port()) + &test_stream("cam", "stats = \"/tmp/x.jsonl\"")).unwrap();
    let out = Command::new(BIN).args(["check-config", "--config", good.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn check_config_on_the_cpu_sets_the_streams_demand_against_what_this_machine_infers() {
    // Rule: on the CPU, check-config times the configured model and prints one `CPU load:` line naming the frames/s the live streams ask for (infer_fps, else the URI's stated rate, else 25 assumed and said so) and the frames/s this machine infers (ms a frame, input size, workers); it is an estimate, so the exit code stays 0, and --no-estimate leaves it out.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("two.toml");
    let model = common::repo().join("models/roadseg-camvid");
    std::fs::write(
        &config,
        format!(
            "[model]\npath = {:?}\ndevice = \"cpu\"\nwidth = 1024\nheight = 576\n\n\
             [[streams]]\nname = \"stated\"\nuri = \"test://smpte?width=320&height=240&fps=25\"\nlive = true\n[streams.output]\nstats = \"/tmp/a.jsonl\"\n\n\
             [[streams]]\nname = \"camera\"\nuri = \"rtsp://camera.invalid/stream\"\n[streams.output]\nstats = \"/tmp/b.jsonl\"\n",
            model.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(BIN).args(["check-config"]).arg(&config).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}{}", String::from_utf8_lossy(&out.stderr));
    let line = shown.lines().find(|l| l.starts_with("CPU load:")).unwrap_or_else(|| panic!("no CPU load line: {shown}"));
    for needle in ["streams ask for ~50 frames/s to infer", "25 fps assumed for 1 stream", "this machine infers ~", "ms a frame at 1024x576, 1 worker)"] {
        assert!(line.contains(needle), "{needle:?} not in: {line}");
    }
    // Both verdicts are right somewhere; whichever this machine gives is named.
    assert!(line.ends_with(": fits") || line.contains("of frames dropped; set infer_fps"), "{line}");
    let out = Command::new(BIN).args(["check-config", "--no-estimate"]).arg(&config).output().unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("CPU load:"), "--no-estimate times nothing");
}

#[test]
fn a_device_this_machine_cannot_use_exits_78_and_check_config_warns() {
    // Rule: `run` with model.device = "cuda" on a machine without a usable GPU exits 78 (EX_CONFIG, so systemd does not restart it) with a message naming model.device, why and what to set; check-config passes but warns that run would exit 78.
    use roadseg::device::{DeviceRequest, resolve};
    if let Ok(r) = resolve(&DeviceRequest::Cuda(Vec::new()), None) {
        roadseg::test_skip::skip(&format!("this machine can use CUDA ({}); an unusable device cannot be seen here", r.device));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cuda.toml");
    let head = header(0, free_port()).replace("device = \"cpu\"", "device = \"cuda\"");
    std::fs::write(&config, head + &test_stream("cam", "stats = \"/tmp/x.jsonl\"")).unwrap();
    let out = Command::new(BIN).args(["run", "--config"]).arg(&config).env_remove("NOTIFY_SOCKET").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    let line = err.lines().find(|l| l.starts_with("roadseg: error:")).unwrap_or_else(|| panic!("no error line: {err}"));
    for needle in ["model.device = \"cuda\" cannot be used on this machine", "model.device = \"cpu\""] {
        assert!(line.contains(needle), "{needle:?} not in: {line}");
    }
    assert!(!line.contains("--device"), "a config names no command-line flag: {line}");
    let out = Command::new(BIN).args(["check-config"]).arg(&config).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        shown.lines().any(|l| l.starts_with("warning: model.device = \"cuda\" cannot be used") && l.contains("would exit 78")),
        "{shown}"
    );
}

#[test]
fn a_file_stream_is_finalised_at_its_end_and_a_missing_one_stays_down() {
    // Rule: a file stream (even one of 3 frames) is recorded whole and finalised at its end, then stays down; a missing file is a clear error that stops only its own stream.
    let dir = tempfile::tempdir().unwrap();
    let make_clip = |name: &str, frames: u32| {
        let clip = dir.path().join(name);
        let mut gst = Command::new("gst-launch-1.0");
        gst.args(["-q", "videotestsrc", &format!("num-buffers={frames}"), "!"])
            .args([
                "video/x-raw,width=320,height=180,framerate=20/1",
                "!",
                "x264enc",
                "!",
                "mp4mux",
                "!",
                "filesink",
            ])
            .arg(format!("location={}", clip.display()));
        assert!(
            common::run_with_timeout(&mut gst, Duration::from_secs(30)).0,
            "making the test clip {name}"
        );
        clip
    };
    let (clip, tiny) = (make_clip("clip.mp4", 40), make_clip("tiny.mp4", 3));
    let mport = free_port();
    let rec = dir.path().join("rec");
    let file_stream = |name: &str, clip: &Path| {
        format!(
            "\n[[streams]]\nname = \"{name}\"\nuri = \"file://{}\"\n\n[streams.output]\nfile = \"{}/{{stream}}.mp4\"\n",
            clip.display(),
            rec.display()
        )
    };
    let streams = file_stream("clip", &clip)
        + &file_stream("tiny", &tiny)
        + &file_stream("missing", &dir.path().join("nothere.mp4"))
        + &test_stream("live", &format!("stats = \"{}/live.jsonl\"", rec.display()));
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, free_port()) + &streams).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let log = d.log.clone();
    let read = move || std::fs::read_to_string(&log).unwrap_or_default();
    d.wait_for("the clips finalised", Duration::from_secs(30), || {
        let log = read();
        log.contains("outputs finalised stream=clip") && log.contains("outputs finalised stream=tiny")
    });
    let files = mp4s(&rec);
    assert_eq!(files.len(), 2, "{files:?}");
    let (frames, err) = probe_frames(files[1].to_str().unwrap(), &[]);
    assert!(
        frames == 3 && err.is_empty(),
        "{}: {frames} frames, errors {err:?}",
        files[1].display()
    );
    let (frames, err) = probe_frames(files[0].to_str().unwrap(), &[]);
    assert!(
        frames == 40 && err.is_empty(),
        "{}: {frames} frames, errors {err:?}",
        files[0].display()
    );
    assert!(
        d.log().contains("nothere.mp4") && d.log().contains("no such file"),
        "{}",
        d.log()
    );
    let live = metric(mport, "roadseg_frames_inferred_total", "live");
    d.wait_for("the live stream still inferring", Duration::from_secs(10), || {
        metric(mport, "roadseg_frames_inferred_total", "live") > live + 3.0
    });
    assert_eq!(metric(mport, "roadseg_stream_up", "clip"), 0.0);
    assert_eq!(metric(mport, "roadseg_stream_up", "missing"), 0.0);
    d.stop_cleanly();
}

#[test]
fn sighup_adds_a_stream_and_leaves_the_running_one_alone() {
    // Rule: SIGHUP reloads the file: a broken file keeps the running config, an added stream starts (its metrics appear) while an unchanged stream keeps counting, a removed one stops and its series leave /metrics, a changed one restarts, and global sections are only logged as needing a restart.
    let dir = tempfile::tempdir().unwrap();
    let mport = free_port();
    let head = header(mport, free_port());
    let one = test_stream("one", &format!("stats = \"{}/one.jsonl\"", dir.path().display()));
    let two = test_stream("two", &format!("stats = \"{}/two.jsonl\"", dir.path().display()));
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, head.clone() + &one).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    let inferred = |s: &str| metric(mport, "roadseg_frames_inferred_total", s);
    d.wait_for("stream one inferring", Duration::from_secs(30), || {
        inferred("one") > 3.0
    });
    assert_eq!(inferred("two"), -1.0, "stream two exists before the reload");

    // A broken file is logged and the running configuration stays.
    std::fs::write(&config, head.clone() + &one + "\n[bogus]\nx = 1\n").unwrap();
    d.signal("-HUP");
    let log = d.log.clone();
    d.wait_for("the failed reload logged", Duration::from_secs(10), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("reload failed")
    });
    assert!(d.log().contains("bogus"), "{}", d.log());

    std::fs::write(&config, head.clone() + &one + &two).unwrap();
    let before = inferred("one");
    d.signal("-HUP");
    d.wait_for("stream two inferring after SIGHUP", Duration::from_secs(30), || {
        inferred("two") > 3.0
    });
    // Both streams share one worker: when two has its 4th frame, one may have
    // only 3 more. Waited for, not raced: a stalled stream still fails here.
    d.wait_for("stream one to keep inferring across the reload", Duration::from_secs(10), || inferred("one") > before + 3.0);
    let starts = d
        .log()
        .lines()
        .filter(|l| l.contains("starting stream") && l.contains("stream=one"))
        .count();
    assert_eq!(starts, 1, "stream one was restarted:\n{}", d.log());

    // Removing a stream stops it; a changed one restarts; [workers] needs a restart and is not applied.
    let changed_two = two.replace("live = true", "live = true\nring_capacity = 4");
    std::fs::write(&config, head + "\n[workers]\ncount = 2\n" + &changed_two).unwrap();
    d.signal("-HUP");
    // Its series leave /metrics (issue 39: a "stream down" alert must not fire for it).
    d.wait_for("stream one gone from /metrics after its removal", Duration::from_secs(20), || {
        metric(mport, "roadseg_stream_up", "one") == -1.0
    });
    let two_after = inferred("two");
    d.wait_for("stream two still inferring", Duration::from_secs(10), || {
        inferred("two") > two_after + 3.0
    });
    assert_eq!(inferred("one"), -1.0, "removed stream one still shows");
    let log = d.log();
    assert!(log.contains("[workers] changed; restart required"), "{log}");
    let starts = log
        .lines()
        .filter(|l| l.contains("starting stream") && l.contains("stream=two"))
        .count();
    assert_eq!(starts, 2, "changed stream two was not restarted:\n{log}");
    d.stop_cleanly();
}

#[test]
fn a_looped_file_plays_again_on_one_timeline_without_counting_a_loss() {
    // Rule: a file stream with loop = true starts again at its end, paced like a camera, on one rising timeline: no source loss or reconnect is counted, its outputs stay open, the recording plays through the loops, and `source started` is logged at INFO for the first pass only.
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    let (code, _, err) = common::roadseg(&["synth", "-o", clip.to_str().unwrap(), "--frames", "20", "--size", "320x180", "--fps", "10"]);
    assert_eq!(code, 0, "{err}");
    let mport = free_port();
    let rec = dir.path().join("rec");
    let stream = format!(
        "\n[[streams]]\nname = \"clip\"\nuri = \"file://{}\"\nloop = true\n\n[streams.output]\nfile = \"{}/{{stream}}.mp4\"\nstats = \"{}/clip.jsonl\"\n",
        clip.display(),
        rec.display(),
        dir.path().display()
    );
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, header(mport, free_port()) + &stream).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    // 20 frames a pass at 10 fps: three passes in about 6 s.
    d.wait_for("three passes", Duration::from_secs(40), || metric(mport, "roadseg_frames_decoded_total", "clip") >= 60.0);
    assert_eq!(metric(mport, "roadseg_stream_interruptions_total", "clip"), 0.0, "{}", d.log());
    assert_eq!(metric(mport, "roadseg_reconnects_total", "clip"), 0.0, "{}", d.log());
    d.stop_cleanly();
    let files = mp4s(&rec);
    assert_eq!(files.len(), 1, "one recording across the loops: {files:?}");
    let (frames, err) = probe_frames(files[0].to_str().unwrap(), &[]);
    assert!(frames >= 55 && err.is_empty(), "{frames} frames recorded, errors {err:?}");
    let log = d.log();
    let started = log.lines().filter(|l| l.contains(" INFO ") && l.contains("source started")).count();
    assert_eq!(started, 1, "three passes, one INFO line:\n{log}");
}

#[test]
fn two_streams_in_batches_of_four_keep_every_frame_in_order_with_its_timestamps() {
    // Rule: with [workers] batch = 4 the daemon runs frames of two file streams in shared batches, and each stream's recording and stats hold every frame once, in order, with its own timestamps.
    let dir = tempfile::tempdir().unwrap();
    let make_clip = |name: &str, frames: u32, fps: u32| {
        let clip = dir.path().join(name);
        let mut gst = Command::new("gst-launch-1.0");
        gst.args(["-q", "videotestsrc", &format!("num-buffers={frames}"), "!"])
            .args([&format!("video/x-raw,width=320,height=180,framerate={fps}/1"), "!", "x264enc", "!", "mp4mux", "!", "filesink"])
            .arg(format!("location={}", clip.display()));
        assert!(common::run_with_timeout(&mut gst, Duration::from_secs(30)).0, "making the test clip {name}");
        clip
    };
    let clips = [("a", make_clip("a.mp4", 40, 20), 40u64, 20.0f64), ("b", make_clip("b.mp4", 30, 25), 30, 25.0)];
    let rec = dir.path().join("rec");
    let mut config = header(free_port(), free_port()) + "\n[workers]\ncount = 1\nbatch = 4\n";
    for (name, clip, _, _) in &clips {
        config += &format!(
            "\n[[streams]]\nname = \"{name}\"\nuri = \"file://{}\"\n\n[streams.output]\nfile = \"{}/{{stream}}.mp4\"\nstats = \"{}/{{stream}}.jsonl\"\n",
            clip.display(),
            rec.display(),
            rec.display()
        );
    }
    let path = dir.path().join("roadseg.toml");
    std::fs::write(&path, config).unwrap();
    let mut d = Daemon::start(&path, &dir.path().join("log"));
    let log = d.log.clone();
    d.wait_for("both clips finalised", Duration::from_secs(60), || {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        log.contains("outputs finalised stream=a") && log.contains("outputs finalised stream=b")
    });
    for (name, _, frames, fps) in &clips {
        let stats = std::fs::read_to_string(rec.join(format!("{name}.jsonl"))).unwrap();
        let lines: Vec<serde_json::Value> = stats.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len() as u64, *frames, "{name}: one line per frame");
        // The decoder's timeline starts where the clip's first frame does
        // (x264's reordering delay shifts it); from there, one frame period each.
        let first = lines[0]["pts"].as_f64().unwrap();
        for (i, line) in lines.iter().enumerate() {
            assert_eq!(line["frame"].as_u64(), Some(i as u64), "{name}: frames in order");
            let pts = line["pts"].as_f64().unwrap();
            assert!((pts - first - i as f64 / fps).abs() < 1e-3, "{name} frame {i}: pts {pts} (first {first})");
        }
        // Segment files are named after the template, the stream first.
        let files: Vec<_> = mp4s(&rec).into_iter().filter(|f| f.file_name().is_some_and(|n| n.to_string_lossy().starts_with(name))).collect();
        assert_eq!(files.len(), 1, "{name}: one recording in {:?}", mp4s(&rec));
        let (count, err) = probe_frames(files[0].to_str().unwrap(), &[]);
        assert!(count == *frames && err.is_empty(), "{name}: {count} frames, errors {err:?}");
    }
    d.stop_cleanly();
}

#[test]
fn a_recording_can_be_kept_to_fewer_frames_and_pixels_than_the_stream() {
    // Rule: record_fps and record_width make the file smaller and cheaper (fewer frames, fewer pixels) while every frame is still inferred and in the sidecar; without them every frame is recorded at full size.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let (low, full) = (dir.path().join("low"), dir.path().join("full"));
    let out = |rec: &Path, extra: &str| {
        format!("file = \"{}/{{stream}}.mp4\"\nsegment_seconds = 60\nstats = \"{}/{{stream}}.jsonl\"\n{extra}", rec.display(), rec.display())
    };
    let config = dir.path().join("roadseg.toml");
    let streams = test_stream("low", &out(&low, "record_fps = 2.5\nrecord_width = 160")) + &test_stream("full", &out(&full, ""));
    std::fs::write(&config, header(mport, rport) + &streams).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("6 s of frames", Duration::from_secs(60), || metric(mport, "roadseg_frames_inferred_total", "low") >= 60.0);
    d.stop_cleanly();
    let probe = |rec: &Path, name: &str| {
        let file = mp4s(rec).into_iter().next().unwrap_or_else(|| panic!("no recording for {name}"));
        let (frames, err) = probe_frames(file.to_str().unwrap(), &[]);
        let size = std::process::Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0"])
            .arg(&file)
            .output()
            .unwrap();
        let lines = std::fs::read_to_string(rec.join(format!("{name}.jsonl"))).unwrap().lines().count() as u64;
        (frames, String::from_utf8_lossy(&size.stdout).trim().to_string(), lines, err)
    };
    let (low_frames, low_size, low_lines, err) = probe(&low, "low");
    let (full_frames, full_size, full_lines, _) = probe(&full, "full");
    assert_eq!((low_size.as_str(), full_size.as_str()), ("160,120", "320,240"), "{err}");
    // 10 fps in, 2.5 recorded: a quarter of the frames, give or take the ends.
    let expected = low_lines as f64 / 4.0;
    assert!((low_frames as f64 - expected).abs() <= 2.0, "{low_frames} frames recorded of {low_lines} inferred at 2.5 of 10 fps");
    assert!(full_frames + 2 >= full_lines && full_frames <= full_lines, "full: {full_frames} recorded of {full_lines} inferred");
    assert!(low_lines >= 60, "every frame still inferred and in the sidecar: {low_lines}");
}

#[test]
fn stats_lines_can_carry_each_frames_road_mask_run_length_coded() {
    // Rule: with stats_masks every stats line has road_rle (w, h, counts summing to w*h, alternating from not-road) whose road share matches the line's road coverage of the scene; without it no line has one.
    let dir = tempfile::tempdir().unwrap();
    let (mport, rport) = (free_port(), free_port());
    let stats = |name: &str| dir.path().join(format!("{name}.jsonl"));
    let out = |name: &str, extra: &str| format!("stats = {:?}\n{extra}", stats(name).display().to_string());
    let config = dir.path().join("roadseg.toml");
    let streams = test_stream("masks", &out("masks", "stats_masks = true")) + &test_stream("plain", &out("plain", ""));
    std::fs::write(&config, header(mport, rport) + &streams).unwrap();
    let mut d = Daemon::start(&config, &dir.path().join("log"));
    d.wait_for("20 frames", Duration::from_secs(60), || metric(mport, "roadseg_frames_inferred_total", "masks") >= 20.0);
    d.stop_cleanly();
    let lines = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(stats(name)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let masked = lines("masks");
    assert!(masked.len() >= 20);
    for line in &masked {
        let rle: roadseg::video::mask_rle::RoadRle = serde_json::from_value(line["road_rle"].clone()).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!((rle.w, rle.h), (320, 240));
        let mask = rle.decode();
        assert_eq!(mask.len(), 320 * 240);
        let share = mask.iter().filter(|&&m| m == 1).count() as f64 / mask.len() as f64;
        let scene = 1.0 - line["hood_pct"].as_f64().unwrap() / 100.0;
        let coverage = line["road_coverage"].as_f64().unwrap() * scene;
        assert!((share - coverage).abs() < 0.01, "mask road {share:.4}, stats say {coverage:.4}: {line}");
    }
    assert!(lines("plain").iter().all(|l| l.get("road_rle").is_none()), "no masks unless asked");
}
