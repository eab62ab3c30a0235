//! The per-pixel loops of the observers, which every frame of every stream
//! runs on the host (the intake thread): luma, its change since the last
//! frame, and sums over cells. Compiled with AVX2/AVX-512 where the CPU has
//! them (`multiversion!`); the baseline build is SSE2 only, and these loops
//! were a third of a 1080p frame's observation there.

use crate::backend::cpu::simd::multiversion;
use crate::frame::{FrameRef, PixelFormat};

pub fn rgba_luma(rgba: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.resize(rgba.len() / 4, 0);
    packed_luma_row4(out, rgba);
}

/// Full-range luma of any frame into `out` (`width * height`): NV12's Y
/// plane stretched from video range (16..=235), so the estimators'
/// thresholds mean the same whatever the decoder hands over.
pub fn frame_luma(frame: &FrameRef<'_>, out: &mut Vec<u8>) {
    let (w, h) = (frame.width, frame.height);
    // Every byte is written below: a buffer of the right size (the daemon's,
    // from the frame before) is not cleared first.
    out.resize(w * h, 0);
    let rows = out.chunks_exact_mut(w.max(1)).enumerate().map(|(y, dst)| (dst, &frame.data[y * frame.stride..]));
    match frame.format {
        PixelFormat::Nv12 => rows.for_each(|(dst, row)| video_range_row(dst, &row[..w])),
        PixelFormat::Rgba => rows.for_each(|(dst, row)| packed_luma_row4(dst, &row[..w * 4])),
        PixelFormat::Rgb => rows.for_each(|(dst, row)| packed_luma_row3(dst, &row[..w * 3])),
    }
}

/// `(y - 16) * 255 / 219`, truncated and clamped to 0..=255, in arithmetic
/// that vectorises (a 256-entry table lookup does not): 76310 / 2^16 is
/// 255 / 219 high by 1.5e-5, too little to lift any of the 220 in-range
/// values over the next integer (their largest fraction is 218 / 219).
#[inline(always)]
fn video_to_full_range(y: u8) -> u8 {
    ((y.saturating_sub(16) as u32 * 76_310) >> 16).min(255) as u8
}

#[inline(always)]
fn rgb_luma(p: &[u8]) -> u8 {
    ((p[0] as u32 * 77 + p[1] as u32 * 150 + p[2] as u32 * 29) >> 8) as u8
}

multiversion! {
    fn video_range_row(dst: &mut [u8], row: &[u8]) {
        dst.iter_mut().zip(row).for_each(|(d, &y)| *d = video_to_full_range(y));
    }
}

multiversion! {
    fn packed_luma_row3(dst: &mut [u8], row: &[u8]) {
        dst.iter_mut().zip(row.chunks_exact(3)).for_each(|(d, p)| *d = rgb_luma(p));
    }
}

multiversion! {
    fn packed_luma_row4(dst: &mut [u8], row: &[u8]) {
        dst.iter_mut().zip(row.chunks_exact(4)).for_each(|(d, p)| *d = rgb_luma(p));
    }
}

multiversion! {
    /// Adds each pixel's |change| (`cur` against `prev`) to its column's sum.
    pub fn add_abs_diff(sums: &mut [u16], cur: &[u8], prev: &[u8]) {
        for ((sum, &a), &b) in sums.iter_mut().zip(cur).zip(prev) {
            *sum += a.abs_diff(b) as u16;
        }
    }
}

multiversion! {
    /// Adds a row of luma to its columns' sums.
    pub fn add_row(sums: &mut [u16], row: &[u8]) {
        for (sum, &v) in sums.iter_mut().zip(row) {
            *sum += v as u16;
        }
    }
}

/// Sums `columns` in runs of `cell_w` into `cells` (one per run; the last
/// run may be short). The width is a constant for the common cell widths,
/// so the sum of a cell is straight-line code rather than a loop of a few
/// turns per cell.
pub fn sum_cells(cells: &mut [u32], columns: &[u16], cell_w: usize) {
    fn fixed<const N: usize>(cells: &mut [u32], columns: &[u16]) {
        let whole = columns.chunks_exact(N);
        let rest = whole.remainder();
        let mut cells = cells.iter_mut();
        // `whole` first: zip takes from its left side first, and a cell taken
        // after the last whole run would be lost to the short run.
        for (run, cell) in whole.zip(cells.by_ref()) {
            *cell = run.iter().map(|&v| v as u32).sum();
        }
        if let Some(cell) = cells.next().filter(|_| !rest.is_empty()) {
            *cell = rest.iter().map(|&v| v as u32).sum();
        }
    }
    match cell_w {
        2 => fixed::<2>(cells, columns),
        3 => fixed::<3>(cells, columns),
        4 => fixed::<4>(cells, columns),
        6 => fixed::<6>(cells, columns),
        8 => fixed::<8>(cells, columns),
        12 => fixed::<12>(cells, columns),
        _ => cells.iter_mut().zip(columns.chunks(cell_w.max(1))).for_each(|(cell, run)| *cell = run.iter().map(|&v| v as u32).sum()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn video_range_is_stretched_exactly_as_the_integer_formula() {
        for y in 0..=255u8 {
            let exact = ((y as i32 - 16) * 255 / 219).clamp(0, 255) as u8;
            assert_eq!(video_to_full_range(y), exact, "Y = {y}");
        }
    }

    #[test]
    fn cells_sum_their_columns_for_every_cell_width() {
        let columns: Vec<u16> = (0..1283u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 20) as u16).collect();
        for cell_w in 1..=14 {
            let n = columns.len().div_ceil(cell_w);
            let mut cells = vec![u32::MAX; n];
            sum_cells(&mut cells, &columns, cell_w);
            let want: Vec<u32> = columns.chunks(cell_w).map(|r| r.iter().map(|&v| v as u32).sum()).collect();
            assert_eq!(cells, want, "cell width {cell_w}");
        }
    }

    #[test]
    fn every_format_gives_the_same_luma_as_per_pixel_arithmetic() {
        let (w, h) = (37, 5);
        let px = |i: usize| (i.wrapping_mul(2_654_435_761) >> 11) as u8;
        let rgb: Vec<u8> = (0..w * h * 3).map(px).collect();
        let rgba: Vec<u8> = rgb.chunks(3).flat_map(|p| [p[0], p[1], p[2], 9]).collect();
        let nv12: Vec<u8> = (0..w * h + w * h / 2).map(px).collect();
        let want_rgb: Vec<u8> = rgb.chunks(3).map(rgb_luma).collect();
        let want_y: Vec<u8> = nv12[..w * h].iter().map(|&y| ((y as i32 - 16) * 255 / 219).clamp(0, 255) as u8).collect();
        let mut out = vec![7; 3];
        frame_luma(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb), &mut out);
        assert_eq!(out, want_rgb);
        frame_luma(&FrameRef::packed(&rgba, w, h, PixelFormat::Rgba), &mut out);
        assert_eq!(out, want_rgb);
        rgba_luma(&rgba, &mut out);
        assert_eq!(out, want_rgb);
        frame_luma(&FrameRef::packed(&nv12, w, h, PixelFormat::Nv12), &mut out);
        assert_eq!(out, want_y);
    }
}
