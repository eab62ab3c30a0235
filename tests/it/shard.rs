// Rule: daemons sharing one config with `[daemon] shard` run each stream exactly once between them (the union of their /api/v1/streams is every stream, with no overlap); a shard with no streams still serves /healthz and metrics; a bad shard is a config error (exit 78) naming daemon.shard; deploy/kubernetes/configmap.yaml passes check-config as each StatefulSet pod.

#![cfg(feature = "video")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::*;

/// sysexits' EX_CONFIG, what `run` and `check-config` exit with on a bad config.
const EX_CONFIG: i32 = 78;

/// Small, slow test patterns: nine of them in three daemons on two cores.
fn stream(name: &str, dir: &Path) -> String {
    format!(
        "\n[[streams]]\nname = \"{name}\"\nuri = \"test://smpte?width=160&height=120&fps=5\"\nlive = true\ninfer_fps = 2\n\n\
         [streams.output]\nstats = \"{}/{{stream}}.jsonl\"\n",
        dir.display()
    )
}

fn config(dir: &Path, metrics: u16, names: &[String]) -> std::path::PathBuf {
    let path = dir.join(format!("roadseg-{metrics}.toml"));
    let streams: String = names.iter().map(|n| stream(n, dir)).collect();
    std::fs::write(&path, header(metrics, free_port()) + &streams).unwrap();
    path
}

/// `roadseg run` with extra environment (the shard settings).
fn start(config: &Path, log: &Path, env: &[(&str, &str)]) -> Daemon {
    Daemon::start_with_env(config, log, env)
}

/// The stream names a daemon's /api/v1/streams lists (None until it answers).
fn api_names(port: u16) -> Option<Vec<String>> {
    let response = get(port, "/api/v1/streams");
    let body = response.split_once("\r\n\r\n")?.1;
    let api: serde_json::Value = serde_json::from_str(body).ok()?;
    Some(api["streams"].as_array()?.iter().filter_map(|s| Some(s["name"].as_str()?.to_string())).collect())
}

fn shard_gauge(port: u16, state: &str) -> Option<f64> {
    labelled_metric(port, "roadseg_shard_streams", &[&format!("state=\"{state}\"")])
}

#[test]
fn three_shards_serve_each_of_nine_streams_exactly_once() {
    // Rule: shards 0/3, 1/3 and 2/3 (the last as "auto" in a pod named roadseg-2) over one config of nine streams: the union of their /api/v1/streams is the nine, none twice; each logs what it runs and skips and exports roadseg_shard_streams.
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..9).map(|i| format!("cam-{i}")).collect();
    // Shard 2 as a StatefulSet pod would be: "auto", host name roadseg-2, ROADSEG_SHARDS=3.
    let shards: [&[(&str, &str)]; 3] = [
        &[("ROADSEG__DAEMON__SHARD", "0/3")],
        &[("ROADSEG__DAEMON__SHARD", "1/3")],
        &[("ROADSEG__DAEMON__SHARD", "auto"), ("HOSTNAME", "roadseg-2"), ("ROADSEG_SHARDS", "3")],
    ];
    let mut daemons = Vec::new();
    for (i, env) in shards.iter().enumerate() {
        let port = free_port();
        let cfg = config(dir.path(), port, &names);
        daemons.push((start(&cfg, &dir.path().join(format!("shard-{i}.log")), env), port));
    }
    let mut union: Vec<String> = Vec::new();
    for (i, (d, port)) in daemons.iter_mut().enumerate() {
        let port = *port;
        d.wait_for("this shard's streams listed", Duration::from_secs(60), || {
            let owned = shard_gauge(port, "owned");
            owned.is_some() && api_names(port).is_some_and(|n| Some(n.len() as f64) == owned)
        });
        let mine = api_names(port).unwrap();
        assert!(!mine.is_empty(), "shard {i} of 3 owns none of cam-0..cam-8 (the hash gives 3, 3 and 2 here)");
        assert_eq!(shard_gauge(port, "skipped"), Some((9 - mine.len()) as f64), "shard {i}");
        let log = d.log();
        assert!(log.contains(&format!("shard {i}/3")) && log.contains("skipping"), "shard {i} says what it runs and skips:\n{log}");
        union.extend(mine);
    }
    let count = union.len();
    union.sort();
    union.dedup();
    assert_eq!(union.len(), count, "a stream runs in two shards: {union:?}");
    assert_eq!(union, names, "every stream runs somewhere");
    for (d, _) in &mut daemons {
        d.stop_cleanly();
    }
}

#[test]
fn a_shard_with_no_streams_still_serves_health_and_metrics() {
    // Rule: a shard that owns none of the streams still runs: /healthz, /metrics (owned 0, skipped 1), an empty stream list, and a log line saying so.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // cam-0 falls to shard 1 of 3 (daemon::shard's fixed values).
    let cfg = config(dir.path(), port, &["cam-0".to_string()]);
    let mut d = start(&cfg, &dir.path().join("log"), &[("ROADSEG__DAEMON__SHARD", "0/3")]);
    d.wait_for("/healthz", Duration::from_secs(30), || get(port, "/healthz").starts_with("HTTP/1.1 200"));
    d.wait_for("the shard gauge", Duration::from_secs(10), || shard_gauge(port, "skipped") == Some(1.0));
    assert_eq!(shard_gauge(port, "owned"), Some(0.0));
    assert_eq!(api_names(port), Some(Vec::new()));
    assert!(d.log().contains("none of the 1 configured streams falls to this shard"), "{}", d.log());
    d.stop_cleanly();
}

/// Runs `roadseg ARGS` with the shard set to `shard`; its exit code and stderr.
fn exit_code(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("ROADSEG_SHARDS")
        .env_remove("HOSTNAME")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("roadseg {args:?} did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_shards_are_config_errors_naming_daemon_shard() {
    // Rule: shard "3/3", "0/0", "x", and "auto" without ROADSEG_SHARDS or a -N host name make check-config and run exit 78 naming daemon.shard; a good one checks.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), &["cam-0".to_string()]);
    let cfg = cfg.to_str().unwrap();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("ROADSEG__DAEMON__SHARD", "3/3")], "0 to 2"),
        (&[("ROADSEG__DAEMON__SHARD", "0/0")], "count of 0"),
        (&[("ROADSEG__DAEMON__SHARD", "x")], "\"I/N\""),
        (&[("ROADSEG__DAEMON__SHARD", "auto"), ("HOSTNAME", "roadseg-0")], "ROADSEG_SHARDS"),
        (&[("ROADSEG__DAEMON__SHARD", "auto"), ("HOSTNAME", "laptop"), ("ROADSEG_SHARDS", "3")], "'laptop' does not end in -N"),
    ];
    for (env, says) in cases {
        for args in [&["check-config", cfg][..], &["run", "--config", cfg][..]] {
            let (code, stderr) = exit_code(args, env);
            assert_eq!(code, EX_CONFIG, "{args:?} {env:?}: {stderr}");
            assert!(stderr.contains("daemon.shard") && stderr.contains(says), "{args:?} {env:?}: {stderr}");
        }
    }
    let (code, stderr) = exit_code(&["check-config", cfg], &[("ROADSEG__DAEMON__SHARD", "1/3")]);
    assert_eq!(code, 0, "{stderr}");
}

/// The `roadseg.toml: |` block of deploy/kubernetes/configmap.yaml, dedented
/// (a literal block scalar: its lines as written, less their indentation).
fn configmap_toml() -> String {
    let yaml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/configmap.yaml")).unwrap();
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "roadseg.toml: |").skip(1);
    let first = lines.next().expect("roadseg.toml has lines");
    let indent = first.len() - first.trim_start().len();
    let block = std::iter::once(first).chain(lines.take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent));
    block.map(|l| l.get(indent..).unwrap_or("")).collect::<Vec<_>>().join("\n") + "\n"
}

#[test]
fn the_kubernetes_configmap_checks_with_each_pods_environment() {
    // Rule: deploy/kubernetes/configmap.yaml's config passes check-config as each of the 3 StatefulSet pods would run it (credentials from the Secret as env), and its cameras split over the pods with none run twice.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("roadseg.toml");
    std::fs::write(&cfg, configmap_toml()).unwrap();
    let mut runs: Vec<String> = Vec::new();
    for pod in 0..3 {
        let host = format!("roadseg-{pod}");
        let env = [
            ("HOSTNAME", host.as_str()),
            ("ROADSEG_SHARDS", "3"),
            ("ROADSEG__METRICS__USERNAME", "prometheus"),
            ("ROADSEG__METRICS__PASSWORD", "secret-1"),
            ("ROADSEG__RTSP__USERNAME", "viewer"),
            ("ROADSEG__RTSP__PASSWORD", "secret-2"),
        ];
        let mut cmd = Command::new(BIN);
        cmd.args(["check-config", cfg.to_str().unwrap()]).env_remove("ROADSEG__DAEMON__SHARD").env_remove("ROADSEG_MODEL").envs(env);
        let (ok, stdout, stderr) = crate::common::run_with_timeout(&mut cmd, Duration::from_secs(30));
        assert!(ok, "{host}: {stderr}\n{}", configmap_toml());
        let line = stdout.lines().find(|l| l.starts_with("  runs:  ")).unwrap_or_else(|| panic!("{host}: no shard lines:\n{stdout}"));
        runs.extend(line["  runs:  ".len()..].split(", ").filter(|n| *n != "none (it still serves /healthz, /readyz and /metrics)").map(String::from));
        assert!(!stdout.contains("secret-"), "passwords are not shown: {stdout}");
    }
    let count = runs.len();
    runs.sort();
    runs.dedup();
    assert_eq!((runs.len(), count), (6, 6), "the six cameras, each on one pod: {runs:?}");
}

#[test]
fn a_reload_keeps_the_shard_it_started_with() {
    // Rule: SIGHUP applies the new streams through the shard settled at start; a changed `shard` is logged and kept until a restart.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), port, &["cam-0".to_string()]);
    let with_shard = |shard: &str, names: &[String]| {
        let text = std::fs::read_to_string(config(dir.path(), port, names)).unwrap();
        std::fs::write(&cfg, text.replacen("[daemon]\n", &format!("[daemon]\nshard = \"{shard}\"\n"), 1)).unwrap();
    };
    with_shard("1/3", &["cam-0".to_string()]);
    let mut d = start(&cfg, &dir.path().join("log"), &[]);
    d.wait_for("cam-0 listed", Duration::from_secs(30), || api_names(port) == Some(vec!["cam-0".to_string()]));
    // cam-0, cam-1 and cam-7 fall to shard 1 of 3; the file now says 2/3.
    let nine: Vec<String> = (0..9).map(|i| format!("cam-{i}")).collect();
    with_shard("2/3", &nine);
    d.signal("-HUP");
    let expected: Vec<String> = ["cam-0", "cam-1", "cam-7"].map(String::from).to_vec();
    d.wait_for("shard 1/3's streams after the reload", Duration::from_secs(30), || {
        api_names(port).map(|mut n| {
            n.sort();
            n
        }) == Some(expected.clone())
    });
    assert_eq!(shard_gauge(port, "skipped"), Some(6.0));
    assert!(d.log().contains("daemon.shard changed to 2/3; restart required"), "{}", d.log());
    d.stop_cleanly();
}
