//! The daemon's signals, delivered on channels: SIGTERM and SIGINT as a
//! stop, SIGHUP as a reload request. A second SIGTERM or SIGINT while the
//! first is being handled exits at once (code 1).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Receiver;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::video::stop::{StopSignal, stop_channel};

pub(super) struct Signals {
    /// SIGTERM or SIGINT came.
    pub terminate: StopSignal,
    /// One item per SIGHUP.
    pub reload: Receiver<()>,
    handle: signal_hook::iterator::Handle,
    thread: JoinHandle<()>,
}

impl Signals {
    pub(super) fn install() -> std::io::Result<Signals> {
        // Only read by signal-hook's own handler: set by the first signal, it
        // makes the second one exit.
        let seen = Arc::new(AtomicBool::new(false));
        for signal in [SIGTERM, SIGINT] {
            signal_hook::flag::register_conditional_shutdown(signal, 1, seen.clone())?;
            signal_hook::flag::register(signal, seen.clone())?;
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
        let handle = signals.handle();
        let (stop, terminate) = stop_channel();
        let (reload_tx, reload) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new().name("roadseg-signals".into()).spawn(move || {
            for signal in signals.forever() {
                if signal == SIGHUP {
                    let _ = reload_tx.send(());
                } else {
                    // The daemon's shutdown sets its own deadline.
                    stop.stop(Instant::now());
                }
            }
        })?;
        Ok(Signals { terminate, reload, handle, thread })
    }

    /// Stops listening (the handlers for a second signal stay).
    pub(super) fn close(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}
