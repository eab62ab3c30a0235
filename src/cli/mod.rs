pub mod bench;
pub mod common;
pub mod eval;
pub mod infer;
#[cfg(feature = "video")]
pub mod process;
#[cfg(feature = "video")]
pub mod synth;
