//! How many inference workers run: a number, or `auto`, which picks what the
//! measurements say each device wants.

use std::fmt;
use std::str::FromStr;

use crate::device::Resolved;

/// Workers per GPU under `auto`. On an H200 (2026-11-26, `docs/benchmarks.md`,
/// "the third lent GPU") one worker's host work per frame (hood, filters,
/// overlay, copies: ~6.6 ms) held it to ~150 frames/s with the GPU 10-25%
/// busy: 4 workers carried 1.49x what 2 did over 16 live streams, lossless
/// where 2 dropped a third; 8 workers over 24 streams were held back by the 16
/// host cores' decoding and encoding instead.
pub const AUTO_WORKERS_PER_GPU: usize = 4;

/// The most workers a pool runs.
pub const MAX_WORKERS: usize = 64;

/// `workers.count` / `--workers`: `auto` or 1..=64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "CountValue", into = "CountValue")]
pub enum WorkerCount {
    /// [`AUTO_WORKERS_PER_GPU`] per GPU (at most one per CPU core, at least
    /// one per GPU); one on the CPU, whose single engine already uses every
    /// core.
    #[default]
    Auto,
    Fixed(usize),
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a worker count (expected auto or a number 1..={MAX_WORKERS})")]
pub struct WorkerCountError(String);

impl WorkerCount {
    /// The workers to start on `resolved`'s device.
    pub fn resolve(self, resolved: &Resolved) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.resolve_for(resolved.gpus.len(), cores)
    }

    /// The workers for `gpus` GPUs (0: the CPU) on a host with `cores` cores.
    pub fn resolve_for(self, gpus: usize, cores: usize) -> usize {
        match self {
            WorkerCount::Fixed(n) => n.clamp(1, MAX_WORKERS),
            WorkerCount::Auto if gpus == 0 => 1,
            // Each worker keeps a host core busy, so a GPU box with few cores
            // gets fewer; every GPU still gets one.
            WorkerCount::Auto => (AUTO_WORKERS_PER_GPU * gpus).min(cores.max(gpus)).clamp(1, MAX_WORKERS),
        }
    }

    /// Whether a fixed count is within 1..=64 (`auto` always is).
    pub fn in_range(self) -> bool {
        match self {
            WorkerCount::Auto => true,
            WorkerCount::Fixed(n) => (1..=MAX_WORKERS).contains(&n),
        }
    }
}

impl FromStr for WorkerCount {
    type Err = WorkerCountError;
    fn from_str(s: &str) -> Result<Self, WorkerCountError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(WorkerCount::Auto);
        }
        t.parse().map(WorkerCount::Fixed).map_err(|_| WorkerCountError(s.to_string()))
    }
}

impl fmt::Display for WorkerCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerCount::Auto => f.write_str("auto"),
            WorkerCount::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// As written in a config: a number, or a string (`"auto"`, or a number from
/// an environment override).
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(untagged)]
enum CountValue {
    Number(usize),
    Text(String),
}

impl TryFrom<CountValue> for WorkerCount {
    type Error = WorkerCountError;
    fn try_from(v: CountValue) -> Result<Self, WorkerCountError> {
        match v {
            CountValue::Number(n) => Ok(WorkerCount::Fixed(n)),
            CountValue::Text(s) => s.parse(),
        }
    }
}

impl From<WorkerCount> for CountValue {
    fn from(c: WorkerCount) -> CountValue {
        match c {
            WorkerCount::Auto => CountValue::Text("auto".into()),
            WorkerCount::Fixed(n) => CountValue::Number(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_gives_four_workers_a_gpu_within_the_cores_and_one_on_the_cpu() {
        let auto = WorkerCount::Auto;
        assert_eq!(auto.resolve_for(0, 2), 1);
        assert_eq!(auto.resolve_for(0, 64), 1);
        assert_eq!(auto.resolve_for(1, 16), 4);
        assert_eq!(auto.resolve_for(2, 16), 8);
        assert_eq!(auto.resolve_for(1, 2), 2, "one worker a core");
        assert_eq!(auto.resolve_for(4, 2), 4, "every GPU gets one");
        assert_eq!(auto.resolve_for(32, 256), MAX_WORKERS);
        assert_eq!(WorkerCount::Fixed(3).resolve_for(0, 2), 3);
        assert_eq!(WorkerCount::Fixed(3).resolve_for(2, 64), 3);
    }

    #[test]
    fn parses_auto_and_numbers_and_names_what_it_cannot() {
        assert_eq!("auto".parse(), Ok(WorkerCount::Auto));
        assert_eq!(" AUTO ".parse(), Ok(WorkerCount::Auto));
        assert_eq!("4".parse(), Ok(WorkerCount::Fixed(4)));
        let e = "two".parse::<WorkerCount>().unwrap_err().to_string();
        assert!(e.contains("'two'") && e.contains("auto"), "{e}");
        assert!(WorkerCount::Fixed(0).to_string() == "0" && !WorkerCount::Fixed(0).in_range());
        assert!(!WorkerCount::Fixed(65).in_range() && WorkerCount::Fixed(64).in_range() && WorkerCount::Auto.in_range());
    }
}
