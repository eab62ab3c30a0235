//! `roadseg check-config`: load exactly as `run` would, check everything, and
//! describe what would run.

use std::fmt;
use std::path::Path;
use std::time::SystemTime;

use super::validate::{self, Problem};
use super::template::{self, format_start};
use crate::video::uri::redact_text;
use super::{ConfigError, DaemonConfig, Problems, RecordMode, Shard, ShardSetting, SourceUri, Sources, StreamConfig};
use crate::daemon::shard::shard_of;
use crate::hub::ModelOrigin;
use crate::worker_count::{AUTO_WORKERS_PER_GPU, WorkerCount};

/// A checked configuration and a human description of it (`Display`).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The layers read, lowest first, e.g. `defaults < /etc/roadseg/roadseg.toml < environment (ROADSEG__*)`.
    pub layers: String,
    pub config: DaemonConfig,
    pub warnings: Vec<String>,
    /// `check-config`'s `CPU load:` line, when the model runs on the CPU and
    /// was timed (see `daemon::cpu_load`).
    pub cpu_load: Option<String>,
    /// Where the model comes from, once `check-config` fetched or found it.
    pub model_origin: Option<ModelOrigin>,
}

/// Loads like `DaemonConfig::load(path)`, then runs every check including
/// the model folder, reporting all problems at once.
pub fn check(path: Option<&Path>) -> Result<Summary, ConfigError> {
    check_sources(&Sources::standard(path))
}

pub fn check_sources(sources: &Sources) -> Result<Summary, ConfigError> {
    let config = DaemonConfig::load_from(sources)?;
    let mut problems: Vec<Problem> = validate::problems(&config);
    problems.extend(validate::model_path_problems(&config.model.path));
    let files = sources.files();
    for p in &mut problems {
        p.at = sources.locate(&files, &p.field);
    }
    Problems::into_result(problems)?;
    Ok(Summary { layers: sources.describe(), warnings: config.warnings(), cpu_load: None, model_origin: None, config })
}

impl fmt::Display for Summary {
    /// No credentials: stream URIs are shown redacted, and any other
    /// `user:password@` (a URI in the wrong field) is masked too.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut plain = String::new();
        self.describe(&mut plain)?;
        f.write_str(&redact_text(&plain))
    }
}

impl Summary {
    fn describe(&self, f: &mut dyn fmt::Write) -> fmt::Result {
        let c = &self.config;
        let m = &c.model;
        writeln!(f, "configuration: {}", self.layers)?;
        let height = if m.height == 0 { "from the first stream".to_string() } else { m.height.to_string() };
        let precision = m.precision.map_or("auto".to_string(), |p| p.to_string());
        let preset = format!("{:?}", m.preset).to_lowercase();
        writeln!(f, "model: {} (width {}, height {height}, device {}, precision {precision}, preset {preset})", m.path.display(), m.width, m.device)?;
        if let Some(ModelOrigin::Hub(hub)) = &self.model_origin {
            writeln!(f, "  from the Hugging Face Hub: {} revision {}, commit {}", hub.repo, hub.revision, hub.commit)?;
            writeln!(f, "  cached at {}", hub.dir.display())?;
        }
        writeln!(f, "  road classes {:?}, confidence threshold {}", m.road_classes, m.confidence_threshold)?;
        match m.exposure_target {
            t if t > 0.0 => writeln!(f, "  frames darker than mean luma {t} brightened before inference")?,
            _ => writeln!(f, "  exposure: off (frames go to the model as they come)")?,
        }
        let count = match c.workers.count {
            WorkerCount::Auto => format!("auto: {AUTO_WORKERS_PER_GPU} a GPU (at most one a CPU core), 1 on the CPU"),
            WorkerCount::Fixed(n) => n.to_string(),
        };
        match c.workers.batch {
            1 => writeln!(f, "workers: {count} (batch 1)")?,
            b => writeln!(f, "workers: {count} (batch {b}, waiting up to {} ms for a fuller one)", c.workers.max_batch_wait_ms)?,
        }
        match c.metrics.listen_addr() {
            Some(a) => writeln!(
                f,
                "metrics: http://{a}/metrics (also /healthz, /readyz, /api/v1/streams and the status page at /{})",
                if c.metrics.needs_auth() { "; Basic auth" } else { "" }
            )?,
            None => writeln!(f, "metrics: HTTP endpoint disabled")?,
        }
        let auth = if c.rtsp.credentials().is_some() { "basic auth" } else { "no auth" };
        match c.rtsp.listen_addr() {
            Some(a) => writeln!(f, "rtsp: {a} ({auth})")?,
            None => writeln!(f, "rtsp: server disabled")?,
        }
        let shard = self.describe_shard(f)?;
        writeln!(f, "streams ({}):", c.streams.len())?;
        for s in &c.streams {
            let live = if s.is_live() { "live" } else { "not live" };
            // Another replica's stream: listed so one config reads the same everywhere.
            let skipped = match shard {
                Some(me) if !me.owns(&s.name) => format!(", skipped: shard {} of {} runs it", shard_of(&s.name, me.count), me.count),
                _ => String::new(),
            };
            writeln!(f, "  {}: {} ({live}, ring {}{skipped})", s.name, SourceUri::redacted(&s.uri), s.ring_capacity)?;
            let o = &s.output;
            // {start} stays as written: it is only known when the daemon starts.
            let named = |t: &String| t.replace("{stream}", &s.name);
            let what = match o.record {
                RecordMode::Source => ", the camera's own video, no encode",
                _ => "",
            };
            if let Some(file) = o.recorded_file().map(|t| named(&t.to_string())) {
                writeln!(f, "    file:  {} ({} s segments{what})", template::segment_name_pattern(&file), o.segment_seconds)?;
            } else if o.file.is_some() {
                writeln!(f, "    file:  not written (record = \"{}\")", o.record.as_str())?;
            }
            if let (Some(mount), Some(addr)) = (o.rtsp_mount(&s.name), c.rtsp.listen_addr()) {
                writeln!(f, "    rtsp:  rtsp://{addr}{mount}")?;
            }
            if let Some(stats) = o.stats.as_ref().map(named) {
                let masks = if o.masks_in_stats() { " (with each frame's road mask)" } else { "" };
                writeln!(f, "    stats: {stats}{masks}")?;
            }
        }
        if c.streams.iter().any(|s| [&s.output.file, &s.output.stats].iter().any(|t| t.as_deref().is_some_and(|t| t.contains("{start}")))) {
            writeln!(f, "({{start}} is the daemon's start time in UTC, e.g. {})", format_start(SystemTime::now()))?;
        }
        if let Some(line) = &self.cpu_load {
            writeln!(f, "{line}")?;
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }

    /// The `shard:` lines, when the config is sharded: which streams this
    /// daemon runs and which it skips. The shard, when there is one.
    fn describe_shard(&self, f: &mut dyn fmt::Write) -> Result<Option<Shard>, fmt::Error> {
        let setting = self.config.daemon.shard;
        let shard = match setting.resolve() {
            Ok(shard) if shard.count > 1 || setting == ShardSetting::Auto => shard,
            Ok(_) => return Ok(None),
            Err(e) => {
                writeln!(f, "shard: {e}")?;
                return Ok(None);
            }
        };
        let from = if setting == ShardSetting::Auto { " (auto: host name and ROADSEG_SHARDS)" } else { "" };
        let (owned, skipped) = shard.partition(self.config.streams.iter().collect(), |s| &s.name);
        let names = |v: &[&StreamConfig]| v.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
        writeln!(f, "shard: {shard}{from}: runs {} of {} streams", owned.len(), self.config.streams.len())?;
        if owned.is_empty() {
            writeln!(f, "  runs:  none (it still serves /healthz, /readyz and /metrics)")?;
        } else {
            writeln!(f, "  runs:  {}", names(&owned))?;
        }
        writeln!(f, "  skips: {}", if skipped.is_empty() { "none".to_string() } else { names(&skipped) })?;
        Ok(Some(shard))
    }
}
