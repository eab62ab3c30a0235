//! What a frame is and what comes back for it: the types the engine, the
//! backends (the CUDA frame path) and the video code all speak. This module
//! depends on nothing else in the crate, so every one of them can use it.

/// Class value for pixels whose confidence is under the threshold.
pub const UNKNOWN: u8 = 255;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    Rgb,
    Rgba,
    /// 4:2:0, a full-resolution Y plane then interleaved UV at half resolution
    /// (BT.601 limited range, what decoders hand out for SD/HD H.264).
    Nv12,
}

impl PixelFormat {
    /// Bytes of one pixel in the first plane (NV12: its Y plane).
    pub fn bytes_per_pixel(self) -> usize {
        match self {
            PixelFormat::Rgb => 3,
            PixelFormat::Rgba => 4,
            PixelFormat::Nv12 => 1,
        }
    }
}

/// A borrowed video frame or image. `stride` is bytes per row (of the Y plane
/// for NV12, whose UV plane follows at `stride * height`).
#[derive(Clone, Copy, Debug)]
pub struct FrameRef<'a> {
    pub data: &'a [u8],
    pub width: usize,
    pub height: usize,
    pub stride: usize,
    pub format: PixelFormat,
}

/// What a frame's buffers depend on: frames of one geometry share the
/// buffers (and recorded work) of a backend's frame slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameGeometry {
    pub width: usize,
    pub height: usize,
    pub stride: usize,
    pub format: PixelFormat,
}

impl FrameGeometry {
    /// Bytes a frame of this geometry spans (NV12: both planes, full rows).
    pub fn bytes(&self) -> usize {
        match self.format {
            PixelFormat::Nv12 => self.stride * self.height * 3 / 2,
            _ => self.stride * self.height,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("bad frame: {0}")]
pub struct FrameError(pub String);

impl<'a> FrameRef<'a> {
    pub fn packed(data: &'a [u8], width: usize, height: usize, format: PixelFormat) -> Self {
        FrameRef { data, width, height, stride: width * format.bytes_per_pixel(), format }
    }

    pub fn geometry(&self) -> FrameGeometry {
        FrameGeometry { width: self.width, height: self.height, stride: self.stride, format: self.format }
    }

    pub fn validate(&self) -> Result<(), FrameError> {
        if self.width == 0 || self.height == 0 {
            return Err(FrameError(format!("empty frame {}x{}", self.width, self.height)));
        }
        if self.stride < self.width * self.format.bytes_per_pixel() {
            return Err(FrameError(format!("stride {} too small for width {}", self.stride, self.width)));
        }
        let needed = match self.format {
            PixelFormat::Nv12 => {
                if !self.width.is_multiple_of(2) || !self.height.is_multiple_of(2) {
                    return Err(FrameError(format!("NV12 frame {}x{} must have even sides", self.width, self.height)));
                }
                self.stride * self.height * 3 / 2
            }
            _ => self.stride * (self.height - 1) + self.width * self.format.bytes_per_pixel(),
        };
        if self.data.len() < needed {
            return Err(FrameError(format!("{} bytes, a {}x{} {:?} frame needs {needed}", self.data.len(), self.width, self.height, self.format)));
        }
        Ok(())
    }

    /// RGB of pixel (x, y) as floats 0..=255.
    #[inline(always)]
    pub(crate) fn rgb(&self, x: usize, y: usize) -> [f32; 3] {
        match self.format {
            PixelFormat::Rgb | PixelFormat::Rgba => {
                let i = y * self.stride + x * self.format.bytes_per_pixel();
                [self.data[i] as f32, self.data[i + 1] as f32, self.data[i + 2] as f32]
            }
            PixelFormat::Nv12 => {
                let luma = self.data[y * self.stride + x] as f32;
                let uv = self.stride * self.height + (y / 2) * self.stride + (x / 2) * 2;
                let (u, v) = (self.data[uv] as f32 - 128.0, self.data[uv + 1] as f32 - 128.0);
                let c = 1.164_383_6 * (luma - 16.0);
                let clamp = |v: f32| v.clamp(0.0, 255.0).round();
                [clamp(c + 1.596_026_8 * v), clamp(c - 0.391_762_3 * u - 0.812_968 * v), clamp(c + 2.017_232_2 * u)]
            }
        }
    }
}

/// One frame's segmentation, buffers reused from frame to frame.
#[derive(Clone, Debug, Default)]
pub struct Segmentation {
    pub width: usize,
    pub height: usize,
    /// Class index per pixel, or [`UNKNOWN`] where confidence < threshold.
    pub classes: Vec<u8>,
    /// Max softmax probability per pixel; empty unless the engine was asked
    /// for it (`EngineOptions::pixel_confidence`).
    pub confidence: Vec<f32>,
    /// Share of all pixels confidently classed as road.
    pub road_coverage: f32,
    pub mean_confidence: f32,
    /// The gamma the frame was brightened with on its way into the model
    /// (`crate::exposure`); None: it went in as it came.
    pub brightened: Option<f32>,
}

impl Segmentation {
    /// 1 where the pixel is (confidently) one of `road_classes`, else 0.
    pub fn road_mask(&self, road_classes: &[usize]) -> Vec<u8> {
        self.classes.iter().map(|&c| u8::from(c != UNKNOWN && road_classes.contains(&(c as usize)))).collect()
    }
}

/// Offsets (in pixels, along rows and columns) at which an unknown pixel
/// looks for road: one found makes it part of the road's uncertain edge.
pub const EDGE_REACH: [usize; 2] = [3, 8];

/// What an overlay draws, as plain data a backend can copy to its device:
/// per class a tint (colour, opacity; opacity 0 leaves the pixel alone), a
/// faint tint over the road's uncertain edge (pixels of [`UNKNOWN`] class
/// with road [`EDGE_REACH`] pixels away), optionally a sparse checker over
/// the other unknown pixels, and the ego vehicle's hood (from each column's
/// first hood row down) over everything else; nothing outside the picture.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameOverlay {
    /// 256 entries, by class index ([`UNKNOWN`]'s entry is unused).
    pub class_tints: Vec<([u8; 3], f32)>,
    /// Which classes are road (256 entries): the edge looks for them.
    pub road: Vec<bool>,
    /// The road's uncertain edge; None: not drawn.
    pub edge: Option<([u8; 3], f32)>,
    /// Drawn where `(x / 4 + y / 4)` is even; None: unknown pixels untouched.
    pub unknown: Option<([u8; 3], f32)>,
    pub hood: ([u8; 3], f32),
    /// First hood row per column (frame width entries), or empty: no hood.
    pub hood_tops: Vec<u32>,
    /// The picture inside letterbox/pillarbox bars, `[x0, y0, x1, y1]` (x1,
    /// y1 exclusive): nothing is drawn outside it.
    pub picture: [u32; 4],
}

impl FrameOverlay {
    /// The tint of pixel (x, y) of a `width`-wide frame whose classes are
    /// `classes` (row-major), or None where the frame shows through.
    #[inline]
    pub fn tint(&self, classes: &[u8], width: usize, x: usize, y: usize) -> Option<([u8; 3], f32)> {
        let [x0, y0, x1, y1] = self.picture.map(|v| v as usize);
        if x < x0 || y < y0 || x >= x1 || y >= y1 {
            return None;
        }
        if self.hood_tops.get(x).is_some_and(|&top| y >= top as usize) {
            return Some(self.hood);
        }
        let class = classes[y * width + x];
        if class != UNKNOWN {
            return Some(self.class_tints[class as usize]).filter(|t| t.1 > 0.0);
        }
        if let Some(edge) = self.edge.filter(|e| e.1 > 0.0) {
            let road_at = |nx: usize, ny: usize| (x0..x1).contains(&nx) && (y0..y1).contains(&ny) && self.road[classes[ny * width + nx] as usize];
            let near = EDGE_REACH.iter().any(|&r| {
                (x >= r && road_at(x - r, y)) || road_at(x + r, y) || (y >= r && road_at(x, y - r)) || road_at(x, y + r)
            });
            if near {
                return Some(edge);
            }
        }
        self.unknown.filter(|_| (x / 4 + y / 4).is_multiple_of(2))
    }
}
