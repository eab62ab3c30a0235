//! The bounded, lock-free hand-off between a source and the workers.
//!
//! Frame buffers come from a fixed pool allocated when the stream starts and
//! travel source -> ring -> worker -> output, then back to the pool, so a
//! stream at steady state allocates nothing per frame. The ring and the pool
//! are `ArrayQueue`s (lock-free); a mutex/condvar pair is used only to sleep
//! when there is nothing to do, never to guard frame data.
//!
//! Live sources never wait: when the ring is full the oldest queued frame is
//! dropped (and reported) so latency cannot creep up. Files wait for space
//! instead (back-pressure) and never lose a frame.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::frame::{DecodedFrame, FrameTiming, PixelFormat, StageTimes};
use crate::frame::FrameRef;
use crate::host_memory::FrameMemory;
use crate::temporal::HoodMask;

/// One frame travelling through the pipeline.
#[derive(Debug)]
pub struct FrameBuf {
    /// Position in the stream (0-based, every decoded frame numbered,
    /// dropped ones included), used to restore order after the workers.
    pub seq: u64,
    pub timing: FrameTiming,
    pub width: u32,
    pub height: u32,
    pub format: PixelFormat,
    /// Tightly packed: RGBA `width * height * 4` bytes, or NV12's Y plane
    /// (`width * height`) then its UV plane (half as many bytes), both
    /// `width` bytes per row. Pinned where a GPU engine asked for that.
    pub data: FrameMemory,
    /// Frames of this stream dropped since the previous frame that made it.
    pub dropped_before: u64,
    /// Road mask (1 = road) at frame size, filled only for streams that ask
    /// for masks (`process --masks-out`); the allocation is reused.
    pub road_mask: Vec<u8>,
    /// What the stream saw of its hood and bars as of this frame, observed
    /// on arrival (None where nobody observed it: the worker then does).
    pub unseen: Option<Arc<HoodMask>>,
    pub stages: StageTimes,
    /// The road is drawn on `data` (false: the decoded frame, nobody was
    /// looking; see `video::demand`).
    pub annotated: bool,
}

impl FrameBuf {
    pub(crate) fn empty() -> Self {
        FrameBuf { seq: 0, timing: FrameTiming::default(), width: 0, height: 0, format: PixelFormat::Rgba, data: FrameMemory::default(), dropped_before: 0, road_mask: Vec::new(), unseen: None, stages: StageTimes::starting(Instant::now()), annotated: false }
    }

    /// Bytes per row (of the Y plane, for NV12).
    pub fn stride(&self) -> usize {
        self.width as usize * self.format.bytes_per_pixel()
    }

    /// The pixels as the engine reads them.
    pub fn frame(&self) -> FrameRef<'_> {
        FrameRef { data: &self.data, width: self.width as usize, height: self.height as usize, stride: self.stride(), format: self.format }
    }

    /// Copies `src` in, reusing the allocation when the size is unchanged.
    fn fill_from(&mut self, src: &DecodedFrame<'_>, offered: Instant) {
        let h = src.height as usize;
        self.width = src.width;
        self.height = src.height;
        self.format = src.format;
        let row = self.stride();
        let chroma_rows = src.chroma.map_or(0, |_| h / 2);
        self.data.resize(row * (h + chroma_rows));
        let (luma, uv) = self.data.split_at_mut(row * h);
        copy_rows(luma, src.data, src.stride, row);
        if let Some((plane, stride)) = src.chroma {
            copy_rows(uv, plane, stride, row);
        }
        self.timing = FrameTiming { pts: src.pts, duration: src.duration };
        self.unseen = None;
        self.stages = StageTimes::starting(offered);
    }
}

/// Fills `out` row by row (`row` bytes each) from `src` rows `stride` apart.
fn copy_rows(out: &mut [u8], src: &[u8], stride: usize, row: usize) {
    for (y, out_row) in out.chunks_exact_mut(row).enumerate() {
        out_row.copy_from_slice(&src[y * stride..y * stride + row]);
    }
}

/// Wakes sleepers; carries no data.
#[derive(Default)]
pub struct Doorbell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Doorbell {
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Sleeps until rung or `timeout`; returns whether it was rung.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        let (mut guard, _) = self.cv.wait_timeout_while(guard, timeout, |rung| !*rung).unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *guard, false)
    }
}

/// What happened to a frame offered to the ring.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued { seq: u64 },
    /// Queued, after dropping the oldest queued frame (live sources).
    QueuedDroppingOldest { seq: u64, dropped_seq: u64 },
    /// Not queued: every buffer is in flight downstream (live sources).
    DroppedIncoming { seq: u64 },
    /// The ring was closed (the stream is stopping).
    Closed,
    /// Not offered to the ring: over the stream's inference rate
    /// (numbered by [`FrameRing::skip`]).
    RateLimited { seq: u64 },
}

pub struct FrameRing {
    queue: ArrayQueue<FrameBuf>,
    pool: ArrayQueue<FrameBuf>,
    live: bool,
    next_seq: AtomicU64,
    dropped_pending: AtomicU64,
    closed: AtomicBool,
    /// Rung when a buffer returns to the pool (a waiting file source may go on).
    space: Doorbell,
}

impl FrameRing {
    /// `capacity` queued frames; `in_flight` more buffers for frames being
    /// inferred, reordered and written.
    pub fn new(capacity: usize, in_flight: usize, live: bool) -> Self {
        let capacity = capacity.max(1);
        let total = capacity + in_flight.max(1);
        let pool = ArrayQueue::new(total);
        for _ in 0..total {
            let _ = pool.push(FrameBuf::empty());
        }
        FrameRing {
            queue: ArrayQueue::new(capacity),
            pool,
            live,
            next_seq: AtomicU64::new(0),
            dropped_pending: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            space: Doorbell::default(),
        }
    }

    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Numbers a decoded frame that is deliberately not queued (over the
    /// stream's inference rate), so the output stage can account for it.
    pub fn skip(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    pub fn depth(&self) -> usize {
        self.queue.len()
    }

    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Stops intake: pushes fail and a waiting producer wakes up.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.space.ring();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Copies `frame` into a pooled buffer and queues it. Files block while
    /// every buffer is in use; live sources drop instead.
    pub fn push(&self, frame: &DecodedFrame<'_>) -> Pushed {
        self.push_with(frame, |_| {})
    }

    /// As [`FrameRing::push`], with `prepare` run on the filled and numbered
    /// buffer before any worker can see it (not for frames dropped on arrival).
    pub fn push_with(&self, frame: &DecodedFrame<'_>, prepare: impl FnOnce(&mut FrameBuf)) -> Pushed {
        let offered = Instant::now();
        let mut dropped_seq = None;
        let mut buf = loop {
            if self.is_closed() {
                return Pushed::Closed;
            }
            if let Some(buf) = self.pool.pop() {
                break buf;
            }
            if self.live {
                match self.queue.pop() {
                    Some(oldest) => {
                        dropped_seq = Some(oldest.seq);
                        self.dropped_pending.fetch_add(1, Ordering::Relaxed);
                        break oldest;
                    }
                    None => {
                        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
                        self.dropped_pending.fetch_add(1, Ordering::Relaxed);
                        return Pushed::DroppedIncoming { seq };
                    }
                }
            }
            self.space.wait(Duration::from_millis(50));
        };
        buf.fill_from(frame, offered);
        buf.seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        buf.dropped_before = self.dropped_pending.swap(0, Ordering::Relaxed);
        prepare(&mut buf);
        let seq = buf.seq;
        let mut pending = buf;
        loop {
            pending.stages.queued = Instant::now();
            match self.queue.push(pending) {
                Ok(()) => break,
                Err(back) => pending = back,
            }
            if self.live {
                // The buffer came from the pool while the queue was full:
                // make room by dropping the oldest (latency must not grow).
                if let Some(oldest) = self.queue.pop() {
                    dropped_seq = Some(oldest.seq);
                    pending.dropped_before += 1;
                    let _ = self.pool.push(oldest);
                }
            } else {
                // Files never drop: wait for a worker to take a frame.
                if self.is_closed() {
                    let _ = self.pool.push(pending);
                    return Pushed::Closed;
                }
                self.space.wait(Duration::from_millis(20));
            }
        }
        match dropped_seq {
            Some(dropped_seq) => Pushed::QueuedDroppingOldest { seq, dropped_seq },
            None => Pushed::Queued { seq },
        }
    }

    /// The oldest queued frame, if any.
    pub fn pop(&self) -> Option<FrameBuf> {
        let mut buf = self.queue.pop();
        if let Some(buf) = buf.as_mut() {
            buf.stages.taken = Instant::now();
        }
        if buf.is_some() && !self.live {
            self.space.ring();
        }
        buf
    }

    /// Gives a buffer back once its frame has been written (or dropped).
    pub fn recycle(&self, buf: FrameBuf) {
        let _ = self.pool.push(buf);
        self.space.ring();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(v: u8) -> Vec<u8> {
        vec![v; 4 * 4 * 4]
    }

    fn decoded(data: &[u8]) -> DecodedFrame<'_> {
        DecodedFrame { data, width: 4, height: 4, stride: 16, format: PixelFormat::Rgba, chroma: None, pts: Some(data[0] as u64), duration: None }
    }

    #[test]
    fn nv12_planes_are_packed_from_strided_input() {
        // Rule: an NV12 frame with padded rows is packed Y rows then UV rows, `width` bytes each.
        let ring = FrameRing::new(2, 1, false);
        let luma: Vec<u8> = (0..4 * 8).map(|i| i as u8).collect(); // 4 rows at stride 8
        let chroma: Vec<u8> = (100..100 + 2 * 8).map(|i| i as u8).collect(); // 2 rows at stride 8
        let frame = DecodedFrame { data: &luma, width: 6, height: 4, stride: 8, format: PixelFormat::Nv12, chroma: Some((&chroma, 8)), pts: Some(0), duration: None };
        assert_eq!(ring.push(&frame), Pushed::Queued { seq: 0 });
        let buf = ring.pop().unwrap();
        assert_eq!(buf.stride(), 6);
        assert_eq!(&buf.data[..6], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(&buf.data[18..24], &[24, 25, 26, 27, 28, 29]);
        assert_eq!(&buf.data[24..], &[100, 101, 102, 103, 104, 105, 108, 109, 110, 111, 112, 113]);
        buf.frame().validate().unwrap();
    }

    #[test]
    fn live_ring_drops_oldest_when_full() {
        let ring = FrameRing::new(2, 1, true);
        let frames: Vec<Vec<u8>> = (0..5).map(frame).collect();
        let results: Vec<Pushed> = frames.iter().map(|f| ring.push(&decoded(f))).collect();
        assert_eq!(results[0], Pushed::Queued { seq: 0 });
        assert_eq!(results[1], Pushed::Queued { seq: 1 });
        // pool holds one spare buffer: the third push still fits the pool but not the queue
        assert_eq!(results[2], Pushed::QueuedDroppingOldest { seq: 2, dropped_seq: 0 });
        assert_eq!(ring.depth(), 2);
        let a = ring.pop().unwrap();
        let b = ring.pop().unwrap();
        assert!(a.seq < b.seq, "FIFO order");
        assert_eq!(b.seq, 4, "newest frame kept");
    }

    #[test]
    fn file_ring_waits_instead_of_dropping() {
        let ring = std::sync::Arc::new(FrameRing::new(1, 1, false));
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || (0..6u8).map(|i| ring.push(&decoded(&frame(i)))).collect::<Vec<_>>())
        };
        let mut seen = Vec::new();
        while seen.len() < 6 {
            if let Some(buf) = ring.pop() {
                seen.push((buf.seq, buf.data[0], buf.dropped_before));
                ring.recycle(buf);
            } else {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let pushed = producer.join().unwrap();
        assert!(pushed.iter().all(|p| matches!(p, Pushed::Queued { .. })));
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 5]);
        assert!(seen.iter().all(|s| s.0 == s.1 as u64 && s.2 == 0));
    }

    #[test]
    fn closing_releases_a_blocked_producer() {
        let ring = std::sync::Arc::new(FrameRing::new(1, 1, false));
        assert_eq!(ring.push(&decoded(&frame(0))), Pushed::Queued { seq: 0 });
        // The queue is full: a file source waits for a worker instead of dropping.
        let blocked = {
            let ring = ring.clone();
            std::thread::spawn(move || ring.push(&decoded(&frame(1))))
        };
        std::thread::sleep(Duration::from_millis(30));
        ring.close();
        assert_eq!(blocked.join().unwrap(), Pushed::Closed);
    }
}
