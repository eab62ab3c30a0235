//! `[daemon] shard`: this daemon's share of the configured streams, settled
//! once at start (the host name and `ROADSEG_SHARDS` do not change under a
//! running process) and applied again to every reloaded config.

use crate::daemon::config::{ConfigError, DaemonConfig, Problem, Problems, Shard, ShardSetting};
use crate::daemon::metrics;

/// The shard this process is. `validate()` has resolved it already; this
/// is the same call, its error kept a config error all the same.
pub(super) fn resolve(config: &DaemonConfig) -> Result<Shard, ConfigError> {
    config.daemon.shard.resolve().map_err(|e| {
        ConfigError::Invalid(Problems(vec![Problem::new("daemon.shard", e.to_string())]))
    })
}

/// Drops the streams other shards run from `config`; their names, in config order.
pub(super) fn select(config: &mut DaemonConfig, shard: Shard) -> Vec<String> {
    let (owned, skipped) = shard.partition(std::mem::take(&mut config.streams), |s| &s.name);
    config.streams = owned;
    skipped.into_iter().map(|s| s.name).collect()
}

/// Says which streams run here and which are left to other shards.
pub(super) fn report(setting: ShardSetting, shard: Shard, config: &DaemonConfig, skipped: &[String]) {
    let owned: Vec<&str> = config.streams.iter().map(|s| s.name.as_str()).collect();
    metrics::set_shard_streams(owned.len(), skipped.len());
    if shard.count == 1 && setting != ShardSetting::Auto {
        return;
    }
    let total = owned.len() + skipped.len();
    if owned.is_empty() {
        tracing::warn!(shard = %shard, "shard {shard}: none of the {total} configured streams falls to this shard; serving /healthz, /readyz and /metrics only (skipped: {})", skipped.join(", "));
        return;
    }
    tracing::info!(shard = %shard, "shard {shard} ({setting}): running {} of {total} streams: {}", owned.len(), owned.join(", "));
    if !skipped.is_empty() {
        tracing::info!(shard = %shard, "shard {shard}: skipping {} streams other shards run: {}", skipped.len(), skipped.join(", "));
    }
}
