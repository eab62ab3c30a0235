//! The latest annotated frame of a stream, kept for snapshots.
//!
//! The output stage hands each written frame's pixels over by swapping
//! vectors with the slot (no copy, no allocation: the frame pool gets the
//! slot's previous vector back, which the next decode overwrites). Only a
//! snapshot request copies, and it encodes outside the lock. The output stage
//! never waits: if a reader holds the slot, that frame is simply not kept.

use std::sync::{Mutex, PoisonError, TryLockError};
use std::time::SystemTime;

use super::ring::FrameBuf;
use crate::frame::{FrameRef, PixelFormat};
use crate::host_memory::FrameMemory;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("encoding the JPEG: {0}")]
    Encode(#[from] image::ImageError),
}

#[derive(Default)]
struct Slot {
    width: u32,
    height: u32,
    seq: u64,
    at: Option<SystemTime>,
    format: Option<PixelFormat>,
    pixels: FrameMemory,
}

#[derive(Default)]
pub struct LatestFrame {
    slot: Mutex<Slot>,
}

/// A copy of the latest frame, RGB.
pub struct Snapshot {
    pub width: u32,
    pub height: u32,
    pub seq: u64,
    pub at: SystemTime,
    pub rgb: Vec<u8>,
}

impl LatestFrame {
    pub fn new() -> LatestFrame {
        LatestFrame::default()
    }

    /// Takes `buf`'s pixels, leaving it the previous frame's vector.
    pub fn offer(&self, buf: &mut FrameBuf) {
        let mut slot = match self.slot.try_lock() {
            Ok(s) => s,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        std::mem::swap(&mut slot.pixels, &mut buf.data);
        slot.format = Some(buf.format);
        slot.width = buf.width;
        slot.height = buf.height;
        slot.seq = buf.seq;
        slot.at = Some(SystemTime::now());
    }

    /// The latest frame's sequence number (None before the first): tells
    /// whether there is anything new without copying it.
    pub fn seq(&self) -> Option<u64> {
        let slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        slot.at.map(|_| slot.seq)
    }

    /// The latest frame as RGB, or None before the first one.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let (width, height, seq, at, format, pixels) = {
            let slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            // One memcpy under the lock; the RGB conversion happens outside it.
            (slot.width, slot.height, slot.seq, slot.at?, slot.format?, slot.pixels.to_vec())
        };
        let (w, h) = (width as usize, height as usize);
        let frame = FrameRef::packed(&pixels, w, h, format);
        frame.validate().ok()?;
        let rgb = (0..w * h).flat_map(|i| frame.rgb(i % w, i / w).map(|c| c as u8)).collect();
        Some(Snapshot { width, height, seq, at, rgb })
    }
}

impl Snapshot {
    pub fn to_jpeg(&self, quality: u8) -> Result<Vec<u8>, SnapshotError> {
        let mut out = Vec::with_capacity(self.rgb.len() / 8);
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality).encode(
            &self.rgb,
            self.width,
            self.height,
            image::ExtendedColorType::Rgb8,
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(width: u32, height: u32, value: u8, seq: u64) -> FrameBuf {
        let mut f = FrameBuf::empty();
        f.width = width;
        f.height = height;
        f.seq = seq;
        f.data = vec![value; (width * height * 4) as usize].into();
        f
    }

    #[test]
    fn offer_swaps_buffers_and_snapshot_encodes_the_latest() {
        // Rule: offering a frame swaps vectors (the pool gets the previous one back, no copy) and a snapshot is the newest frame, decodable as a JPEG of its size.
        let latest = LatestFrame::new();
        assert!(latest.snapshot().is_none());
        let mut a = frame(16, 8, 200, 1);
        let a_ptr = a.data.as_ptr();
        latest.offer(&mut a);
        assert!(a.data.is_empty(), "the first offer hands back the slot's empty vector");
        let mut b = frame(16, 8, 10, 2);
        latest.offer(&mut b);
        assert_eq!(b.data.as_ptr(), a_ptr, "the second offer hands back the first frame's vector");
        let snap = latest.snapshot().unwrap();
        assert_eq!((snap.width, snap.height, snap.seq), (16, 8, 2));
        assert!(snap.rgb.iter().all(|&v| v == 10));
        let jpeg = snap.to_jpeg(80).unwrap();
        let decoded = image::load_from_memory_with_format(&jpeg, image::ImageFormat::Jpeg).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (16, 8));
    }

    #[test]
    fn an_nv12_frame_is_snapshotted_as_rgb() {
        // Rule: a snapshot of an NV12 frame is its RGB conversion (video-range grey 126 -> RGB 128).
        let latest = LatestFrame::new();
        let mut f = frame(16, 8, 0, 3);
        f.format = PixelFormat::Nv12;
        f.data = [vec![126u8; 16 * 8], vec![128u8; 16 * 4]].concat().into();
        latest.offer(&mut f);
        let snap = latest.snapshot().unwrap();
        assert_eq!(snap.rgb.len(), 16 * 8 * 3);
        assert!(snap.rgb.iter().all(|&v| v == 128), "{:?}", &snap.rgb[..6]);
    }
}
