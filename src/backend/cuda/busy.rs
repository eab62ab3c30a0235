//! How long the GPU spent in a worker's recorded forwards: a pair of timing
//! events around each launch on the worker's stream, read back once the
//! frame is done (its results have been synchronised by then, so reading
//! never waits on work still running). This is `roadseg_gpu_busy_ratio`'s
//! numerator; host work between launches (copies, pre/post-processing on the
//! CPU) is not counted.

use std::sync::Mutex;

use cudarc::driver::{CudaEvent, CudaStream, DriverError, sys};

/// Event pairs, reused frame after frame: events are made only when a frame
/// launches more forwards than any before it (multi-scale presets), and
/// never while a graph is being captured.
#[derive(Default)]
pub(super) struct BusyClock {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pairs: Vec<(CudaEvent, CudaEvent)>,
    /// Pairs recorded since the last read.
    used: usize,
    /// Set once making or recording events failed: the clock then stays off
    /// (a timing problem must never cost frames).
    broken: bool,
}

impl BusyClock {
    /// Enqueues `launch` between two events on `stream`.
    pub(super) fn around<R>(&self, stream: &CudaStream, launch: impl FnOnce() -> R) -> R {
        let started = self.record(stream, true);
        let result = launch();
        if started {
            self.record(stream, false);
        }
        result
    }

    fn record(&self, stream: &CudaStream, start: bool) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.broken {
            return false;
        }
        let ok = (|| -> Result<(), DriverError> {
            if start && st.used == st.pairs.len() {
                let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
                let pair = (stream.context().new_event(timed)?, stream.context().new_event(timed)?);
                st.pairs.push(pair);
            }
            let i = if start { st.used } else { st.used - 1 };
            let (begin, end) = &st.pairs[i];
            if start { begin.record(stream) } else { end.record(stream) }
        })();
        match ok {
            Ok(()) => {
                if start {
                    st.used += 1;
                }
                true
            }
            Err(e) => {
                tracing::warn!("GPU busy time is not measured from here on: {e}");
                st.broken = true;
                false
            }
        }
    }

    /// Milliseconds the recorded launches took since the last call, or None
    /// when nothing was timed.
    pub(super) fn take_ms(&self) -> Option<f64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let used = std::mem::take(&mut st.used);
        if st.broken || used == 0 {
            return None;
        }
        let mut total = 0.0;
        for (begin, end) in &st.pairs[..used] {
            total += f64::from(begin.elapsed_ms(end).ok()?);
        }
        Some(total)
    }
}
