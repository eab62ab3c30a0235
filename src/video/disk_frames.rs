//! Frames on disk: the samples of every fragment mp4mux hands its file sink
//! (a `moof` box's `trun` sample counts), counted as the bytes go to the
//! file. A recording's `frames_written` is this number, not the frames
//! pushed: those can still sit in the encoder, the GOP splitmuxsink holds
//! or the fragment being filled when the disk fills.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gstreamer as gst;
use gstreamer::prelude::*;

/// Counts into `frames` the samples of each fragment reaching `filesink`'s
/// sink pad once the fragment's data has gone through (when the next
/// fragment starts; the last one is the caller's to add at a clean end).
pub(crate) fn count_into(filesink: &gst::Element, frames: Arc<AtomicU64>) -> bool {
    let Some(pad) = filesink.static_pad("sink") else { return false };
    let pending = AtomicU64::new(0);
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if let Some(buffer) = info.buffer()
            && let Ok(map) = buffer.map_readable()
        {
            let samples = fragment_samples(&map);
            if samples > 0 {
                frames.fetch_add(pending.swap(samples, Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        gst::PadProbeReturn::Ok
    });
    true
}

/// Big-endian u32 at `at`, if the bytes are there.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The boxes laid end to end in `bytes`: (type, body).
fn boxes(bytes: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let size = u32_at(bytes, at)? as usize;
        let kind = bytes.get(at + 4..at + 8)?;
        let body = bytes.get(at + 8..at.checked_add(size)?).filter(|_| size >= 8)?;
        at += size;
        Some((kind, body))
    })
}

/// Samples in the `moof` boxes a buffer starts with (0 for any other
/// buffer: headers, `mdat` payload, the index at the end).
pub(crate) fn fragment_samples(bytes: &[u8]) -> u64 {
    if bytes.get(4..8) != Some(b"moof".as_slice()) {
        return 0;
    }
    let mut samples = 0u64;
    for (_, moof) in boxes(bytes).filter(|(kind, _)| *kind == b"moof") {
        for (_, traf) in boxes(moof).filter(|(kind, _)| *kind == b"traf") {
            // trun: version and flags (4 bytes), then the sample count.
            for (_, trun) in boxes(traf).filter(|(kind, _)| *kind == b"trun") {
                samples += u32_at(trun, 4).unwrap_or(0) as u64;
            }
        }
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut v = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(kind);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn samples_are_read_from_each_trun_of_a_moof() {
        // Rule: a moof's trun sample counts are summed; any other buffer counts 0; a cut-short box never reads past the buffer.
        let trun = |n: u32| b(b"trun", &[[0u8, 0, 3, 1].as_slice(), &n.to_be_bytes()].concat());
        let traf = b(b"traf", &[b(b"tfhd", &[0; 8]), trun(12), trun(3)].concat());
        let moof = b(b"moof", &[b(b"mfhd", &[0; 8]), traf].concat());
        assert_eq!(fragment_samples(&moof), 15);
        assert_eq!(fragment_samples(&[moof.clone(), b(b"mdat", &[1, 2, 3])].concat()), 15);
        assert_eq!(fragment_samples(&b(b"mdat", &moof)), 0, "moof bytes inside a payload");
        assert_eq!(fragment_samples(&moof[..moof.len() - 3]), 0, "cut short");
        assert_eq!(fragment_samples(&[]), 0);
    }
}
