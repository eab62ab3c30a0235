//! Test skips that are counted: a test that cannot run here (no GPU, no
//! NVRTC, no promtool, no ../shared) calls [`skip`], which prints the usual
//! `SKIP:` line and appends `test-name: reason` to a skip log, so that
//! `tools/test-skips.sh` can end the run with how many tests skipped and why
//! (cargo's own summary counts a skipped test as passed). Test support only:
//! the library's unit tests, tests/it and tests/soak.rs all share it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming the skip log (tools/test-skips.sh sets it).
pub const LOG_VAR: &str = "ROADSEG_SKIP_LOG";

/// Says why the running test skips, on stderr and in the skip log. The
/// test's name is its thread's (libtest names each test's thread after it).
pub fn skip(reason: &str) {
    eprintln!("SKIP: {reason}");
    let name = std::thread::current().name().unwrap_or("unnamed test").to_string();
    if let Some(log) = log_path()
        && let Err(e) = record(&log, &name, reason)
    {
        // The skip itself still happens; only its count is lost.
        eprintln!("warning: could not record the skip in {}: {e}", log.display());
    }
}

/// `$ROADSEG_SKIP_LOG`, else `test-skips.log` in the profile folder above the
/// test executable (target/release/deps/x -> target/release/test-skips.log),
/// which is where tools/test-skips.sh looks by default.
pub fn log_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(LOG_VAR).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("test-skips.log"))
}

/// Appends one line `name: reason` to `log`. One `write_all` of one short
/// line on an O_APPEND file, so tests skipping at once do not interleave.
pub fn record(log: &Path, name: &str, reason: &str) -> std::io::Result<()> {
    let line = format!("{name}: {}\n", reason.replace('\n', " "));
    std::fs::OpenOptions::new().create(true).append(true).open(log)?.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_one_line_naming_the_test_and_the_reason() {
        // Rule: each recorded skip appends exactly one line `test: reason`, newlines in the reason flattened, earlier lines kept.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips.log");
        record(&log, "a::b", "no GPU\n(driver missing)").unwrap();
        record(&log, "c::d", "no promtool").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "a::b: no GPU (driver missing)\nc::d: no promtool\n");
    }
}
