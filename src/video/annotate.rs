//! Draws a frame's segmentation and a status line onto the frame itself.

use crate::engine::Segmentation;
use crate::images::{OverlayStyle, draw_overlay};
use crate::temporal::HoodMask;

use super::font::{draw_text, shade_box, text_width};

/// What the status line reports for one frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameStats {
    /// Share of the scene (the frame less the hood) that is road.
    pub road_coverage: f32,
    /// Share of the frame that is the ego vehicle's hood.
    pub hood_coverage: f32,
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
    /// Tints `rgba` (width*height*4) with the segmentation and the hood, then the status line.
    pub fn draw(&self, rgba: &mut [u8], seg: &Segmentation, hood: &HoodMask, stats: &FrameStats) {
        draw_overlay(rgba, 4, seg, &self.style, Some(hood));
        if !self.show_text {
            return;
        }
        let (w, h) = (seg.width, seg.height);
        let hood_text = if hood.is_empty() { String::new() } else { format!("  HOOD {:.1}%", stats.hood_coverage * 100.0) };
        let text = format!(
            "ROAD {:.1}%{hood_text}  CONF {:.2}  INFER {:.0} MS  {:.1} FPS",
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
        let stats = FrameStats { road_coverage: 0.5, hood_coverage: 0.0, mean_confidence: 0.9, inference_ms: 12.0, fps: 25.0 };
        a.draw(&mut rgba, &seg, &HoodMask::none(w, h), &stats);
        let px = |x: usize, y: usize| &rgba[(y * w + x) * 4..(y * w + x) * 4 + 3];
        assert_ne!(px(10, h - 1), &[100, 100, 100], "road pixel tinted");
        assert_eq!(px(1, h / 2 - 2), &[100, 100, 100], "non-road pixel untouched");
        assert!(rgba.chunks(4).take(w * 15).any(|p| p[..3] == [255, 255, 255]), "status text drawn");
    }

    #[test]
    fn hood_is_drawn_in_its_own_colour() {
        let (w, h) = (64, 64);
        let seg = Segmentation { width: w, height: h, classes: vec![0; w * h], confidence: vec![0.9; w * h], road_coverage: 1.0, mean_confidence: 0.9 };
        let style = OverlayStyle { road_classes: vec![0], ..OverlayStyle::default() };
        let a = Annotator { style: style.clone(), show_text: false };
        let hood = HoodMask::from_tops(w, h, vec![56; w]);
        let mut rgba = vec![100u8; w * h * 4];
        a.draw(&mut rgba, &seg, &hood, &FrameStats::default());
        let px = |x: usize, y: usize| rgba[(y * w + x) * 4..(y * w + x) * 4 + 3].to_vec();
        assert_ne!(px(5, 60), px(5, 40), "hood and road look different");
        assert!(px(5, 60)[2] > px(5, 60)[0], "hood tinted towards {:?}", style.hood_colour);
    }
}
