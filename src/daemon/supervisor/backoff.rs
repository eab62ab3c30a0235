//! Exponential reconnect delay.

use std::time::Duration;

pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(super) fn new(initial_ms: u64, max_ms: u64) -> Backoff {
        let initial = Duration::from_millis(initial_ms.max(1));
        let max = Duration::from_millis(max_ms.max(initial_ms).max(1));
        Backoff { initial, max, next: initial }
    }

    pub(super) fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub(super) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum_and_resets() {
        // Rule: reconnect delays double from reconnect_initial_ms, cap at reconnect_max_ms, and reset.
        let mut b = Backoff::new(500, 3000);
        let ms: Vec<u128> = (0..5).map(|_| b.take().as_millis()).collect();
        assert_eq!(ms, [500, 1000, 2000, 3000, 3000]);
        b.reset();
        assert_eq!(b.take().as_millis(), 500);
    }
}
