//! Draws a frame's segmentation and a status line onto the frame itself.
//! No GStreamer here: the engine-only build (and the GPU test that compares
//! the CUDA overlay with this one byte for byte) has it too.

mod font;

use std::time::SystemTime;

use crate::engine::Segmentation;
use crate::frame::{FrameOverlay, PixelFormat};
use crate::images::{OverlayStyle, draw_overlay, frame_overlay, overlay_tint};
use crate::temporal::HoodMask;

use font::{draw_text, shade_box, text_width};

/// What the status line reports for one frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameStats {
    /// Share of the scene (the picture inside any letterbox/pillarbox bars,
    /// less the hood) that is road.
    pub road_coverage: f32,
    /// Share of the frame that is the ego vehicle's hood.
    pub hood_coverage: f32,
    /// Share of the frame whose road the grounded-road rule handed to another
    /// class (islands joined to nothing below: night sky, lit walls, tunnel
    /// ceilings); 0 with the rule off.
    pub road_cut: f32,
    pub mean_confidence: f32,
    /// The gamma the frame was brightened with before inference
    /// (`crate::exposure`); None: it went in as it came.
    pub brightened: Option<f32>,
    pub inference_ms: f64,
    pub fps: f64,
}

/// Where a frame comes from, for the line above the status line.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub stream: &'a str,
    /// Wall-clock time the frame was decoded, drawn in UTC.
    pub decoded_at: SystemTime,
}

#[derive(Clone, Debug)]
pub struct Annotator {
    pub style: OverlayStyle,
    /// Draw the status line (road, hood, confidence, inference time, fps).
    pub show_text: bool,
    /// With `show_text`, a line above it naming the stream and the time the
    /// frame was decoded (the daemon, whose recordings outlive their
    /// context; `process` has one input and leaves it out).
    pub show_origin: bool,
}

impl Annotator {
    /// Tints a packed frame (RGBA, or NV12 as the ring carries it) at the
    /// segmentation's size with the segmentation and the hood, then draws the
    /// status line.
    pub fn draw(&self, pixels: &mut [u8], format: PixelFormat, seg: &Segmentation, hood: &HoodMask, stats: &FrameStats, origin: Origin<'_>) {
        let (w, h) = (seg.width, seg.height);
        match format {
            PixelFormat::Nv12 => tint_nv12(pixels, w, h, overlay_tint(seg, &self.style, Some(hood))),
            PixelFormat::Rgb => draw_overlay(pixels, 3, seg, &self.style, Some(hood)),
            PixelFormat::Rgba => draw_overlay(pixels, 4, seg, &self.style, Some(hood)),
        }
        self.draw_status(pixels, format, w, h, hood, stats, origin);
    }

    /// What `draw` tints, as data for a backend that draws it in its frame
    /// path ([`crate::engine::Engine::set_overlays`]).
    pub fn overlay(&self, hood: &HoodMask, width: usize, height: usize) -> FrameOverlay {
        frame_overlay(&self.style, Some(hood), width, height)
    }

    /// The lines of text drawn on a frame, top first (none without `show_text`).
    pub fn text_lines(&self, hood: &HoodMask, stats: &FrameStats, origin: Origin<'_>) -> Vec<String> {
        if !self.show_text {
            return Vec::new();
        }
        let mut lines = Vec::with_capacity(2);
        if self.show_origin {
            lines.push(format!("{}  {}", origin.stream, crate::clock::strftime("%Y-%m-%d %H:%M:%S UTC", origin.decoded_at)));
        }
        let hood_text = if hood.is_empty() { String::new() } else { format!("  HOOD {:.1}%", stats.hood_coverage * 100.0) };
        lines.push(format!(
            "ROAD {:.1}%{hood_text}  CONF {:.2}  INFER {:.0} MS  {:.1} FPS",
            stats.road_coverage * 100.0,
            stats.mean_confidence,
            stats.inference_ms,
            stats.fps
        ));
        lines
    }

    /// The text lines alone, over a `w` x `h` packed frame already tinted.
    #[allow(clippy::too_many_arguments)]
    pub fn draw_status(&self, pixels: &mut [u8], format: PixelFormat, w: usize, h: usize, hood: &HoodMask, stats: &FrameStats, origin: Origin<'_>) {
        let lines = self.text_lines(hood, stats, origin);
        if lines.is_empty() {
            return;
        }
        let channels = match format {
            PixelFormat::Nv12 => 1,
            PixelFormat::Rgb => 3,
            PixelFormat::Rgba => 4,
        };
        // Scale the font with the picture so it stays legible at 1080p and fits at 320 px.
        // Nothing is drawn on letterbox/pillarbox bars: the box sits at the
        // picture's corner (on NV12 at even coordinates, as chroma is 2x2).
        let (x0, y0, x1, _) = hood.bars.picture(w, h);
        let (x0, y0) = if format == PixelFormat::Nv12 { (x0.next_multiple_of(2), y0.next_multiple_of(2)) } else { (x0, y0) };
        let pic_w = x1.saturating_sub(x0);
        let scale = (pic_w / 640).clamp(1, 4);
        let pad = 4 * scale;
        // Glyphs are 7 rows; lines 3 rows apart.
        let line_h = 10 * scale;
        let widest = lines.iter().map(|l| text_width(l, scale)).max().unwrap_or(0);
        let box_w = (widest + 2 * pad).min(pic_w);
        let box_h = lines.len() * line_h - 3 * scale + 2 * pad;
        shade_box(pixels, w, h, channels, x0, y0, box_w, box_h);
        if format == PixelFormat::Nv12 {
            // Grey box, white text: the box's chroma goes to neutral.
            let uv = &mut pixels[w * h..];
            for row in uv.chunks_exact_mut(w).skip(y0 / 2).take(box_h.div_ceil(2)) {
                for c in &mut row[x0.min(w)..(x0 + box_w).min(w)] {
                    *c = 128;
                }
            }
        }
        let white = if format == PixelFormat::Nv12 { [235; 3] } else { [255; 3] };
        for (i, line) in lines.iter().enumerate() {
            draw_text(pixels, w, h, channels, x0 + pad..x1, y0 + pad + i * line_h, scale, line, white);
        }
    }
}

/// BT.601 video-range YUV of an RGB colour (what H.264 decoders produce).
fn yuv(rgb: [u8; 3]) -> [f32; 3] {
    let [r, g, b] = rgb.map(f32::from);
    [16.0 + 0.256_788 * r + 0.504_129 * g + 0.097_906 * b, 128.0 - 0.148_223 * r - 0.290_993 * g + 0.439_216 * b, 128.0 + 0.439_216 * r - 0.367_788 * g - 0.071_427 * b]
}

fn blend(under: u8, over: f32, alpha: f32) -> u8 {
    (under as f32 * (1.0 - alpha) + over * alpha).round() as u8
}

/// Tints NV12 in place, as `draw_overlay` tints RGB: luma per pixel, and each
/// 2x2 block's shared chroma by the tint of its top-left pixel.
fn tint_nv12(pixels: &mut [u8], w: usize, h: usize, tint: impl Fn(usize) -> Option<([u8; 3], f32)>) {
    // The tint is one of a few colours, mostly the same as the pixel before:
    // convert each only when it changes, not once per pixel.
    let mut last = ([0u8; 3], yuv([0; 3]));
    let mut yuv_of = |colour: [u8; 3]| {
        if last.0 != colour {
            last = (colour, yuv(colour));
        }
        last.1
    };
    let (luma, chroma) = pixels.split_at_mut(w * h);
    for (i, y) in luma.iter_mut().enumerate() {
        if let Some((colour, alpha)) = tint(i) {
            *y = blend(*y, yuv_of(colour)[0], alpha);
        }
    }
    for (by, row) in chroma.chunks_exact_mut(w).take(h / 2).enumerate() {
        for (bx, uv) in row.chunks_exact_mut(2).enumerate() {
            if let Some((colour, alpha)) = tint(2 * by * w + 2 * bx) {
                let [_, u, v] = yuv_of(colour);
                uv[0] = blend(uv[0], u, alpha);
                uv[1] = blend(uv[1], v, alpha);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::UNKNOWN;

    fn origin() -> Origin<'static> {
        Origin { stream: "cam", decoded_at: SystemTime::UNIX_EPOCH }
    }

    /// A 64x64 segmentation of class `class_of(pixel)`, the road class (0)
    /// tinted, and a status line to draw.
    fn scene(class_of: impl Fn(usize) -> u8) -> (Segmentation, Annotator, FrameStats) {
        let (w, h) = (64, 64);
        let seg = Segmentation {
            width: w,
            height: h,
            classes: (0..w * h).map(class_of).collect(),
            confidence: vec![0.9; w * h],
            road_coverage: 0.5,
            mean_confidence: 0.9,
            brightened: None,
        };
        let a = Annotator { style: OverlayStyle { road_classes: vec![0], ..OverlayStyle::default() }, show_text: true, show_origin: false };
        let stats = FrameStats { road_coverage: 0.5, hood_coverage: 0.0, road_cut: 0.0, mean_confidence: 0.9, brightened: None, inference_ms: 12.0, fps: 25.0 };
        (seg, a, stats)
    }

    #[test]
    fn road_is_tinted_and_text_is_drawn() {
        let (w, h) = (64, 64);
        let (seg, a, stats) = scene(|i| if i / w > h / 2 { 0 } else if i % 7 == 0 { UNKNOWN } else { 1 });
        let mut rgba = vec![100u8; w * h * 4];
        a.draw(&mut rgba, PixelFormat::Rgba, &seg, &HoodMask::none(w, h), &stats, origin());
        let px = |x: usize, y: usize| &rgba[(y * w + x) * 4..(y * w + x) * 4 + 3];
        assert_ne!(px(10, h - 1), &[100, 100, 100], "road pixel tinted");
        assert_eq!(px(1, h / 2 - 2), &[100, 100, 100], "non-road pixel untouched");
        assert!(rgba.chunks(4).take(w * 15).any(|p| p[..3] == [255, 255, 255]), "status text drawn");
    }

    #[test]
    fn nv12_is_tinted_like_rgba_and_text_is_drawn() {
        // Rule: on NV12 the road tint and the status line land as they do on RGBA (same colours after conversion, within rounding).
        let (w, h) = (64, 64);
        let (seg, a, stats) = scene(|i| if i / w >= h / 2 { 0 } else { 1 });
        // Mid grey in both formats.
        let mut nv12 = [vec![126u8; w * h], vec![128u8; w * h / 2]].concat();
        let mut rgba = vec![128u8; w * h * 4];
        a.draw(&mut nv12, PixelFormat::Nv12, &seg, &HoodMask::none(w, h), &stats, origin());
        a.draw(&mut rgba, PixelFormat::Rgba, &seg, &HoodMask::none(w, h), &stats, origin());
        let frame = crate::frame::FrameRef::packed(&nv12, w, h, PixelFormat::Nv12);
        for (x, y) in [(10, h - 2), (40, h / 2 + 3), (1, h / 2 - 2)] {
            let from_nv12 = frame.rgb(x, y);
            let i = (y * w + x) * 4;
            for c in 0..3 {
                assert!((from_nv12[c] - rgba[i + c] as f32).abs() <= 3.0, "({x}, {y}): {from_nv12:?} vs {:?}", &rgba[i..i + 3]);
            }
        }
        assert!(nv12[..w * 15].contains(&235), "status text drawn on the luma");
    }

    #[test]
    fn the_stream_and_the_time_it_was_decoded_are_drawn_above_the_status() {
        // Rule: with show_origin (the daemon's overlay_text) a line naming the stream and the frame's decode time in UTC is drawn above the status line; without it the frame carries the status line alone.
        let (w, h) = (400, 64);
        let (seg, mut a, stats) = scene(|_| 1);
        let seg = Segmentation { width: w, height: h, classes: vec![1; w * h], confidence: vec![0.9; w * h], ..seg };
        let at = Origin { stream: "front_cam-2", decoded_at: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_771_845) };
        let draw = |a: &Annotator, origin: Origin<'_>| {
            let mut rgba = vec![100u8; w * h * 4];
            a.draw(&mut rgba, PixelFormat::Rgba, &seg, &HoodMask::none(w, h), &stats, origin);
            rgba
        };
        // White (text) pixels in the rows of line `n` (scale 1: 4 px padding, lines 10 px apart).
        let text_in_line = |rgba: &[u8], n: usize| (4 + 10 * n..11 + 10 * n).any(|y| (0..w).any(|x| rgba[(y * w + x) * 4..][..3] == [255, 255, 255]));
        let alone = draw(&a, at);
        assert!(text_in_line(&alone, 0) && !text_in_line(&alone, 1), "the status line alone");
        a.show_origin = true;
        let lines = a.text_lines(&HoodMask::none(w, h), &stats, at);
        assert_eq!(lines[0], "front_cam-2  2026-11-27 09:30:45 UTC");
        assert!(lines[1].starts_with("ROAD 50.0%"), "{lines:?}");
        let both = draw(&a, at);
        assert!(text_in_line(&both, 0) && text_in_line(&both, 1), "two lines drawn");
        assert_ne!(both, draw(&a, Origin { stream: "rear", ..at }), "the stream's name is drawn");
        assert_ne!(both, draw(&a, Origin { decoded_at: at.decoded_at + std::time::Duration::from_secs(1), ..at }), "the time is drawn");
    }

    #[test]
    fn hood_is_drawn_in_its_own_colour() {
        let (w, h) = (64, 64);
        let seg = Segmentation { width: w, height: h, classes: vec![0; w * h], confidence: vec![0.9; w * h], road_coverage: 1.0, mean_confidence: 0.9, brightened: None };
        let style = OverlayStyle { road_classes: vec![0], ..OverlayStyle::default() };
        let a = Annotator { style: style.clone(), show_text: false, show_origin: false };
        let hood = HoodMask::from_tops(w, h, vec![56; w]);
        let mut rgba = vec![100u8; w * h * 4];
        a.draw(&mut rgba, PixelFormat::Rgba, &seg, &hood, &FrameStats::default(), origin());
        let px = |x: usize, y: usize| rgba[(y * w + x) * 4..(y * w + x) * 4 + 3].to_vec();
        assert_ne!(px(5, 60), px(5, 40), "hood and road look different");
        assert!(px(5, 60)[2] > px(5, 60)[0], "hood tinted towards {:?}", style.hood_colour);
    }

    #[test]
    fn nothing_is_drawn_on_bars_and_the_status_sits_in_the_picture() {
        // Rule: with pillarbox bars every bar pixel keeps its bytes (road tint and status line alike), and the road inside the picture is tinted.
        let (w, h) = (64, 64);
        let (seg, a, stats) = scene(|_| 0);
        let bars = crate::temporal::Bars { left: 8, right: 6, ..crate::temporal::Bars::NONE };
        let hood = HoodMask::none(w, h).with_bars(bars);
        let mut rgba = vec![7u8; w * h * 4];
        a.draw(&mut rgba, PixelFormat::Rgba, &seg, &hood, &stats, origin());
        for (i, px) in rgba.chunks(4).enumerate() {
            let x = i % w;
            if !(8..w - 6).contains(&x) {
                assert_eq!(&px[..3], &[7, 7, 7], "bar pixel ({x}, {}) drawn on", i / w);
            }
        }
        assert_ne!(&rgba[((h - 1) * w + 30) * 4..((h - 1) * w + 30) * 4 + 3], &[7, 7, 7], "road in the picture tinted");
        assert!(rgba.chunks(4).take(w * 15).any(|p| p[..3] == [255, 255, 255]), "status text drawn in the picture");
    }
}
