//! What can be wrong with a checkpoint folder: reading it, its `config.json`
//! (as [`ConfigProblem`]) and its tensors.

/// A checkpoint folder that cannot be used, naming the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read {path}: {err} (a model folder holds config.json and model.safetensors)")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("bad model config {path}: {source}")]
    Config { path: String, source: ConfigProblem },
    #[error("bad safetensors file {path}: {reason} (truncated or not a safetensors file? re-download or re-export it)")]
    Safetensors { path: String, reason: String },
    /// A tensor the model needs that is missing, or there but not usable.
    #[error("{}", tensor_message(.name, .path, .problem))]
    Tensor { name: String, path: String, problem: TensorProblem },
}

/// What is wrong with a tensor of the safetensors file (worded to follow
/// "tensor 'NAME' in PATH").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorProblem {
    /// Worded "missing tensor 'NAME' in PATH ..." in [`CheckpointError`].
    #[error("is missing")]
    Missing,
    #[error("has shape {actual:?}, config.json implies {expected:?}")]
    Shape { expected: Vec<usize>, actual: Vec<usize> },
    #[error("has dtype {0}; only F32, F16 and BF16 are supported")]
    Dtype(String),
    #[error("is not used by the model config.json describes (depths or sizes differ from the weights?)")]
    Unused,
    #[error("holds a non-finite value")]
    NonFinite,
}

/// "missing tensor ..." leads with what is wrong, as users search for it.
fn tensor_message(name: &str, path: &str, problem: &TensorProblem) -> String {
    match problem {
        TensorProblem::Missing => format!("missing tensor '{name}' in {path} (does config.json match these weights?)"),
        other => format!("tensor '{name}' in {path} {other}"),
    }
}

/// What makes a `config.json` unusable: not JSON of the right types, or it
/// parsed but describes no model roadseg can run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigProblem {
    /// Not JSON, or a field of the wrong type (serde_json's message says where).
    #[error("{0}")]
    Json(#[from] serde_json::Error),
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
    /// Not a decimal class index below the number of entries, or a second
    /// key for the same index ("1" and "01").
    #[error("id2label key '{key}' is not one of the class indices 0..{count}, each named once")]
    BadLabelKey { key: String, count: usize },
    #[error("num_labels is {num_labels} but id2label names {count} classes")]
    LabelCount { num_labels: usize, count: usize },
    #[error("the model has no labels")]
    NoLabels,
    #[error("{0} labels: at most 255 fit the uint8 class maps")]
    TooManyLabels(usize),
}
