//! SegFormer (Mix Transformer encoder + all-MLP decoder), written once against
//! [`Backend`]. [`SegformerWeights`] is loaded once and shared; a [`Segformer`]
//! is one runnable instance for one fixed input size and batch (N images run
//! as one forward), owning its buffers.

mod decoder;
mod host;
mod layers;
mod params;

use std::sync::Arc;

use crate::backend::{Backend, ConvDims};
use crate::checkpoint::{Checkpoint, SegformerConfig};

use self::decoder::Decoder;
use self::layers::{Block, LayerNorm, PatchEmbed, StageDims, StageScratch};
pub use self::params::{MAX_BATCH, ModelError, Weights};

struct Stage<B: Backend> {
    embed: PatchEmbed<B>,
    blocks: Vec<Block<B>>,
    norm: LayerNorm<B>,
    sr: usize,
}

/// All parameters of one checkpoint on one backend; read-only, shared by
/// every [`Segformer`] instance (per worker, per input size, per scale).
pub struct SegformerWeights<B: Backend> {
    pub config: SegformerConfig,
    pub labels: Vec<String>,
    stages: Vec<Stage<B>>,
    decoder: Decoder<B>,
}

impl<B: Backend> SegformerWeights<B> {
    /// Reads every tensor the config implies, checking names and shapes, and
    /// fails on model tensors the config does not account for.
    pub fn load(ckpt: &mut Checkpoint, backend: &B) -> Result<Arc<Self>, ModelError> {
        let config = ckpt.config.clone();
        let labels = ckpt.labels.clone();
        let mut w = Weights { ckpt, backend };
        let mut stages = Vec::with_capacity(config.num_encoder_blocks);
        for s in 0..config.num_encoder_blocks {
            let embed = PatchEmbed::new(&config, &mut w, s)?;
            let blocks = (0..config.depths[s]).map(|i| Block::new(&config, &mut w, s, i)).collect::<Result<Vec<_>, _>>()?;
            let norm = LayerNorm::new(&mut w, &format!("segformer.encoder.layer_norm.{s}"), config.hidden_sizes[s])?;
            stages.push(Stage { embed, blocks, norm, sr: config.sr_ratios[s] });
        }
        let decoder = Decoder::new(&config, &mut w)?;
        w.ckpt.check_all_used()?;
        Ok(Arc::new(SegformerWeights { config, labels, stages, decoder }))
    }

    pub fn num_labels(&self) -> usize {
        self.decoder.labels
    }
}

struct StageBuffers<B: Backend> {
    dims: StageDims,
    embed: ConvDims,
    embed_out: B::Tensor,
    embed_ws: B::Tensor,
    /// The residual stream `[N*h*w, C]`; after the final norm, the stage output.
    x: B::Tensor,
    normed: B::Tensor,
    scratch: Option<StageScratch<B>>,
}

/// One model instance for one input size and batch N: input `[N, H, W, 3]`
/// (normalised, channels last), logits `[N, ceil(H/4), ceil(W/4), labels]`.
/// Every activation buffer is N times a single image's, so memory grows
/// linearly with N (the weights are shared, not copied).
pub struct Segformer<B: Backend> {
    weights: Arc<SegformerWeights<B>>,
    width: usize,
    height: usize,
    batch: usize,
    input: B::Tensor,
    stages: Vec<StageBuffers<B>>,
    decoder_acc: B::Tensor,
    /// Stages 2..'s projections `[h_i*w_i, D]`, all alive at once for the
    /// (possibly fused) decode tail.
    decoder_maps: Vec<B::Tensor>,
    logits: B::Tensor,
    /// (h, w) of each stage's output.
    stage_sizes: Vec<(usize, usize)>,
}

impl<B: Backend> Segformer<B> {
    /// One image at a time.
    pub fn new(weights: Arc<SegformerWeights<B>>, b: &B, width: usize, height: usize) -> Result<Self, ModelError> {
        Self::batched(weights, b, width, height, 1)
    }

    /// `batch` images per forward (1..=[`MAX_BATCH`]).
    pub fn batched(weights: Arc<SegformerWeights<B>>, b: &B, width: usize, height: usize, batch: usize) -> Result<Self, ModelError> {
        if !(1..=MAX_BATCH).contains(&batch) {
            return Err(ModelError::Batch(batch));
        }
        let too_small = |stage, h, w| ModelError::InputTooSmall { width, height, stage, h, w };
        let mut stages = Vec::with_capacity(weights.stages.len());
        let (mut h, mut w) = (height, width);
        for (i, stage) in weights.stages.iter().enumerate() {
            let embed = stage.embed.proj.dims(batch, h, w);
            if !embed.is_valid() || h == 0 || w == 0 {
                return Err(too_small(i, h, w));
            }
            (h, w) = (embed.out_h(), embed.out_w());
            let keys = if stage.sr > 1 {
                let reduced = ConvDims { batch, h, w, c_in: 1, c_out: 1, kernel: stage.sr, stride: stage.sr, pad: 0 };
                if !reduced.is_valid() {
                    return Err(too_small(i, h, w));
                }
                reduced.out_h() * reduced.out_w()
            } else {
                h * w
            };
            let dims = StageDims { batch, h, w, keys };
            let c = embed.c_out;
            let scratch = match stage.blocks.first() {
                Some(block) => Some(StageScratch::new(b, block, &dims)?),
                None => None,
            };
            // [N, h, w, C] each
            let rows = dims.rows();
            stages.push(StageBuffers {
                dims,
                embed,
                embed_out: b.tensor(rows * c)?,
                embed_ws: b.tensor(b.conv2d_workspace(embed))?,
                x: b.tensor(rows * c)?,
                normed: b.tensor(rows * c)?,
                scratch,
            });
        }
        let d = weights.decoder.hidden;
        // Decoder buffers hold the batch: acc `[N*h0*w0, D]`, each later
        // stage's projection `[N*h_i*w_i, D]`, logits `[N*h0*w0, labels]`.
        let rows0 = stages[0].dims.rows();
        Ok(Segformer {
            stage_sizes: stages.iter().map(|s| (s.dims.h, s.dims.w)).collect(),
            input: b.tensor(batch * height * width * 3)?,
            decoder_acc: b.tensor(rows0 * d)?,
            decoder_maps: stages.iter().skip(1).map(|s| b.tensor(s.dims.rows() * d)).collect::<Result<_, _>>()?,
            logits: b.tensor(rows0 * weights.decoder.labels)?,
            stages,
            weights,
            width,
            height,
            batch,
        })
    }

    pub fn weights(&self) -> &Arc<SegformerWeights<B>> {
        &self.weights
    }

    /// (width, height) of the input.
    pub fn input_size(&self) -> (usize, usize) {
        (self.width, self.height)
    }

    /// Images per forward.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Input values of one image, `H * W * 3`.
    pub fn input_len(&self) -> usize {
        self.width * self.height * 3
    }

    /// Logit values of one image, `lh * lw * labels`.
    pub fn logits_len(&self) -> usize {
        self.stages[0].dims.tokens() * self.weights.decoder.labels
    }

    /// (width, height) of the logits map (stage-1 resolution).
    pub fn logits_size(&self) -> (usize, usize) {
        (self.stages[0].dims.w, self.stages[0].dims.h)
    }

    pub fn input_mut(&mut self) -> &mut B::Tensor {
        &mut self.input
    }

    pub fn logits(&self) -> &B::Tensor {
        &self.logits
    }

    /// The logits buffer, for a caller that rewrites them (temporal smoothing)
    /// before they are postprocessed.
    pub fn logits_mut(&mut self) -> &mut B::Tensor {
        &mut self.logits
    }

    /// Runs the model on the current input, writing the logits buffer.
    pub fn forward(&mut self, b: &B) -> Result<(), ModelError> {
        for i in 0..self.stages.len() {
            let stage = &self.weights.stages[i];
            let (done, rest) = self.stages.split_at_mut(i);
            let buf = &mut rest[0];
            let src = if i == 0 { &self.input } else { &done[i - 1].x };
            // [N, h, w, C_prev] -> conv -> [N, h', w', C] -> LN over N*h'*w' rows
            stage.embed.proj.forward(b, src, &mut buf.embed_out, &mut buf.embed_ws, buf.embed)?;
            stage.embed.norm.forward(b, &buf.embed_out, &mut buf.x, buf.dims.rows())?;
            if let Some(scratch) = buf.scratch.as_mut() {
                for block in &stage.blocks {
                    block.forward(b, &mut buf.x, &mut buf.normed, scratch, &buf.dims)?;
                }
            }
            // final norm: x -> normed, then swap so `x` holds the stage output.
            stage.norm.forward(b, &buf.x, &mut buf.normed, buf.dims.rows())?;
            std::mem::swap(&mut buf.x, &mut buf.normed);
        }
        let outputs = self.stages.iter().map(|s| &s.x);
        let (acc, maps) = (&mut self.decoder_acc, &mut self.decoder_maps);
        self.weights.decoder.forward(b, outputs, (self.batch, &self.stage_sizes), acc, maps, &mut self.logits)
    }
}
