//! What a SIGHUP reload has to do: which streams to start, stop or restart.

use super::{DaemonConfig, StreamConfig};

/// Streams are matched by name; a renamed stream is one removed plus one added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// In the new config only: start them. New config order.
    pub added: Vec<String>,
    /// In the old config only: stop them. Old config order.
    pub removed: Vec<String>,
    /// In both but different: restart them. Every kept stream is here when
    /// `[annotate]` changed, since the overlay is built per stream.
    pub changed: Vec<String>,
    /// In both and identical: leave them running.
    pub unchanged: Vec<String>,
    /// `[model]`, `[workers]`, `[rtsp]` or `[metrics]` differ. Those are not
    /// reloaded (they need a restart of the whole daemon); the daemon keeps
    /// the old values and logs `global_sections`.
    pub global_changed: bool,
    pub global_sections: Vec<&'static str>,
}

impl ReloadPlan {
    /// Nothing to do for the streams (global changes are not applied anyway).
    pub fn streams_unchanged(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The sections besides `[[streams]]` that `old` and `new` differ in, by name,
/// in file order: the ones only a restart applies.
pub fn changed_sections(old: &DaemonConfig, new: &DaemonConfig) -> Vec<&'static str> {
    [
        ("model", old.model != new.model),
        ("workers", old.workers != new.workers),
        ("rtsp", old.rtsp != new.rtsp),
        ("metrics", old.metrics != new.metrics),
        ("mqtt", old.mqtt != new.mqtt),
        ("annotate", old.annotate != new.annotate),
    ]
    .into_iter()
    .filter_map(|(name, differs)| differs.then_some(name))
    .collect()
}

pub fn plan_reload(old: &DaemonConfig, new: &DaemonConfig) -> ReloadPlan {
    // [mqtt] is restart-only too but not flagged here; [annotate] changes every stream.
    let global_sections: Vec<&'static str> =
        changed_sections(old, new).into_iter().filter(|name| ["model", "workers", "rtsp", "metrics"].contains(name)).collect();
    let overlay_changed = old.annotate != new.annotate;
    let find = |streams: &[StreamConfig], name: &str| streams.iter().any(|s| s.name == name);

    let mut plan = ReloadPlan { global_changed: !global_sections.is_empty(), global_sections, ..ReloadPlan::default() };
    for s in &new.streams {
        match old.stream(&s.name) {
            None => plan.added.push(s.name.clone()),
            Some(before) if overlay_changed || before != s => plan.changed.push(s.name.clone()),
            Some(_) => plan.unchanged.push(s.name.clone()),
        }
    }
    plan.removed = old.streams.iter().filter(|s| !find(&new.streams, &s.name)).map(|s| s.name.clone()).collect();
    plan
}
