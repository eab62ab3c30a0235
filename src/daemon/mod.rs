//! The long-running service around the engine: its configuration, the one
//! place metric names live, the health/metrics HTTP endpoint and systemd
//! notifications. The pipeline itself lives in `crate::video`.

pub mod config;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod health;
pub mod http;
pub mod metrics;
pub mod notify;
#[cfg(feature = "video")]
pub mod run;
#[cfg(feature = "video")]
pub mod supervisor;
