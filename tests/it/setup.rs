//! tools/install-deps.sh, the first thing a new user runs, with apt and
//! dpkg stood in for by stubs on PATH (nothing is installed).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{repo, run_with_timeout};

/// An executable `name` in `dir` running `body` (sh).
fn stub(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the script with the stubs in `dir` first on PATH: (success, stdout).
fn install_deps(dir: &Path) -> (bool, String) {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("tools/install-deps.sh")).env("PATH", path);
    let (ok, out, err) = run_with_timeout(&mut cmd, Duration::from_secs(30));
    (ok, out + &err)
}

#[test]
fn install_deps_says_what_it_installs_before_apt_runs() {
    // Rule: tools/install-deps.sh names the packages it is about to install before apt runs (no silent minute), names each as apt sets it up instead of apt's whole output, and says so when nothing is missing without running apt.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path();
    stub(bin, "sudo", "exec \"$@\"");
    stub(bin, "cargo", "exit 0");
    stub(bin, "dpkg-query", "exit 1");
    stub(
        bin,
        "apt-get",
        "echo \"APT-GET $1\"\n[ \"$1\" = install ] && { echo 'Get:1 http://deb.debian.org/debian bookworm/main ffmpeg'; echo 'Setting up ffmpeg (7:5.1) ...'; }\nexit 0",
    );
    let (ok, out) = install_deps(bin);
    assert!(ok, "{out}");
    let first_apt = out.find("APT-GET").unwrap_or_else(|| panic!("apt ran: {out}"));
    let named = out.find("libgstrtspserver-1.0-dev").unwrap_or_else(|| panic!("packages named: {out}"));
    assert!(named < first_apt, "the packages are named before apt runs:\n{out}");
    assert!(out[..first_apt].contains("installing 16 of 16 packages"), "{out}");
    assert!(out.contains("  set up ffmpeg") && !out.contains("Get:1"), "each package set up is named, apt's chatter is not:\n{out}");

    stub(bin, "dpkg-query", "echo 'install ok installed'");
    let (ok, out) = install_deps(bin);
    assert!(ok && out.contains("all 16 packages are already installed") && !out.contains("APT-GET"), "{out}");
}
