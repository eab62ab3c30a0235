//! Attention for AVX2+FMA (or AVX-512) CPUs and head dims that are a multiple
//! of 16 (every SegFormer: 32 for B0, 64 for B1-B5), in register tiles of 6
//! queries x 16 keys or channels (8 x 32 with AVX-512).
//!
//! K is transposed once per call, V is read where it lies, a lane takes 12
//! or 16 queries at a time so their scores stay in L1, and the softmax's division
//! moves onto each query's output channels instead of its `keys` scores.
//! Measured on the bundled B0 at 1024x576 (2 cores, `bench --profile-ops`):
//! with AVX2, 4 x 16 tiles ran as fast as two `gemm` calls per 64-query block
//! (both FMA-bound, 107-114 ms a frame) and 6 x 16 tiles (12 of the 16 ymm
//! registers as accumulators) take 93-95 ms; with AVX-512 its 8 x 32 tiles
//! take 63 ms where the `gemm` crate's AVX-512 kernels take 81.

use rayon::prelude::*;

use super::simd;
use crate::backend::AttnDims;

/// The most queries a lane takes at a time (each ISA takes a whole number of
/// its row tiles): their scores (`MAX_QUERY_BLOCK x keys`) fit L1.
pub const MAX_QUERY_BLOCK: usize = 16;
/// Keys are padded to whole tiles of either ISA.
const KEY_PAD: usize = 32;
/// The AVX2 tiles' width, which head dims must be a multiple of.
const MIN_TILE: usize = 16;

/// The vector instructions a block runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Avx2,
    Avx512,
}

/// The widest tiles this CPU runs for `d`, or `None` where the GEMM-based
/// attention must do (no AVX2+FMA, or a head dim the tiles do not divide).
pub fn best_isa(d: AttnDims) -> Option<Isa> {
    if !cfg!(target_arch = "x86_64") || d.head_dim == 0 {
        return None;
    }
    if simd::has_avx512() && d.head_dim % (2 * MIN_TILE) == 0 {
        Some(Isa::Avx512)
    } else if simd::has_avx2_fma() && d.head_dim % MIN_TILE == 0 {
        Some(Isa::Avx2)
    } else {
        None
    }
}

pub fn supported(d: AttnDims) -> bool {
    best_isa(d).is_some()
}

/// Keys rounded up to whole tiles; the transposed K is zero beyond `keys`.
fn keys_padded(keys: usize) -> usize {
    keys.div_ceil(KEY_PAD) * KEY_PAD
}

fn transposed_k_len(d: AttnDims) -> usize {
    d.heads * d.head_dim * keys_padded(d.keys)
}

fn lane_scores_len(d: AttnDims) -> usize {
    MAX_QUERY_BLOCK * keys_padded(d.keys)
}

pub fn workspace_len(d: AttnDims, lanes: usize) -> usize {
    transposed_k_len(d) + lanes * lane_scores_len(d)
}

/// `y[q, h] = softmax(q_h . k_h^T / sqrt(head_dim)) . v_h` for one image.
/// `q`/`y` are `[queries, heads*head_dim]`, `kv` is `[keys, 2*heads*head_dim]`
/// (keys then values). Call only where [`supported`] holds.
pub fn attention(q: &[f32], kv: &[f32], y: &mut [f32], workspace: &mut [f32], d: AttnDims) {
    let isa = best_isa(d).expect("tiled attention needs AVX2+FMA and a head dim that is a multiple of 16");
    attention_on(isa, q, kv, y, workspace, d);
}

fn attention_on(isa: Isa, q: &[f32], kv: &[f32], y: &mut [f32], workspace: &mut [f32], d: AttnDims) {
    let channels = d.heads * d.head_dim;
    let keys_pad = keys_padded(d.keys);
    assert!(q.len() >= d.queries * channels && y.len() >= d.queries * channels && kv.len() >= d.keys * 2 * channels);
    let (kt, lanes_ws) = workspace.split_at_mut(transposed_k_len(d));
    transpose_keys(kv, kt, d);
    let kt = &*kt;

    let lane_count = (lanes_ws.len() / lane_scores_len(d)).max(1);
    assert!(lanes_ws.len() >= lane_scores_len(d), "attention workspace too small");
    let query_block = match isa {
        Isa::Avx2 => AVX2_QUERY_BLOCK,
        Isa::Avx512 => AVX512_QUERY_BLOCK,
    };
    let blocks = d.queries.div_ceil(query_block);
    let rows_per_lane = blocks.div_ceil(lane_count).max(1) * query_block;
    let scale = 1.0 / (d.head_dim as f32).sqrt();
    let y = &mut y[..d.queries * channels];
    y.par_chunks_mut(rows_per_lane * channels)
        .zip(lanes_ws.par_chunks_mut(lane_scores_len(d)))
        .enumerate()
        .for_each(|(lane, (y_lane, scores))| {
            let first_row = lane * rows_per_lane;
            let lane_rows = y_lane.len() / channels;
            for block_start in (0..lane_rows).step_by(query_block) {
                let rows = query_block.min(lane_rows - block_start);
                for head in 0..d.heads {
                    let h_off = head * d.head_dim;
                    let block = Block {
                        q: &q[(first_row + block_start) * channels + h_off..],
                        kt: &kt[head * d.head_dim * keys_pad..(head + 1) * d.head_dim * keys_pad],
                        v: &kv[channels + h_off..],
                        rows,
                        row_stride: channels,
                        v_stride: 2 * channels,
                        keys: d.keys,
                        keys_pad,
                        head_dim: d.head_dim,
                        scale,
                    };
                    block.check(scores.len(), y_lane.len() - block_start * channels - h_off);
                    // SAFETY: `best_isa` checked the CPU for `isa`; `check` bounded
                    // every offset the tile loops reach in `q`, `kt`, `v`, scores and `y`.
                    unsafe { block.run(isa, scores, &mut y_lane[block_start * channels + h_off..]) };
                }
            }
        });
}

/// `kt[head][c][key] = k[key][head*head_dim + c]`, zero for padded keys.
fn transpose_keys(kv: &[f32], kt: &mut [f32], d: AttnDims) {
    let channels = d.heads * d.head_dim;
    let keys_pad = keys_padded(d.keys);
    kt.par_chunks_mut(keys_pad).enumerate().for_each(|(hc, row)| {
        // hc = head * head_dim + c, which is also k's column.
        for (key, out) in row.iter_mut().enumerate() {
            *out = if key < d.keys { kv[key * 2 * channels + hc] } else { 0.0 };
        }
    });
}

/// One head of up to [`MAX_QUERY_BLOCK`] queries.
struct Block<'a> {
    q: &'a [f32],
    kt: &'a [f32],
    v: &'a [f32],
    rows: usize,
    row_stride: usize,
    v_stride: usize,
    keys: usize,
    keys_pad: usize,
    head_dim: usize,
    scale: f32,
}

impl Block<'_> {
    fn check(&self, scores_len: usize, y_len: usize) {
        assert!(self.rows >= 1 && self.rows <= MAX_QUERY_BLOCK);
        assert!(scores_len >= MAX_QUERY_BLOCK * self.keys_pad);
        let last_row = (self.rows - 1) * self.row_stride + self.head_dim;
        assert!(self.q.len() >= last_row && y_len >= last_row);
        assert!(self.kt.len() >= self.head_dim * self.keys_pad);
        assert!(self.v.len() >= (self.keys - 1) * self.v_stride + self.head_dim);
    }

    /// The query row a tile lane reads: rows past the block's end repeat its
    /// last row, so every tile is full and their results are never stored.
    fn q_row(&self, row: usize) -> usize {
        row.min(self.rows - 1) * self.row_stride
    }

    /// Scores, softmax and weighted values of the block.
    unsafe fn run(&self, isa: Isa, scores: &mut [f32], y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match isa {
                Isa::Avx512 => avx512::run(self, scores, y),
                Isa::Avx2 => avx2::run(self, scores, y),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("tiled attention ({isa:?}) is only dispatched on x86_64: {} {}", scores.len(), y.len())
    }
}

/// One ISA's register tiles: `TILE_ROWS` queries x `TILE_COLS` keys (scores)
/// or channels (weighted values), two vectors per row; a lane's block of
/// queries is `$block` (a multiple of `TILE_ROWS`, so a tile never runs past
/// the block's score rows).
macro_rules! tiles {
    ($isa:ident, $feature:literal, $lanes:literal, $rows:literal, $block:ident, $zero:ident, $load:ident, $store:ident, $fmadd:ident, $set1:ident, $mul:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $isa {
            use std::arch::x86_64::*;

            use super::{Block, MAX_QUERY_BLOCK, softmax_unnormalised};

            pub const TILE_ROWS: usize = $rows;
            const _: () = assert!(super::$block % TILE_ROWS == 0 && super::$block <= MAX_QUERY_BLOCK);
            pub const TILE_COLS: usize = 2 * $lanes;

            #[target_feature(enable = $feature)]
            pub unsafe fn run(b: &Block<'_>, scores: &mut [f32], y: &mut [f32]) {
                unsafe {
                    self::scores(b, scores);
                    let mut inv_sum = [0.0f32; MAX_QUERY_BLOCK];
                    for (row, inv) in inv_sum.iter_mut().enumerate().take(b.rows) {
                        *inv = softmax_unnormalised(&mut scores[row * b.keys_pad..row * b.keys_pad + b.keys], b.scale);
                    }
                    weighted_values(b, scores, &inv_sum, y);
                }
            }

            /// `scores[r][key] = q[r] . k[key]`; each `TILE_COLS`-key column
            /// of `kt` stays in L1 while the block's row tiles use it.
            #[target_feature(enable = $feature)]
            unsafe fn scores(b: &Block<'_>, scores: &mut [f32]) {
                let (q, kt, s) = (b.q.as_ptr(), b.kt.as_ptr(), scores.as_mut_ptr());
                for key0 in (0..b.keys_pad).step_by(TILE_COLS) {
                    for row0 in (0..b.rows).step_by(TILE_ROWS) {
                        let rows: [usize; TILE_ROWS] = std::array::from_fn(|r| b.q_row(row0 + r));
                        unsafe {
                            let mut acc = [$zero(); 2 * TILE_ROWS];
                            for c in 0..b.head_dim {
                                let k0 = $load(kt.add(c * b.keys_pad + key0));
                                let k1 = $load(kt.add(c * b.keys_pad + key0 + $lanes));
                                for r in 0..TILE_ROWS {
                                    let qv = $set1(*q.add(rows[r] + c));
                                    acc[2 * r] = $fmadd(qv, k0, acc[2 * r]);
                                    acc[2 * r + 1] = $fmadd(qv, k1, acc[2 * r + 1]);
                                }
                            }
                            for r in 0..TILE_ROWS {
                                // Rows past `rows` land in the block's spare score rows.
                                let out = s.add((row0 + r) * b.keys_pad + key0);
                                $store(out, acc[2 * r]);
                                $store(out.add($lanes), acc[2 * r + 1]);
                            }
                        }
                    }
                }
            }

            /// `y[r] = (p[r] . v) * inv_sum[r]`.
            #[target_feature(enable = $feature)]
            unsafe fn weighted_values(b: &Block<'_>, scores: &[f32], inv_sum: &[f32; MAX_QUERY_BLOCK], y: &mut [f32]) {
                let (v, s, out) = (b.v.as_ptr(), scores.as_ptr(), y.as_mut_ptr());
                for c0 in (0..b.head_dim).step_by(TILE_COLS) {
                    for row0 in (0..b.rows).step_by(TILE_ROWS) {
                        unsafe {
                            let mut acc = [$zero(); 2 * TILE_ROWS];
                            for key in 0..b.keys {
                                let v0 = $load(v.add(key * b.v_stride + c0));
                                let v1 = $load(v.add(key * b.v_stride + c0 + $lanes));
                                for r in 0..TILE_ROWS {
                                    let p = $set1(*s.add((row0 + r) * b.keys_pad + key));
                                    acc[2 * r] = $fmadd(p, v0, acc[2 * r]);
                                    acc[2 * r + 1] = $fmadd(p, v1, acc[2 * r + 1]);
                                }
                            }
                            for r in 0..TILE_ROWS.min(b.rows - row0) {
                                let inv = $set1(inv_sum[row0 + r]);
                                let dst = out.add((row0 + r) * b.row_stride + c0);
                                $store(dst, $mul(acc[2 * r], inv));
                                $store(dst.add($lanes), $mul(acc[2 * r + 1], inv));
                            }
                        }
                    }
                }
            }
        }
    };
}

/// Queries per lane block: a whole number of each ISA's row tiles.
const AVX2_QUERY_BLOCK: usize = 12;
const AVX512_QUERY_BLOCK: usize = 16;

// 16 vector registers: 6 rows x 2 accumulators, two loads and a broadcast.
tiles!(avx2, "avx2,fma", 8, 6, AVX2_QUERY_BLOCK, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_mul_ps);
// 32 vector registers: 8 rows x 2 accumulators leave room for the loads.
tiles!(avx512, "avx512f", 16, 8, AVX512_QUERY_BLOCK, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_mul_ps);

/// Replaces `row` with `exp((row - max) * scale)` and returns one over its
/// sum, leaving the division to the (fewer) output channels.
#[inline(always)]
fn softmax_unnormalised(row: &mut [f32], scale: f32) -> f32 {
    let max = simd::max_lanes(row);
    for v in row.iter_mut() {
        *v = simd::exp((*v - max) * scale);
    }
    1.0 / simd::sum_lanes(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain softmax attention, one query and head at a time, in f64.
    fn reference(q: &[f32], kv: &[f32], d: AttnDims) -> Vec<f32> {
        let channels = d.heads * d.head_dim;
        let mut y = vec![0.0f32; d.queries * channels];
        let scale = 1.0 / (d.head_dim as f64).sqrt();
        for i in 0..d.queries {
            for h in 0..d.heads {
                let hq = &q[i * channels + h * d.head_dim..][..d.head_dim];
                let s: Vec<f64> = (0..d.keys)
                    .map(|j| {
                        let k = &kv[j * 2 * channels + h * d.head_dim..][..d.head_dim];
                        hq.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() * scale
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for c in 0..d.head_dim {
                    let acc: f64 = (0..d.keys).map(|j| e[j] * kv[j * 2 * channels + channels + h * d.head_dim + c] as f64).sum();
                    y[i * channels + h * d.head_dim + c] = (acc / total) as f32;
                }
            }
        }
        y
    }

    #[test]
    fn matches_plain_attention_on_ragged_shapes() {
        let isas: Vec<Isa> = [(Isa::Avx2, simd::has_avx2_fma()), (Isa::Avx512, simd::has_avx512())]
            .into_iter()
            .filter_map(|(isa, present)| present.then_some(isa))
            .collect();
        if isas.is_empty() {
            eprintln!("skipped: this CPU has no AVX2+FMA, so the tiled attention is never used");
            return;
        }
        // Queries not a multiple of 4 or 16, keys not a multiple of 16, one
        // and several heads, head dims of B0 (32) and B1-B5 (64).
        for (queries, keys, heads, head_dim) in [(37, 23, 1, 32), (70, 50, 2, 32), (5, 16, 3, 64), (129, 9, 1, 16), (40, 33, 1, 32)] {
            let d = AttnDims { batch: 1, queries, keys, heads, head_dim };
            let channels = heads * head_dim;
            let q: Vec<f32> = (0..queries * channels).map(|i| ((i as f32) * 0.731).sin() * 2.0).collect();
            let kv: Vec<f32> = (0..keys * 2 * channels).map(|i| ((i as f32) * 0.377).cos() * 2.0).collect();
            let want = reference(&q, &kv, d);
            // AVX-512 tiles need head dims that are a multiple of 32.
            for &isa in isas.iter().filter(|&&isa| isa == Isa::Avx2 || head_dim % 32 == 0) {
                for lanes in [1, 3, 8] {
                    let mut ws = vec![f32::NAN; workspace_len(d, lanes)];
                    let mut y = vec![f32::NAN; queries * channels];
                    attention_on(isa, &q, &kv, &mut y, &mut ws, d);
                    let worst = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                    assert!(worst < 2e-5, "{d:?} {isa:?} lanes {lanes}: worst difference {worst}");
                }
            }
        }
    }
}
