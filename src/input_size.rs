//! The model's input size for a video or an image: the one rule `process`,
//! `infer`, `eval` and the daemon share. Every frame is resized to one fixed
//! input; its width is chosen (1024 unless configured; by default a portrait
//! source's height is 1024 instead) and the other side follows the source's
//! aspect so nothing is stretched more than rounding needs. Sides are
//! multiples of 32, SegFormer's coarsest stride, so every stage's feature map
//! divides evenly.

/// Input width when none is given.
pub const DEFAULT_WIDTH: u32 = 1024;
/// Input height when the source's size is unknown: 16:9 at the default width.
pub const FALLBACK_HEIGHT: u32 = 576;
/// The largest side the daemon's configuration accepts.
const MAX_SIDE: u32 = 4096;
const STRIDE: u32 = 32;

/// Input height for `width` and frames of `frame_width` x `frame_height`:
/// the frame's aspect rounded to a multiple of 32 in 32..=4096;
/// [`FALLBACK_HEIGHT`] when the frame size is unknown (zero).
pub fn height_for(width: u32, frame_width: u32, frame_height: u32) -> u32 {
    if frame_width == 0 || frame_height == 0 {
        return FALLBACK_HEIGHT;
    }
    let strides = f64::from(width) * f64::from(frame_height) / f64::from(frame_width) / f64::from(STRIDE);
    strides.round().clamp(1.0, f64::from(MAX_SIDE / STRIDE)) as u32 * STRIDE
}

/// `(width, height)` of the input for frames of the given size: the longer
/// side at [`DEFAULT_WIDTH`], the other following the aspect. A portrait
/// phone video (478x850) so runs at 576x1024, not 1024x1824: its road is seen
/// near the scale the model learned (at 1024x1824 the bundled model left the
/// near road of `road2.mp4` in ../shared half unpainted, flicker 5.1% against
/// 2.8%) for a third of the work.
pub fn default_for(frame_width: u32, frame_height: u32) -> (usize, usize) {
    if frame_height > frame_width && frame_width > 0 {
        return (height_for(DEFAULT_WIDTH, frame_height, frame_width) as usize, DEFAULT_WIDTH as usize);
    }
    (DEFAULT_WIDTH as usize, height_for(DEFAULT_WIDTH, frame_width, frame_height) as usize)
}

/// For a configured `width` that makes portrait frames taller than wide
/// (the daemon's `model.width`), the default input those frames would get
/// instead: what to suggest. None for landscape and square frames.
pub fn portrait_suggestion(width: u32, frame_width: u32, frame_height: u32) -> Option<(usize, usize)> {
    (height_for(width, frame_width, frame_height) > width).then(|| default_for(frame_width, frame_height))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn height_follows_the_frame_aspect_in_multiples_of_32() {
        // Rule: height = width * frame aspect, rounded to a multiple of 32 in 32..=4096; unknown sizes give 576.
        assert_eq!(height_for(1024, 1920, 1080), 576);
        assert_eq!(height_for(224, 320, 240), 160);
        assert_eq!(height_for(64, 1000, 10), 32);
        assert_eq!(height_for(1024, 100, 100_000), 4096);
        assert_eq!(height_for(1024, 0, 0), FALLBACK_HEIGHT);
        assert_eq!(default_for(960, 540), (1024, 576));
    }

    #[test]
    fn portrait_frames_get_the_longer_side_at_the_default_width() {
        // Rule: by default the longer side is 1024: landscape and square frames keep 1024 wide, a portrait phone video is 1024 tall with its width from the aspect (a multiple of 32).
        assert_eq!(default_for(478, 850), (576, 1024));
        assert_eq!(default_for(1080, 1920), (576, 1024));
        assert_eq!(default_for(720, 720), (1024, 1024));
        assert_eq!(default_for(1280, 720), (1024, 576));
        assert_eq!(default_for(0, 0), (1024, FALLBACK_HEIGHT as usize));
        assert_eq!(portrait_suggestion(1024, 480, 848), Some((576, 1024)), "the daemon's 1024 wide would be 1024x1824");
        assert_eq!(portrait_suggestion(1024, 1280, 720), None);
        assert_eq!(portrait_suggestion(512, 720, 720), None);
    }
}
