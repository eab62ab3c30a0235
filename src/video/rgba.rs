//! RGBA frames into GStreamer buffers, for the appsrc-fed sinks.

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;

use super::frame::Nanos;

/// Why an RGBA frame does not fit a sink's frame size.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FrameSizeError {
    #[error("stride {stride} is shorter than a {width}-pixel RGBA row ({row} bytes)")]
    Stride { stride: usize, width: u32, row: usize },
    #[error("{len} bytes, need {need} for {width}x{height} RGBA at stride {stride}")]
    Short { len: usize, need: usize, width: u32, height: u32, stride: usize },
}

/// A frame's geometry as an appsrc expects it: rows packed at `width * 4` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packed {
    pub width: u32,
    pub height: u32,
}

impl Packed {
    pub(crate) fn row(self) -> usize {
        self.width as usize * 4
    }

    pub(crate) fn size(self) -> usize {
        self.row() * self.height as usize
    }

    /// `video/x-raw,format=RGBA,...` as a gst-launch value (quoted).
    pub(crate) fn caps_desc(self, fps_num: i32, fps_den: i32) -> String {
        format!(
            "\"video/x-raw,format=RGBA,width={},height={},framerate={}/{}\"",
            self.width, self.height, fps_num, fps_den
        )
    }

    /// Why `len` bytes at `stride` cannot be this frame, if they cannot.
    pub(crate) fn check(self, len: usize, stride: usize) -> Result<(), FrameSizeError> {
        let need = stride.saturating_mul((self.height as usize).saturating_sub(1)) + self.row();
        if stride < self.row() {
            Err(FrameSizeError::Stride { stride, width: self.width, row: self.row() })
        } else if len < need {
            Err(FrameSizeError::Short { len, need, width: self.width, height: self.height, stride })
        } else {
            Ok(())
        }
    }

    /// A pool of frame-sized buffers, so a steady stream does not allocate per frame.
    pub(crate) fn pool(self) -> Result<gst::BufferPool, glib::BoolError> {
        let pool = gst::BufferPool::new();
        let mut config = pool.config();
        config.set_params(None, self.size() as u32, 2, 0);
        pool.set_config(config)?;
        pool.set_active(true)?;
        Ok(pool)
    }

    /// Copies a checked frame into a pool buffer stamped with `pts` / `duration`.
    pub(crate) fn buffer(
        self,
        pool: &gst::BufferPool,
        rgba: &[u8],
        stride: usize,
        pts: Option<Nanos>,
        duration: Option<Nanos>,
    ) -> Result<gst::Buffer, glib::BoolError> {
        let mut buffer = match pool.acquire_buffer(None) {
            Ok(b) => b,
            // An inactive pool only happens while shutting down; a plain buffer still works.
            Err(_) => gst::Buffer::with_size(self.size())?,
        };
        {
            let b = buffer.make_mut();
            b.set_pts(pts.map(gst::ClockTime::from_nseconds));
            b.set_duration(duration.map(gst::ClockTime::from_nseconds));
            let mut map = b.map_writable()?;
            let dst = map.as_mut_slice();
            let row = self.row();
            if stride == row {
                dst[..self.size()].copy_from_slice(&rgba[..self.size()]);
            } else {
                for (y, out) in dst.chunks_exact_mut(row).take(self.height as usize).enumerate() {
                    out.copy_from_slice(&rgba[y * stride..y * stride + row]);
                }
            }
        }
        Ok(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_stride_and_length() {
        let p = Packed { width: 4, height: 2 };
        assert!(p.check(32, 16).is_ok());
        assert!(p.check(36, 20).is_ok()); // last row need not be padded
        assert!(p.check(35, 20).is_err());
        assert!(p.check(64, 12).is_err());
    }
}
