//! Readiness as /readyz reports it: the model is loaded and every configured
//! stream is up (a degraded stream, dropping most frames, is named but ready). Setters also drive the matching gauges, so the metrics and
//! the probe always agree.
//!
//! Register streams (`add_stream`) before loading the model: otherwise there
//! is a moment with the model loaded and no streams known, which reads ready.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::metrics;
use crate::hub::ModelOrigin;

#[derive(Debug)]
pub struct Health {
    model_loaded: AtomicBool,
    /// Stream name to its state. Held only to read or flip a flag, never
    /// across a callback or an I/O call.
    streams: RwLock<BTreeMap<String, Arc<StreamHealth>>>,
    /// Nothing inferred for this long while up = stalled (None: never).
    stall_after: Option<Duration>,
    origin: Instant,
    /// Why the last reload was rejected; None once one applied (or none ran).
    reload_error: Mutex<Option<String>>,
    /// Where the loaded model came from (folder or Hub commit), once loaded.
    model: OnceLock<ModelOrigin>,
}

#[derive(Debug, Default)]
struct StreamHealth {
    up: AtomicBool,
    /// Dropping most frames (daemon::overload). Reported, not a readiness
    /// failure: the daemon runs, only slower than its sources.
    degraded: AtomicBool,
    /// Milliseconds since `origin` of the last progress: the stream coming
    /// up, or a frame inferred. Read against the clock to find stalls.
    progress_ms: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

impl Health {
    pub fn new() -> Health {
        Health::with_stall_timeout(None)
    }

    /// `stall_after`: how long an up stream may go without an inferred frame.
    pub fn with_stall_timeout(stall_after: Option<Duration>) -> Health {
        Health { model_loaded: AtomicBool::new(false), streams: RwLock::default(), stall_after, origin: Instant::now(), reload_error: Mutex::default(), model: OnceLock::new() }
    }

    pub fn set_model_loaded(&self, loaded: bool) {
        self.model_loaded.store(loaded, Ordering::Release);
        metrics::set_model_loaded(loaded);
    }

    /// The model is loaded, from `origin` (a model never changes while running).
    pub fn set_model(&self, origin: ModelOrigin) {
        let _ = self.model.set(origin);
        self.set_model_loaded(true);
    }

    pub fn model(&self) -> Option<&ModelOrigin> {
        self.model.get()
    }

    /// How the last reload went: `Err(why)` when it was rejected.
    pub fn set_reload(&self, result: Result<(), String>) {
        metrics::set_reload_failed(result.is_err());
        *self.reload_error.lock().unwrap_or_else(PoisonError::into_inner) = result.err();
    }

    /// Why the last reload was rejected, if it was.
    pub fn reload_error(&self) -> Option<String> {
        self.reload_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A configured stream, down until it delivers frames.
    pub fn add_stream(&self, name: &str) {
        metrics::revive_stream(name);
        self.set_stream_up(name, false);
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn stream(&self, name: &str) -> Arc<StreamHealth> {
        if let Some(s) = self.streams.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return s.clone();
        }
        self.streams.write().unwrap_or_else(PoisonError::into_inner).entry(name.to_string()).or_default().clone()
    }

    /// Adds the stream if it is not known yet. Coming up counts as progress,
    /// so a stream that just (re)connected has the whole stall timeout.
    pub fn set_stream_up(&self, name: &str, up: bool) {
        let s = self.stream(name);
        if up && !s.up.swap(true, Ordering::AcqRel) {
            s.progress_ms.store(self.now_ms(), Ordering::Release);
        }
        s.up.store(up, Ordering::Release);
        metrics::set_stream_up(name, up);
    }

    /// Sets whether `name` is degraded (known streams only; readiness ignores it).
    pub fn set_stream_degraded(&self, name: &str, degraded: bool) {
        if let Some(s) = self.streams.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            s.degraded.store(degraded, Ordering::Release);
            metrics::set_stream_degraded(name, degraded);
        }
    }

    pub fn is_degraded(&self, name: &str) -> bool {
        self.streams.read().unwrap_or_else(PoisonError::into_inner).get(name).is_some_and(|s| s.degraded.load(Ordering::Acquire))
    }

    /// A frame of `name` was inferred (hot path: one read lock, one store).
    pub fn inferred(&self, name: &str) {
        if let Some(s) = self.streams.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            s.progress_ms.store(self.now_ms(), Ordering::Release);
        }
    }

    /// Every stream and whether it is up, by name.
    pub fn stream_states(&self) -> Vec<(String, bool)> {
        let streams = self.streams.read().unwrap_or_else(PoisonError::into_inner);
        streams.iter().map(|(name, s)| (name.clone(), s.up.load(Ordering::Acquire))).collect()
    }

    /// A stream removed by a reload no longer holds readiness back.
    pub fn remove_stream(&self, name: &str) {
        let removed = self.streams.write().unwrap_or_else(PoisonError::into_inner).remove(name).is_some();
        if removed {
            metrics::set_stream_up(name, false);
            metrics::set_stream_degraded(name, false);
            metrics::retire_stream(name);
        }
    }

    /// Up streams with nothing inferred for longer than the stall timeout,
    /// with how long; empty before the model is loaded (nothing can be
    /// inferred yet) or when stall detection is off.
    pub fn stalled(&self) -> Vec<(String, Duration)> {
        let Some(limit) = self.stall_after else { return Vec::new() };
        if !self.model_loaded.load(Ordering::Acquire) {
            return Vec::new();
        }
        let now = self.now_ms();
        let streams = self.streams.read().unwrap_or_else(PoisonError::into_inner);
        streams
            .iter()
            .filter(|(_, s)| s.up.load(Ordering::Acquire))
            .map(|(name, s)| (name.clone(), Duration::from_millis(now.saturating_sub(s.progress_ms.load(Ordering::Acquire)))))
            .filter(|(_, idle)| *idle > limit)
            .collect()
    }

    /// `(ready, reason)`; the reason says what is missing, or "ready".
    pub fn is_ready(&self) -> (bool, String) {
        if !self.model_loaded.load(Ordering::Acquire) {
            return (false, "model not loaded".to_string());
        }
        let stalled = self.stalled();
        let streams = self.streams.read().unwrap_or_else(PoisonError::into_inner);
        let down: Vec<&str> = streams.iter().filter(|(_, s)| !s.up.load(Ordering::Acquire)).map(|(name, _)| name.as_str()).collect();
        if !down.is_empty() {
            return (false, format!("stream(s) down: {}", down.join(", ")));
        }
        if !stalled.is_empty() {
            let list: Vec<String> = stalled.iter().map(|(n, idle)| format!("{n} (nothing inferred for {} s)", idle.as_secs())).collect();
            return (false, format!("stream(s) stalled: {}", list.join(", ")));
        }
        // Degraded streams are named but keep the daemon ready: it is running, only behind its sources.
        let degraded: Vec<&str> = streams.iter().filter(|(_, s)| s.degraded.load(Ordering::Acquire)).map(|(name, _)| name.as_str()).collect();
        let behind = if degraded.is_empty() { String::new() } else { format!(" (degraded, dropping frames: {})", degraded.join(", ")) };
        (true, format!("ready: model loaded, {} stream(s) up{behind}", streams.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_the_model_and_every_stream() {
        // Rule: ready only once the model is loaded and every configured stream is up.
        let h = Health::new();
        h.add_stream("a");
        h.add_stream("b");
        assert_eq!(h.is_ready(), (false, "model not loaded".to_string()));
        h.set_model_loaded(true);
        assert_eq!(h.is_ready(), (false, "stream(s) down: a, b".to_string()));
        h.set_stream_up("a", true);
        h.set_stream_up("b", true);
        assert!(h.is_ready().0);
        h.set_stream_up("b", false);
        assert_eq!(h.is_ready().1, "stream(s) down: b");
        h.remove_stream("b");
        assert!(h.is_ready().0, "{}", h.is_ready().1);
    }

    #[test]
    fn a_degraded_stream_is_named_but_keeps_the_daemon_ready() {
        // Rule: a degraded stream (dropping most frames) leaves /readyz ready, its reason naming the stream; unknown streams are ignored.
        let h = Health::new();
        h.add_stream("a");
        h.set_model_loaded(true);
        h.set_stream_up("a", true);
        h.set_stream_degraded("a", true);
        h.set_stream_degraded("gone", true);
        assert!(h.is_degraded("a") && !h.is_degraded("gone"));
        assert_eq!(h.is_ready(), (true, "ready: model loaded, 1 stream(s) up (degraded, dropping frames: a)".to_string()));
        h.set_stream_degraded("a", false);
        assert_eq!(h.is_ready(), (true, "ready: model loaded, 1 stream(s) up".to_string()));
    }

    #[test]
    fn an_up_stream_with_nothing_inferred_is_stalled() {
        // Rule: a stream up for longer than the stall timeout with nothing inferred is stalled and not ready; a frame inferred clears it; down streams are down, not stalled.
        let h = Health::with_stall_timeout(Some(Duration::from_millis(50)));
        h.add_stream("a");
        h.add_stream("b");
        h.set_model_loaded(true);
        h.set_stream_up("a", true);
        h.set_stream_up("b", true);
        assert!(h.stalled().is_empty(), "just came up");
        std::thread::sleep(Duration::from_millis(80));
        h.inferred("b");
        let stalled: Vec<String> = h.stalled().into_iter().map(|(n, _)| n).collect();
        assert_eq!(stalled, ["a"]);
        let (ready, reason) = h.is_ready();
        assert!(!ready && reason.starts_with("stream(s) stalled: a (nothing inferred for"), "{reason}");
        h.inferred("a");
        assert!(h.is_ready().0);
        h.set_stream_up("a", false);
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(h.stalled().len(), 1, "b stalls; a is down, not stalled: {:?}", h.stalled());
        assert!(Health::new().stalled().is_empty());
    }
}
