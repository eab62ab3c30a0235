//! The systemd watchdog: pinged from its own thread only while the main
//! loop keeps beating, so a wedged main loop or a stalled stream (the loop
//! then stops beating) gets the daemon restarted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender};

use crate::daemon::notify;

pub(super) struct Watchdog {
    origin: Instant,
    /// Milliseconds since `origin` of the last beat.
    beat: Arc<AtomicU64>,
    /// Dropped to stop the thread.
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Watchdog {
    /// None when systemd asked for no watchdog.
    pub(super) fn start() -> Option<Watchdog> {
        let interval = notify::watchdog_interval()?;
        let (origin, beat) = (Instant::now(), Arc::new(AtomicU64::new(0)));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let last = beat.clone();
        let thread = std::thread::spawn(move || {
            loop {
                let now = origin.elapsed().as_millis() as u64;
                if now.saturating_sub(last.load(Ordering::SeqCst)) <= interval.as_millis() as u64
                    && let Err(e) = notify::watchdog()
                {
                    tracing::debug!("{e}");
                }
                if !matches!(stopped.recv_timeout(interval.min(Duration::from_secs(1))), Err(RecvTimeoutError::Timeout)) {
                    return;
                }
            }
        });
        Some(Watchdog { origin, beat, stop, thread })
    }

    /// The daemon is healthy now.
    pub(super) fn beat(&self) {
        self.beat.store(self.origin.elapsed().as_millis() as u64, Ordering::SeqCst);
    }

    pub(super) fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}
