//! `check-config`'s estimate on the CPU: the frames a second the configured
//! streams will send to inference against what this machine infers, timed
//! with the configured model at the configured size. A CPU infers a few
//! frames a second, so two 25 fps cameras drop most of their frames
//! (issue 38); this says so before the daemon runs, not after.

use std::fmt;
use std::path::Path;
use std::time::Instant;

use super::config::DaemonConfig;
use crate::backend::cpu::CpuBackend;
use crate::device::Resolved;
use crate::engine::{self, EngineError, FrameRef, LoadError, ModelSpec, PixelFormat};
use crate::input_size::FALLBACK_HEIGHT;

/// What a live stream is taken to deliver when neither `infer_fps` nor its
/// URI says: a typical camera.
pub const ASSUMED_FPS: f64 = 25.0;
/// The frame timed: a typical camera's, resized to the model's input as a
/// stream's would be.
const FRAME: (usize, usize) = (1280, 720);
/// Untimed passes first (the first allocates buffers), then timed ones.
const WARMUP: usize = 1;
const TIMED: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("timing a frame: {0}")]
    Frame(#[from] EngineError),
}

/// Demand against capacity (`Display`: one `CPU load:` line).
#[derive(Clone, Debug, PartialEq)]
pub struct CpuLoad {
    /// Frames a second the live streams send to inference, summed.
    pub demand_fps: f64,
    /// Live streams counted.
    pub streams: usize,
    /// Of those, the streams whose rate is [`ASSUMED_FPS`], not stated.
    pub assumed: usize,
    pub ms_per_frame: f64,
    /// Model input (width, height).
    pub size: (usize, usize),
    /// Workers the daemon would start (`workers.count` resolved).
    pub workers: usize,
}

impl CpuLoad {
    /// Frames a second this machine infers. Not `workers` times one
    /// engine's rate: on the CPU one engine already keeps every core busy,
    /// and two workers measured no faster than one (docs/benchmarks.md,
    /// "Workers on the CPU").
    pub fn capacity_fps(&self) -> f64 {
        1000.0 / self.ms_per_frame.max(f64::MIN_POSITIVE)
    }
}

/// The frames a second `config`'s live streams send to inference: each
/// stream's `infer_fps`, at most its URI's stated rate; else that rate;
/// else [`ASSUMED_FPS`]. Files that are not live are left out: they are read
/// as fast as inference goes and drop nothing. Another shard's streams are
/// left out too. Returns (demand, streams counted, streams assumed).
pub fn demand(config: &DaemonConfig) -> (f64, usize, usize) {
    let shard = config.daemon.shard.resolve().ok();
    let (mut fps, mut streams, mut assumed) = (0.0, 0, 0);
    for s in config.streams.iter().filter(|s| s.is_live() && shard.is_none_or(|me| me.owns(&s.name))) {
        let stated = s.source().ok().and_then(|u| u.stated_fps());
        let rate = match (s.infer_fps, stated) {
            (Some(limit), Some(source)) => limit.min(source),
            (Some(limit), None) => limit,
            (None, Some(source)) => source,
            (None, None) => {
                assumed += 1;
                ASSUMED_FPS
            }
        };
        fps += rate;
        streams += 1;
    }
    (fps, streams, assumed)
}

/// Times `config`'s model on the CPU and sets it against [`demand`].
/// `model.height = 0` (taken from the first stream when the daemon starts)
/// is timed at [`FALLBACK_HEIGHT`].
pub fn estimate(config: &DaemonConfig, model_dir: &Path, resolved: &Resolved) -> Result<CpuLoad, EstimateError> {
    let m = &config.model;
    let height = if m.height == 0 { FALLBACK_HEIGHT } else { m.height };
    let spec = ModelSpec { path: model_dir, ..m.spec(height) };
    let (mut engines, _) = engine::load_engines(&spec, resolved, 1, CpuBackend::new())?;
    let engine = &mut engines[0];
    // Mid grey: the model's time does not depend on what the picture shows.
    let pixels = vec![128u8; FRAME.0 * FRAME.1 * 3];
    let frame = FrameRef::packed(&pixels, FRAME.0, FRAME.1, PixelFormat::Rgb);
    for _ in 0..WARMUP {
        engine.run_frame(&frame)?;
    }
    let started = Instant::now();
    for _ in 0..TIMED {
        engine.run_frame(&frame)?;
    }
    let ms_per_frame = started.elapsed().as_secs_f64() * 1000.0 / TIMED as f64;
    let (demand_fps, streams, assumed) = demand(config);
    Ok(CpuLoad { demand_fps, streams, assumed, ms_per_frame, size: spec.size, workers: config.workers.count.resolve(resolved) })
}

/// `x` to two significant figures at most, for "~4.2" and "~50".
fn rough(x: f64) -> String {
    if x >= 10.0 { format!("{:.0}", x) } else { format!("{:.1}", x) }
}

impl fmt::Display for CpuLoad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let capacity = self.capacity_fps();
        let machine = format!(
            "this machine infers ~{} frames/s ({:.0} ms a frame at {}x{}, {} worker{})",
            rough(capacity),
            self.ms_per_frame,
            self.size.0,
            self.size.1,
            self.workers,
            if self.workers == 1 { "" } else { "s" }
        );
        if self.streams == 0 {
            return write!(f, "CPU load: no live streams to keep up with; {machine}");
        }
        let assumed = match self.assumed {
            0 => String::new(),
            n => format!(" ({ASSUMED_FPS} fps assumed for {n} stream{} whose rate the config does not state)", if n == 1 { "" } else { "s" }),
        };
        write!(f, "CPU load: streams ask for ~{} frames/s to infer{assumed}; {machine}: ", rough(self.demand_fps))?;
        if self.demand_fps <= capacity {
            return f.write_str("fits");
        }
        let dropped = (1.0 - capacity / self.demand_fps) * 100.0;
        // A rate each stream can have with all of them kept up with.
        let each = capacity / self.streams as f64;
        let each = if each >= 1.0 { each.floor().to_string() } else { format!("{:.1}", (each * 10.0).floor().max(1.0) / 10.0) };
        write!(f, "expect ~{dropped:.0}% of frames dropped; set infer_fps (e.g. {each} per stream), add a GPU, or fewer streams")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(demand_fps: f64, streams: usize, ms_per_frame: f64) -> CpuLoad {
        CpuLoad { demand_fps, streams, assumed: 0, ms_per_frame, size: (1024, 576), workers: 1 }
    }

    #[test]
    fn overload_names_the_drop_share_and_a_rate_that_fits() {
        // Rule: more demand than capacity gives the share dropped and an infer_fps each stream can have; less says fits.
        let line = load(50.0, 2, 238.0).to_string();
        assert!(line.contains("~50 frames/s") && line.contains("~4.2 frames/s (238 ms a frame at 1024x576, 1 worker)"), "{line}");
        assert!(line.contains("~92% of frames dropped") && line.contains("e.g. 2 per stream"), "{line}");
        assert!(load(4.0, 2, 238.0).to_string().ends_with(": fits"));
    }
}
