//! A road mask as a few hundred numbers: downscaled (nearest) to at most
//! [`MAX_WIDTH`] columns, then run-length coded row-major, alternating
//! not-road and road runs, starting with not-road (a 0 first when the first
//! pixel is road). What a stats line carries with `stats_masks`: the road of
//! every frame, for a fraction of a video's bytes.

use serde::{Deserialize, Serialize};

/// Columns kept: 1/4 of 1280, the model's own logits resolution at 1024 wide.
pub const MAX_WIDTH: usize = 320;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoadRle {
    pub w: usize,
    pub h: usize,
    pub counts: Vec<u32>,
}

/// `mask` (`width` x `height`, non-zero = road) as [`RoadRle`].
pub fn encode(mask: &[u8], width: usize, height: usize) -> RoadRle {
    let step = width.div_ceil(MAX_WIDTH).max(1);
    let (w, h) = (width.div_ceil(step), height.div_ceil(step));
    let mut counts = Vec::new();
    let (mut current, mut run) = (false, 0u32);
    for y in 0..h {
        let row = &mask[(y * step).min(height - 1) * width..][..width];
        for x in 0..w {
            let road = row[(x * step).min(width - 1)] != 0;
            if road != current {
                counts.push(run);
                (current, run) = (road, 0);
            }
            run += 1;
        }
    }
    counts.push(run);
    RoadRle { w, h, counts }
}

impl RoadRle {
    /// The mask back, `w` x `h`, 1 = road.
    pub fn decode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.w * self.h);
        for (i, &n) in self.counts.iter().enumerate() {
            out.extend(std::iter::repeat_n((i % 2) as u8, n as usize));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_road_mask_codes_to_runs_and_back() {
        // Rule: counts alternate not-road/road from not-road, sum to w*h, and decode to the nearest-downscaled mask.
        let (width, height) = (1280, 720);
        let mask: Vec<u8> = (0..width * height).map(|i| u8::from(i / width > 400 && (i % width) > 200)).collect();
        let rle = encode(&mask, width, height);
        assert_eq!((rle.w, rle.h), (320, 180));
        assert_eq!(rle.counts.iter().map(|&c| c as usize).sum::<usize>(), 320 * 180);
        let back = rle.decode();
        for y in 0..180 {
            for x in 0..320 {
                assert_eq!(back[y * 320 + x], mask[y * 4 * width + x * 4], "({x}, {y})");
            }
        }
        assert!(rle.counts.len() < 300, "{} runs for a simple road", rle.counts.len());
        let all_road = encode(&[1; 12], 4, 3);
        assert_eq!(all_road.counts, [0, 12], "road first: a 0-length not-road run");
        assert_eq!(encode(&[0, 1, 1, 0], 2, 2), RoadRle { w: 2, h: 2, counts: vec![1, 2, 1] });
    }
}
