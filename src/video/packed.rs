//! Packed frames (RGBA, or NV12 as the ring carries it) into GStreamer
//! buffers, for the appsrc-fed sinks.

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer_video as gst_video;

use super::frame::Nanos;
use crate::frame::PixelFormat;

/// Why a frame does not fit a sink's frame size.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FrameSizeError {
    #[error("stride {stride} is shorter than a {width}-pixel {format:?} row ({row} bytes)")]
    Stride { stride: usize, width: u32, row: usize, format: PixelFormat },
    #[error("{len} bytes, need {need} for {width}x{height} {format:?} at stride {stride}")]
    Short { len: usize, need: usize, width: u32, height: u32, stride: usize, format: PixelFormat },
    #[error("{width}x{height} cannot be NV12: both sides must be even")]
    OddNv12 { width: u32, height: u32 },
}

/// A frame's geometry as the sinks take it: rows `stride` bytes apart, and
/// for NV12 the interleaved UV plane right after the Y plane (`stride *
/// height` bytes in) at the same stride.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packed {
    pub width: u32,
    pub height: u32,
    pub format: PixelFormat,
}

impl Packed {
    pub(crate) fn new(width: u32, height: u32, format: PixelFormat) -> Result<Packed, FrameSizeError> {
        if format == PixelFormat::Nv12 && (!width.is_multiple_of(2) || !height.is_multiple_of(2)) {
            return Err(FrameSizeError::OddNv12 { width, height });
        }
        Ok(Packed { width, height, format })
    }

    /// Bytes of one row of the first plane, unpadded.
    pub(crate) fn row(self) -> usize {
        self.width as usize * self.format.bytes_per_pixel()
    }

    /// Rows of every plane together (NV12: Y rows then half as many UV rows).
    fn rows(self) -> usize {
        let h = self.height as usize;
        if self.format == PixelFormat::Nv12 { h + h / 2 } else { h }
    }

    fn caps_format(self) -> &'static str {
        match self.format {
            PixelFormat::Rgba => "RGBA",
            PixelFormat::Rgb => "RGB",
            PixelFormat::Nv12 => "NV12",
        }
    }

    /// The buffer layout GStreamer expects for these caps (rows may be padded).
    fn layout(self) -> Result<gst_video::VideoInfo, glib::BoolError> {
        let format = match self.format {
            PixelFormat::Rgba => gst_video::VideoFormat::Rgba,
            PixelFormat::Rgb => gst_video::VideoFormat::Rgb,
            PixelFormat::Nv12 => gst_video::VideoFormat::Nv12,
        };
        gst_video::VideoInfo::builder(format, self.width, self.height).build()
    }

    /// Bytes of one frame in GStreamer's layout.
    pub(crate) fn size(self) -> usize {
        self.layout().map(|l| l.size()).unwrap_or(self.row() * self.rows())
    }

    /// `video/x-raw,format=...,...` as a gst-launch value (quoted).
    pub(crate) fn caps_desc(self, fps_num: i32, fps_den: i32) -> String {
        format!(
            "\"video/x-raw,format={},width={},height={},framerate={}/{}\"",
            self.caps_format(),
            self.width,
            self.height,
            fps_num,
            fps_den
        )
    }

    /// Why `len` bytes at `stride` cannot be this frame, if they cannot.
    pub(crate) fn check(self, len: usize, stride: usize) -> Result<(), FrameSizeError> {
        let need = stride.saturating_mul(self.rows().saturating_sub(1)) + self.row();
        if stride < self.row() {
            Err(FrameSizeError::Stride { stride, width: self.width, row: self.row(), format: self.format })
        } else if len < need {
            Err(FrameSizeError::Short { len, need, width: self.width, height: self.height, stride, format: self.format })
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
        pixels: &[u8],
        stride: usize,
        pts: Option<Nanos>,
        duration: Option<Nanos>,
    ) -> Result<gst::Buffer, glib::BoolError> {
        let layout = self.layout()?;
        let mut buffer = match pool.acquire_buffer(None) {
            Ok(b) => b,
            // An inactive pool only happens while shutting down; a plain buffer still works.
            Err(_) => gst::Buffer::with_size(layout.size())?,
        };
        {
            let b = buffer.make_mut();
            b.set_pts(pts.map(gst::ClockTime::from_nseconds));
            b.set_duration(duration.map(gst::ClockTime::from_nseconds));
            let mut map = b.map_writable()?;
            let dst = map.as_mut_slice();
            let row = self.row();
            let h = self.height as usize;
            // (first source row, rows) of each plane; NV12's UV rows follow its Y rows.
            let planes: &[(usize, usize)] = if self.format == PixelFormat::Nv12 { &[(0, h), (h, h / 2)] } else { &[(0, h)] };
            for (plane, &(first, rows)) in planes.iter().enumerate() {
                let (offset, dst_stride) = (layout.offset()[plane], layout.stride()[plane] as usize);
                for y in 0..rows {
                    let src = (first + y) * stride;
                    let out = offset + y * dst_stride;
                    dst[out..out + row].copy_from_slice(&pixels[src..src + row]);
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
        let p = Packed::new(4, 2, PixelFormat::Rgba).unwrap();
        assert!(p.check(32, 16).is_ok());
        assert!(p.check(36, 20).is_ok()); // last row need not be padded
        assert!(p.check(35, 20).is_err());
        assert!(p.check(64, 12).is_err());
        let nv12 = Packed::new(6, 4, PixelFormat::Nv12).unwrap();
        assert!(nv12.check(36, 6).is_ok());
        assert!(nv12.check(35, 6).is_err());
        assert!(Packed::new(5, 4, PixelFormat::Nv12).is_err());
    }

    #[test]
    fn nv12_planes_land_where_gstreamer_expects_them() {
        // Rule: a packed NV12 frame whose rows are not a multiple of 4 wide is copied into GStreamer's padded layout plane by plane.
        gst::init().unwrap();
        let p = Packed::new(6, 4, PixelFormat::Nv12).unwrap();
        let pixels: Vec<u8> = (0..36).collect();
        let pool = p.pool().unwrap();
        let buffer = p.buffer(&pool, &pixels, 6, Some(0), None).unwrap();
        let layout = p.layout().unwrap();
        let map = buffer.map_readable().unwrap();
        let (y_stride, uv_offset, uv_stride) = (layout.stride()[0] as usize, layout.offset()[1], layout.stride()[1] as usize);
        assert_eq!(y_stride, 8, "GStreamer pads 6-pixel rows to 8");
        assert_eq!(&map[y_stride * 3..y_stride * 3 + 6], &pixels[18..24], "last Y row");
        assert_eq!(&map[uv_offset + uv_stride..uv_offset + uv_stride + 6], &pixels[30..36], "last UV row");
    }
}
