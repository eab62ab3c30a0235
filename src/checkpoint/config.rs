//! `config.json` of a HuggingFace SegFormer checkpoint. Missing fields take
//! `transformers.SegformerConfig`'s defaults; unknown fields are ignored because
//! HF configs carry many keys that do not affect inference.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::CheckpointError;

/// What makes a `config.json` unusable (it parsed, but describes no model
/// roadseg can run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigProblem {
    #[error("num_encoder_blocks must be at least 1")]
    NoBlocks,
    #[error("{name} has {len} entries but num_encoder_blocks is {blocks}")]
    ListLength { name: &'static str, len: usize, blocks: usize },
    #[error("{name}[{pos}] is 0")]
    Zero { name: &'static str, pos: usize },
    #[error("hidden_sizes[{stage}]={size} is not divisible by num_attention_heads[{stage}]={heads}")]
    HeadSplit { stage: usize, size: usize, heads: usize },
    #[error("hidden_act '{0}' is not supported (only the exact 'gelu')")]
    Activation(String),
    #[error("num_channels is {0} but roadseg feeds RGB (3)")]
    Channels(usize),
    #[error("decoder_hidden_size is 0")]
    DecoderSize,
    #[error("reshape_last_stage=false is not supported")]
    NoReshape,
    #[error("id2label key '{key}' repeats class index {index}")]
    RepeatedLabel { key: String, index: usize },
    #[error("id2label key '{key}' is not a class index below {count}")]
    BadLabelKey { key: String, count: usize },
    #[error("num_labels is {num_labels} but id2label names {count} classes")]
    LabelCount { num_labels: usize, count: usize },
    #[error("num_labels is {0}: at most 255 fit the uint8 class maps")]
    TooManyNumLabels(usize),
    #[error("the model has no labels")]
    NoLabels,
    #[error("{0} labels: at most 255 fit the uint8 class maps")]
    TooManyLabels(usize),
}

#[derive(Clone, Debug, Deserialize)]
pub struct SegformerConfig {
    #[serde(default = "defaults::num_channels")]
    pub num_channels: usize,
    #[serde(default = "defaults::num_encoder_blocks")]
    pub num_encoder_blocks: usize,
    #[serde(default = "defaults::depths")]
    pub depths: Vec<usize>,
    #[serde(default = "defaults::sr_ratios")]
    pub sr_ratios: Vec<usize>,
    #[serde(default = "defaults::hidden_sizes")]
    pub hidden_sizes: Vec<usize>,
    #[serde(default = "defaults::patch_sizes")]
    pub patch_sizes: Vec<usize>,
    #[serde(default = "defaults::strides")]
    pub strides: Vec<usize>,
    #[serde(default = "defaults::num_attention_heads")]
    pub num_attention_heads: Vec<usize>,
    #[serde(default = "defaults::mlp_ratios")]
    pub mlp_ratios: Vec<usize>,
    #[serde(default = "defaults::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "defaults::decoder_hidden_size")]
    pub decoder_hidden_size: usize,
    #[serde(default)]
    pub id2label: BTreeMap<String, String>,
    #[serde(default)]
    pub num_labels: Option<usize>,
    #[serde(default = "defaults::reshape_last_stage")]
    pub reshape_last_stage: bool,
}

mod defaults {
    pub fn num_channels() -> usize {
        3
    }
    pub fn num_encoder_blocks() -> usize {
        4
    }
    pub fn depths() -> Vec<usize> {
        vec![2, 2, 2, 2]
    }
    pub fn sr_ratios() -> Vec<usize> {
        vec![8, 4, 2, 1]
    }
    pub fn hidden_sizes() -> Vec<usize> {
        vec![32, 64, 160, 256]
    }
    pub fn patch_sizes() -> Vec<usize> {
        vec![7, 3, 3, 3]
    }
    pub fn strides() -> Vec<usize> {
        vec![4, 2, 2, 2]
    }
    pub fn num_attention_heads() -> Vec<usize> {
        vec![1, 2, 5, 8]
    }
    pub fn mlp_ratios() -> Vec<usize> {
        vec![4, 4, 4, 4]
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn decoder_hidden_size() -> usize {
        256
    }
    pub fn reshape_last_stage() -> bool {
        true
    }
}

impl SegformerConfig {
    pub fn from_json(text: &str, path: &str) -> Result<Self, CheckpointError> {
        let cfg: SegformerConfig =
            serde_json::from_str(text).map_err(|source| CheckpointError::ConfigJson { path: path.into(), source })?;
        cfg.validate().map_err(|source| CheckpointError::Config { path: path.into(), source })?;
        Ok(cfg)
    }

    /// Class names by index. Without `id2label`, `num_labels` (default 2, as in
    /// HF) unnamed classes `class_0..`.
    pub fn labels(&self) -> Vec<String> {
        if self.id2label.is_empty() {
            return (0..self.num_labels.unwrap_or(2)).map(|i| format!("class_{i}")).collect();
        }
        let mut labels = vec![String::new(); self.id2label.len()];
        for (k, v) in &self.id2label {
            // validate() guarantees every key is an index below len.
            labels[k.parse::<usize>().unwrap_or(0)] = v.clone();
        }
        labels
    }

    pub fn num_labels(&self) -> usize {
        self.labels().len()
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
                Ok(i) if i < count => return Err(ConfigProblem::RepeatedLabel { key: key.clone(), index: i }),
                _ => return Err(ConfigProblem::BadLabelKey { key: key.clone(), count }),
            }
        }
        if let (Some(n), false) = (self.num_labels, self.id2label.is_empty()) {
            if n != count {
                return Err(ConfigProblem::LabelCount { num_labels: n, count });
            }
        }
        // Before labels() below builds one name per class.
        if let (Some(n), true) = (self.num_labels, self.id2label.is_empty())
            && n > 255
        {
            return Err(ConfigProblem::TooManyNumLabels(n));
        }
        if self.num_labels() == 0 {
            return Err(ConfigProblem::NoLabels);
        }
        if self.num_labels() > 255 {
            return Err(ConfigProblem::TooManyLabels(self.num_labels()));
        }
        Ok(())
    }
}
