//! A HuggingFace SegFormer checkpoint folder: `config.json` + `model.safetensors`
//! (float32, float16 or bfloat16), memory-mapped and checked tensor by tensor.

mod config;
mod error;
mod locate;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors};

pub use config::SegformerConfig;
pub use error::{CheckpointError, ConfigProblem, TensorProblem};
pub use locate::{BUNDLED_MODEL, MODEL_ENV, ModelNotFound, SYSTEM_MODEL, locate_model, search_path};

struct TensorEntry {
    dtype: Dtype,
    shape: Vec<usize>,
    range: std::ops::Range<usize>,
}

/// An opened checkpoint. Tensors are read (and converted to f32) on demand
/// while the model is built; every name read is remembered so that tensors
/// the model never asked for can be reported.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub config: SegformerConfig,
    pub labels: Vec<String>,
    weights_path: String,
    mmap: Mmap,
    entries: HashMap<String, TensorEntry>,
    taken: BTreeSet<String>,
}

/// Tensors that a model with these prefixes must consume; anything else in
/// the file (e.g. BatchNorm's `num_batches_tracked`) is ignored.
const MODEL_PREFIXES: [&str; 2] = ["segformer.", "decode_head."];

/// A safetensors format error in words (the crate's Debug names are terse).
fn describe(e: &SafeTensorError) -> String {
    use SafeTensorError as E;
    match e {
        E::HeaderTooSmall => "shorter than the 8-byte header length".into(),
        E::HeaderTooLarge => "the header length in the first 8 bytes is over 100 MB".into(),
        E::InvalidHeaderLength => "the header length in the first 8 bytes runs past the end of the file".into(),
        E::InvalidHeader(err) => format!("the header is not UTF-8 ({err})"),
        E::InvalidHeaderDeserialization(err) => format!("the header is not valid safetensors JSON ({err})"),
        E::InvalidOffset(name) => format!("tensor '{name}' has data offsets that overlap another tensor's or leave a gap"),
        E::TensorInvalidInfo => "a tensor's data offsets do not span its shape times its dtype size".into(),
        E::ValidationOverflow => "a tensor's shape is impossibly large (its byte size overflows)".into(),
        E::MisalignedSlice => "a tensor of a sub-byte dtype does not end on a byte boundary".into(),
        E::MetadataIncompleteBuffer => "the tensors' data does not end where the file ends".into(),
        other => other.to_string(),
    }
}

impl Checkpoint {
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref().to_path_buf();
        let config_path = dir.join("config.json");
        let cfg_name = config_path.display().to_string();
        let text = std::fs::read_to_string(&config_path)
            .map_err(|err| CheckpointError::Io { path: cfg_name.clone(), err })?;
        let config = SegformerConfig::from_json(&text, &cfg_name)?;
        let labels = config.labels();

        let weights = dir.join("model.safetensors");
        let weights_path = weights.display().to_string();
        let file = File::open(&weights).map_err(|err| CheckpointError::Io { path: weights_path.clone(), err })?;
        // SAFETY: the map is read-only; a file changed underneath a running
        // daemon is an operator error that at worst yields wrong weights,
        // which are copied out during load anyway.
        let mmap = unsafe { Mmap::map(&file) }
            .map_err(|err| CheckpointError::Io { path: weights_path.clone(), err })?;
        let (header_len, metadata) = SafeTensors::read_metadata(&mmap)
            .map_err(|e| CheckpointError::Safetensors { path: weights_path.clone(), reason: describe(&e) })?;
        let data_start = 8 + header_len;
        let entries = metadata
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (a, b) = info.data_offsets;
                let entry = TensorEntry { dtype: info.dtype, shape: info.shape.clone(), range: data_start + a..data_start + b };
                (name, entry)
            })
            .collect();
        Ok(Checkpoint { dir, config, labels, weights_path, mmap, entries, taken: BTreeSet::new() })
    }

    pub fn weights_path(&self) -> &str {
        &self.weights_path
    }

    /// Reads tensor `name`, checking it has exactly `shape`, as f32.
    pub fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, CheckpointError> {
        let bad = |problem| CheckpointError::Tensor { name: name.into(), path: self.weights_path.clone(), problem };
        let entry = self.entries.get(name).ok_or_else(|| bad(TensorProblem::Missing))?;
        if entry.shape != shape {
            return Err(bad(TensorProblem::Shape { expected: shape.to_vec(), actual: entry.shape.clone() }));
        }
        let bytes = &self.mmap[entry.range.clone()];
        let values: Vec<f32> = match entry.dtype {
            Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => return Err(bad(TensorProblem::Dtype(format!("{other:?}")))),
        };
        if values.iter().any(|v| !v.is_finite()) {
            return Err(bad(TensorProblem::NonFinite));
        }
        self.taken.insert(name.to_string());
        Ok(values)
    }

    /// Fails on the first model tensor that the build never read: it means
    /// config.json describes a smaller model than the weights hold.
    pub fn check_all_used(&self) -> Result<(), CheckpointError> {
        let mut unused: Vec<&String> = self
            .entries
            .keys()
            .filter(|n| MODEL_PREFIXES.iter().any(|p| n.starts_with(p)))
            .filter(|n| !n.ends_with("num_batches_tracked"))
            .filter(|n| !self.taken.contains(*n))
            .collect();
        unused.sort();
        match unused.first() {
            Some(name) => Err(CheckpointError::Tensor { name: (*name).clone(), path: self.weights_path.clone(), problem: TensorProblem::Unused }),
            None => Ok(()),
        }
    }

    /// Dtype of the stored weights, for reports ("F32", "F16", ...).
    pub fn storage_dtype(&self) -> String {
        self.entries
            .values()
            .find(|e| e.shape.len() > 1)
            .map(|e| format!("{:?}", e.dtype))
            .unwrap_or_else(|| "unknown".into())
    }
}
