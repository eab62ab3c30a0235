//! SegFormer's encoder layers (Mix Transformer). Each holds only read-only
//! parameters; activation buffers belong to the stage that runs them, sized
//! once for a fixed input size and batch, so many model instances can share
//! one set of layers. A batch of N images is N maps one after another: every
//! `[n, C]` below is `[N * tokens, C]`.

use super::host::{concat_columns, conv_to_hwio, transpose};
use super::params::{ModelError, Weights};
use crate::backend::{Affine, AttnDims, Backend, ConvDims, DwConvDims, GemmDims, NormDims};
use crate::checkpoint::SegformerConfig;

pub struct LayerNorm<B: Backend> {
    /// gamma and beta, `[dim]` each.
    params: Affine<B::Param>,
    pub dim: usize,
}

impl<B: Backend> LayerNorm<B> {
    pub fn new(w: &mut Weights<'_, B>, prefix: &str, dim: usize) -> Result<Self, ModelError> {
        Ok(LayerNorm { params: w.affine(prefix, &[dim], |gamma| gamma)?, dim })
    }

    /// x: [rows, dim] -> y: [rows, dim]
    pub fn forward(&self, b: &B, x: &B::Tensor, y: &mut B::Tensor, rows: usize) -> Result<(), ModelError> {
        Ok(b.layer_norm(x, &self.params, y, NormDims { rows, dim: self.dim })?)
    }
}

pub struct Linear<B: Backend> {
    /// Weight `[inp, out]`, bias `[out]`.
    params: Affine<B::Param>,
    pub inp: usize,
    pub out: usize,
}

impl<B: Backend> Linear<B> {
    pub fn new(w: &mut Weights<'_, B>, prefix: &str, inp: usize, out: usize) -> Result<Self, ModelError> {
        Ok(Linear { params: w.affine(prefix, &[out, inp], |m| transpose(&m, out, inp))?, inp, out })
    }

    /// x: [rows, inp] -> y: [rows, out], or y += ... when `accumulate`.
    pub fn forward(&self, b: &B, x: &B::Tensor, y: &mut B::Tensor, rows: usize, accumulate: bool) -> Result<(), ModelError> {
        let dims = GemmDims { rows, k: self.inp, n: self.out };
        Ok(b.linear(x, &self.params.weight, Some(&self.params.bias), y, dims, accumulate)?)
    }
}

/// A strided convolution (patch embedding, sequence reduction) with bias.
pub struct Conv2d<B: Backend> {
    /// Weight `[kernel, kernel, c_in, c_out]`, bias `[c_out]`.
    params: Affine<B::Param>,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
}

impl<B: Backend> Conv2d<B> {
    pub fn new(
        w: &mut Weights<'_, B>,
        prefix: &str,
        (c_in, c_out): (usize, usize),
        (kernel, stride, pad): (usize, usize, usize),
    ) -> Result<Self, ModelError> {
        let params = w.affine(prefix, &[c_out, c_in, kernel, kernel], |m| conv_to_hwio(&m, c_out, c_in, kernel))?;
        Ok(Conv2d { params, c_in, c_out, kernel, stride, pad })
    }

    pub fn dims(&self, batch: usize, h: usize, w: usize) -> ConvDims {
        ConvDims { batch, h, w, c_in: self.c_in, c_out: self.c_out, kernel: self.kernel, stride: self.stride, pad: self.pad }
    }

    /// x: [batch, h, w, c_in] -> y: [batch, out_h, out_w, c_out]
    pub fn forward(&self, b: &B, x: &B::Tensor, y: &mut B::Tensor, ws: &mut B::Tensor, dims: ConvDims) -> Result<(), ModelError> {
        Ok(b.conv2d(x, &self.params, y, ws, dims)?)
    }
}

/// Overlapping patch embedding: a strided conv then layer norm.
pub struct PatchEmbed<B: Backend> {
    pub proj: Conv2d<B>,
    pub norm: LayerNorm<B>,
}

impl<B: Backend> PatchEmbed<B> {
    pub fn new(cfg: &SegformerConfig, w: &mut Weights<'_, B>, stage: usize) -> Result<Self, ModelError> {
        let c_in = if stage == 0 { cfg.num_channels } else { cfg.hidden_sizes[stage - 1] };
        let c_out = cfg.hidden_sizes[stage];
        let k = cfg.patch_sizes[stage];
        let prefix = format!("segformer.encoder.patch_embeddings.{stage}");
        let proj = Conv2d::new(w, &format!("{prefix}.proj"), (c_in, c_out), (k, cfg.strides[stage], k / 2))?;
        let norm = LayerNorm::new(w, &format!("{prefix}.layer_norm"), c_out)?;
        Ok(PatchEmbed { proj, norm })
    }
}

/// Self-attention whose keys and values come from a map shrunk `sr` times
/// per side (SegFormer's "efficient" attention).
pub struct EfficientAttention<B: Backend> {
    query: Linear<B>,
    /// keys and values in one GEMM: weight `[C, 2C]`, bias `[2C]`.
    kv: Affine<B::Param>,
    pub reduction: Option<(Conv2d<B>, LayerNorm<B>)>,
    output: Linear<B>,
    pub heads: usize,
    pub dim: usize,
}

impl<B: Backend> EfficientAttention<B> {
    pub fn new(cfg: &SegformerConfig, w: &mut Weights<'_, B>, prefix: &str, stage: usize) -> Result<Self, ModelError> {
        let c = cfg.hidden_sizes[stage];
        let sr = cfg.sr_ratios[stage];
        let query = Linear::new(w, &format!("{prefix}.attention.self.query"), c, c)?;
        let key = w.ckpt.take(&format!("{prefix}.attention.self.key.weight"), &[c, c])?;
        let key_b = w.ckpt.take(&format!("{prefix}.attention.self.key.bias"), &[c])?;
        let value = w.ckpt.take(&format!("{prefix}.attention.self.value.weight"), &[c, c])?;
        let value_b = w.ckpt.take(&format!("{prefix}.attention.self.value.bias"), &[c])?;
        let kv = concat_columns(&transpose(&key, c, c), c, &transpose(&value, c, c), c);
        let kv_bias = [key_b, value_b].concat();
        let reduction = if sr > 1 {
            let conv = Conv2d::new(w, &format!("{prefix}.attention.self.sr"), (c, c), (sr, sr, 0))?;
            let norm = LayerNorm::new(w, &format!("{prefix}.attention.self.layer_norm"), c)?;
            Some((conv, norm))
        } else {
            None
        };
        let output = Linear::new(w, &format!("{prefix}.attention.output.dense"), c, c)?;
        Ok(EfficientAttention {
            query,
            kv: Affine { weight: w.upload(&kv)?, bias: w.upload(&kv_bias)? },
            reduction,
            output,
            heads: cfg.num_attention_heads[stage],
            dim: c,
        })
    }

    /// h: normed tokens [n, C]; adds the attention output to the residual x [n, C].
    pub fn forward(&self, b: &B, h: &B::Tensor, x: &mut B::Tensor, s: &mut StageScratch<B>, d: &StageDims) -> Result<(), ModelError> {
        let c = self.dim;
        self.query.forward(b, h, &mut s.q, d.rows(), false)?;
        // keys/values source: h itself, or h reshaped [N, h, w, C] -> sr conv
        // -> [N, h/sr * w/sr, C] -> LN
        let kv_src = match &self.reduction {
            Some((conv, norm)) => {
                conv.forward(b, h, &mut s.reduced, &mut s.conv_ws, conv.dims(d.batch, d.h, d.w))?;
                norm.forward(b, &s.reduced, &mut s.reduced_norm, d.key_rows())?;
                &s.reduced_norm
            }
            None => h,
        };
        // kv: [N * keys, 2C]
        let dims = GemmDims { rows: d.key_rows(), k: c, n: 2 * c };
        b.linear(kv_src, &self.kv.weight, Some(&self.kv.bias), &mut s.kv, dims, false)?;
        b.attention(&s.q, &s.kv, &mut s.context, &mut s.attn_ws, self.dims(d))?;
        self.output.forward(b, &s.context, x, d.rows(), true)
    }

    /// Per image: queries are the stage's tokens, keys the (reduced) map.
    fn dims(&self, d: &StageDims) -> AttnDims {
        AttnDims { batch: d.batch, queries: d.tokens(), keys: d.keys, heads: self.heads, head_dim: self.dim / self.heads }
    }
}

/// Mix-FFN: dense -> depthwise 3x3 conv -> GELU -> dense.
pub struct MixFfn<B: Backend> {
    dense1: Linear<B>,
    /// Depthwise weight `[3, 3, hidden]`, bias `[hidden]`.
    dw: Affine<B::Param>,
    dense2: Linear<B>,
    pub hidden: usize,
}

impl<B: Backend> MixFfn<B> {
    pub fn new(cfg: &SegformerConfig, w: &mut Weights<'_, B>, prefix: &str, stage: usize) -> Result<Self, ModelError> {
        let c = cfg.hidden_sizes[stage];
        let hidden = c * cfg.mlp_ratios[stage];
        let dense1 = Linear::new(w, &format!("{prefix}.mlp.dense1"), c, hidden)?;
        let dw = w.affine(&format!("{prefix}.mlp.dwconv.dwconv"), &[hidden, 1, 3, 3], |m| conv_to_hwio(&m, hidden, 1, 3))?;
        let dense2 = Linear::new(w, &format!("{prefix}.mlp.dense2"), hidden, c)?;
        Ok(MixFfn { dense1, dw, dense2, hidden })
    }

    /// h: normed tokens [n, C]; adds the FFN output to the residual x [n, C].
    pub fn forward(&self, b: &B, h: &B::Tensor, x: &mut B::Tensor, s: &mut StageScratch<B>, d: &StageDims) -> Result<(), ModelError> {
        // [n, C] -> [n, 4C] == [N, h, w, 4C] for the depthwise conv
        self.dense1.forward(b, h, &mut s.ffn_in, d.rows(), false)?;
        let dims = DwConvDims { batch: d.batch, h: d.h, w: d.w, channels: self.hidden };
        b.dwconv3x3_gelu(&s.ffn_in, &self.dw, &mut s.ffn_act, dims)?;
        self.dense2.forward(b, &s.ffn_act, x, d.rows(), true)
    }
}

pub struct Block<B: Backend> {
    norm1: LayerNorm<B>,
    pub attention: EfficientAttention<B>,
    norm2: LayerNorm<B>,
    pub ffn: MixFfn<B>,
}

impl<B: Backend> Block<B> {
    pub fn new(cfg: &SegformerConfig, w: &mut Weights<'_, B>, stage: usize, index: usize) -> Result<Self, ModelError> {
        let prefix = format!("segformer.encoder.block.{stage}.{index}");
        let c = cfg.hidden_sizes[stage];
        Ok(Block {
            norm1: LayerNorm::new(w, &format!("{prefix}.layer_norm_1"), c)?,
            attention: EfficientAttention::new(cfg, w, &prefix, stage)?,
            norm2: LayerNorm::new(w, &format!("{prefix}.layer_norm_2"), c)?,
            ffn: MixFfn::new(cfg, w, &prefix, stage)?,
        })
    }

    /// Pre-norm transformer block, in place on the residual stream x [n, C].
    /// `normed` is scratch [n, C] for the layer norms' output.
    pub fn forward(
        &self,
        b: &B,
        x: &mut B::Tensor,
        normed: &mut B::Tensor,
        s: &mut StageScratch<B>,
        d: &StageDims,
    ) -> Result<(), ModelError> {
        self.norm1.forward(b, x, normed, d.rows())?;
        self.attention.forward(b, normed, x, s, d)?;
        self.norm2.forward(b, x, normed, d.rows())?;
        self.ffn.forward(b, normed, x, s, d)
    }
}

/// Spatial sizes of one stage for one input size and batch.
#[derive(Clone, Copy, Debug)]
pub struct StageDims {
    /// Images in the batch.
    pub batch: usize,
    pub h: usize,
    pub w: usize,
    /// Keys per image (the map after spatial reduction).
    pub keys: usize,
}

impl StageDims {
    /// Tokens of one image.
    pub fn tokens(&self) -> usize {
        self.h * self.w
    }

    /// Token rows of the whole batch, as row-wise ops see them.
    pub fn rows(&self) -> usize {
        self.batch * self.tokens()
    }

    /// Key rows of the whole batch.
    pub fn key_rows(&self) -> usize {
        self.batch * self.keys
    }
}

/// One stage's activation buffers, shared by all its blocks (they run one
/// after another), allocated once per input size.
pub struct StageScratch<B: Backend> {
    pub q: B::Tensor,
    pub reduced: B::Tensor,
    pub reduced_norm: B::Tensor,
    pub conv_ws: B::Tensor,
    pub kv: B::Tensor,
    pub context: B::Tensor,
    pub attn_ws: B::Tensor,
    pub ffn_in: B::Tensor,
    pub ffn_act: B::Tensor,
}

impl<B: Backend> StageScratch<B> {
    pub fn new(b: &B, block: &Block<B>, d: &StageDims) -> Result<Self, ModelError> {
        let c = block.attention.dim;
        // Every buffer holds the whole batch: [N * tokens, .] or [N * keys, .].
        let (n, keys) = (d.rows(), d.key_rows());
        let conv_ws = match &block.attention.reduction {
            Some((conv, _)) => b.conv2d_workspace(conv.dims(d.batch, d.h, d.w)),
            None => 0,
        };
        Ok(StageScratch {
            q: b.tensor(n * c)?,
            reduced: b.tensor(keys * c)?,
            reduced_norm: b.tensor(keys * c)?,
            conv_ws: b.tensor(conv_ws)?,
            kv: b.tensor(keys * 2 * c)?,
            context: b.tensor(n * c)?,
            attn_ws: b.tensor(b.attention_workspace(block.attention.dims(d)))?,
            ffn_in: b.tensor(n * block.ffn.hidden)?,
            ffn_act: b.tensor(n * block.ffn.hidden)?,
        })
    }
}
