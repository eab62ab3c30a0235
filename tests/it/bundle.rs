//! The portable bundle (`tools/device-bundle.sh`, issue 10): one folder with
//! roadseg, its GStreamer, plugins and libraries that runs where neither
//! GStreamer nor Rust is installed. Run from a clean environment, it makes and
//! segments a clip with its own libgstreamer and plugins, never the system's
//! (checked with the dynamic loader's own log, `LD_DEBUG=libs`).
#![cfg(feature = "video")]


use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

const SCANNER: &str = "/usr/lib/x86_64-linux-gnu/gstreamer1.0/gstreamer-1.0/gst-plugin-scanner";
const FRAMES: u64 = 20;

fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().is_ok_and(|o| o.status.success())
}

fn frames_in(path: &Path) -> u64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "ffprobe on {}: {stderr}", path.display());
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("ffprobe frame count of {}", path.display()))
}

/// `BUNDLE/roadseg ARGS` with nothing inherited but PATH and HOME, and the
/// loader logging every library it loads to `ld_dir/ld.PID` (one file per
/// process: the launcher, roadseg, gst-plugin-scanner).
fn run_clean(bundle: &Path, home: &Path, ld_dir: &Path, args: &[&str]) -> String {
    std::fs::create_dir_all(ld_dir).unwrap();
    let mut cmd = Command::new(bundle.join("roadseg"));
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("LD_DEBUG", "libs")
        .env("LD_DEBUG_OUTPUT", ld_dir.join("ld"))
        .current_dir(repo())
        .args(args);
    let (ok, stdout, stderr) = run_with_timeout(&mut cmd, Duration::from_secs(180));
    assert!(ok, "bundle roadseg {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// For every process that loaded libgstreamer: the libraries whose
/// initialisers ran (`calling init: PATH` lines), by log file.
fn gstreamer_processes(ld_dir: &Path) -> BTreeMap<PathBuf, Vec<String>> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(ld_dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let inits: Vec<String> =
            text.lines().filter_map(|l| l.split_once("calling init: ")).map(|(_, p)| p.trim().to_string()).collect();
        if inits.iter().any(|p| p.contains("libgstreamer-1.0.so")) {
            found.insert(path, inits);
        }
    }
    found
}

fn is_glibc_core(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ["libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "libresolv.so", "ld-linux"]
        .iter()
        .any(|core| name.starts_with(core))
}

/// Every library a GStreamer process initialised came from the bundle, except
/// the glibc core; returns the bundled paths seen.
fn assert_only_bundled(ld_dir: &Path, bundle: &Path, what: &str) -> Vec<String> {
    let procs = gstreamer_processes(ld_dir);
    assert!(!procs.is_empty(), "{what}: no process loaded libgstreamer (LD_DEBUG logs in {})", ld_dir.display());
    let prefix = format!("{}/", bundle.display());
    let mut bundled = Vec::new();
    for (log, inits) in &procs {
        let gst: Vec<&String> = inits.iter().filter(|p| p.contains("libgstreamer-1.0.so")).collect();
        assert!(gst.iter().all(|p| p.starts_with(&prefix)), "{what}: libgstreamer loaded from {gst:?}, not {prefix} ({})", log.display());
        let foreign: Vec<&String> = inits.iter().filter(|p| !p.starts_with(&prefix) && !is_glibc_core(p)).collect();
        assert!(foreign.is_empty(), "{what}: libraries from outside the bundle: {foreign:?} ({})", log.display());
        bundled.extend(inits.iter().cloned());
    }
    bundled
}

#[test]
fn the_bundle_segments_a_clip_in_a_clean_environment_with_its_own_gstreamer() {
    // Rule: tools/device-bundle.sh makes one folder that fits a device call beside the working tree (60 MiB together) whose launcher, with only PATH and HOME set, synthesises an H.264 clip and segments it into an MP4 holding every frame, loading libgstreamer, every plugin and every library but the glibc core from the bundle (the registry it writes lists bundled plugins only).
    for tool in ["bash", "ldd", "objdump", "strip", "ffprobe"] {
        if !have(tool) {
            roadseg::test_skip::skip(&format!("{tool} not found (the bundle script or the check needs it)"));
            return;
        }
    }
    if !Path::new(SCANNER).exists() {
        roadseg::test_skip::skip(&format!("{SCANNER} not found (GStreamer's plugin scanner, libgstreamer1.0-0)"));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path().canonicalize().unwrap();
    let bundle = tmp.join("bundle");
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();

    let mut build = Command::new("bash");
    build.arg(repo().join("tools/device-bundle.sh")).arg(&bundle).env("ROADSEG_BIN", env!("CARGO_BIN_EXE_roadseg")).current_dir(repo());
    let (ok, stdout, stderr) = run_with_timeout(&mut build, Duration::from_secs(300));
    assert!(ok, "tools/device-bundle.sh failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("bundle: "), "{stdout}");
    for part in ["roadseg", "bin/roadseg", "libexec/gst-plugin-scanner", "lib/libgstreamer-1.0.so.0", "lib/gstreamer-1.0/libgstopenh264.so"] {
        assert!(bundle.join(part).exists(), "{part} missing from the bundle");
    }
    let size: u64 = walk(&bundle).iter().map(|p| p.symlink_metadata().unwrap().len()).sum();
    // A device call carries the checkout's working tree beside the bundle.
    let tree = Command::new("bash").arg(repo().join("tools/carry-size.sh")).arg("--tree").current_dir(repo()).output().expect("tools/carry-size.sh runs");
    let tree: u64 = String::from_utf8_lossy(&tree.stdout).trim().parse().expect("carry-size --tree prints bytes");
    assert!(size + tree <= 60 * 1024 * 1024, "bundle {size} + working tree {tree} bytes: over the 60 MiB a device call may carry");

    let clip = tmp.join("clip.mp4");
    let out = tmp.join("out.mp4");
    let frames = FRAMES.to_string();
    run_clean(&bundle, &home, &tmp.join("ld-synth"), &["synth", "-o", clip.to_str().unwrap(), "--frames", &frames, "--size", "320x192"]);
    assert_eq!(frames_in(&clip), FRAMES, "synth clip");
    let summary = run_clean(
        &bundle,
        &home,
        &tmp.join("ld-process"),
        &["process", clip.to_str().unwrap(), "-o", out.to_str().unwrap(), "--model", "models/roadseg-camvid", "--device", "cpu", "--size", "128x64"],
    );
    assert!(summary.contains(&format!("{FRAMES} frames")), "{summary}");
    assert!(out.is_file(), "{} not written", out.display());
    assert_eq!(frames_in(&out), FRAMES, "annotated output holds every input frame");

    let synth_libs = assert_only_bundled(&tmp.join("ld-synth"), &bundle, "synth");
    let process_libs = assert_only_bundled(&tmp.join("ld-process"), &bundle, "process");
    let plugin = |name: &str| format!("{}/lib/gstreamer-1.0/libgst{name}.so", bundle.display());
    for (libs, what, plugins) in [(&synth_libs, "synth", ["x264", "isomp4"]), (&process_libs, "process", ["openh264", "isomp4"])] {
        for p in plugins {
            assert!(libs.contains(&plugin(p)), "{what}: {} not loaded; loaded: {libs:#?}", plugin(p));
        }
    }

    // The launcher's private registry, under HOME since nothing else is set.
    let registries: Vec<PathBuf> = std::fs::read_dir(home.join(".cache/roadseg")).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    assert_eq!(registries.len(), 1, "one registry file in {}/.cache/roadseg: {registries:?}", home.display());
    let registry = std::fs::read(&registries[0]).unwrap();
    let registry = String::from_utf8_lossy(&registry);
    assert!(registry.contains(&plugin("openh264")), "registry lists the bundled openh264 plugin");
    assert!(!registry.contains("/usr/lib/x86_64-linux-gnu/gstreamer-1.0/"), "registry lists system plugins");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.symlink_metadata().unwrap().is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
