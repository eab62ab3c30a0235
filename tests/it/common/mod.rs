//! Helpers shared by the integration tests.
#![allow(dead_code)]

#[cfg(feature = "video")]
pub mod daemon;
pub mod mock_hub;
#[cfg(feature = "video")]
pub mod webdriver;
#[cfg(feature = "cuda")]
pub mod gpu;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use roadseg::backend::Backend;
use roadseg::backend::cpu::CpuBackend;
use roadseg::checkpoint::Checkpoint;
use roadseg::engine::{Engine, EngineOptions, chw_to_hwc, hwc_to_chw};
use roadseg::model::SegformerWeights;
use roadseg::npy;

/// HF reference fixtures in ../shared/fixtures/segformer.
pub const SHARED_CASES: [&str; 4] = ["b0-cityscapes-1024x1024", "b5-shallow-fp16-320x256", "tiny-1024x576", "b0-image-1024x576"];
/// HF reference fixtures made by tools/make_test_fixtures.py, in tests/data.
pub const LOCAL_CASES: [&str; 2] = ["odd-bf16-203x141", "three-stage-fp16-161x97"];

/// The checkout: `$ROADSEG_REPO` when set (test executables carried to a
/// machine where the checkout lives elsewhere), else where this was built.
pub fn repo() -> PathBuf {
    std::env::var_os("ROADSEG_REPO").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `../shared/<rel>`, or None (with a message saying the test is skipped).
pub fn shared(rel: &str) -> Option<PathBuf> {
    let root = std::env::var_os("ROADSEG_SHARED").map(PathBuf::from).unwrap_or_else(|| repo().join("..").join("shared"));
    let p = root.join(rel);
    if p.exists() {
        Some(p)
    } else {
        roadseg::test_skip::skip(&format!("{} is absent (the ../shared data set is not beside this checkout)", p.display()));
        None
    }
}

/// Every backend this machine can run, by name. The CPU is always there.
pub fn cpu_backend() -> Arc<CpuBackend> {
    Arc::new(CpuBackend::new())
}

/// A model folder's weights on backend `b`.
pub fn load<B: Backend>(dir: &Path, b: &B) -> Arc<SegformerWeights<B>> {
    let mut ckpt = Checkpoint::open(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    SegformerWeights::load(&mut ckpt, b).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

pub fn engine<B: Backend>(b: Arc<B>, dir: &Path, width: usize, height: usize, scales: Vec<f32>) -> Engine<B> {
    engine_exposed(b, dir, width, height, scales, roadseg::exposure::Exposure::OFF)
}

/// As [`engine`], brightening dark frames as `exposure` says.
pub fn engine_exposed<B: Backend>(b: Arc<B>, dir: &Path, width: usize, height: usize, scales: Vec<f32>, exposure: roadseg::exposure::Exposure) -> Engine<B> {
    let weights = load(dir, &*b);
    let options = EngineOptions { width, height, scales, road_classes: vec![], ego_class: None, confidence_threshold: 0.0, exposure, pixel_confidence: true };
    Engine::new(b, weights, options).expect("engine builds")
}

/// Logits `[labels, h/4, w/4]` for a fixture folder's `pixel_values.npy`.
pub fn fixture_logits<B: Backend>(b: Arc<B>, dir: &Path) -> (Vec<f32>, Vec<usize>) {
    let pv = npy::read_f32(dir.join("pixel_values.npy")).expect("pixel_values.npy");
    let (h, w) = (pv.shape[2], pv.shape[3]);
    let mut e = engine(b, dir, w, h, vec![1.0]);
    let logits = e.run_normalized(&chw_to_hwc(&pv.data, h, w, 3)).expect("forward").to_vec();
    let (lw, lh) = e.logits_size();
    let labels = e.num_labels();
    (hwc_to_chw(&logits, lh, lw, labels), vec![1, labels, lh, lw])
}

/// (max |a-b|, mean |a-b|)
pub fn diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut max = 0.0f32;
    let mut sum = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let d = (x - y).abs();
        max = max.max(d);
        sum += d as f64;
    }
    (max, (sum / a.len() as f64) as f32)
}

pub fn abs_max(a: &[f32]) -> f32 {
    a.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// Copies a checkpoint folder (config.json + model.safetensors) into `dst`.
pub fn copy_checkpoint(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
}

/// Runs the built roadseg binary; returns (exit code, stdout, stderr).
pub fn roadseg(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roadseg"))
        .args(args)
        .current_dir(repo())
        .env("ROADSEG_LOG", "warn")
        .output()
        .expect("run roadseg");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a command to completion within `timeout` (killed, and the test
/// failed, after that): (success, stdout, stderr).
pub fn run_with_timeout(cmd: &mut std::process::Command, timeout: std::time::Duration) -> (bool, String, String) {
    use std::process::Stdio;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let s = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            return (status.success(), s(out.stdout), s(out.stderr));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{cmd:?} timed out after {timeout:?}; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
