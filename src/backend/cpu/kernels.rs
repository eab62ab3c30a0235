//! CPU element-wise and memory-bound kernels, parallel over rows with rayon.

use rayon::prelude::*;

use super::simd::{self, multiversion};
use crate::backend::{ConvDims, DwConvDims, NormDims, ResizeDims};

/// Rows per rayon task: big enough that scheduling costs vanish, small enough
/// that both cores stay busy on the smallest maps.
const ROWS_PER_TASK: usize = 64;

multiversion! {
    fn layer_norm_rows(x: &[f32], gamma: &[f32], beta: &[f32], y: &mut [f32], dim: usize) {
        for (xr, yr) in x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)) {
            let mean = simd::sum_lanes(xr) / dim as f32;
            let var = simd::sum_sq_dev_lanes(xr, mean) / dim as f32;
            let inv = 1.0 / (var + 1e-5).sqrt();
            for i in 0..dim {
                yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
            }
        }
    }
}

pub fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], y: &mut [f32], d: NormDims) {
    let NormDims { rows, dim } = d;
    let x = &x[..rows * dim];
    y[..rows * dim]
        .par_chunks_mut(ROWS_PER_TASK * dim)
        .zip(x.par_chunks(ROWS_PER_TASK * dim))
        .for_each(|(yc, xc)| layer_norm_rows(xc, gamma, beta, yc, dim));
}

multiversion! {
    fn add_slices(y: &mut [f32], x: &[f32]) {
        for (a, b) in y.iter_mut().zip(x) {
            *a += *b;
        }
    }
}

pub fn add_assign(y: &mut [f32], x: &[f32], len: usize) {
    y[..len].par_chunks_mut(1 << 16).zip(x[..len].par_chunks(1 << 16)).for_each(|(a, b)| add_slices(a, b));
}

pub fn relu(y: &mut [f32], len: usize) {
    y[..len].par_chunks_mut(1 << 16).for_each(|c| c.iter_mut().for_each(|v| *v = v.max(0.0)));
}

/// Channels a depthwise-conv pass keeps in registers: their 9 taps and
/// their sum stay there while the pass walks the row's columns.
const DW_CHANNELS: usize = 16;

multiversion! {
    /// One output row of one image's depthwise 3x3 conv (padding 1) + bias + GELU.
    fn dwconv_row(x: &[f32], w: &[f32], bias: &[f32], out: &mut [f32], row: usize, d: DwConvDims) {
        let DwConvDims { h, w: width, channels: c, .. } = d;
        // The three source rows under this output row; none past the border.
        let src_rows: [Option<&[f32]>; 3] = std::array::from_fn(|dy| {
            let yy = row + dy;
            (yy >= 1 && yy <= h).then(|| &x[(yy - 1) * width * c..yy * width * c])
        });
        let whole = c - c % DW_CHANNELS;
        for c0 in (0..whole).step_by(DW_CHANNELS) {
            let taps: [[f32; DW_CHANNELS]; 9] = std::array::from_fn(|t| w[t * c + c0..][..DW_CHANNELS].try_into().expect("16 taps"));
            let start: [f32; DW_CHANNELS] = bias[c0..c0 + DW_CHANNELS].try_into().expect("16 biases");
            for col in 0..width {
                let mut acc = start;
                for (dy, src_row) in src_rows.iter().enumerate() {
                    let Some(src_row) = src_row else { continue };
                    for dx in 0..3 {
                        let xx = col + dx;
                        if xx == 0 || xx > width {
                            continue;
                        }
                        let src = &src_row[(xx - 1) * c + c0..][..DW_CHANNELS];
                        let tap = &taps[dy * 3 + dx];
                        for i in 0..DW_CHANNELS {
                            acc[i] = simd::fma(src[i], tap[i], acc[i]);
                        }
                    }
                }
                let o = &mut out[col * c + c0..][..DW_CHANNELS];
                for i in 0..DW_CHANNELS {
                    o[i] = simd::gelu(acc[i]);
                }
            }
        }
        // Channels past the last whole group (none in SegFormer, whose MLP
        // widths are multiples of 16), one at a time.
        for ch in whole..c {
            for col in 0..width {
                let mut acc = bias[ch];
                for (dy, src_row) in src_rows.iter().enumerate() {
                    let Some(src_row) = src_row else { continue };
                    for dx in 0..3 {
                        let xx = col + dx;
                        if xx >= 1 && xx <= width {
                            acc = simd::fma(src_row[(xx - 1) * c + ch], w[(dy * 3 + dx) * c + ch], acc);
                        }
                    }
                }
                out[col * c + ch] = simd::gelu(acc);
            }
        }
    }
}

pub fn dwconv3x3_gelu(x: &[f32], w: &[f32], bias: &[f32], y: &mut [f32], d: DwConvDims) {
    let len = d.h * d.w * d.channels;
    let x = &x[..len];
    y[..len].par_chunks_mut(d.w * d.channels).enumerate().for_each(|(row, out)| dwconv_row(x, w, bias, out, row, d));
}

/// Source index pair and weight of the far neighbour for one output
/// coordinate, exactly as PyTorch's `upsample_bilinear2d(align_corners=False)`.
#[inline(always)]
pub fn bilinear_source(dst: usize, src_len: usize, dst_len: usize) -> (usize, usize, f32) {
    let scale = src_len as f32 / dst_len as f32;
    let real = ((dst as f32 + 0.5) * scale - 0.5).max(0.0);
    let i0 = (real as usize).min(src_len - 1);
    let i1 = (i0 + 1).min(src_len - 1);
    (i0, i1, real - i0 as f32)
}

multiversion! {
    fn resize_row(x: &[f32], out: &mut [f32], d: ResizeDims, row: usize, accumulate: bool) {
        let c = d.channels;
        let (y0, y1, ly) = bilinear_source(row, d.src_h, d.dst_h);
        let (hy0, hy1) = (1.0 - ly, ly);
        let r0 = &x[y0 * d.src_w * c..(y0 + 1) * d.src_w * c];
        let r1 = &x[y1 * d.src_w * c..(y1 + 1) * d.src_w * c];
        for col in 0..d.dst_w {
            let (x0, x1, lx) = bilinear_source(col, d.src_w, d.dst_w);
            let (hx0, hx1) = (1.0 - lx, lx);
            let (a, b) = (&r0[x0 * c..(x0 + 1) * c], &r0[x1 * c..(x1 + 1) * c]);
            let (p, q) = (&r1[x0 * c..(x0 + 1) * c], &r1[x1 * c..(x1 + 1) * c]);
            let o = &mut out[col * c..(col + 1) * c];
            for i in 0..c {
                let v = hy0 * (hx0 * a[i] + hx1 * b[i]) + hy1 * (hx0 * p[i] + hx1 * q[i]);
                o[i] = if accumulate { o[i] + v } else { v };
            }
        }
    }
}

pub fn resize_bilinear(x: &[f32], y: &mut [f32], d: ResizeDims, accumulate: bool) {
    let x = &x[..d.src_h * d.src_w * d.channels];
    y[..d.dst_h * d.dst_w * d.channels]
        .par_chunks_mut(d.dst_w * d.channels)
        .enumerate()
        .for_each(|(row, out)| resize_row(x, out, d, row, accumulate));
}

/// Unfolds conv patches: row `(oy, ox)` of `cols` holds the `[ky, kx, c_in]`
/// window under output pixel `(oy, ox)`, zero where it hangs over the border.
pub fn im2col(x: &[f32], cols: &mut [f32], d: ConvDims) {
    let (oh, ow) = (d.out_h(), d.out_w());
    let patch = d.kernel * d.kernel * d.c_in;
    cols[..oh * ow * patch].par_chunks_mut(ow * patch).enumerate().for_each(|(oy, out_row)| {
        for ox in 0..ow {
            let dst = &mut out_row[ox * patch..(ox + 1) * patch];
            for ky in 0..d.kernel {
                let iy = (oy * d.stride + ky) as isize - d.pad as isize;
                let seg = &mut dst[ky * d.kernel * d.c_in..(ky + 1) * d.kernel * d.c_in];
                if iy < 0 || iy >= d.h as isize {
                    seg.fill(0.0);
                    continue;
                }
                let src_row = &x[iy as usize * d.w * d.c_in..(iy as usize + 1) * d.w * d.c_in];
                let ix0 = (ox * d.stride) as isize - d.pad as isize;
                if ix0 >= 0 && ix0 as usize + d.kernel <= d.w {
                    let s = ix0 as usize * d.c_in;
                    seg.copy_from_slice(&src_row[s..s + d.kernel * d.c_in]);
                    continue;
                }
                for kx in 0..d.kernel {
                    let ix = ix0 + kx as isize;
                    let cell = &mut seg[kx * d.c_in..(kx + 1) * d.c_in];
                    if ix < 0 || ix >= d.w as isize {
                        cell.fill(0.0);
                    } else {
                        cell.copy_from_slice(&src_row[ix as usize * d.c_in..(ix as usize + 1) * d.c_in]);
                    }
                }
            }
        }
    });
}

multiversion! {
    /// Scales each row of `scores` and replaces it with its softmax.
    pub fn softmax_rows(scores: &mut [f32], cols: usize, scale: f32) {
        for row in scores.chunks_exact_mut(cols) {
            let max = simd::max_lanes(row);
            for v in row.iter_mut() {
                *v = simd::exp((*v - max) * scale);
            }
            let inv = 1.0 / simd::sum_lanes(row);
            for v in row.iter_mut() {
                *v *= inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dwconv_matches_plain_loops_at_borders_and_ragged_channels() {
        // 20 channels: one register group of 16 and 4 left over.
        let (h, width, c) = (5, 7, 20);
        let d = DwConvDims { batch: 1, h, w: width, channels: c };
        let x: Vec<f32> = (0..h * width * c).map(|i| ((i as f32) * 0.613).sin()).collect();
        let w: Vec<f32> = (0..9 * c).map(|i| ((i as f32) * 0.291).cos() * 0.5).collect();
        let bias: Vec<f32> = (0..c).map(|i| i as f32 * 0.01 - 0.1).collect();
        let mut y = vec![f32::NAN; h * width * c];
        dwconv3x3_gelu(&x, &w, &bias, &mut y, d);
        for row in 0..h {
            for col in 0..width {
                for ch in 0..c {
                    let mut acc = bias[ch] as f64;
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (yy, xx) = (row as isize + ky as isize - 1, col as isize + kx as isize - 1);
                            if yy >= 0 && yy < h as isize && xx >= 0 && xx < width as isize {
                                acc += x[(yy as usize * width + xx as usize) * c + ch] as f64 * w[(ky * 3 + kx) * c + ch] as f64;
                            }
                        }
                    }
                    let want = simd::gelu(acc as f32);
                    let got = y[(row * width + col) * c + ch];
                    assert!((got - want).abs() < 1e-5, "row {row} col {col} channel {ch}: {got} vs {want}");
                }
            }
        }
    }
}
