//! Whether anyone looks at a stream's annotated pixels. Drawing the road on
//! a frame (on the CPU: a pass over every pixel; on a GPU: the overlay, then
//! the frame copied back to the host) is only worth it for an annotated
//! recording, an RTSP client, or a live viewer. Without one, a stream still
//! draws one frame a second, so its snapshot and status page stay fresh.
//!
//! The output stage, which knows the sinks, says after each frame whether
//! they want pixels; the workers read it before inferring the next ones. The
//! frames already in flight when a viewer arrives are not drawn: sinks that
//! want pixels skip them, and the viewer's picture starts a few frames later.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a stream nobody watches still draws a frame.
pub const UNWATCHED_REFRESH: Duration = Duration::from_secs(1);

/// One stream's demand for annotated frames; shared by its output stage and
/// the workers.
#[derive(Debug)]
pub struct PixelDemand {
    wanted: AtomicBool,
    origin: Instant,
    /// Milliseconds after `origin` (plus one; 0: never) of the last frame drawn.
    last_drawn_ms: AtomicU64,
}

impl PixelDemand {
    pub fn new(wanted: bool) -> PixelDemand {
        PixelDemand { wanted: AtomicBool::new(wanted), origin: Instant::now(), last_drawn_ms: AtomicU64::new(0) }
    }

    pub fn set_wanted(&self, wanted: bool) {
        self.wanted.store(wanted, Ordering::Release);
    }

    pub fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    /// Whether the frame a worker is about to infer gets drawn: every frame
    /// while someone looks, else one every [`UNWATCHED_REFRESH`] (of several
    /// workers asking at once, one gets it).
    pub fn draw_next(&self) -> bool {
        self.draw_at(self.origin.elapsed())
    }

    fn draw_at(&self, since_origin: Duration) -> bool {
        let now = since_origin.as_millis() as u64 + 1;
        let last = self.last_drawn_ms.load(Ordering::Acquire);
        let due = last == 0 || now.saturating_sub(last) >= UNWATCHED_REFRESH.as_millis() as u64;
        if self.wanted() {
            self.last_drawn_ms.store(now, Ordering::Release);
            return true;
        }
        due && self.last_drawn_ms.compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_drawn_while_wanted_and_once_a_second_otherwise() {
        // Rule: a wanted stream draws every frame; an unwatched one draws its first frame and then one per second, not more; wanting again draws at once.
        let d = PixelDemand::new(false);
        let ms = Duration::from_millis;
        assert!(d.draw_at(ms(0)), "the first frame is drawn (for the snapshot)");
        let drawn: Vec<u64> = (1..=75).map(|i| i * 40).filter(|&t| d.draw_at(ms(t))).collect();
        assert_eq!(drawn, vec![1000, 2000, 3000], "25 fps unwatched: one frame a second");
        d.set_wanted(true);
        assert!((0..10).all(|i| d.draw_at(ms(3010 + i * 40))), "every frame once someone looks");
        d.set_wanted(false);
        assert!(!d.draw_at(ms(3500)), "a second after the last drawn frame, not before");
        assert!(d.draw_at(ms(4400)));
    }

    #[test]
    fn of_workers_asking_at_once_one_draws() {
        // Rule: when an unwatched stream's refresh is due, exactly one of several concurrent workers draws.
        let d = std::sync::Arc::new(PixelDemand::new(false));
        let _ = d.draw_at(Duration::ZERO);
        let drawn: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| d.draw_at(Duration::from_millis(1500)) as usize)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(drawn, 1);
    }
}
