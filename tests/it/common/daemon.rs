//! Running the real `roadseg` binary as a daemon in tests: configs for the
//! small test model, a process handle killed on drop, /metrics scrapes,
//! ffprobe checks and an RTSP camera stand-in. Every wait is bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_roadseg");

pub fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/odd-bf16-203x141")
}

/// A port nothing listens on (bound, then released), never one this test
/// process handed out before: the kernel may offer a just-released port
/// again, and two services of one config on the same port is a config error.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// `[model]` for the small test model, metrics on `metrics` (0: disabled), RTSP on `rtsp`.
pub fn header(metrics: u16, rtsp: u16) -> String {
    let metrics = if metrics == 0 {
        String::new()
    } else {
        format!("127.0.0.1:{metrics}")
    };
    format!(
        "[model]\npath = {:?}\nwidth = 224\nheight = 128\ndevice = \"cpu\"\nroad_classes = [\"label_0\"]\n\n\
         [metrics]\nlisten = \"{metrics}\"\n\n[rtsp]\nlisten = \"127.0.0.1:{rtsp}\"\n\n[daemon]\nshutdown_timeout_s = 10\n",
        model().display().to_string()
    )
}

/// A live test-pattern stream with the given `[streams.output]` lines.
pub fn test_stream(name: &str, output: &str) -> String {
    format!(
        "\n[[streams]]\nname = \"{name}\"\nuri = \"test://smpte?width=320&height=240&fps=10\"\nlive = true\n\n[streams.output]\n{output}\n"
    )
}

/// A running `roadseg run`; killed on drop. Its log goes to `log`.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(config: &Path, log: &Path) -> Daemon {
        Daemon::start_with_env(config, log, &[])
    }

    /// `roadseg run` with extra environment; the shard settings of the
    /// caller's environment are never inherited.
    pub fn start_with_env(config: &Path, log: &Path, env: &[(&str, &str)]) -> Daemon {
        let err = std::fs::File::create(log).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(config)
            .env("ROADSEG_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("ROADSEG_SHARDS")
            .env_remove("ROADSEG__DAEMON__SHARD")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawning roadseg run");
        Daemon {
            child,
            log: log.to_path_buf(),
        }
    }

    /// As under systemd's `Type=notify` with `WatchdogSec=0.4`: datagrams go to `socket`.
    pub fn start_notified(config: &Path, socket: &Path, log: &Path, env: &[(&str, &str)]) -> Daemon {
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(config)
            .env("NOTIFY_SOCKET", socket)
            .env("WATCHDOG_USEC", "400000")
            .envs(env.iter().copied())
            .env_remove("WATCHDOG_PID")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, log: log.to_path_buf() }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// Waits for the exit; None if it did not come within `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then asserts the daemon exits 0 within 15 s.
    pub fn stop_cleanly(&mut self) {
        self.signal("-TERM");
        let status = self.wait(Duration::from_secs(15)).expect("exit after SIGTERM");
        assert!(status.success(), "exit {status}; log:\n{}", self.log());
    }

    /// Panics with the log unless `cond` holds within `timeout`.
    pub fn wait_for(&mut self, what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !cond() {
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!("daemon exited ({s}) while waiting for {what}; log:\n{}", self.log());
            }
            if Instant::now() > deadline {
                panic!("timed out after {timeout:?} waiting for {what}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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

/// GET /metrics from `port` ("" when nothing answers).
pub fn scrape(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The value of `name{stream="stream"}` (plain counters/gauges with one label).
pub fn metric(port: u16, name: &str, stream: &str) -> f64 {
    let prefix = format!("{name}{{stream=\"{stream}\"}}");
    scrape(port)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// The value of the series of `name` whose labels include every one of `labels`.
pub fn labelled_metric(port: u16, name: &str, labels: &[&str]) -> Option<f64> {
    let prefix = format!("{name}{{");
    scrape(port).lines().find_map(|l| {
        l.strip_prefix(prefix.as_str())
            .filter(|rest| labels.iter().all(|label| rest.contains(label)))
            .and_then(|rest| rest.rsplit(' ').next()?.parse().ok())
    })
}

/// Each file decodes: frames and no errors from ffprobe.
pub fn assert_playable(files: &[PathBuf]) {
    for f in files {
        let (frames, err) = probe_frames(f.to_str().unwrap(), &[]);
        assert!(frames > 0 && err.is_empty(), "{}: {frames} frames, errors {err:?}", f.display());
    }
}

/// Frames ffprobe decodes from the first video stream of `target`, and its error output.
pub fn probe_frames(target: &str, extra: &[&str]) -> (u64, String) {
    let mut cmd = Command::new("ffprobe");
    cmd.args(["-v", "error"]).args(extra).args([
        "-count_frames",
        "-select_streams",
        "v:0",
        "-show_entries",
        "stream=nb_read_frames",
        "-of",
        "csv=p=0",
        target,
    ]);
    let (_, out, err) = super::run_with_timeout(&mut cmd, Duration::from_secs(20));
    (out.trim().trim_end_matches(',').parse().unwrap_or(0), err)
}

pub fn mp4s(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "mp4"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A roadseg daemon standing in for an RTSP camera: serves a live test
/// pattern at rtsp://127.0.0.1:PORT/cam. Returns it, its port and its config.
pub fn start_camera(dir: &Path) -> (Daemon, u16, PathBuf) {
    let camera_port = free_port();
    let camera_config = dir.join("camera.toml");
    std::fs::write(&camera_config, header(0, camera_port) + &test_stream("cam", "rtsp = \"{stream}\"")).unwrap();
    let camera = Daemon::start(&camera_config, &dir.join("camera.log"));
    (camera, camera_port, camera_config)
}

/// `GET path` on the metrics port: the whole response, status line first.
pub fn get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// `name` on $PATH.
pub fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file()))
        .ok_or(())
}
