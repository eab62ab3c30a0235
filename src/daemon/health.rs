//! Readiness as /readyz reports it: the model is loaded and every configured
//! stream is up. Setters also drive the matching gauges, so the metrics and
//! the probe always agree.
//!
//! Register streams (`add_stream`) before loading the model: otherwise there
//! is a moment with the model loaded and no streams known, which reads ready.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock};

use super::metrics;

#[derive(Debug, Default)]
pub struct Health {
    model_loaded: AtomicBool,
    /// Stream name to "up". Held only to read or flip a flag, never across a
    /// callback or an I/O call.
    streams: RwLock<BTreeMap<String, bool>>,
}

impl Health {
    pub fn new() -> Health {
        Health::default()
    }

    pub fn set_model_loaded(&self, loaded: bool) {
        self.model_loaded.store(loaded, Ordering::Release);
        metrics::set_model_loaded(loaded);
    }

    /// A configured stream, down until it delivers frames.
    pub fn add_stream(&self, name: &str) {
        self.set_stream_up(name, false);
    }

    /// Adds the stream if it is not known yet.
    pub fn set_stream_up(&self, name: &str, up: bool) {
        self.streams.write().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), up);
        metrics::set_stream_up(name, up);
    }

    /// A stream removed by a reload no longer holds readiness back.
    pub fn remove_stream(&self, name: &str) {
        let removed = self.streams.write().unwrap_or_else(PoisonError::into_inner).remove(name).is_some();
        if removed {
            metrics::set_stream_up(name, false);
        }
    }

    /// `(ready, reason)`; the reason says what is missing, or "ready".
    pub fn is_ready(&self) -> (bool, String) {
        if !self.model_loaded.load(Ordering::Acquire) {
            return (false, "model not loaded".to_string());
        }
        let streams = self.streams.read().unwrap_or_else(PoisonError::into_inner);
        let down: Vec<&str> = streams.iter().filter(|(_, up)| !**up).map(|(name, _)| name.as_str()).collect();
        if down.is_empty() {
            (true, format!("ready: model loaded, {} stream(s) up", streams.len()))
        } else {
            (false, format!("stream(s) down: {}", down.join(", ")))
        }
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
}
