//! Clients per mount: the server only reports connections, and one
//! connection may play several mounts (or none: an OPTIONS probe), so a
//! client counts for a mount from its PLAY until its TEARDOWN or until it
//! disconnects.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Clone, Default)]
pub struct Viewers {
    /// Mount path (e.g. `/cam`) to clients playing it.
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

/// One client's mounts, dropped from the counts when it goes.
#[derive(Default)]
pub struct ClientMounts {
    playing: Mutex<BTreeSet<String>>,
}

impl Viewers {
    pub fn mount(&self, path: &str) {
        self.lock().entry(path.to_string()).or_insert(0);
    }

    pub fn unmount(&self, path: &str) {
        self.lock().remove(path);
    }

    pub fn count(&self, path: &str) -> usize {
        self.lock().get(path).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The mount a request path belongs to: itself, or the mount it is a
    /// control URL under (`/cam/stream=0`).
    fn mount_of(&self, request_path: &str) -> Option<String> {
        let path = request_path.trim_end_matches('/');
        let counts = self.lock();
        counts.keys().filter(|m| path == m.as_str() || path.starts_with(&format!("{m}/"))).max_by_key(|m| m.len()).cloned()
    }

    /// A PLAY for `request_path` from `client`.
    pub fn play(&self, client: &ClientMounts, request_path: &str) {
        let Some(mount) = self.mount_of(request_path) else { return };
        if client.playing.lock().unwrap_or_else(PoisonError::into_inner).insert(mount.clone()) {
            *self.lock().entry(mount).or_insert(0) += 1;
        }
    }

    /// A TEARDOWN for `request_path` from `client`.
    pub fn teardown(&self, client: &ClientMounts, request_path: &str) {
        let Some(mount) = self.mount_of(request_path) else { return };
        if client.playing.lock().unwrap_or_else(PoisonError::into_inner).remove(&mount) {
            self.leave(&mount);
        }
    }

    /// `client` disconnected: it leaves every mount it still played.
    pub fn closed(&self, client: &ClientMounts) {
        let mounts = std::mem::take(&mut *client.playing.lock().unwrap_or_else(PoisonError::into_inner));
        for mount in mounts {
            self.leave(&mount);
        }
    }

    fn leave(&self, mount: &str) {
        if let Some(n) = self.lock().get_mut(mount) {
            *n = n.saturating_sub(1);
        }
    }
}

/// The path of an RTSP request URI (`rtsp://host:port/cam/stream=0` -> `/cam/stream=0`).
pub fn request_path(uri: &str) -> &str {
    let rest = uri.split_once("://").map_or(uri, |(_, r)| r);
    rest.find('/').map_or("/", |i| &rest[i..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_count_per_mount_from_play_to_teardown_or_close() {
        // Rule: a client counts for a mount from PLAY to TEARDOWN or disconnect, once however many PLAYs; control URLs count for their mount.
        let v = Viewers::default();
        v.mount("/cam");
        v.mount("/cam2");
        let (a, b) = (ClientMounts::default(), ClientMounts::default());
        v.play(&a, request_path("rtsp://127.0.0.1:8554/cam/"));
        v.play(&a, "/cam/stream=0");
        v.play(&b, "/cam");
        v.play(&b, "/cam2");
        v.play(&b, "/elsewhere");
        assert_eq!((v.count("/cam"), v.count("/cam2")), (2, 1));
        v.teardown(&b, "/cam2");
        assert_eq!(v.count("/cam2"), 0);
        v.closed(&a);
        v.closed(&b);
        assert_eq!(v.count("/cam"), 0);
        v.unmount("/cam");
        v.play(&a, "/cam");
        assert_eq!(v.count("/cam"), 0, "unmounted");
    }
}
