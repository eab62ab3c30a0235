//! `config.json` of a HuggingFace SegFormer checkpoint. Missing fields take
//! `transformers.SegformerConfig`'s defaults; unknown fields are ignored because
//! HF configs carry many keys that do not affect inference.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{CheckpointError, ConfigProblem};

/// Fields missing from the file take HF's defaults ([`Default`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct SegformerConfig {
    pub num_channels: usize,
    pub num_encoder_blocks: usize,
    pub depths: Vec<usize>,
    pub sr_ratios: Vec<usize>,
    pub hidden_sizes: Vec<usize>,
    pub patch_sizes: Vec<usize>,
    pub strides: Vec<usize>,
    pub num_attention_heads: Vec<usize>,
    pub mlp_ratios: Vec<usize>,
    pub hidden_act: String,
    pub decoder_hidden_size: usize,
    pub id2label: BTreeMap<String, String>,
    pub num_labels: Option<usize>,
    pub reshape_last_stage: bool,
}

/// `transformers.SegformerConfig()`: SegFormer-B0, no labels named.
impl Default for SegformerConfig {
    fn default() -> Self {
        SegformerConfig {
            num_channels: 3,
            num_encoder_blocks: 4,
            depths: vec![2, 2, 2, 2],
            sr_ratios: vec![8, 4, 2, 1],
            hidden_sizes: vec![32, 64, 160, 256],
            patch_sizes: vec![7, 3, 3, 3],
            strides: vec![4, 2, 2, 2],
            num_attention_heads: vec![1, 2, 5, 8],
            mlp_ratios: vec![4, 4, 4, 4],
            hidden_act: "gelu".into(),
            decoder_hidden_size: 256,
            id2label: BTreeMap::new(),
            num_labels: None,
            reshape_last_stage: true,
        }
    }
}

impl SegformerConfig {
    pub fn from_json(text: &str, path: &str) -> Result<Self, CheckpointError> {
        let parse = || -> Result<Self, ConfigProblem> {
            let cfg: SegformerConfig = serde_json::from_str(text)?;
            cfg.validate()?;
            Ok(cfg)
        };
        parse().map_err(|source| CheckpointError::Config { path: path.into(), source })
    }

    /// Class names by index. Without `id2label`, `num_labels` (default 2, as in
    /// HF) unnamed classes `class_0..`.
    pub fn labels(&self) -> Vec<String> {
        if self.id2label.is_empty() {
            return (0..self.num_labels()).map(|i| format!("class_{i}")).collect();
        }
        let mut labels = vec![String::new(); self.id2label.len()];
        for (k, v) in &self.id2label {
            // validate() guarantees every key is an index below len.
            labels[k.parse::<usize>().unwrap_or(0)] = v.clone();
        }
        labels
    }

    pub fn num_labels(&self) -> usize {
        if self.id2label.is_empty() { self.num_labels.unwrap_or(2) } else { self.id2label.len() }
    }

    fn validate(&self) -> Result<(), ConfigProblem> {
        let n = self.num_encoder_blocks;
        if n == 0 {
            return Err(ConfigProblem::NoBlocks);
        }
        let lists: [(&str, &Vec<usize>); 7] = [
            ("depths", &self.depths),
            ("sr_ratios", &self.sr_ratios),
            ("hidden_sizes", &self.hidden_sizes),
            ("patch_sizes", &self.patch_sizes),
            ("strides", &self.strides),
            ("num_attention_heads", &self.num_attention_heads),
            ("mlp_ratios", &self.mlp_ratios),
        ];
        for (name, list) in lists {
            if list.len() != n {
                return Err(ConfigProblem::ListLength { name, len: list.len(), blocks: n });
            }
            if let Some(pos) = list.iter().position(|&v| v == 0) {
                return Err(ConfigProblem::Zero { name, pos });
            }
        }
        for (i, (&c, &h)) in self.hidden_sizes.iter().zip(&self.num_attention_heads).enumerate() {
            if c % h != 0 {
                return Err(ConfigProblem::HeadSplit { stage: i, size: c, heads: h });
            }
        }
        if self.hidden_act != "gelu" {
            return Err(ConfigProblem::Activation(self.hidden_act.clone()));
        }
        if self.num_channels != 3 {
            return Err(ConfigProblem::Channels(self.num_channels));
        }
        if self.decoder_hidden_size == 0 {
            return Err(ConfigProblem::DecoderSize);
        }
        if !self.reshape_last_stage {
            return Err(ConfigProblem::NoReshape);
        }
        let count = self.id2label.len();
        let mut seen = vec![false; count];
        for key in self.id2label.keys() {
            match key.parse::<usize>() {
                Ok(i) if i < count && !seen[i] => seen[i] = true,
                _ => return Err(ConfigProblem::BadLabelKey { key: key.clone(), count }),
            }
        }
        if let (Some(n), false) = (self.num_labels, self.id2label.is_empty()) {
            if n != count {
                return Err(ConfigProblem::LabelCount { num_labels: n, count });
            }
        }
        match self.num_labels() {
            0 => Err(ConfigProblem::NoLabels),
            n if n > 255 => Err(ConfigProblem::TooManyLabels(n)),
            _ => Ok(()),
        }
    }
}
