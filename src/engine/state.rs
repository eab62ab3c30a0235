//! The engine's state per frame geometry (frame slots) and per batch size
//! (batched model instances): plain data that `pipeline.rs` holds and
//! `frame_path.rs` / `batch.rs` work on. It imports neither of them, so the
//! engine's files depend one way: pipeline <- frame_path <- batch, and all
//! of them on this.

use crate::backend::Backend;
use crate::frame::{FrameGeometry, Segmentation};
use crate::model::Segformer;

/// Which slot a frame takes: its geometry, and how many frames of the same
/// geometry came before it in its batch (0 outside batches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotKey {
    pub(super) geometry: FrameGeometry,
    pub(super) ordinal: usize,
}

impl SlotKey {
    pub(super) fn nth(geometry: FrameGeometry, ordinal: usize) -> Self {
        SlotKey { geometry, ordinal }
    }
}

/// A backend's buffers for one frame geometry, and the work recorded with
/// them (dropped with them; batches' recordings that use it are dropped
/// when it is evicted).
pub(crate) struct FrameSlot<B: Backend> {
    pub(super) key: SlotKey,
    /// When it was last used, in the engine's slot clock: the smallest goes first.
    pub(super) used: u64,
    pub(super) slot: B::FrameSlot,
    /// Frame in, segmentation out.
    pub(super) whole: B::Recording,
    /// As `whole`, and the frame drawn with its overlay.
    pub(super) annotated: B::Recording,
    /// Frame in, summed logits out (for a round trip through the host).
    pub(super) to_logits: B::Recording,
}

/// The work recorded for one set of frame slots, in batch order.
pub(super) struct BatchRecording<B: Backend> {
    pub(super) slots: Vec<SlotKey>,
    /// Which frames are drawn with their overlay.
    pub(super) annotate: Vec<bool>,
    /// Frames in, segmentations out.
    pub(super) whole: B::Recording,
    /// Frames in, logits out (for a round trip through the host).
    pub(super) to_logits: B::Recording,
}

pub(super) struct BatchPass<B: Backend> {
    pub(super) model: Segformer<B>,
    pub(super) recordings: Vec<BatchRecording<B>>,
    /// Host copy of the logits `[N, lh, lw, labels]` when a filter runs.
    pub(super) logits: Vec<f32>,
}

pub(crate) struct Batches<B: Backend> {
    /// Index N - 2 holds the instance for N images, once built.
    pub(super) passes: Vec<Option<BatchPass<B>>>,
    /// The last batch's segmentations (the first `last` of them), buffers reused.
    pub(super) outputs: Vec<Segmentation>,
    /// Frames in the last batch.
    pub(super) last: usize,
}

impl<B: Backend> Default for Batches<B> {
    fn default() -> Self {
        Batches { passes: Vec::new(), outputs: Vec::new(), last: 0 }
    }
}

impl<B: Backend> Batches<B> {
    /// Drops every recording that uses the slot `key` (it is going away).
    pub(super) fn forget_slot(&mut self, key: SlotKey) {
        for pass in self.passes.iter_mut().flatten() {
            pass.recordings.retain(|r| !r.slots.contains(&key));
        }
    }
}
