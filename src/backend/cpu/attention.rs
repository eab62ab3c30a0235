//! Softmax attention on the CPU, one block of queries at a time so the score
//! matrix never exceeds `BLOCK x keys` per worker lane (stage 1 of SegFormer at
//! 1024x1024 would otherwise need 65536 x 1024 scores per head).

use rayon::prelude::*;

use super::attention_tiled as tiled;
use super::gemm::{MatRef, matmul};
use super::kernels::softmax_rows;
use crate::backend::AttnDims;

pub const BLOCK: usize = 64;

/// Independent lanes of work, each with its own score scratch. A few per
/// thread so a lane that finishes early does not leave a core idle.
pub fn lanes() -> usize {
    rayon::current_num_threads() * 4
}

pub fn workspace_len(d: AttnDims) -> usize {
    if tiled::supported(d) { tiled::workspace_len(d, lanes()) } else { lanes() * BLOCK * d.keys }
}

pub fn attention(q: &[f32], kv: &[f32], y: &mut [f32], workspace: &mut [f32], d: AttnDims) {
    if tiled::supported(d) {
        return tiled::attention(q, kv, y, workspace, d);
    }
    let channels = d.heads * d.head_dim;
    let scale = 1.0 / (d.head_dim as f32).sqrt();
    // The lane count comes from the workspace the caller sized, so a thread
    // pool of another size at run time still covers every query.
    let lane_count = (workspace.len() / (BLOCK * d.keys)).max(1);
    let blocks = d.queries.div_ceil(BLOCK);
    let blocks_per_lane = blocks.div_ceil(lane_count).max(1);
    let rows_per_lane = blocks_per_lane * BLOCK;
    let y = &mut y[..d.queries * channels];
    y.par_chunks_mut(rows_per_lane * channels)
        .zip(workspace.par_chunks_mut(BLOCK * d.keys))
        .enumerate()
        .for_each(|(lane, (y_lane, scores))| {
            let first_row = lane * rows_per_lane;
            let lane_rows = y_lane.len() / channels;
            for block_start in (0..lane_rows).step_by(BLOCK) {
                let rows = BLOCK.min(lane_rows - block_start);
                let q_off = (first_row + block_start) * channels;
                let scores = &mut scores[..rows * d.keys];
                for head in 0..d.heads {
                    let h_off = head * d.head_dim;
                    // scores[rows, keys] = q[rows, head] . k[keys, head]^T
                    let q_head = MatRef {
                        data: &q[q_off + h_off..],
                        rows,
                        cols: d.head_dim,
                        row_stride: channels,
                        col_stride: 1,
                    };
                    let k_t = MatRef {
                        data: &kv[h_off..],
                        rows: d.head_dim,
                        cols: d.keys,
                        row_stride: 1,
                        col_stride: 2 * channels,
                    };
                    matmul(q_head, k_t, scores, d.keys, false, false);
                    softmax_rows(scores, d.keys, scale);
                    // y[rows, head] = scores[rows, keys] . v[keys, head]
                    let s = MatRef { data: scores, rows, cols: d.keys, row_stride: d.keys, col_stride: 1 };
                    let v = MatRef {
                        data: &kv[channels + h_off..],
                        rows: d.keys,
                        cols: d.head_dim,
                        row_stride: 2 * channels,
                        col_stride: 1,
                    };
                    matmul(s, v, &mut y_lane[block_start * channels + h_off..], channels, false, false);
                }
            }
        });
}
