//! The long-running service around the engine: its configuration, the one
//! place metric names live, the HTTP endpoint (metrics, health, status page
//! and API) and systemd notifications. The pipeline itself lives in `crate::video`.

pub mod config;
pub mod cpu_load;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod health;
pub mod metrics;
pub mod mqtt;
pub mod notify;
pub mod overload;
#[cfg(feature = "video")]
pub mod status;
#[cfg(feature = "video")]
pub mod retention;
pub mod run;
pub mod shard;
#[cfg(feature = "video")]
pub mod supervisor;
#[cfg(feature = "video")]
pub mod web;
