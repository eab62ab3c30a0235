//! Draws a frame's segmentation and a status line onto the frame itself.

use crate::engine::Segmentation;
use crate::images::{OverlayStyle, draw_overlay};

use super::font::{draw_text, shade_box, text_width};

/// What the status line reports for one frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameStats {
    pub road_coverage: f32,
    pub mean_confidence: f32,
    pub inference_ms: f64,
    pub fps: f64,
}

#[derive(Clone, Debug)]
pub struct Annotator {
    pub style: OverlayStyle,
    pub show_text: bool,
}

impl Annotator {
    /// Tints `rgba` (width*height*4) with the segmentation, then the status line.
    pub fn draw(&self, rgba: &mut [u8], seg: &Segmentation, stats: &FrameStats) {
        draw_overlay(rgba, 4, seg, &self.style);
        if !self.show_text {
            return;
        }
        let (w, h) = (seg.width, seg.height);
        let text = format!(
            "ROAD {:.1}%  CONF {:.2}  INFER {:.0} MS  {:.1} FPS",
            stats.road_coverage * 100.0,
            stats.mean_confidence,
            stats.inference_ms,
            stats.fps
        );
        // Scale the font with the frame so it stays legible at 1080p and fits at 320 px.
        let scale = (w / 640).clamp(1, 4);
        let pad = 4 * scale;
        let box_w = (text_width(&text, scale) + 2 * pad).min(w);
        let box_h = 7 * scale + 2 * pad;
        shade_box(rgba, w, h, 4, 0, 0, box_w, box_h);
        draw_text(rgba, w, h, 4, pad, pad, scale, &text, [255, 255, 255]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::UNKNOWN;

    #[test]
    fn road_is_tinted_and_text_is_drawn() {
        let (w, h) = (64, 64);
        let seg = Segmentation {
            width: w,
            height: h,
            classes: (0..w * h).map(|i| if i / w > h / 2 { 0 } else if i % 7 == 0 { UNKNOWN } else { 1 }).collect(),
            confidence: vec![0.9; w * h],
            road_coverage: 0.5,
            mean_confidence: 0.9,
        };
        let mut rgba = vec![100u8; w * h * 4];
        let a = Annotator { style: OverlayStyle { road_classes: vec![0], ..OverlayStyle::default() }, show_text: true };
        a.draw(&mut rgba, &seg, &FrameStats { road_coverage: 0.5, mean_confidence: 0.9, inference_ms: 12.0, fps: 25.0 });
        let px = |x: usize, y: usize| &rgba[(y * w + x) * 4..(y * w + x) * 4 + 3];
        assert_ne!(px(10, h - 1), &[100, 100, 100], "road pixel tinted");
        assert_eq!(px(1, h / 2 - 2), &[100, 100, 100], "non-road pixel untouched");
        assert!(rgba.chunks(4).take(w * 15).any(|p| p[..3] == [255, 255, 255]), "status text drawn");
    }
}
