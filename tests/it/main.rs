//! Every integration test, as modules of one test binary: the 2-core
//! machine links once instead of once per file. Each module checks one area
//! (its first lines say which); `cargo test --release MODULE::` runs one.
//! Two stay apart: tests/hostile.rs installs a watching global allocator,
//! and tests/soak.rs (a 3-minute soak) runs after everything else, alone.

mod common;

mod bad_checkpoint;
mod batch;
mod bundle;
mod bundled_model;
mod cli;
mod credentials;
mod cuda;
mod cuda_attention;
mod cuda_kernels;
mod daemon;
mod faults;
mod frame_path;
mod held_out_bonnets;
mod http;
mod hub;
mod media;
mod overlay;
mod overload;
mod parity;
mod pressure;
mod process;
mod record;
mod real_bonnets;
mod setup;
mod shard;
mod skips;
