//! SIGHUP: the configuration file read again and applied to the streams.
//! `[model]`, `[workers]`, `[rtsp]`, `[metrics]`, `[mqtt]` and `[annotate]`
//! need a restart and keep their running values.

use std::time::{Duration, Instant, SystemTime};

use super::{Daemon, load_config, note};
use crate::daemon::config::{DaemonConfig, changed_sections, plan_reload};
use crate::daemon::notify;
use crate::daemon::retention::Target;

impl Daemon {
    pub(super) fn reload(&mut self) {
        note(notify::reloading());
        tracing::info!("SIGHUP: reloading the configuration");
        match load_config(self.config_path.as_deref()) {
            Err(e) => {
                tracing::error!("reload failed, keeping the running configuration: {e}");
                self.health.set_reload(Err(e.to_string()));
            }
            Ok(mut new) => {
                self.keep_shard(&mut new);
                self.apply(new)
            }
        }
        note(notify::ready());
    }

    fn apply(&mut self, mut new: DaemonConfig) {
        self.keep_restart_only_sections(&mut new);
        let plan = plan_reload(&self.config, &new);
        tracing::info!(added = ?plan.added, removed = ?plan.removed, changed = ?plan.changed, unchanged = plan.unchanged.len(), "reload plan");
        if let Err(e) = self.ensure_rtsp(&new) {
            tracing::error!("reload: cannot start the RTSP server, keeping the running configuration: {e}");
            self.health.set_reload(Err(format!("cannot start the RTSP server: {e}")));
            return;
        }
        self.health.set_reload(Ok(()));
        let to_stop: Vec<String> = plan.removed.iter().chain(&plan.changed).cloned().collect();
        if !to_stop.is_empty() {
            let deadline = Instant::now() + Duration::from_secs(new.daemon.shutdown_timeout_s);
            self.stop_streams(&to_stop, deadline);
        }
        for name in &plan.removed {
            if let Some(s) = self.directory.get(name) {
                s.viewers.close_all();
            }
            self.health.remove_stream(name);
            self.directory.remove(name);
            tracing::info!(stream = %name, "stream removed");
        }
        self.config = new;
        self.load.rule = super::overload_rule(&self.config);
        if let Some(r) = &self.retention {
            r.set_targets(Target::all(&self.config));
        }
        // Named for their own start: they must not overwrite earlier recordings.
        let now = SystemTime::now();
        for name in plan.changed.iter().chain(&plan.added) {
            if let Some(s) = self.config.stream(name).cloned() {
                self.start_stream(&s, now);
            }
        }
        tracing::info!("reload done");
    }

    /// The shard settled at start filters the new config too: a reload never
    /// starts another replica's stream. A changed `shard` needs a restart.
    fn keep_shard(&self, new: &mut DaemonConfig) {
        if new.daemon.shard != self.config.daemon.shard {
            tracing::warn!(
                "reload: daemon.shard changed to {}; restart required to apply (keeping shard {})",
                new.daemon.shard,
                self.shard
            );
            new.daemon.shard = self.config.daemon.shard;
        }
        let skipped = super::sharding::select(new, self.shard);
        super::sharding::report(new.daemon.shard, self.shard, new, &skipped);
    }

    /// Sections only a restart applies: a change is logged and the running value kept.
    fn keep_restart_only_sections(&self, new: &mut DaemonConfig) {
        let old = &self.config;
        let changed = changed_sections(old, new);
        if !changed.is_empty() {
            tracing::warn!("reload: [{}] changed; restart required to apply (keeping the running values)", changed.join("], ["));
        }
        new.model = old.model.clone();
        new.workers = old.workers.clone();
        new.rtsp = old.rtsp.clone();
        new.metrics = old.metrics.clone();
        new.annotate = old.annotate.clone();
        new.mqtt = old.mqtt.clone();
    }
}
