//! The model, settled before any stream starts: its input size (configured,
//! or from the first stream's frames), its engines, and the worker pool
//! that runs them with the daemon's metric hooks.

use std::path::Path;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::StreamMetricMap;
use crate::backend::cpu::CpuBackend;
use crate::daemon::config::{AnnotateConfig, DaemonConfig};
use crate::daemon::health::Health;
use crate::daemon::metrics::{self, DeviceMetrics};
use crate::device::Resolved;
use crate::engine::{self, LoadError, ModelSpec};
use crate::images::{OverlayStyle, palette};
use crate::input_size::{self, FALLBACK_HEIGHT};
use crate::annotate::{Annotator, FrameStats};
use crate::video::pool::{BatchPolicy, WorkerPool, WorkerWindow};
use crate::video::stop::StopSignal;
use crate::video::stream;

/// How long the first stream may take to show its frame size when
/// `model.height` is 0.
const SIZE_WAIT: Duration = Duration::from_secs(10);

/// The model's input height: `model.height`, else the first stream's aspect
/// (its source started once for a frame, then stopped), else
/// [`FALLBACK_HEIGHT`]. `stop` cuts the wait short.
pub(super) fn input_height(config: &DaemonConfig, stop: &StopSignal) -> u32 {
    let m = &config.model;
    if m.height > 0 {
        return m.height;
    }
    let Some(first) = config.streams.first() else { return FALLBACK_HEIGHT };
    match stream::probe(&first.source_settings(), SIZE_WAIT, stop) {
        Ok(info) => {
            let h = input_size::height_for(m.width, info.width, info.height);
            tracing::info!(stream = %first.name, "model height {h} from the first stream's {}x{} frames", info.width, info.height);
            // `process` puts a portrait video's longer side at 1024; the
            // daemon keeps its configured width, so say what that costs.
            if let Some((pw, ph)) = input_size::portrait_suggestion(m.width, info.width, info.height) {
                tracing::warn!(
                    stream = %first.name,
                    "the first stream is portrait: a {}x{h} model input is {:.1}x the work of {pw}x{ph} and shows the model its road larger than it learned it; set model.width = {pw} for that",
                    m.width,
                    (m.width as f64 * h as f64) / (pw * ph) as f64
                );
            }
            h
        }
        Err(e) => {
            tracing::warn!(stream = %first.name, "no frame size from the first stream within {} s ({e}); model height {FALLBACK_HEIGHT} (set model.height to choose)", SIZE_WAIT.as_secs());
            FALLBACK_HEIGHT
        }
    }
}

/// Loads the model once at `height` and starts one worker per configured
/// worker, each with its own engine (weights shared).
pub(super) fn start_pool(
    config: &DaemonConfig,
    model_dir: &Path,
    height: u32,
    resolved: &Resolved,
    streams: &StreamMetricMap,
    health: &Arc<Health>,
) -> Result<WorkerPool, LoadError> {
    let m = &config.model;
    // `model.path` may name a Hub model; `model_dir` is where it was fetched to.
    let spec = ModelSpec { path: model_dir, max_batch: config.workers.batch, ..m.spec(height) };
    let (engines, labels) = engine::load_engines_for(&spec, resolved, config.workers.count, CpuBackend::new())?;
    let workers = engines.len();
    let batch_sizes = engines[0].batch_sizes_ready();
    tracing::info!(workers, count = %config.workers.count, device = %resolved.device, ?batch_sizes, "starting inference workers");
    let annotator = annotator(&config.annotate, engines[0].options().road_classes.clone(), &labels);
    let device = DeviceMetrics::new(&resolved.device);
    // Labelled by each worker's own GPU (workers are spread round robin).
    let worker_devices = resolved.worker_devices(workers);
    let busy: Vec<_> = worker_devices.iter().enumerate().map(|(i, d)| device.worker_busy(i, d)).collect();
    let gpu_busy = device.gpu_busy(&worker_devices);
    let on_inference = {
        let (streams, health) = (streams.clone(), health.clone());
        Arc::new(move |stream: &str, ms: f64, stats: &FrameStats| {
            device.record_inference(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
            health.inferred(stream);
            if let Some(m) = streams.read().unwrap_or_else(PoisonError::into_inner).get(stream) {
                m.frames_inferred.increment(1);
                m.road_coverage.set(f64::from(stats.road_coverage));
                m.mean_confidence.set(f64::from(stats.mean_confidence));
                m.hood_coverage.set(f64::from(stats.hood_coverage));
                m.road_cut.set(f64::from(stats.road_cut));
                m.exposure_gamma.set(f64::from(stats.brightened.unwrap_or(1.0)));
                m.last_inferred.set(metrics::unix_now());
            }
        })
    };
    let on_busy = Arc::new(move |w: WorkerWindow| {
        if let Some(g) = busy.get(w.worker) {
            g.set(w.busy_share());
        }
        if let Some(gpu_share) = w.gpu_share() {
            gpu_busy.set(w.worker, gpu_share);
        }
    });
    let policy = BatchPolicy { max: config.workers.batch, wait: Duration::from_millis(config.workers.max_batch_wait_ms) };
    Ok(WorkerPool::start(engines, policy, annotator, on_inference, on_busy))
}

fn annotator(a: &AnnotateConfig, road_classes: Vec<usize>, labels: &[String]) -> Annotator {
    Annotator {
        style: OverlayStyle {
            road_classes,
            road_colour: a.road_colour,
            road_alpha: a.road_alpha,
            full_palette: a.full_palette.then(|| palette(labels)),
            show_unknown: a.show_unknown,
            road_edge: a.road_edge,
            ..OverlayStyle::default()
        },
        show_text: a.overlay_text,
        show_origin: a.overlay_text,
    }
}
