//! Live view: a stream's annotated frames as fragmented MP4 over HTTP, which
//! a plain `<video>` element plays (pipelines/live-view.txt). Each viewer
//! has its own small encoder, built on the first frame after it arrives and
//! stopped when it leaves: nothing is encoded while nobody watches, and the
//! output stage only ever copies a frame into a viewer's leaky queue.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use tokio::sync::mpsc;

use super::launch::{self, fill};
use super::packed::Packed;
use super::ring::FrameBuf;

const DESCRIPTION: &str = include_str!("../../pipelines/live-view.txt");
/// Viewers of one stream at once; more are refused (each costs an encoder).
pub const MAX_VIEWERS: usize = 8;
/// Chunks waiting for a viewer's connection: one that falls further behind
/// is cut off rather than buffered without end.
const BACKLOG_CHUNKS: usize = 256;
const FRAGMENT_MS: u32 = 100;
const BITRATE_KBPS: u32 = 1500;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("{MAX_VIEWERS} viewers already watch this stream; try again later")]
    Full,
}

/// A stream's live viewers. Cheap when nobody watches: one atomic load per frame.
#[derive(Default)]
pub struct LiveHub {
    watching: AtomicUsize,
    viewers: Mutex<Vec<Viewer>>,
    frames: AtomicU64,
    /// Viewers of the MJPEG fallback (`live.mjpeg`), which need no encoder
    /// here: they count toward [`MAX_VIEWERS`] and the viewers gauge.
    mjpeg: AtomicUsize,
    /// Bumped by [`LiveHub::close_all`]: MJPEG responses end when it moves.
    epoch: AtomicU64,
    /// Unix ms at which the first frame of the newest MP4 viewer's timeline
    /// was decoded (0: none yet): its player at `currentTime` t shows the
    /// frame decoded at this + t, so the page can show its own delay.
    origin_ms: AtomicU64,
}

struct Viewer {
    chunks: mpsc::Sender<Bytes>,
    /// Set by the encoder's output when the connection is gone or too slow.
    gone: Arc<AtomicBool>,
    encoder: Option<Encoder>,
}

struct Encoder {
    pipeline: gst::Pipeline,
    appsrc: gst_app::AppSrc,
    packed: Packed,
    pool: gst::BufferPool,
    size: (u32, u32, crate::frame::PixelFormat),
    first_pts: Option<u64>,
    pushed_any: bool,
    started: Instant,
}

/// The body of a live-view response: fragmented MP4 (or MJPEG parts), chunk by chunk.
pub struct LiveStream(mpsc::Receiver<Bytes>);

impl From<mpsc::Receiver<Bytes>> for LiveStream {
    fn from(chunks: mpsc::Receiver<Bytes>) -> LiveStream {
        LiveStream(chunks)
    }
}

impl futures_core::Stream for LiveStream {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(Ok))
    }
}

impl LiveHub {
    pub fn new() -> LiveHub {
        LiveHub::default()
    }

    /// A new viewer: its encoder starts with the next frame.
    pub fn watch(&self) -> Result<LiveStream, LiveError> {
        let mut viewers = self.viewers.lock().unwrap_or_else(PoisonError::into_inner);
        if viewers.len() + self.mjpeg.load(Ordering::Acquire) >= MAX_VIEWERS {
            return Err(LiveError::Full);
        }
        let (chunks, rx) = mpsc::channel(BACKLOG_CHUNKS);
        viewers.push(Viewer { chunks, gone: Arc::default(), encoder: None });
        self.watching.store(viewers.len(), Ordering::Release);
        Ok(LiveStream(rx))
    }

    pub fn viewers(&self) -> usize {
        self.watching.load(Ordering::Acquire) + self.mjpeg.load(Ordering::Acquire)
    }

    /// An MJPEG viewer arrives; returns the epoch its response ends after.
    pub fn mjpeg_joined(&self) -> Result<u64, LiveError> {
        let viewers = self.viewers.lock().unwrap_or_else(PoisonError::into_inner);
        if viewers.len() + self.mjpeg.load(Ordering::Acquire) >= MAX_VIEWERS {
            return Err(LiveError::Full);
        }
        self.mjpeg.fetch_add(1, Ordering::AcqRel);
        Ok(self.epoch.load(Ordering::Acquire))
    }

    pub fn mjpeg_left(&self) {
        self.mjpeg.fetch_sub(1, Ordering::AcqRel);
    }

    /// A frame encoded for a live viewer outside this hub (an MJPEG part).
    pub fn count_encoded(&self) {
        self.frames.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether [`LiveHub::close_all`] ran since `epoch`.
    pub fn closed_since(&self, epoch: u64) -> bool {
        self.epoch.load(Ordering::Acquire) != epoch
    }

    /// See the `origin_ms` field: None before any MP4 viewer's first frame.
    pub fn timeline_origin_unix_ms(&self) -> Option<u64> {
        Some(self.origin_ms.load(Ordering::Acquire)).filter(|&ms| ms > 0)
    }

    /// Frames handed to viewers' encoders so far.
    pub fn frames_encoded(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }

    /// Ends every viewer's response (the stream stops, or the daemon does).
    pub fn close_all(&self) {
        let mut viewers = self.viewers.lock().unwrap_or_else(PoisonError::into_inner);
        viewers.clear();
        self.watching.store(0, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives an annotated frame to every viewer. Never waits: if a request is
    /// registering a viewer this moment, this frame is not shown.
    pub fn offer(&self, buf: &FrameBuf) {
        if self.watching.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut viewers = match self.viewers.try_lock() {
            Ok(v) => v,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        viewers.retain(|v| !v.gone.load(Ordering::Acquire) && !v.chunks.is_closed());
        let mut shown = false;
        for v in viewers.iter_mut() {
            let size = (buf.width, buf.height, buf.format);
            if v.encoder.as_ref().is_none_or(|e| e.size != size) {
                match Encoder::start(buf, v.chunks.clone(), v.gone.clone()) {
                    Ok(e) => v.encoder = Some(e),
                    Err(e) => {
                        tracing::warn!("live view: cannot start an encoder: {e}");
                        v.gone.store(true, Ordering::Release);
                        continue;
                    }
                }
            }
            if let Some(e) = v.encoder.as_mut()
                && let Ok(first) = e.push(buf)
            {
                if first {
                    self.origin_ms.store(decoded_unix_ms(buf), Ordering::Release);
                }
                shown = true;
            }
        }
        if shown {
            self.frames.fetch_add(1, Ordering::Relaxed);
        }
        self.watching.store(viewers.len(), Ordering::Release);
    }
}

impl Encoder {
    fn start(buf: &FrameBuf, chunks: mpsc::Sender<Bytes>, gone: Arc<AtomicBool>) -> Result<Encoder, glib::BoolError> {
        let packed = Packed::new(buf.width, buf.height, buf.format).map_err(|e| glib::bool_error!("{e}"))?;
        // The frame rate is unknown here (frames come as inferred): 25 is
        // only the caps' nominal rate; timestamps carry the real one.
        let description = fill(
            DESCRIPTION,
            &[
                ("max_bytes", &(packed.size() * 3).to_string()),
                ("caps", &packed.caps_desc(25, 1)),
                ("gop", "25"),
                ("kbps", &BITRATE_KBPS.to_string()),
                ("fragment_ms", &FRAGMENT_MS.to_string()),
            ],
        );
        let pipeline = launch::launch(&description).map_err(|e| glib::bool_error!("{e}"))?;
        let appsrc = pipeline
            .by_name("src")
            .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
            .ok_or_else(|| glib::bool_error!("live-view description has no appsrc named src"))?;
        let appsink = pipeline
            .by_name("out")
            .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
            .ok_or_else(|| glib::bool_error!("live-view description has no appsink named out"))?;
        appsink.set_callbacks(
            gst_app::AppSinkCallbacks::builder()
                .new_sample(move |sink| {
                    let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                    let Some(map) = sample.buffer().and_then(|b| b.map_readable().ok()) else {
                        return Ok(gst::FlowSuccess::Ok);
                    };
                    // A full backlog is a viewer too slow to keep: cut it off.
                    if chunks.try_send(Bytes::copy_from_slice(&map)).is_err() {
                        gone.store(true, Ordering::Release);
                        return Err(gst::FlowError::Eos);
                    }
                    Ok(gst::FlowSuccess::Ok)
                })
                .build(),
        );
        let pool = packed.pool()?;
        pipeline.set_state(gst::State::Playing).map_err(|e| glib::bool_error!("{e}"))?;
        Ok(Encoder { pipeline, appsrc, packed, pool, size: (buf.width, buf.height, buf.format), first_pts: None, pushed_any: false, started: Instant::now() })
    }

    /// Ok(true) for the frame that starts this viewer's timeline.
    fn push(&mut self, buf: &FrameBuf) -> Result<bool, glib::BoolError> {
        let first = !self.pushed_any;
        self.pushed_any = true;
        // Each viewer's timeline starts at 0 with its first frame.
        let pts = match buf.timing.pts {
            Some(pts) => pts.saturating_sub(*self.first_pts.get_or_insert(pts)),
            None => self.started.elapsed().as_nanos() as u64,
        };
        // With its duration, each one-frame fragment's sample spans the time
        // to the next frame; without it mp4mux guesses from the caps' nominal
        // rate, leaving gaps between fragments that a player may stall on.
        let buffer = self.packed.buffer(&self.pool, &buf.data, buf.stride(), Some(pts), buf.timing.duration)?;
        self.appsrc.push_buffer(buffer).map(|_| first).map_err(|e| glib::bool_error!("{e:?}"))
    }
}

/// When `buf` was decoded, as Unix ms (its stage times are monotonic).
fn decoded_unix_ms(buf: &FrameBuf) -> u64 {
    let decoded = std::time::SystemTime::now() - buf.stages.decoded.elapsed();
    decoded.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

impl Drop for Encoder {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
        let _ = self.pool.set_active(false);
    }
}
