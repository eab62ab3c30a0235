//! Restores per-stream frame order after the worker pool: frames finish in
//! any order, sinks must see them in sequence order. Dropped and failed
//! frames are announced too, so a gap never stalls the stream.

use std::collections::BTreeMap;

#[derive(Debug)]
pub enum Slot<T> {
    Ready(T),
    /// This sequence number will never produce a frame (dropped or failed).
    Skipped,
}

pub struct Reorder<T> {
    next: u64,
    pending: BTreeMap<u64, Slot<T>>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder { next: 0, pending: BTreeMap::new() }
    }
}

impl<T> Reorder<T> {
    pub fn insert(&mut self, seq: u64, slot: Slot<T>) {
        if seq >= self.next {
            self.pending.insert(seq, slot);
        }
    }

    /// The next frames now in order (skipped ones consumed silently).
    pub fn drain_ready(&mut self, mut emit: impl FnMut(T)) {
        while let Some(slot) = self.pending.remove(&self.next) {
            self.next += 1;
            if let Slot::Ready(item) = slot {
                emit(item);
            }
        }
    }

    /// Frames waiting for an earlier one.
    pub fn backlog(&self) -> usize {
        self.pending.len()
    }

    /// At end of stream: everything still held, in order.
    pub fn drain_all(&mut self, mut emit: impl FnMut(T)) {
        for (_, slot) in std::mem::take(&mut self.pending) {
            if let Slot::Ready(item) = slot {
                emit(item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emits_in_sequence_across_gaps() {
        let mut r = Reorder::default();
        let mut out = Vec::new();
        r.insert(2, Slot::Ready("c"));
        r.insert(1, Slot::Skipped);
        r.drain_ready(|x| out.push(x));
        assert!(out.is_empty(), "0 not here yet");
        r.insert(0, Slot::Ready("a"));
        r.drain_ready(|x| out.push(x));
        assert_eq!(out, vec!["a", "c"]);
        r.insert(4, Slot::Ready("e"));
        r.drain_all(|x| out.push(x));
        assert_eq!(out, vec!["a", "c", "e"]);
    }
}
