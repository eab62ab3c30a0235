//! `roadseg run`: the daemon. Loads and checks the configuration, starts the
//! metrics endpoint and the RTSP server, one supervisor per stream (see
//! `supervisor.rs`), loads the model once for every worker, then waits for
//! signals:
//!
//! - SIGTERM / SIGINT: stop intake, drain the frames in flight, finalise every
//!   output (EOS, so each MP4 is complete), shut the servers down and exit 0,
//!   all within `daemon.shutdown_timeout_s` (exit non-zero if that passes). A
//!   second signal exits at once.
//! - SIGHUP: reload the configuration file. Streams are started, stopped or
//!   restarted as `plan_reload` says; `[model]`, `[workers]`, `[rtsp]`,
//!   `[metrics]` and `[annotate]` need a restart and are kept as they were.
//!   A file that does not load or validate is logged and the running
//!   configuration stays.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail};

use super::config::{DaemonConfig, ModelConfig, SourceUri, Summary, check};
use super::health::Health;
use super::metrics::{self, DeviceMetrics, StreamMetrics};
use super::notify;
use super::mqtt::MqttPublisher;
use super::retention::{Retention, Target};
use super::status::{StreamDirectory, StreamStatus};
use super::supervisor::{StreamContext, StreamSupervisor};
use super::web::{Credentials, WebContext, WebServer};
use crate::backend::cpu::CpuBackend;
use crate::device::{self, DeviceRequest, Resolved};
use crate::engine::{self, AnyEngine, ModelSpec};
use crate::images::{OverlayStyle, palette};
use crate::video::annotate::Annotator;
use crate::video::frame::VideoInfo;
use crate::video::pool::WorkerPool;
use crate::video::rtsp::RtspServer;

/// How long to wait for a stream's frame size when `model.height` is 0.
const SIZE_WAIT: Duration = Duration::from_secs(10);
/// Model height when no stream reports its size in time.
const FALLBACK_HEIGHT: u32 = 576;
const TICK: Duration = Duration::from_millis(100);
/// Extra frame buffers per stream beyond one per worker.
const IN_FLIGHT_SLACK: usize = 8;

/// `roadseg check-config FILE`: every check `run` makes, the model folder
/// included; the summary on success.
pub fn check_config(path: &Path) -> Result<Summary> {
    Ok(check(Some(path))?)
}

/// Loads and checks everything `run` needs before it starts anything
/// (every problem at once, the model folder included).
fn load_config(path: Option<&Path>) -> Result<DaemonConfig> {
    let config = check(path)?.config;
    if config.streams.is_empty() {
        return Err(super::config::ConfigError::NoStreams.into());
    }
    Ok(config)
}

/// Model input height for `width` and a frame of `info`: the frame's aspect,
/// rounded to a multiple of 32 (32..=4096).
pub fn derived_height(width: u32, info: VideoInfo) -> u32 {
    if info.width == 0 || info.height == 0 {
        return FALLBACK_HEIGHT;
    }
    let h = (f64::from(width) * f64::from(info.height) / f64::from(info.width) / 32.0)
        .round()
        .max(1.0);
    (h as u32 * 32).min(4096)
}

/// Loads the model once and builds `count` engines sharing its weights.
fn load_engines(m: &ModelConfig, size: (usize, usize), resolved: &Resolved, count: usize) -> Result<(Vec<AnyEngine>, Vec<String>)> {
    let spec = ModelSpec {
        path: &m.path,
        size,
        preset: m.preset,
        road_classes: &m.road_classes,
        confidence_threshold: m.confidence_threshold,
        cuda_graphs: m.cuda_graphs,
    };
    Ok(engine::load_engines(&spec, resolved, count, CpuBackend::new())?)
}

/// Streams' metric handles by name, for the workers' inference hook.
type StreamMetricMap = Arc<RwLock<HashMap<String, StreamMetrics>>>;

struct Daemon {
    config_path: Option<PathBuf>,
    config: DaemonConfig,
    start_time: SystemTime,
    start_instant: Instant,
    pool: Arc<RwLock<WorkerPool>>,
    rtsp: Option<Arc<RtspServer>>,
    health: Arc<Health>,
    stream_metrics: StreamMetricMap,
    /// What the status page and API list.
    directory: Arc<StreamDirectory>,
    streams: Vec<StreamSupervisor>,
    retention: Option<Retention>,
    mqtt: Option<MqttPublisher>,
    /// Start-up is over: streams started from now on are named for their own start.
    running: bool,
    workers_ready: Arc<AtomicBool>,
}

impl Daemon {
    fn context(&self, config: &super::config::StreamConfig) -> StreamContext {
        let name = &config.name;
        let metrics = StreamMetrics::new(name);
        self.stream_metrics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), metrics.clone());
        let source = SourceUri::redacted(&config.uri);
        let status = Arc::new(StreamStatus::new(name, source, config.is_live(), metrics.clone()));
        self.directory.insert(status.clone());
        StreamContext {
            status,
            pool: self.pool.clone(),
            rtsp: self.rtsp.clone(),
            health: self.health.clone(),
            metrics,
            start_time: if self.running {
                SystemTime::now()
            } else {
                self.start_time
            },
            in_flight: self.config.workers.count + IN_FLIGHT_SLACK,
            finish_timeout: Duration::from_secs(self.config.daemon.shutdown_timeout_s),
            workers_ready: self.workers_ready.clone(),
        }
    }

    /// Starts the RTSP server if a stream of `config` needs it and none runs.
    fn ensure_rtsp(&mut self, config: &DaemonConfig) -> Result<()> {
        if self.rtsp.is_some() || !config.streams.iter().any(|s| s.output.rtsp.is_some()) {
            return Ok(());
        }
        let Some(addr) = self.config.rtsp.listen_addr() else {
            bail!("a stream has rtsp output but rtsp.listen is empty");
        };
        let auth = self
            .config
            .rtsp
            .credentials()
            .map(|(u, p)| (u.to_string(), p.to_string()));
        // validate() refuses this already; kept here so no path can open it.
        if auth.is_none() && !addr.ip().is_loopback() && !self.config.rtsp.allow_anonymous {
            bail!("rtsp.listen {addr} is reachable from other hosts without credentials (set rtsp.username and rtsp.password, or rtsp.allow_anonymous = true)");
        }
        self.rtsp = Some(Arc::new(RtspServer::start(addr, auth)?));
        Ok(())
    }

    fn start_stream(&mut self, config: &super::config::StreamConfig) {
        self.health.add_stream(&config.name);
        let ctx = self.context(config);
        tracing::info!(
            stream = %config.name,
            source = %SourceUri::redacted(&config.uri),
            live = config.is_live(),
            "starting stream"
        );
        match StreamSupervisor::spawn(config.clone(), ctx) {
            Ok(s) => self.streams.push(s),
            Err(e) => tracing::error!(stream = %config.name, "cannot start the stream's supervisor thread: {e}"),
        }
    }

    /// Stops the named streams (all at once) and waits for them until `deadline`.
    /// False if some did not finish in time.
    fn stop_streams(&mut self, names: &[String], deadline: Instant) -> bool {
        let (mut stopping, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.streams)
            .into_iter()
            .partition(|s| names.contains(&s.name));
        self.streams = keep;
        for s in &stopping {
            s.request_stop(deadline);
        }
        let mut all = true;
        for s in &mut stopping {
            if !s.join_until(deadline) {
                tracing::error!(stream = %s.name, "stream did not finish its outputs before the deadline");
                all = false;
            }
        }
        all
    }

    /// Waits for the first stream (in config order among those that report
    /// one within `SIZE_WAIT`) to report its frame size.
    fn first_frame_size(&self, stop: &AtomicBool) -> Option<VideoInfo> {
        let deadline = Instant::now() + SIZE_WAIT;
        while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
            if let Some(info) = self.streams.iter().find_map(StreamSupervisor::info) {
                return Some(info);
            }
            if self.streams.iter().all(StreamSupervisor::is_finished) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn reload(&mut self) {
        if let Err(e) = notify::reloading() {
            tracing::debug!("{e}");
        }
        tracing::info!("SIGHUP: reloading the configuration");
        match load_config(self.config_path.as_deref()) {
            Err(e) => tracing::error!("reload failed, keeping the running configuration: {e:#}"),
            Ok(new) => self.apply(new),
        }
        if let Err(e) = notify::ready() {
            tracing::debug!("{e}");
        }
    }

    fn apply(&mut self, mut new: DaemonConfig) {
        let mut kept = Vec::new();
        if new.model != self.config.model {
            kept.push("model");
        }
        if new.workers != self.config.workers {
            kept.push("workers");
        }
        if new.rtsp != self.config.rtsp {
            kept.push("rtsp");
        }
        if new.metrics != self.config.metrics {
            kept.push("metrics");
        }
        if new.mqtt != self.config.mqtt {
            kept.push("mqtt");
        }
        if new.annotate != self.config.annotate {
            kept.push("annotate");
        }
        if !kept.is_empty() {
            tracing::warn!(
                "reload: [{}] changed; restart required to apply (keeping the running values)",
                kept.join("], [")
            );
        }
        new.model = self.config.model.clone();
        new.workers = self.config.workers.clone();
        new.rtsp = self.config.rtsp.clone();
        new.metrics = self.config.metrics.clone();
        new.annotate = self.config.annotate.clone();
        new.mqtt = self.config.mqtt.clone();
        let plan = super::config::plan_reload(&self.config, &new);
        tracing::info!(added = ?plan.added, removed = ?plan.removed, changed = ?plan.changed, unchanged = plan.unchanged.len(), "reload plan");
        if let Err(e) = self.ensure_rtsp(&new) {
            tracing::error!("reload: cannot start the RTSP server, keeping the running configuration: {e:#}");
            return;
        }
        let to_stop: Vec<String> = plan.removed.iter().chain(&plan.changed).cloned().collect();
        if !to_stop.is_empty() {
            let deadline = Instant::now() + Duration::from_secs(new.daemon.shutdown_timeout_s);
            self.stop_streams(&to_stop, deadline);
        }
        for name in &plan.removed {
            self.health.remove_stream(name);
            self.directory.remove(name);
            tracing::info!(stream = %name, "stream removed");
        }
        self.config = new;
        if let Some(r) = &self.retention {
            r.set_targets(Target::all(&self.config));
        }
        for name in plan.changed.iter().chain(&plan.added) {
            if let Some(s) = self.config.stream(name).cloned() {
                self.start_stream(&s);
            }
        }
        tracing::info!("reload done");
    }

    /// `roadseg_rtsp_clients`: clients playing each stream's mount.
    fn update_rtsp_clients(&self) {
        let Some(server) = &self.rtsp else { return };
        let metrics = self.stream_metrics.read().unwrap_or_else(PoisonError::into_inner);
        for s in &self.streams {
            if let (Some(mount), Some(m)) = (s.config.output.rtsp_mount(&s.name), metrics.get(&s.name)) {
                m.rtsp_clients.set(server.clients_at(&mount) as f64);
            }
        }
    }

    fn status_line(&self) -> String {
        let (ready, reason) = self.health.is_ready();
        format!(
            "{} stream(s); {}",
            self.streams.len(),
            if ready { "all up".to_string() } else { reason }
        )
    }
}

fn note(result: Result<(), notify::NotifyError>) {
    if let Err(e) = result {
        tracing::debug!("{e}");
    }
}

/// glibc gives each new thread its own malloc arena, up to 8 per core, and
/// GStreamer starts threads per RTSP viewer and per reconnect: over weeks the
/// arenas fragment into memory that is never returned. Two are plenty for a
/// daemon whose hot paths reuse their buffers: soaks (tools/soak.sh) with 4
/// arenas still grew 7.7 MiB over minutes 1-5 before levelling off, with 2
/// they are flat from the first minute. `MALLOC_ARENA_MAX` in the environment
/// still wins.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator tunable; called before the daemon's threads start.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// `roadseg run --config FILE`. Returns when the daemon has shut down.
pub fn run(config_path: Option<&Path>) -> Result<()> {
    let config = load_config(config_path)?;
    for w in config.warnings() {
        tracing::warn!("{w}");
    }

    let terminate = Arc::new(AtomicBool::new(false));
    let reload = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second signal while the first is being handled exits at once (code 1).
        signal_hook::flag::register_conditional_shutdown(signal, 1, terminate.clone())
            .context("installing signal handlers")?;
        signal_hook::flag::register(signal, terminate.clone()).context("installing signal handlers")?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone()).context("installing signal handlers")?;
    // Past a file-size limit (systemd's LimitFSIZE, a quota) a write should
    // fail like a full disk, pausing one recording, not kill the whole daemon.
    // SAFETY: setting a signal's disposition to SIG_IGN runs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    limit_malloc_arenas();

    let stall_after = (config.daemon.stall_timeout_s > 0).then(|| Duration::from_secs(config.daemon.stall_timeout_s));
    let health = Arc::new(Health::with_stall_timeout(stall_after));
    for s in &config.streams {
        health.add_stream(&s.name);
    }
    let directory = Arc::new(StreamDirectory::new());
    let http = match config.metrics.listen_addr() {
        Some(addr) => {
            let ctx = WebContext {
                metrics: metrics::install()?,
                health: health.clone(),
                streams: directory.clone(),
                credentials: config.http_credentials().map(|(u, p)| Credentials::new(u, p)),
            };
            Some(WebServer::start(addr, ctx)?)
        }
        None => None,
    };

    let resolved = device::resolve(&config.model.device, config.model.precision).map_err(|e| anyhow!("model.device: {e}"))?;
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    if config.model.device == DeviceRequest::Auto && resolved.is_cpu() {
        metrics::device_fallback("cuda", "cpu");
    }

    let mut daemon = Daemon {
        config_path: config_path.map(Path::to_path_buf),
        config: config.clone(),
        start_time: SystemTime::now(),
        start_instant: Instant::now(),
        pool: Arc::new(RwLock::new(WorkerPool::new())),
        rtsp: None,
        health: health.clone(),
        stream_metrics: Arc::default(),
        directory,
        streams: Vec::new(),
        retention: None,
        mqtt: None,
        running: false,
        workers_ready: Arc::default(),
    };
    daemon.ensure_rtsp(&config)?;
    // [daemon] min_free_bytes is read at start (a reload updates the streams' targets).
    daemon.retention = Some(Retention::start(Target::all(&config), config.daemon.min_free_bytes));
    // Sources start before the model: the model's height may come from the first frame.
    for s in &config.streams {
        daemon.start_stream(s);
    }
    daemon.running = true;

    let width = config.model.width;
    let height = if config.model.height > 0 {
        config.model.height
    } else {
        match daemon.first_frame_size(&terminate) {
            Some(info) => {
                let h = derived_height(width, info);
                tracing::info!(
                    "model height {h} from the first stream's {}x{} frames",
                    info.width,
                    info.height
                );
                h
            }
            None => {
                tracing::warn!(
                    "no stream reported its frame size within {} s; model height {FALLBACK_HEIGHT}",
                    SIZE_WAIT.as_secs()
                );
                FALLBACK_HEIGHT
            }
        }
    };
    let workers = config.workers.count.max(1);
    let loaded = load_engines(&config.model, (width as usize, height as usize), &resolved, workers);
    let (engines, labels) = match loaded {
        Ok(x) => x,
        Err(e) => {
            let deadline = Instant::now() + Duration::from_secs(config.daemon.shutdown_timeout_s);
            let names: Vec<String> = daemon.streams.iter().map(|s| s.name.clone()).collect();
            daemon.stop_streams(&names, deadline);
            return Err(e);
        }
    };
    let a = &config.annotate;
    let annotator = Annotator {
        style: OverlayStyle {
            road_classes: engines[0].options().road_classes.clone(),
            road_colour: a.road_colour,
            road_alpha: a.road_alpha,
            full_palette: a.full_palette.then(|| palette(&labels)),
            show_unknown: a.show_unknown,
            ..OverlayStyle::default()
        },
        show_text: a.overlay_text,
    };
    let device = DeviceMetrics::new(&resolved.device);
    let busy: Vec<_> = (0..workers).map(|i| device.worker_busy(i)).collect();
    let on_inference = {
        let (device, streams, health) = (device.clone(), daemon.stream_metrics.clone(), health.clone());
        Arc::new(move |stream: &str, ms: f64, stats: &crate::video::annotate::FrameStats| {
            device.record_inference(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
            health.inferred(stream);
            if let Some(m) = streams.read().unwrap_or_else(PoisonError::into_inner).get(stream) {
                m.frames_inferred.increment(1);
                m.road_coverage.set(f64::from(stats.road_coverage));
                m.mean_confidence.set(f64::from(stats.mean_confidence));
                m.hood_coverage.set(f64::from(stats.hood_coverage));
                m.last_inferred.set(metrics::unix_now());
            }
        })
    };
    let on_busy = Arc::new(move |worker: usize, share: f64| {
        if let Some(g) = busy.get(worker) {
            g.set(share);
        }
    });
    daemon
        .pool
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .spawn_workers(engines, annotator, on_inference, on_busy);
    daemon.workers_ready.store(true, Ordering::SeqCst);
    health.set_model_loaded(true);
    if !config.mqtt.url.is_empty() {
        daemon.mqtt = Some(MqttPublisher::start(&config.mqtt, health.clone(), daemon.stream_metrics.clone())?);
    }
    note(notify::ready());
    tracing::info!(streams = daemon.streams.len(), workers, "roadseg is running");

    // Watchdog: pings only while the main loop below keeps ticking.
    let heartbeat = Arc::new(AtomicU64::new(0));
    let watchdog_stop = Arc::new(AtomicBool::new(false));
    let watchdog = notify::watchdog_interval().map(|interval| {
        let (heartbeat, stop) = (heartbeat.clone(), watchdog_stop.clone());
        let origin = daemon.start_instant;
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let now = origin.elapsed().as_millis() as u64;
                if now.saturating_sub(heartbeat.load(Ordering::SeqCst)) <= interval.as_millis() as u64 {
                    note(notify::watchdog());
                }
                std::thread::sleep(interval.min(Duration::from_secs(1)));
            }
        })
    });

    #[cfg(feature = "cuda")]
    let gpu_gauges = match &resolved.target {
        device::Target::Cuda { gpus, .. } => super::gpu::GpuMonitor::start(gpus),
        device::Target::Cpu => None,
    };

    let mut last_status = Instant::now() - Duration::from_secs(60);
    let mut was_stalled = false;
    while !terminate.load(Ordering::SeqCst) {
        // A stalled stream starves the watchdog: systemd restarts the daemon.
        let stalled = health.stalled();
        if stalled.is_empty() {
            heartbeat.store(daemon.start_instant.elapsed().as_millis() as u64, Ordering::SeqCst);
        } else if !was_stalled {
            let names: Vec<&str> = stalled.iter().map(|(n, _)| n.as_str()).collect();
            tracing::error!(streams = %names.join(", "), "inference stalled: no frame inferred within daemon.stall_timeout_s; the watchdog is no longer fed");
        }
        was_stalled = !stalled.is_empty();
        if reload.swap(false, Ordering::SeqCst) {
            daemon.reload();
        }
        daemon.update_rtsp_clients();
        if last_status.elapsed() >= Duration::from_secs(5) {
            note(notify::status(&daemon.status_line()));
            last_status = Instant::now();
        }
        std::thread::sleep(TICK);
    }

    // Shutdown.
    note(notify::stopping());
    let timeout = Duration::from_secs(daemon.config.daemon.shutdown_timeout_s);
    tracing::info!(
        "stopping: draining and finalising every stream (at most {} s)",
        timeout.as_secs()
    );
    let deadline = Instant::now() + timeout;
    let names: Vec<String> = daemon.streams.iter().map(|s| s.name.clone()).collect();
    let clean = daemon.stop_streams(&names, deadline);
    watchdog_stop.store(true, Ordering::SeqCst);
    if let Some(r) = daemon.retention.take() {
        r.stop();
    }
    if let Some(m) = daemon.mqtt.take() {
        m.stop();
    }
    #[cfg(feature = "cuda")]
    if let Some(g) = gpu_gauges {
        g.stop();
    }
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    if !clean {
        bail!(
            "shutdown timed out after {} s; some outputs may be incomplete",
            timeout.as_secs()
        );
    }
    let Daemon { pool, rtsp, .. } = daemon;
    if let Ok(pool) = Arc::try_unwrap(pool) {
        pool.into_inner().unwrap_or_else(PoisonError::into_inner).shutdown();
    }
    if let Some(rtsp) = rtsp.and_then(|r| Arc::try_unwrap(r).ok()) {
        rtsp.shutdown();
    }
    if let Some(http) = http {
        http.shutdown();
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_height_follows_the_frame_aspect_in_multiples_of_32() {
        // Rule: height = width * frame aspect, rounded to a multiple of 32; unknown sizes give 576.
        let info = |width, height| VideoInfo {
            width,
            height,
            fps_num: 25,
            fps_den: 1,
        };
        assert_eq!(derived_height(1024, info(1920, 1080)), 576);
        assert_eq!(derived_height(224, info(320, 240)), 160);
        assert_eq!(derived_height(64, info(1000, 10)), 32);
        assert_eq!(derived_height(1024, info(0, 0)), FALLBACK_HEIGHT);
    }
}
