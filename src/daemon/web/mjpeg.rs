//! `live.mjpeg`: the live view for browsers that cannot play the fragmented
//! MP4 (no H.264 decoder: some Chromium and Firefox builds): the latest
//! annotated frame as JPEG, at most [`MJPEG_FPS`] a second, as
//! `multipart/x-mixed-replace`, which a plain `<img>` shows as it arrives.
//! JPEGs are made only while the response is read, and only of new frames.

use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use crate::daemon::status::StreamStatus;
use crate::video::live::{LiveError, LiveStream};

pub const BOUNDARY: &str = "roadseg-frame";
/// A fallback, not the main view: a few frames a second keep the encoding
/// cost (one JPEG of the whole frame each) small on the daemon's machine.
pub const MJPEG_FPS: u64 = 5;
const QUALITY: u8 = 75;

/// Counts the viewer while its response lives.
struct Ticket {
    status: Arc<StreamStatus>,
    epoch: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.status.viewers.mjpeg_left();
    }
}

pub fn response(status: Arc<StreamStatus>) -> Result<Response, LiveError> {
    let epoch = status.viewers.mjpeg_joined()?;
    let ticket = Ticket { status, epoch };
    // Two parts in hand at most: a slow client gets fewer frames, not a backlog.
    let (parts, rx) = mpsc::channel::<Bytes>(2);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / MJPEG_FPS));
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut shown = None;
        loop {
            tick.tick().await;
            if parts.is_closed() || ticket.status.viewers.closed_since(ticket.epoch) {
                break;
            }
            let seq = ticket.status.latest.seq();
            if seq.is_none() || seq == shown {
                continue;
            }
            let status = ticket.status.clone();
            let encoded = tokio::task::spawn_blocking(move || {
                let shot = status.latest.snapshot()?;
                Some((shot.seq, shot.to_jpeg(QUALITY)))
            })
            .await;
            let (seq, jpeg) = match encoded {
                Ok(Some((seq, Ok(jpeg)))) => (seq, jpeg),
                Ok(Some((_, Err(e)))) => {
                    tracing::warn!(stream = %ticket.status.name, "live.mjpeg: {e}");
                    break;
                }
                _ => continue,
            };
            shown = Some(seq);
            ticket.status.viewers.count_encoded();
            let mut part = format!("--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {}\r\n\r\n", jpeg.len()).into_bytes();
            part.extend_from_slice(&jpeg);
            part.extend_from_slice(b"\r\n");
            if parts.send(Bytes::from(part)).await.is_err() {
                break;
            }
        }
    });
    let content_type = format!("multipart/x-mixed-replace; boundary={BOUNDARY}");
    Ok((
        [(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-store".to_string())],
        axum::body::Body::from_stream(LiveStream::from(rx)),
    )
        .into_response())
}
