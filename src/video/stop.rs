//! A stop request with a deadline, carried on a channel so whoever waits on
//! something else (source events, a backoff, a first frame) wakes for it at
//! once instead of polling a flag.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};

/// Asks the matching [`StopSignal`] to stop by a deadline. The first request
/// counts; later ones are ignored.
#[derive(Clone, Debug)]
pub struct StopHandle(Sender<Instant>);

impl StopHandle {
    pub fn stop(&self, deadline: Instant) {
        // Full: a request is already pending. Disconnected: it already stopped.
        let _ = self.0.try_send(deadline);
    }
}

/// The receiving side, owned by the thread that has to stop. Once a request
/// arrived it stays requested. If every [`StopHandle`] is dropped, that is
/// a request to stop now: nobody is left to ask later.
pub struct StopSignal {
    rx: Receiver<Instant>,
    latched: Cell<Option<Instant>>,
}

/// What a wait ended with.
#[derive(Debug)]
pub enum Wake<T> {
    /// Stop, finishing by this deadline.
    Stop(Instant),
    Item(T),
    /// The timeout passed (or the other channel is closed).
    Idle,
}

/// A connected pair.
pub fn stop_channel() -> (StopHandle, StopSignal) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    (StopHandle(tx), StopSignal { rx, latched: Cell::new(None) })
}

impl StopSignal {
    /// A signal that never fires (a caller with nothing to stop it).
    pub fn never() -> StopSignal {
        StopSignal { rx: crossbeam_channel::never(), latched: Cell::new(None) }
    }

    /// The deadline, if a stop was requested.
    pub fn requested(&self) -> Option<Instant> {
        if self.latched.get().is_none() {
            match self.rx.try_recv() {
                Ok(deadline) => self.latched.set(Some(deadline)),
                Err(crossbeam_channel::TryRecvError::Disconnected) => self.latched.set(Some(Instant::now())),
                Err(crossbeam_channel::TryRecvError::Empty) => {}
            }
        }
        self.latched.get()
    }

    /// Waits up to `timeout` for an item on `rx` or a stop, whichever comes first.
    pub fn wait_on<T>(&self, rx: &Receiver<T>, timeout: Duration) -> Wake<T> {
        if let Some(deadline) = self.requested() {
            return Wake::Stop(deadline);
        }
        select! {
            recv(self.rx) -> deadline => {
                let deadline = deadline.unwrap_or_else(|_| Instant::now());
                self.latched.set(Some(deadline));
                Wake::Stop(deadline)
            }
            recv(rx) -> item => item.map_or(Wake::Idle, Wake::Item),
            default(timeout) => Wake::Idle,
        }
    }

    /// Sleeps for `d` unless a stop comes first; its deadline if one did.
    pub fn sleep(&self, d: Duration) -> Option<Instant> {
        match self.wait_on::<()>(&crossbeam_channel::never(), d) {
            Wake::Stop(deadline) => Some(deadline),
            Wake::Item(()) | Wake::Idle => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_wakes_a_wait_and_stays_requested() {
        // Rule: a stop request ends any wait at once, the first deadline counts, and it stays requested.
        let (handle, signal) = stop_channel();
        let (_tx, rx) = crossbeam_channel::unbounded::<u32>();
        assert!(matches!(signal.wait_on(&rx, Duration::from_millis(1)), Wake::Idle));
        let deadline = Instant::now() + Duration::from_secs(5);
        handle.stop(deadline);
        handle.stop(deadline + Duration::from_secs(1));
        let t = Instant::now();
        assert!(matches!(signal.wait_on(&rx, Duration::from_secs(10)), Wake::Stop(d) if d == deadline));
        assert_eq!(signal.sleep(Duration::from_secs(10)), Some(deadline));
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(signal.requested(), Some(deadline));
    }

    #[test]
    fn dropping_every_handle_is_a_stop_and_never_is_not() {
        // Rule: with no handle left a signal reads as stopped; StopSignal::never never does.
        let (handle, signal) = stop_channel();
        drop(handle);
        assert!(signal.requested().is_some());
        assert_eq!(StopSignal::never().sleep(Duration::from_millis(1)), None);
    }
}
