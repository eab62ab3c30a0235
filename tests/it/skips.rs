//! Counted skips: roadseg::test_skip::skip records each skipping test in the
//! skip log and tools/test-skips.sh ends a run with their count and reasons.

use std::process::Command;
use std::time::Duration;

use crate::common::{repo, run_with_timeout};

/// Set in the child run of this very test, which then skips instead.
const CHILD: &str = "ROADSEG_SKIP_SELF_CHECK";
const REASON: &str = "the self-check's child skips on purpose";

/// tools/test-skips.sh with `args`, its log in `log`: (success, stdout + stderr).
fn skips_sh(log: &std::path::Path, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("tools/test-skips.sh")).args(args).env("ROADSEG_SKIP_LOG", log).env(CHILD, "1");
    let (ok, out, err) = run_with_timeout(&mut cmd, Duration::from_secs(60));
    (ok, out + &err)
}

#[test]
fn a_skipping_test_is_counted_and_named_at_the_end_of_the_run() {
    // Rule: a test that calls roadseg::test_skip::skip appends `its::name: reason` to the skip log, and tools/test-skips.sh CMD empties the log first, runs CMD, ends with "N test(s) skipped:" and each reason with its tests, and exits with CMD's status; alone it prints the log's summary.
    if std::env::var_os(CHILD).is_some() {
        return roadseg::test_skip::skip(REASON);
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips.log");
    std::fs::write(&log, "stale::test: from an earlier run\n").unwrap();
    let me = std::env::current_exe().unwrap();
    let name = "skips::a_skipping_test_is_counted_and_named_at_the_end_of_the_run";
    let (ok, out) = skips_sh(&log, &[me.to_str().unwrap(), "--exact", name, "--test-threads=1"]);
    assert!(ok, "the child test passes (a skip is a pass):\n{out}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{name}: {REASON}\n"), "one line, the stale one gone");
    let summary = format!("1 test skipped:\n  {REASON}: 1 test: {name}\n");
    assert!(out.ends_with(&summary), "the run ends with the summary:\n{out}");
    // Alone, it prints the same summary again; tests sharing a reason are grouped under it.
    let (ok, out) = skips_sh(&log, &[]);
    assert!(ok && out == summary, "{out}");
    std::fs::write(&log, "m::a: no GPU\nm::b: no GPU\nm::b: no GPU\nm::c: no promtool\n").unwrap();
    let (_, out) = skips_sh(&log, &[]);
    assert_eq!(out, "3 tests skipped:\n  no GPU: 2 tests: m::a, m::b\n  no promtool: 1 test: m::c\n");
    // A command's failure is passed on, and a run with no skips says so.
    let (ok, out) = skips_sh(&log, &["sh", "-c", "exit 3"]);
    assert!(!ok && out.trim_end().ends_with("no tests skipped"), "{out}");
}
