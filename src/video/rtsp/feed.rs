//! One mounted stream: the factory that builds its shared media, and the handle
//! the pipeline pushes annotated frames into.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_rtsp_server as rtsp;
use gstreamer_rtsp_server::prelude::*;

use super::RtspError;
use crate::video::encoder::EncoderChoice;
use crate::video::frame::{FrameTiming, Nanos, VideoInfo};
use crate::video::launch::fill;
use crate::video::packed::Packed;

const FEED: &str = include_str!("../../../pipelines/rtsp-feed.txt");
/// Frames the appsrc may queue before the oldest is dropped.
const QUEUED_FRAMES: usize = 3;
/// A frame whose re-based time is this far from the media's clock re-anchors the
/// timeline (the source restarted, or stalled and came back).
const MAX_DRIFT_NS: i128 = 2_000_000_000;

/// Where a stream's frames go. Cheap to clone; every clone feeds the same clients.
#[derive(Clone)]
pub struct RtspFeed {
    inner: Arc<Inner>,
}

struct Inner {
    path: String,
    packed: Packed,
    frame_ns: Option<Nanos>,
    pool: gst::BufferPool,
    /// The appsrc of the media clients are watching, set in media-configure and
    /// cleared when that media is unprepared (its last client left).
    live: Mutex<Option<Live>>,
    removed: AtomicBool,
}

struct Live {
    appsrc: gst_app::AppSrc,
    /// Added to a frame's PTS to put it on the media's running time.
    offset: Option<i128>,
    last_out: Option<Nanos>,
}

impl RtspFeed {
    /// A factory for `info`-sized frames and the feed that fills its media.
    pub(super) fn new(
        path: &str,
        info: VideoInfo,
        encoder: &EncoderChoice,
    ) -> Result<(RtspFeed, rtsp::RTSPMediaFactory), RtspError> {
        let packed = Packed::new(info.width, info.height, info.format).map_err(|source| RtspError::FrameSize { path: path.to_string(), source })?;
        let launch = fill(
            FEED,
            &[
                ("max_bytes", &(packed.size() * QUEUED_FRAMES).to_string()),
                ("caps", &packed.caps_desc(info.fps_num, info.fps_den)),
                ("encoder", encoder.description()),
            ],
        );
        let frame_ns = (info.fps_num > 0 && info.fps_den > 0)
            .then(|| 1_000_000_000u64 * info.fps_den as u64 / info.fps_num as u64);
        let inner = Arc::new(Inner {
            path: path.to_string(),
            packed,
            frame_ns,
            pool: packed.pool()?,
            live: Mutex::new(None),
            removed: AtomicBool::new(false),
        });

        let factory = rtsp::RTSPMediaFactory::new();
        factory.set_launch(&launch.replace('\n', " "));
        // One encoder for all clients; joining and leaving never restarts it.
        factory.set_shared(true);
        factory.set_suspend_mode(rtsp::RTSPSuspendMode::None);
        factory.set_eos_shutdown(false);
        let weak = Arc::downgrade(&inner);
        factory.connect_media_configure(move |_, media| {
            let Some(inner) = weak.upgrade() else { return };
            let Some(appsrc) = media
                .element()
                .downcast::<gst::Bin>()
                .ok()
                .and_then(|b| b.by_name("src"))
                .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
            else {
                tracing::error!(path = %inner.path, "RTSP media has no appsrc named src");
                return;
            };
            let this = appsrc.downgrade();
            let weak = Arc::downgrade(&inner);
            media.connect_unprepared(move |_| {
                let Some(inner) = weak.upgrade() else { return };
                if let Ok(mut live) = inner.live.lock()
                    && live.as_ref().is_some_and(|l| Some(&l.appsrc) == this.upgrade().as_ref())
                {
                    *live = None;
                }
            });
            if let Ok(mut live) = inner.live.lock() {
                *live = Some(Live { appsrc, offset: None, last_out: None });
            }
            tracing::info!(path = %inner.path, "RTSP stream has a client");
        });
        Ok((RtspFeed { inner }, factory))
    }

    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// Whether a client is watching (frames pushed now are delivered).
    pub fn has_clients(&self) -> bool {
        self.inner.live.lock().map(|l| l.is_some()).unwrap_or(false)
    }

    /// Sends one frame (laid out as the stream was added with) to every client of this stream. Ok(false): nobody is
    /// watching (or the stream was removed) and the frame was dropped, which is
    /// the normal case between clients. Never blocks on the network or encoder.
    pub fn push(&self, pixels: &[u8], stride: usize, timing: FrameTiming) -> Result<bool, RtspError> {
        let inner = &self.inner;
        inner
            .packed
            .check(pixels.len(), stride)
            .map_err(|source| RtspError::FrameSize { path: inner.path.clone(), source })?;
        if inner.removed.load(Ordering::Acquire) {
            return Ok(false);
        }
        // Only the stamp is computed under the lock; the copy and push happen outside it.
        let (appsrc, pts) = {
            let Ok(mut guard) = inner.live.lock() else { return Ok(false) };
            let Some(live) = guard.as_mut() else { return Ok(false) };
            // Until the media is PLAYING its base time may still be unset, which
            // makes the "running time" the raw clock (hours): drop frames till then.
            if live.appsrc.current_state() != gst::State::Playing || live.appsrc.base_time().is_none() {
                return Ok(false);
            }
            let Some(now) = live.appsrc.current_running_time() else { return Ok(false) };
            (live.appsrc.clone(), live.stamp(timing.pts, now.nseconds()))
        };
        let buffer = inner.packed.buffer(&inner.pool, pixels, stride, Some(pts), timing.duration.or(inner.frame_ns))?;
        // Flushing here means the media is shutting down under us: a dropped frame.
        Ok(appsrc.push_buffer(buffer).is_ok())
    }

    /// Ends the stream for current clients and drops every later frame.
    pub(super) fn close(&self) {
        self.inner.removed.store(true, Ordering::Release);
        let appsrc = self.inner.live.lock().ok().and_then(|mut l| l.take()).map(|l| l.appsrc);
        if let Some(appsrc) = appsrc {
            let _ = appsrc.end_of_stream();
        }
    }
}

impl Live {
    /// Puts a source PTS on the media's running time, keeping frame spacing and
    /// strictly increasing output; re-anchors on the first frame, a missing PTS,
    /// a jump backwards or a long stall.
    fn stamp(&mut self, pts: Option<Nanos>, now: Nanos) -> Nanos {
        let candidate = match (pts, self.offset) {
            (Some(p), Some(off)) => Some(p as i128 + off),
            _ => None,
        };
        let ok = |out: i128| {
            out >= 0 && (out - now as i128).abs() < MAX_DRIFT_NS && self.last_out.is_none_or(|l| out > l as i128)
        };
        let out = match candidate {
            Some(out) if ok(out) => out as Nanos,
            _ => {
                self.offset = pts.map(|p| now as i128 - p as i128);
                match self.last_out {
                    // Never at or before the previous frame, even when re-anchored...
                    Some(l) if l >= now && ((l - now) as i128) < MAX_DRIFT_NS => l + 1,
                    // ...unless that frame was far ahead of the clock: waiting for it
                    // would freeze the stream, one discontinuity is the lesser harm.
                    _ => now,
                }
            }
        };
        self.last_out = Some(out);
        out
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.pool.set_active(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> Live {
        gst::init().unwrap();
        let appsrc = gst_app::AppSrc::builder().build();
        Live { appsrc, offset: None, last_out: None }
    }

    #[test]
    fn stamps_keep_spacing_and_reanchor() {
        let mut l = live();
        assert_eq!(l.stamp(Some(10_000), 5_000_000), 5_000_000);
        assert_eq!(l.stamp(Some(40_010_000), 5_100_000), 45_000_000); // spacing kept
        // Source restarted at 0: re-anchored on the clock, still increasing.
        assert_eq!(l.stamp(Some(0), 90_000_000), 90_000_000);
        assert_eq!(l.stamp(None, 90_000_000), 90_000_001);
        assert_eq!(l.stamp(Some(40_000_000), 10_090_000_000), 10_090_000_000);
        // A 10 s stall: re-anchored instead of stamping 10 s in the past.
        assert_eq!(l.stamp(Some(80_000_000), 20_090_000_000), 20_090_000_000);
        // A stamp far ahead of the clock does not hold every later frame back.
        let mut l = live();
        assert_eq!(l.stamp(Some(0), 3_600_000_000_000), 3_600_000_000_000);
        assert_eq!(l.stamp(Some(40_000_000), 100_000_000), 100_000_000);
        assert_eq!(l.stamp(Some(80_000_000), 140_000_000), 140_000_000);
    }
}
