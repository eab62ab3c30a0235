//! What the status page and `/api/v1/streams` show about each stream: its
//! state, its source (credentials redacted), its numbers (read from its
//! metric handles) and its latest annotated frame. Supervisors write states
//! and frames; the HTTP side only reads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::metrics::StreamMetrics;
use super::overload::Load;
use crate::video::live::LiveHub;
use crate::video::snapshot::LatestFrame;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StreamState {
    /// Waiting for the source's first frame.
    Starting = 0,
    Up = 1,
    /// A live source was lost; reconnecting with backoff.
    Reconnecting = 2,
    /// A file ended or failed; the stream stays down.
    Down = 3,
    /// Stopped by a shutdown or a reload.
    Stopped = 4,
}

impl StreamState {
    pub fn label(self) -> &'static str {
        match self {
            StreamState::Starting => "starting",
            StreamState::Up => "up",
            StreamState::Reconnecting => "reconnecting",
            StreamState::Down => "down",
            StreamState::Stopped => "stopped",
        }
    }

    fn from_u8(v: u8) -> StreamState {
        match v {
            1 => StreamState::Up,
            2 => StreamState::Reconnecting,
            3 => StreamState::Down,
            4 => StreamState::Stopped,
            _ => StreamState::Starting,
        }
    }
}

/// One stream as the status side sees it.
pub struct StreamStatus {
    pub name: String,
    /// The source URI with any password replaced.
    pub source: String,
    pub live: bool,
    /// `[streams.output] record` as it applies ("none" without a file).
    pub record: &'static str,
    pub metrics: StreamMetrics,
    pub latest: LatestFrame,
    /// Browsers watching the annotated stream (`live.mp4`).
    pub viewers: LiveHub,
    state: AtomicU8,
    /// Unix milliseconds of the last decoded frame; 0 before the first.
    last_frame_ms: AtomicU64,
    /// Rates and overload, from the daemon's once-a-second sample.
    load: Mutex<Load>,
    /// Why the source last failed to start or was lost; cleared when it is up.
    last_error: Mutex<Option<String>>,
}

impl StreamStatus {
    pub fn new(name: &str, source: String, live: bool, metrics: StreamMetrics) -> StreamStatus {
        StreamStatus {
            name: name.to_string(),
            source,
            live,
            record: "annotated",
            metrics,
            latest: LatestFrame::new(),
            viewers: LiveHub::new(),
            state: AtomicU8::new(StreamState::Starting as u8),
            last_frame_ms: AtomicU64::new(0),
            load: Mutex::default(),
            last_error: Mutex::default(),
        }
    }

    /// With what `[streams.output] record` makes of the stream.
    pub fn recording(mut self, record: &'static str) -> StreamStatus {
        self.record = record;
        self
    }

    /// Records why the source failed (`Some`), or that it is up (`None`).
    pub fn set_last_error(&self, error: Option<String>) {
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = error;
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn set_state(&self, state: StreamState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub fn state(&self) -> StreamState {
        StreamState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// What the API and the status page call the state: an up stream that
    /// drops most of its frames is "degraded" (it still counts as up).
    pub fn state_label(&self) -> &'static str {
        match self.state() {
            StreamState::Up if self.load().degraded => "degraded",
            state => state.label(),
        }
    }

    pub fn set_load(&self, load: Load) {
        *self.load.lock().unwrap_or_else(PoisonError::into_inner) = load;
    }

    pub fn load(&self) -> Load {
        *self.load.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called per decoded frame: one clock read and one store.
    pub fn frame_arrived(&self) {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis() as u64;
        self.last_frame_ms.store(ms, Ordering::Relaxed);
    }

    pub fn last_frame(&self) -> Option<SystemTime> {
        match self.last_frame_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }
}

/// Every configured stream by name. Held only to add, remove or list.
#[derive(Default)]
pub struct StreamDirectory {
    streams: RwLock<BTreeMap<String, Arc<StreamStatus>>>,
}

impl StreamDirectory {
    pub fn new() -> StreamDirectory {
        StreamDirectory::default()
    }

    /// Adds the stream, replacing one of the same name (a restart by reload).
    pub fn insert(&self, status: Arc<StreamStatus>) {
        self.streams.write().unwrap_or_else(PoisonError::into_inner).insert(status.name.clone(), status);
    }

    pub fn remove(&self, name: &str) {
        self.streams.write().unwrap_or_else(PoisonError::into_inner).remove(name);
    }

    pub fn get(&self, name: &str) -> Option<Arc<StreamStatus>> {
        self.streams.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// In name order.
    pub fn list(&self) -> Vec<Arc<StreamStatus>> {
        self.streams.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }
}
