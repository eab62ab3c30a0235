//! `roadseg run`: the daemon. It starts in one direction: the configuration
//! is loaded and checked, the metrics endpoint and the RTSP server start,
//! the model's input size is settled (configured, or probed from the first
//! stream), the model is loaded into a pool of workers, and only then does
//! each stream get its supervisor (see `supervisor.rs`). Then it waits for
//! signals:
//!
//! - SIGTERM / SIGINT: stop intake, drain the frames in flight, finalise every
//!   output (EOS, so each MP4 is complete), shut the servers down and exit 0,
//!   all within `daemon.shutdown_timeout_s` (exit non-zero if that passes). A
//!   second signal exits at once.
//! - SIGHUP: reload the configuration file (see `run/reload.rs`). A file that
//!   does not load or validate is logged and the running configuration stays.

mod load_monitor;
mod model;
mod reload;
mod sharding;
mod signals;
mod watchdog;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::cpu_load;
use super::config::{ConfigError, DaemonConfig, Shard, SourceUri, StreamConfig, Summary, check};
use super::health::Health;
use super::metrics::{self, MetricsError, StreamMetrics};
use super::mqtt::{MqttError, MqttPublisher};
use super::notify;
use super::overload::OverloadRule;
use super::retention::{Retention, Target};
use super::status::{StreamDirectory, StreamStatus};
use super::supervisor::{StreamContext, StreamSupervisor};
use super::web::{Credentials, WebContext, WebError, WebServer};
use crate::device::{self, DeviceError, DeviceRequest};
use crate::engine::LoadError;
use crate::hub::{self, HubError, HubSettings, ModelOrigin, ModelSource};
use crate::video::rtsp::{RtspError, RtspServer};
use crate::video::stop::Wake;
use crate::video::stream::Services;
use load_monitor::LoadMonitor;
use signals::Signals;
use watchdog::Watchdog;

/// How often the main loop feeds the watchdog and samples the RTSP clients.
const TICK: Duration = Duration::from_millis(100);
/// How often systemd's status line is refreshed.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// Why the daemon did not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("installing signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Web(#[from] WebError),
    /// Not a `#[source]`: its own text names `--device`, which a config has not.
    #[error(
        "model.device = \"{}\" cannot be used on this machine: {}. Set model.device = \"cpu\", or \"auto\" to use a GPU when there is one",
        .0.request(),
        .0.reason()
    )]
    Device(DeviceError),
    #[error(transparent)]
    Model(#[from] LoadError),
    /// Shown as itself, kept as the source: `main` takes its exit code.
    #[error("model.path: {0}")]
    Hub(#[source] HubError),
    #[error("a stream has rtsp output but rtsp.listen is empty")]
    NoRtspListen,
    #[error(
        "rtsp.listen {0} is reachable from other hosts without credentials (set rtsp.username and rtsp.password, or rtsp.allow_anonymous = true)"
    )]
    AnonymousRtsp(SocketAddr),
    #[error(transparent)]
    Rtsp(#[from] RtspError),
    #[error(transparent)]
    Mqtt(#[from] MqttError),
    #[error("shutdown timed out after {} s; some outputs may be incomplete", .0.as_secs())]
    ShutdownTimedOut(Duration),
}

impl DaemonError {
    /// A bad configuration, as opposed to a failure at run time (systemd
    /// should not restart a daemon for the first). A device this machine
    /// cannot use is one: restarting will not grow it a GPU.
    pub fn is_config(&self) -> bool {
        match self {
            DaemonError::Hub(e) => e.is_config(),
            other => matches!(other, DaemonError::Config(_) | DaemonError::Device(_)),
        }
    }
}

/// `roadseg check-config FILE`: every check `run` makes, the model folder
/// included; the summary on success. With `estimate`, on the CPU, the model
/// is timed and the summary says whether the streams' frames will keep up.
pub fn check_config(path: &Path, estimate: bool) -> Result<Summary, DaemonError> {
    let mut summary = check(Some(path))?;
    // As `run` would: a Hub model is fetched (or found in the cache) now,
    // so a check on the machine that runs it also readies its cache.
    let origin = model_origin(&summary.config)?;
    // A warning, not an error: the file may be checked on another machine
    // than the one that will run it.
    match device::resolve(&summary.config.model.device, summary.config.model.precision) {
        Err(e) => summary.warnings.push(format!("{}; `roadseg run` here would exit 78", DaemonError::Device(e))),
        // Only an estimate: whatever it finds, the config is still valid.
        Ok(resolved) if estimate && resolved.is_cpu() => {
            summary.cpu_load = Some(match cpu_load::estimate(&summary.config, origin.dir(), &resolved) {
                Ok(load) => load.to_string(),
                Err(e) => format!("CPU load: not estimated ({e})"),
            });
        }
        Ok(_) => {}
    }
    summary.model_origin = Some(origin);
    Ok(summary)
}

/// The model folder: as configured (found and checked with the config), or
/// a Hub model fetched into the Hugging Face cache.
fn model_origin(config: &DaemonConfig) -> Result<ModelOrigin, DaemonError> {
    match hub::model_source(&config.model.path) {
        ModelSource::Folder(dir) => Ok(ModelOrigin::Folder(dir)),
        ModelSource::Hub(id) => hub::fetch_logged(&id, &HubSettings::from_env()).map(ModelOrigin::Hub).map_err(DaemonError::Hub),
    }
}

/// Loads and checks everything `run` needs before it starts anything
/// (every problem at once, the model folder included).
fn load_config(path: Option<&Path>) -> Result<DaemonConfig, ConfigError> {
    let config = check(path)?.config;
    if config.streams.is_empty() {
        return Err(ConfigError::NoStreams);
    }
    Ok(config)
}

/// Streams' metric handles by name, for the workers' inference hook.
type StreamMetricMap = Arc<RwLock<HashMap<String, StreamMetrics>>>;

struct Daemon {
    config_path: Option<PathBuf>,
    /// This daemon's streams only: the others belong to other shards.
    config: DaemonConfig,
    /// Settled at start; every reloaded config is filtered by it.
    shard: Shard,
    /// `{start}` in the names of the first streams' outputs.
    start_time: SystemTime,
    services: Services,
    health: Arc<Health>,
    stream_metrics: StreamMetricMap,
    /// What the status page and API list.
    directory: Arc<StreamDirectory>,
    streams: Vec<StreamSupervisor>,
    http: Option<WebServer>,
    retention: Option<Retention>,
    mqtt: Option<MqttPublisher>,
    watchdog: Option<Watchdog>,
    /// Rates and overload, sampled by the main loop.
    load: LoadMonitor,
    #[cfg(feature = "cuda")]
    gpu_gauges: Option<super::gpu::GpuMonitor>,
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
pub fn run(config_path: Option<&Path>) -> Result<(), DaemonError> {
    let mut config = load_config(config_path)?;
    let shard = sharding::resolve(&config)?;
    let skipped = sharding::select(&mut config, shard);
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    let signals = Signals::install().map_err(DaemonError::Signals)?;
    // Past a file-size limit (systemd's LimitFSIZE, a quota) a write should
    // fail like a full disk, pausing one recording, not kill the whole daemon.
    // SAFETY: setting a signal's disposition to SIG_IGN runs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    limit_malloc_arenas();
    let result = Daemon::start(config_path, config, shard, &skipped, &signals).and_then(|mut daemon| {
        daemon.run_until_signal(&signals);
        daemon.shutdown()
    });
    signals.close();
    result
}

impl Daemon {
    /// Everything up to running streams, in order: the HTTP endpoint, the
    /// RTSP server, the model and its workers, then the streams.
    /// `config` holds this shard's streams; `skipped` names the others.
    fn start(config_path: Option<&Path>, config: DaemonConfig, shard: Shard, skipped: &[String], signals: &Signals) -> Result<Daemon, DaemonError> {
        // First: an unusable device is a config error (exit 78), found before any port opens.
        let resolved = device::resolve(&config.model.device, config.model.precision).map_err(DaemonError::Device)?;
        // Before any port opens too: a wrong Hub name is a config error, and
        // a first download takes its time before anything is served.
        let origin = model_origin(&config)?;
        let stall_after = (config.daemon.stall_timeout_s > 0).then(|| Duration::from_secs(config.daemon.stall_timeout_s));
        let health = Arc::new(Health::with_stall_timeout(stall_after));
        for s in &config.streams {
            health.add_stream(&s.name);
        }
        let directory = Arc::new(StreamDirectory::new());
        let http = match config.metrics.listen_addr() {
            None => None,
            Some(addr) => {
                let credentials = config.http_credentials().map(|(u, p)| Credentials::new(u, p));
                let ctx = WebContext { metrics: metrics::install()?, health: health.clone(), streams: directory.clone(), credentials };
                Some(WebServer::start(addr, ctx)?)
            }
        };
        // After the recorder is installed, so the gauge is exported.
        sharding::report(config.daemon.shard, shard, &config, skipped);
        for w in &resolved.warnings {
            tracing::warn!("{w}");
        }
        if config.model.device == DeviceRequest::Auto && resolved.is_cpu() {
            metrics::device_fallback("cuda", "cpu");
        }
        let rtsp = start_rtsp(&config, &config)?.map(Arc::new);
        let stream_metrics = StreamMetricMap::default();
        let height = model::input_height(&config, &signals.terminate);
        let pool = model::start_pool(&config, origin.dir(), height, &resolved, &stream_metrics, &health)?;
        health.set_model(origin);
        let mqtt = match config.mqtt.url.is_empty() {
            true => None,
            false => Some(MqttPublisher::start(&config.mqtt, health.clone(), stream_metrics.clone())?),
        };
        let mut daemon = Daemon {
            config_path: config_path.map(Path::to_path_buf),
            shard,
            // [daemon] min_free_bytes is read at start (a reload updates the streams' targets).
            retention: Some(Retention::start(Target::all(&config), config.daemon.min_free_bytes)),
            start_time: SystemTime::now(),
            services: Services { pool: Arc::new(pool), rtsp },
            health,
            stream_metrics,
            directory,
            streams: Vec::new(),
            http,
            mqtt,
            watchdog: None,
            load: LoadMonitor::new(overload_rule(&config)),
            #[cfg(feature = "cuda")]
            gpu_gauges: match &resolved.target {
                device::Target::Cuda { gpus, .. } => super::gpu::GpuMonitor::start(gpus),
                device::Target::Cpu => None,
            },
            config,
        };
        // A SIGTERM while the model loaded: nothing to start only to stop it.
        if signals.terminate.requested().is_none() {
            for s in daemon.config.streams.clone() {
                daemon.start_stream(&s, daemon.start_time);
            }
        }
        note(notify::ready());
        daemon.watchdog = Watchdog::start();
        tracing::info!(streams = daemon.streams.len(), workers = daemon.services.pool.workers(), "roadseg is running");
        Ok(daemon)
    }

    /// Serves until SIGTERM or SIGINT, reloading on SIGHUP.
    fn run_until_signal(&mut self, signals: &Signals) {
        let mut last_status: Option<Instant> = None;
        let mut was_stalled = false;
        loop {
            // A stalled stream starves the watchdog: systemd restarts the daemon.
            let stalled = self.health.stalled();
            if stalled.is_empty() {
                if let Some(w) = &self.watchdog {
                    w.beat();
                }
            } else if !was_stalled {
                let names: Vec<&str> = stalled.iter().map(|(n, _)| n.as_str()).collect();
                tracing::error!(streams = %names.join(", "), "inference stalled: no frame inferred within daemon.stall_timeout_s; the watchdog is no longer fed");
            }
            was_stalled = !stalled.is_empty();
            self.update_viewer_gauges();
            self.load.sample(Instant::now(), &self.directory.list(), &self.health);
            if last_status.is_none_or(|t| t.elapsed() >= STATUS_EVERY) {
                note(notify::status(&self.status_line()));
                last_status = Some(Instant::now());
            }
            match signals.terminate.wait_on(&signals.reload, TICK) {
                Wake::Stop(_) => return,
                Wake::Item(()) => {
                    // Several SIGHUPs in a row need one reload.
                    signals.reload.try_iter().for_each(drop);
                    self.reload();
                }
                Wake::Idle => {}
            }
        }
    }

    /// Stops every stream (draining and finalising its outputs), then the
    /// services, within `daemon.shutdown_timeout_s`.
    fn shutdown(mut self) -> Result<(), DaemonError> {
        note(notify::stopping());
        let timeout = Duration::from_secs(self.config.daemon.shutdown_timeout_s);
        tracing::info!("stopping: draining and finalising every stream (at most {} s)", timeout.as_secs());
        let names: Vec<String> = self.streams.iter().map(|s| s.name.clone()).collect();
        let clean = self.stop_streams(&names, Instant::now() + timeout);
        if let Some(w) = self.watchdog.take() {
            w.stop();
        }
        if let Some(r) = self.retention.take() {
            r.stop();
        }
        if let Some(m) = self.mqtt.take() {
            m.stop();
        }
        #[cfg(feature = "cuda")]
        if let Some(g) = self.gpu_gauges.take() {
            g.stop();
        }
        if !clean {
            return Err(DaemonError::ShutdownTimedOut(timeout));
        }
        // Every stream has let go of the pool and the server by now.
        if let Ok(pool) = Arc::try_unwrap(self.services.pool) {
            pool.shutdown();
        }
        if let Some(rtsp) = self.services.rtsp.and_then(|r| Arc::try_unwrap(r).ok()) {
            rtsp.shutdown();
        }
        if let Some(http) = self.http.take() {
            // Live views are endless responses: end them, or the server waits on them.
            self.directory.list().iter().for_each(|s| s.viewers.close_all());
            http.shutdown();
        }
        tracing::info!("stopped");
        Ok(())
    }

    /// Starts the RTSP server if a stream of `config` needs it and none runs.
    fn ensure_rtsp(&mut self, config: &DaemonConfig) -> Result<(), DaemonError> {
        if self.services.rtsp.is_none() {
            self.services.rtsp = start_rtsp(&self.config, config)?.map(Arc::new);
        }
        Ok(())
    }

    /// Starts a supervisor for `config`, its outputs named for `named_for`.
    fn start_stream(&mut self, config: &StreamConfig, named_for: SystemTime) {
        let name = &config.name;
        self.health.add_stream(name);
        // A stream restarted by a reload keeps its handles: the API's counts
        // then go on as the exported counters do (they never reset).
        let metrics = self
            .stream_metrics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_string())
            .or_insert_with(|| StreamMetrics::new(name))
            .clone();
        let source = SourceUri::redacted(&config.uri);
        let status = Arc::new(StreamStatus::new(name, source.clone(), config.is_live(), metrics.clone()).recording(config.output.record_label()));
        self.directory.insert(status.clone());
        let ctx = StreamContext {
            services: self.services.clone(),
            health: self.health.clone(),
            metrics,
            status,
            start_time: named_for,
            finish_timeout: Duration::from_secs(self.config.daemon.shutdown_timeout_s),
        };
        tracing::info!(stream = %name, source = %source, live = config.is_live(), "starting stream");
        match StreamSupervisor::spawn(config.clone(), ctx) {
            Ok(s) => self.streams.push(s),
            Err(e) => tracing::error!(stream = %name, "cannot start the stream's supervisor thread: {e}"),
        }
    }

    /// Stops the named streams (all at once) and waits for them until `deadline`.
    /// False if some did not finish in time.
    fn stop_streams(&mut self, names: &[String], deadline: Instant) -> bool {
        let (mut stopping, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.streams).into_iter().partition(|s| names.contains(&s.name));
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

    /// `roadseg_rtsp_clients` (clients playing each stream's mount) and the
    /// live view's viewers and frames encoded.
    fn update_viewer_gauges(&self) {
        let metrics = self.stream_metrics.read().unwrap_or_else(PoisonError::into_inner);
        for s in &self.streams {
            let Some(m) = metrics.get(&s.name) else { continue };
            if let (Some(server), Some(mount)) = (&self.services.rtsp, s.config.output.rtsp_mount(&s.name)) {
                m.rtsp_clients.set(server.clients_at(&mount) as f64);
            }
            if let Some(status) = self.directory.get(&s.name) {
                m.live_viewers.set(status.viewers.viewers() as f64);
                m.live_frames.absolute(status.viewers.frames_encoded());
            }
        }
    }

    fn status_line(&self) -> String {
        let (ready, reason) = self.health.is_ready();
        format!("{} stream(s); {}", self.streams.len(), if ready { "all up".to_string() } else { reason })
    }
}

fn overload_rule(config: &DaemonConfig) -> OverloadRule {
    OverloadRule { drop_share: config.daemon.overload_drop_share, window: Duration::from_secs(config.daemon.overload_window_s) }
}

/// The RTSP server `config`'s streams need, on `running`'s `[rtsp]` (a
/// reload keeps the running one); None when no stream serves RTSP.
fn start_rtsp(running: &DaemonConfig, config: &DaemonConfig) -> Result<Option<RtspServer>, DaemonError> {
    if !config.streams.iter().any(|s| s.output.rtsp.is_some()) {
        return Ok(None);
    }
    let r = &running.rtsp;
    let addr = r.listen_addr().ok_or(DaemonError::NoRtspListen)?;
    let auth = r.credentials().map(|(u, p)| (u.to_string(), p.to_string()));
    // validate() refuses this already; kept here so no path can open it.
    if auth.is_none() && !addr.ip().is_loopback() && !r.allow_anonymous {
        return Err(DaemonError::AnonymousRtsp(addr));
    }
    Ok(Some(RtspServer::start(addr, auth)?))
}
