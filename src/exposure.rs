//! Dark frames brightened before the model sees them, as a camera's auto
//! exposure would: a frame whose mean luma is under a target gets a gamma
//! curve that lifts it towards the target. Only the model's input changes;
//! annotated video, the hood and smoothing see the frame as it came.
//!
//! Why: the bundled model learnt road from daylight streets. On a Berlin
//! crossing at blue hour (mean luma 0.13) it found road on 45% of what
//! Intel's model calls road; the same frames brightened to 0.25 gave 65%
//! (`docs/exposure.md`). A gamma, not a gain: a gain saturates the street
//! lights and lifts the dark road less than the sky (0.51 at best).
//! The curve is continuous in the frame's luma (gamma 1 at the target), so
//! a stream whose light drifts across the target does not jump.
//!
//! The curve is a 256-entry table shared by every backend (the CPU's
//! preprocessing and the CUDA kernel index the same floats), so both see
//! the same input, and the identity table leaves the input bit for bit as
//! before.

use crate::frame::{FrameRef, PixelFormat};

/// Default target mean luma (0..1): every CamVid val frame is above it
/// (darkest 0.293), so the frames the model selects on are untouched;
/// 0.30 already cost one unseen BDD frame at dusk (0.268) 0.018 of road IoU.
pub const DEFAULT_TARGET: f32 = 0.25;
/// The strongest curve used: a frame brightened fully to the target shows
/// sensor noise and black sky that the model paints as road
/// (docs/exposure.md).
pub const MIN_GAMMA: f32 = 0.7;
/// Under this mean luma a frame is an unlit scene: what shows is what the
/// headlights light, already bright, and brightening the rest shows the
/// model sensor noise and black sky it paints as road. An unlit highway at
/// night (tmo324's night.mp4, 0.022-0.034) lost road against Intel's model
/// at any curve, flickered a third more (0.98% to 1.31% of pixels) and grew
/// its hood up the dark shoulder. The curve fades in from here ...
pub const UNLIT: f32 = 0.04;
/// ... to full strength here: the darkest frame it helped, a BDD street at
/// night, is at 0.087 (docs/exposure.md).
pub const LIT: f32 = 0.08;
/// Pixels sampled for the mean: every 4th column of every 4th row, 0.15 ms
/// (NV12) to 0.37 ms (RGB) of host time for a 1080p frame
/// (`examples/exposure_cost.rs`).
const SAMPLE_STEP: usize = 4;

/// How dark frames are brightened (inert settings).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exposure {
    /// Frames with a mean luma (0..1) under this are brightened; 0 = off.
    pub target: f32,
}

impl Exposure {
    pub const OFF: Exposure = Exposure { target: 0.0 };
    pub const DEFAULT: Exposure = Exposure { target: DEFAULT_TARGET };

    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..1.0).contains(&self.target) {
            return Err(format!("exposure target {} must be within 0 (off) .. 1 (exclusive)", self.target));
        }
        Ok(())
    }

    pub fn is_off(&self) -> bool {
        self.target <= 0.0
    }

    /// The gamma for a frame of mean luma `luma` (0..1): 1 at or above the
    /// target, else the one that maps `luma` to the target, no stronger than
    /// [`MIN_GAMMA`], faded out between [`LIT`] and [`UNLIT`] (1 below it).
    /// Continuous in `luma` everywhere.
    pub fn gamma_for(&self, luma: f32) -> f32 {
        if self.is_off() || luma >= self.target || luma <= UNLIT {
            return 1.0;
        }
        let full = (self.target.ln() / luma.ln()).clamp(MIN_GAMMA, 1.0);
        let strength = ((luma - UNLIT) / (LIT - UNLIT)).clamp(0.0, 1.0);
        1.0 - strength * (1.0 - full)
    }

    /// The curve for `frame`.
    pub fn curve_for(&self, frame: &FrameRef<'_>) -> ToneCurve {
        if self.is_off() {
            return ToneCurve::IDENTITY;
        }
        ToneCurve::gamma(self.gamma_for(mean_luma(frame)))
    }
}

/// Value in (0..=255) -> value out, as floats, for each of R, G and B.
#[derive(Clone, Debug, PartialEq)]
pub struct ToneCurve {
    gamma: f32,
    table: [f32; 256],
}

impl ToneCurve {
    pub const IDENTITY: ToneCurve = ToneCurve { gamma: 1.0, table: identity_table() };

    /// 255 * (v / 255)^gamma, rounded to whole values as an 8-bit picture
    /// would be (so a CPU and a GPU reading it agree exactly).
    pub fn gamma(gamma: f32) -> ToneCurve {
        if gamma == 1.0 {
            return ToneCurve::IDENTITY;
        }
        let mut table = [0.0; 256];
        for (v, out) in table.iter_mut().enumerate() {
            *out = (255.0 * (v as f64 / 255.0).powf(gamma as f64)).round() as f32;
        }
        ToneCurve { gamma, table }
    }

    pub fn gamma_value(&self) -> f32 {
        self.gamma
    }

    pub fn is_identity(&self) -> bool {
        self.gamma == 1.0
    }

    /// The gamma, when the curve brightens (`Segmentation::brightened`).
    pub fn brightened(&self) -> Option<f32> {
        (!self.is_identity()).then_some(self.gamma)
    }

    pub fn table(&self) -> &[f32; 256] {
        &self.table
    }

    /// `v` (a whole value 0..=255, as `FrameRef::rgb` gives) through the curve.
    #[inline(always)]
    pub fn map(&self, v: f32) -> f32 {
        self.table[v as u8 as usize]
    }
}

impl Default for ToneCurve {
    fn default() -> Self {
        ToneCurve::IDENTITY
    }
}

const fn identity_table() -> [f32; 256] {
    let mut t = [0.0; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i as f32;
        i += 1;
    }
    t
}

/// Mean luma of `frame`, 0..1 (BT.601 weights of full-range RGB; NV12's
/// limited-range Y stretched to full range, which is the same quantity),
/// over a grid of sampled pixels.
pub fn mean_luma(frame: &FrameRef<'_>) -> f32 {
    let (w, h) = (frame.width, frame.height);
    if w == 0 || h == 0 || frame.validate().is_err() {
        return 1.0;
    }
    // A frame too small for the grid (no sample at SAMPLE_STEP / 2): every pixel.
    let step = if w > SAMPLE_STEP / 2 && h > SAMPLE_STEP / 2 { SAMPLE_STEP } else { 1 };
    let luma = |x: usize, y: usize| match frame.format {
        PixelFormat::Nv12 => ((frame.data[y * frame.stride + x] as f64 - 16.0) * (255.0 / 219.0)).clamp(0.0, 255.0),
        PixelFormat::Rgb | PixelFormat::Rgba => {
            let i = y * frame.stride + x * frame.format.bytes_per_pixel();
            let p = &frame.data[i..i + 3];
            0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64
        }
    };
    let (mut sum, mut n) = (0.0f64, 0usize);
    for y in (step / 2..h).step_by(step) {
        for x in (step / 2..w).step_by(step) {
            sum += luma(x, y);
            n += 1;
        }
    }
    (sum / n as f64 / 255.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grey(v: u8, w: usize, h: usize) -> Vec<u8> {
        vec![v; w * h * 3]
    }

    #[test]
    fn bright_frames_and_off_keep_the_identity() {
        let px = grey(128, 64, 36);
        let frame = FrameRef::packed(&px, 64, 36, PixelFormat::Rgb);
        assert!(Exposure::DEFAULT.curve_for(&frame).is_identity());
        let dark = grey(40, 64, 36);
        let frame = FrameRef::packed(&dark, 64, 36, PixelFormat::Rgb);
        assert!(Exposure::OFF.curve_for(&frame).is_identity());
        assert!(!Exposure::DEFAULT.curve_for(&frame).is_identity());
        for v in 0..=255u8 {
            assert_eq!(ToneCurve::IDENTITY.map(v as f32), v as f32);
        }
    }

    #[test]
    fn the_gamma_reaches_the_target_and_is_bounded_and_continuous() {
        let e = Exposure::DEFAULT;
        let g = e.gamma_for(0.15);
        assert!((0.15f32.powf(g) - 0.25).abs() < 1e-4, "0.15^{g}");
        assert_eq!(e.gamma_for(0.09), MIN_GAMMA, "dark frames are capped");
        assert_eq!(e.gamma_for(0.03), 1.0, "an unlit scene is left alone");
        let fading = e.gamma_for(0.06);
        assert!(fading > MIN_GAMMA && fading < 1.0, "{fading}");
        for (a, b) in [(UNLIT, UNLIT + 1e-5), (LIT - 1e-5, LIT)] {
            assert!((e.gamma_for(a) - e.gamma_for(b)).abs() < 1e-3, "no jump at {a}");
        }
        assert_eq!(e.gamma_for(0.25), 1.0);
        assert!((e.gamma_for(0.2499) - 1.0).abs() < 1e-3, "no jump at the target");
        assert_eq!(e.gamma_for(0.9), 1.0);
    }

    #[test]
    fn the_curve_lifts_dark_values_keeps_the_ends_and_is_monotonic() {
        let c = ToneCurve::gamma(0.7);
        assert_eq!(c.map(0.0), 0.0);
        assert_eq!(c.map(255.0), 255.0);
        assert!(c.map(30.0) > 30.0);
        assert!(c.table().windows(2).all(|p| p[0] <= p[1]));
        assert!(c.table().iter().all(|v| v.fract() == 0.0), "whole values, as an 8-bit picture");
    }

    #[test]
    fn nv12_and_rgb_of_one_grey_give_one_luma() {
        let (w, h) = (32, 16);
        // Full-range grey 100 is limited-range Y 16 + 100 * 219 / 255 = 101.9.
        let rgb = grey(100, w, h);
        let mut nv12 = vec![102u8; w * h];
        nv12.extend(vec![128u8; w * h / 2]);
        let a = mean_luma(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb));
        let b = mean_luma(&FrameRef::packed(&nv12, w, h, PixelFormat::Nv12));
        assert!((a - 100.0 / 255.0).abs() < 1e-6);
        assert!((a - b).abs() < 0.005, "{a} vs {b}");
    }

    #[test]
    fn tiny_frames_use_every_pixel() {
        let px = vec![0u8, 0, 0, 255, 255, 255];
        let l = mean_luma(&FrameRef::packed(&px, 2, 1, PixelFormat::Rgb));
        assert!((l - 0.5).abs() < 1e-3, "{l}");
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(Exposure { target: 1.0 }.validate().is_err());
        assert!(Exposure { target: -0.1 }.validate().is_err());
        assert!(Exposure::OFF.validate().is_ok());
    }
}
