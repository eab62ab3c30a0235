//! The main loop's once-a-second look at every stream's load
//! (daemon::overload): rates and the degraded state published to the status
//! side and to health (MQTT reads it there), overload logged.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::daemon::health::Health;
use crate::daemon::overload::{Notice, OverloadRule, SAMPLE_EVERY, StreamLoad, warning};
use crate::daemon::status::StreamStatus;

/// Every stream's [`StreamLoad`], sampled by the daemon's main loop.
pub(super) struct LoadMonitor {
    pub(super) rule: OverloadRule,
    streams: HashMap<String, StreamLoad>,
    last: Option<Instant>,
}

impl LoadMonitor {
    pub(super) fn new(rule: OverloadRule) -> LoadMonitor {
        LoadMonitor { rule, streams: HashMap::new(), last: None }
    }

    /// Reads every stream once a [`SAMPLE_EVERY`] (sooner calls do nothing),
    /// publishes its load to its status and to `health` (for MQTT), and logs
    /// overload; forgets streams no longer listed.
    pub(super) fn sample(&mut self, now: Instant, streams: &[Arc<StreamStatus>], health: &Health) {
        if self.last.is_some_and(|t| now.saturating_duration_since(t) < SAMPLE_EVERY) {
            return;
        }
        self.last = Some(now);
        self.streams.retain(|name, _| streams.iter().any(|s| &s.name == name));
        for s in streams {
            let (load, notice) = self.streams.entry(s.name.clone()).or_default().update(now, &s.metrics.readings(), &self.rule);
            s.set_load(load);
            health.set_stream_degraded(&s.name, load.degraded);
            match notice {
                Some(Notice::Warn) => tracing::warn!(stream = %s.name, "{}", warning(&s.name, &load, &self.rule)),
                Some(Notice::Recovered) => tracing::info!(stream = %s.name, "stream {} keeps up with its frames again (no longer degraded)", s.name),
                None => {}
            }
        }
    }
}
