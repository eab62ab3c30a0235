//! Overload made visible: a stream the workers cannot keep up with is
//! warned about and shown as degraded, while the daemon stays ready.

#![cfg(feature = "video")]

use std::time::Duration;

use crate::common;
use crate::common::daemon::*;

/// The JSON body of `GET /api/v1/streams`.
fn streams(port: u16) -> serde_json::Value {
    let r = get(port, "/api/v1/streams");
    r.split_once("\r\n\r\n").and_then(|(_, body)| serde_json::from_str(body).ok()).unwrap_or_default()
}

#[test]
fn a_stream_inference_cannot_keep_up_with_is_warned_about_and_degraded_while_the_daemon_stays_ready() {
    // Rule: when most of a stream's frames are dropped as ring_full over daemon.overload_window_s (here a 25 fps file looped live, one worker at about 3 frames/s), the log warns naming the stream, the drop rate and the remedies (infer_fps, workers, a GPU), /api/v1/streams shows state "degraded" with its drop share and moving-average rates, roadseg_stream_degraded is 1, and /readyz stays 200.
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    let (code, _, err) = common::roadseg(&["synth", "-o", clip.to_str().unwrap(), "--frames", "25", "--size", "320x180", "--fps", "25"]);
    assert_eq!(code, 0, "{err}");
    let mport = free_port();
    let head = header(mport, free_port()).replace("shutdown_timeout_s = 10", "shutdown_timeout_s = 10\noverload_window_s = 3\n\n[workers]\ncount = 1");
    let stream = format!(
        "\n[[streams]]\nname = \"busy\"\nuri = \"file://{}\"\nloop = true\n\n[streams.output]\nstats = \"{}/busy.jsonl\"\n",
        clip.display(),
        dir.path().display()
    );
    let config = dir.path().join("roadseg.toml");
    std::fs::write(&config, head + &stream).unwrap();
    // A worker that needs 300 ms a frame: a CPU far too slow for 25 fps.
    let log_path = dir.path().join("log");
    let mut d = Daemon::start_with_env(&config, &log_path, &[("ROADSEG_TEST_SLOW_INFERENCE_MS", "300")]);
    let mut seen = serde_json::Value::Null;
    d.wait_for("the stream shown as degraded", Duration::from_secs(40), || {
        seen = streams(mport);
        seen["streams"][0]["state"] == "degraded"
    });
    let s = &seen["streams"][0];
    assert_eq!(s["degraded"], true, "{seen}");
    let share = s["drop_share"].as_f64().unwrap_or(0.0);
    assert!(share > 0.5, "drop share {share}: {seen}");
    let (fps_in, fps_out) = (s["fps_in"].as_f64().unwrap_or(0.0), s["fps_out"].as_f64().unwrap_or(0.0));
    assert!(fps_in > 10.0 && fps_out > 0.5 && fps_out < 10.0, "moving averages in {fps_in}, out {fps_out}: {seen}");
    assert_eq!(seen["ready"], true, "{seen}");
    let ready = get(mport, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "/readyz stays ready: {ready}");
    assert!(ready.contains("degraded, dropping frames: busy"), "the reason names it: {ready}");
    assert_eq!(metric(mport, "roadseg_stream_degraded", "busy"), 1.0, "the gauge says so too");
    d.wait_for("the warning", Duration::from_secs(5), || std::fs::read_to_string(&log_path).unwrap_or_default().contains("stream busy is degraded"));
    let log = d.log();
    let warning = log.lines().find(|l| l.contains("stream busy is degraded")).unwrap();
    for part in ["WARN", "% of its frames were dropped (ring_full)", "infer_fps", "workers", "GPU"] {
        assert!(warning.contains(part), "{part}: {warning}");
    }
    // Rate-limited: one warning, not one a second.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(d.log().matches("stream busy is degraded").count(), 1, "{}", d.log());
    d.stop_cleanly();
}
