//! The all-MLP decode head, folded at load time.
//!
//! HF computes, per stage i: `u_i = up(E_i Wc_i^T + bc_i)` (to 1/4 resolution),
//! then `relu(BN(concat(u_n..u_1) Wf^T))` and the classifier. Everything before
//! the ReLU is linear and bilinear upsampling commutes with per-pixel linear
//! maps (its weights sum to 1, so biases pass through), hence
//! `BN(sum_i up(E_i M_i)) + bias` with `M_i = Wc_i^T Wf_i^T diag(s)`. Each
//! stage's projection then runs at its own resolution, and the 4D x D fuse GEMM
//! at 1/4 resolution (most of the head's cost) disappears.

use super::host::{matmul, transpose};
use super::params::{ModelError, Weights};
use crate::backend::{Affine, Backend, DecodeDims, GemmDims, StageMap};
use crate::checkpoint::SegformerConfig;

/// BatchNorm eps (HF uses nn.BatchNorm2d's default).
const BN_EPS: f32 = 1e-5;

pub struct Decoder<B: Backend> {
    /// Per stage `[C_i, D]`, BatchNorm scale folded in.
    projections: Vec<B::Param>,
    /// Every bias and the BatchNorm shift, summed: `[D]`.
    bias: B::Param,
    /// Weight `[D, labels]`, bias `[labels]`.
    classifier: Affine<B::Param>,
    pub channels: Vec<usize>,
    pub hidden: usize,
    pub labels: usize,
}

impl<B: Backend> Decoder<B> {
    pub fn new(cfg: &SegformerConfig, w: &mut Weights<'_, B>) -> Result<Self, ModelError> {
        let d = cfg.decoder_hidden_size;
        let stages = cfg.num_encoder_blocks;
        let labels = cfg.num_labels();
        let fuse = w.ckpt.take("decode_head.linear_fuse.weight", &[d, stages * d, 1, 1])?;
        let gamma = w.ckpt.take("decode_head.batch_norm.weight", &[d])?;
        let beta = w.ckpt.take("decode_head.batch_norm.bias", &[d])?;
        let mean = w.ckpt.take("decode_head.batch_norm.running_mean", &[d])?;
        let var = w.ckpt.take("decode_head.batch_norm.running_var", &[d])?;
        let scale: Vec<f32> = gamma.iter().zip(&var).map(|(g, v)| g / (v + BN_EPS).sqrt()).collect();
        let mut bias: Vec<f32> = (0..d).map(|j| beta[j] - mean[j] * scale[j]).collect();

        // fuse: [D, stages*D]; HF concatenates the stages last-first.
        let fuse_t = transpose(&fuse, d, stages * d); // [stages*D, D]
        let mut projections = Vec::with_capacity(stages);
        for (i, &c) in cfg.hidden_sizes.iter().enumerate() {
            let wc = w.ckpt.take(&format!("decode_head.linear_c.{i}.proj.weight"), &[d, c])?;
            let bc = w.ckpt.take(&format!("decode_head.linear_c.{i}.proj.bias"), &[d])?;
            let block = stages - 1 - i;
            let wf_t = &fuse_t[block * d * d..(block + 1) * d * d]; // [D, D] = Wf_i^T
            let mut m = matmul(&transpose(&wc, d, c), wf_t, c, d, d); // [C_i, D]
            for row in m.chunks_exact_mut(d) {
                row.iter_mut().zip(&scale).for_each(|(v, s)| *v *= s);
            }
            let bf = matmul(&bc, wf_t, 1, d, d);
            for j in 0..d {
                bias[j] += bf[j] * scale[j];
            }
            projections.push(w.upload(&m)?);
        }
        let classifier = w.affine("decode_head.classifier", &[labels, d, 1, 1], |m| transpose(&m, labels, d))?;
        Ok(Decoder {
            projections,
            bias: w.upload(&bias)?,
            classifier,
            channels: cfg.hidden_sizes.clone(),
            hidden: d,
            labels,
        })
    }

    /// stage outputs `[batch, h_i, w_i, C_i]` -> logits `[batch, h_0, w_0, labels]`.
    /// `acc` is `[batch*h_0*w_0, D]`, `maps[i - 1]` `[batch*h_i*w_i, D]` for
    /// i >= 1; `sizes` holds each stage's `(h_i, w_i)`.
    pub fn forward<'t>(
        &self,
        b: &B,
        stages: impl Iterator<Item = &'t B::Tensor>,
        (batch, sizes): (usize, &[(usize, usize)]),
        acc: &mut B::Tensor,
        maps: &mut [B::Tensor],
        logits: &mut B::Tensor,
    ) -> Result<(), ModelError>
    where
        B::Tensor: 't,
    {
        let d = self.hidden;
        let (h0, w0) = sizes[0];
        for (i, stage) in stages.enumerate() {
            let (h, w) = sizes[i];
            // [batch*h_i*w_i, C_i] x [C_i, D] -> [batch*h_i*w_i, D]
            let dims = GemmDims { rows: batch * h * w, k: self.channels[i], n: d };
            match i {
                0 => b.linear(stage, &self.projections[0], Some(&self.bias), acc, dims, false)?,
                _ => b.linear(stage, &self.projections[i], None, &mut maps[i - 1], dims, false)?,
            }
        }
        let maps: Vec<StageMap<'_, B::Tensor>> = maps.iter().zip(&sizes[1..]).map(|(map, &(h, w))| StageMap { map, h, w }).collect();
        let dims = DecodeDims { batch, h0, w0, hidden: d, labels: self.labels };
        Ok(b.decode_tail(acc, &maps, &self.classifier, logits, dims)?)
    }
}
