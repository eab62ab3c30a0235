//! Safe defaults end to end, with the real binary: credentials in stream URIs
//! (and the RTSP and MQTT passwords) never appear in the daemon's log, /metrics,
//! /healthz, /readyz, the status page and API, the JSONL sidecar or
//! `check-config` output; and the RTSP server is refused beyond loopback
//! without credentials unless `rtsp.allow_anonymous = true`.

#![cfg(feature = "video")]

use crate::common::daemon::free_port;
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_roadseg");
/// In every secret below; must be found nowhere.
const SECRET: &str = "s3cret-pass";

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/odd-bf16-203x141")
}

/// GET `path` from 127.0.0.1:`port`: the whole response, head included ("" if nothing answers).
fn get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn config(dir: &Path, metrics: u16, rtsp: u16, camera_port: u16) -> String {
    format!(
        "[model]\npath = {model:?}\nwidth = 224\nheight = 128\ndevice = \"cpu\"\nroad_classes = [\"label_0\"]\n\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\n\
         [rtsp]\nlisten = \"127.0.0.1:{rtsp}\"\nusername = \"viewer\"\npassword = \"rtsp-{SECRET}\"\n\n\
         [mqtt]\nurl = \"mqtt://127.0.0.1:{camera_port}\"\nusername = \"bob\"\npassword = \"mqtt-{SECRET}\"\n\n\
         [[streams]]\nname = \"cam\"\nuri = \"rtsp://alice:{SECRET}@127.0.0.1:{camera_port}/x\"\n\
         reconnect_initial_ms = 100\nreconnect_max_ms = 400\n\
         [streams.output]\nstats = \"{cam_stats}\"\nrtsp = \"cam\"\n\n\
         [[streams]]\nname = \"pattern\"\nuri = \"test://ball?width=320&height=240&fps=10\"\nlive = true\n\
         [streams.output]\nstats = \"{pattern_stats}\"\nrtsp = \"pattern\"\n",
        model = model().display().to_string(),
        cam_stats = dir.join("cam.jsonl").display(),
        pattern_stats = dir.join("pattern.jsonl").display(),
    )
}

fn check_config(path: &Path) -> (bool, String) {
    let (ok, out, err) = common::run_with_timeout(
        Command::new(BIN).args(["check-config", path.to_str().unwrap()]).env_remove("NOTIFY_SOCKET"),
        Duration::from_secs(30),
    );
    (ok, format!("{out}{err}"))
}

#[test]
fn credentials_never_reach_logs_metrics_endpoints_sidecars_or_check_config() {
    // Rule: a password in a stream URI or the RTSP config appears in no log line, metric, HTTP body, JSONL sidecar or check-config output.
    let dir = tempfile::tempdir().unwrap();
    let (metrics, rtsp, camera) = (free_port(), free_port(), free_port());
    let path = dir.path().join("roadseg.toml");
    std::fs::write(&path, config(dir.path(), metrics, rtsp, camera)).unwrap();

    // check-config: the summary, and the error paths (a bad URI, a syntax error on a URI line).
    let mut outputs: Vec<(String, String)> = Vec::new();
    let (ok, shown) = check_config(&path);
    assert!(ok && shown.contains("cam: rtsp://alice:***@127.0.0.1"), "{shown}");
    outputs.push(("check-config".into(), shown));
    let good = std::fs::read_to_string(&path).unwrap();
    let broken = [
        ("bad uri", good.replace("/x\"", "/x y\"")),
        ("bad port", good.replace(&format!(":{camera}/x"), ":99999/x")),
        ("syntax error", good.replace("@127.0.0.1", "@127.0.0.1\"\"")),
        ("bad rtsp password line", good.replace(&format!("password = \"rtsp-{SECRET}\""), &format!("password = \"rtsp-{SECRET}"))),
        ("uri in the name", good.replace("name = \"cam\"", &format!("name = \"rtsp://alice:{SECRET}@h/x\""))),
        ("credentials in the mqtt url", good.replace("mqtt://127.0.0.1", &format!("mqtt://bob:{SECRET}@127.0.0.1"))),
    ];
    for (what, text) in broken {
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, text).unwrap();
        let (ok, shown) = check_config(&bad);
        assert!(!ok, "{what}: check-config accepted it: {shown}");
        assert!(shown.contains("error"), "{what}: {shown}");
        outputs.push((format!("check-config ({what})"), shown));
    }

    // The daemon, at debug level: the camera port is closed, so `cam` fails and
    // reconnects over and over; `pattern` runs and writes its sidecar.
    let log_path = dir.path().join("daemon.log");
    let mut child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&path)
        .env("ROADSEG_LOG", "debug")
        .env("NO_COLOR", "1")
        .env_remove("NOTIFY_SOCKET")
        .stdout(Stdio::from(std::fs::File::create(dir.path().join("daemon.out")).unwrap()))
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(90);
    let lines = |name: &str| std::fs::read_to_string(dir.path().join(name)).map_or(0, |s| s.lines().count());
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("daemon exited ({status}); log:\n{}", log());
        }
        let reconnects = get(metrics, "/metrics")
            .lines()
            .filter(|l| l.starts_with("roadseg_reconnects_total") && l.contains("cam"))
            .any(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v >= 2.0));
        if lines("pattern.jsonl") >= 5 && reconnects {
            break;
        }
        assert!(Instant::now() < deadline, "no frames or no reconnects within 90 s; log:\n{}", log());
        std::thread::sleep(Duration::from_millis(200));
    }
    for endpoint in ["/metrics", "/healthz", "/readyz", "/", "/api/v1/streams", "/api/v1/streams/cam", "/nonexistent"] {
        let body = get(metrics, endpoint);
        assert!(!body.is_empty(), "{endpoint} answered nothing");
        outputs.push((format!("GET {endpoint}"), body));
    }
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.wait();
    let log = log();
    // The URI is logged (masked), so the check below is not vacuous.
    assert!(log.contains("alice:***@127.0.0.1"), "the log shows the camera URI, masked: {log}");
    outputs.push(("daemon log".into(), log));
    outputs.push(("daemon stdout".into(), std::fs::read_to_string(dir.path().join("daemon.out")).unwrap_or_default()));
    for sidecar in ["pattern.jsonl", "cam.jsonl"] {
        outputs.push((sidecar.into(), std::fs::read_to_string(dir.path().join(sidecar)).unwrap_or_default()));
    }
    assert!(outputs.iter().any(|(w, o)| w == "GET /metrics" && o.contains("stream=\"cam\"")), "metrics have the cam stream");

    let leaks: Vec<String> = outputs
        .iter()
        .filter(|(_, text)| text.contains(SECRET))
        .map(|(what, text)| {
            let line = text.lines().find(|l| l.contains(SECRET)).unwrap_or_default();
            format!("{what}: {line}")
        })
        .collect();
    assert!(leaks.is_empty(), "the password leaked into:\n{}", leaks.join("\n"));
}

#[test]
fn rtsp_beyond_loopback_needs_credentials_or_allow_anonymous() {
    // Rule: check-config refuses an RTSP listen address beyond loopback without credentials, naming rtsp.allow_anonymous; with allow_anonymous = true or credentials it passes.
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "[model]\npath = {:?}\nwidth = 224\nheight = 128\ndevice = \"cpu\"\nroad_classes = [\"label_0\"]\n\n\
         [metrics]\nlisten = \"\"\n\n[rtsp]\nlisten = \"0.0.0.0:{}\"\n#EXTRA\n\n\
         [[streams]]\nname = \"cam\"\nuri = \"test://ball?width=320&height=240&fps=10\"\n[streams.output]\nrtsp = \"cam\"\n",
        model().display().to_string(),
        free_port()
    );
    let path = dir.path().join("rtsp.toml");
    let cases = [
        ("no credentials", "", false),
        ("allow_anonymous = true", "allow_anonymous = true", true),
        ("allow_anonymous = false", "allow_anonymous = false", false),
        ("credentials", "username = \"viewer\"\npassword = \"pw\"", true),
    ];
    for (what, extra, accepted) in cases {
        std::fs::write(&path, base.replace("#EXTRA", extra)).unwrap();
        let (ok, shown) = check_config(&path);
        assert_eq!(ok, accepted, "{what}: {shown}");
        if !accepted {
            assert!(shown.contains("rtsp.listen") && shown.contains("rtsp.allow_anonymous = true"), "{what}: {shown}");
            assert!(!shown.contains("panicked"), "{shown}");
        }
    }
    // Loopback needs neither.
    std::fs::write(&path, base.replace("0.0.0.0", "127.0.0.1").replace("#EXTRA", "")).unwrap();
    let (ok, shown) = check_config(&path);
    assert!(ok, "loopback without credentials: {shown}");
    // And `run` refuses it too, before listening (exit 78, a config error).
    std::fs::write(&path, base.replace("#EXTRA", "")).unwrap();
    let (ok, _, err) = common::run_with_timeout(
        Command::new(BIN).args(["run", "--config", path.to_str().unwrap()]).env_remove("NOTIFY_SOCKET"),
        Duration::from_secs(30),
    );
    assert!(!ok && err.contains("rtsp.allow_anonymous"), "{err}");
}
