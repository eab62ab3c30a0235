//! `roadseg process`: one file (or URI) through the whole pipeline into an
//! annotated MP4, every input frame in order with its timestamps.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use roadseg::backend::cpu::CpuBackend;
use roadseg::images::{OverlayStyle, palette};
use roadseg::input_size;
use roadseg::model::MAX_BATCH;
use roadseg::temporal::{DEFAULT_WEIGHT, TemporalSettings};
use roadseg::annotate::{Annotator, FrameStats};
use roadseg::video::output::StreamObserver;
use roadseg::video::pool::{BatchPolicy, WorkerPool, WorkerWindow};
use roadseg::video::ring::FrameBuf;
use roadseg::video::source::{EditListShortfall, Shortfall, SourceError, SourceSettings, video_edit};
use roadseg::video::stop::{StopSignal, Wake, stop_channel};
use roadseg::video::stream::{
    Drained, FIRST_FRAME_WAIT, FileTarget, OutputSpec, Services, SourceEvent, StatsTarget, StreamHandle, StreamSpec, probe,
};
use roadseg::video::uri::SourceUri;
use roadseg::worker_count::{MAX_WORKERS, WorkerCount};

use super::common::{ModelArgs, load_engines, parse_size};

#[derive(Args, Debug)]
pub struct ProcessArgs {
    /// A video file, or a URI (file://, http(s)://, rtsp://, test://...).
    pub input: String,
    /// Annotated MP4 to write (default: <input name>-roadseg.mp4 in the current folder).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Per-frame JSON lines: frame, pts, road_coverage, hood_pct, road_cut, mean_confidence, exposure_gamma, inference_ms, dropped_before.
    #[arg(long)]
    pub stats_out: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Model input WxH (default: the longer side 1024, the other from the video's aspect).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(usize, usize)>,
    /// Inference workers (each a model instance; weights are shared): auto
    /// (4 a GPU, at most one a CPU core; 1 on the CPU) or 1..=64.
    #[arg(long, default_value = "auto")]
    pub workers: WorkerCount,
    /// Frames a worker runs as one batched forward, 1..=16 (it takes up to
    /// this many frames that are ready, never waiting for more).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Tint every class with its palette colour, not only the road.
    #[arg(long)]
    pub full_palette: bool,
    /// Mark low-confidence pixels with a sparse yellow checker (a debugging view).
    #[arg(long)]
    pub show_unknown: bool,
    /// Do not tint the road's uncertain edge (low-confidence pixels next to road).
    #[arg(long)]
    pub no_road_edge: bool,
    /// Folder for per-frame road masks (PNG, 255 = road, frame-sized), named by frame number.
    #[arg(long)]
    pub masks_out: Option<PathBuf>,
    /// Smooth class logits over time so masks do not flicker (auto: on, for
    /// files too; off: every frame on its own, as `infer` sees it).
    #[arg(long, value_enum, default_value_t = Toggle::Auto)]
    pub smooth: Toggle,
    /// Weight of the newest frame in the smoothed logits, (0, 1].
    #[arg(long, default_value_t = DEFAULT_WEIGHT)]
    pub smooth_weight: f32,
    /// Estimate the ego vehicle's hood (kept out of road coverage and masks, drawn in blue).
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub hood: Toggle,
    /// Keep only road joined to the bottom of the picture (blobs of "road" in
    /// the sky or on walls go to their next class).
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub connected_road: Toggle,
    /// Write the final hood estimate here (PNG, 255 = hood, frame-sized).
    #[arg(long)]
    pub hood_out: Option<PathBuf>,
    /// Infer at most this many frames a second; the others are dropped
    /// (default: every frame).
    #[arg(long)]
    pub infer_fps: Option<f64>,
    /// A file that ends before the end its container announces (truncated or
    /// damaged) is a warning and exit 0, not an error.
    #[arg(long)]
    pub allow_truncated: bool,
}

pub use super::common::Toggle;

impl ProcessArgs {
    fn temporal(&self) -> Result<TemporalSettings> {
        if !(self.smooth_weight > 0.0 && self.smooth_weight <= 1.0) {
            bail!("--smooth-weight {} must be in (0, 1] (1 = no smoothing)", self.smooth_weight);
        }
        // On for files as for cameras: a recording is watched as a video, and
        // unsmoothed its road flickers (highway.mp4, shaken frames: 1.85% of
        // the pixels flip per frame, 0.49% smoothed; solidWhiteRight.mp4
        // 0.25% -> 0.11%; 2026-12-02). With several workers a frame that
        // finishes after a later one is blended without moving the average,
        // so such a run may differ from the next by a few pixels; one worker
        // (the CPU default) is exactly repeatable.
        let smooth = self.smooth != Toggle::Off;
        Ok(TemporalSettings {
            smoothing: smooth.then_some(self.smooth_weight),
            hood: self.hood != Toggle::Off,
            connected_road: self.connected_road != Toggle::Off,
        })
    }
}

/// A path becomes a file:// URI; URIs pass through.
fn to_uri(input: &str) -> Result<String> {
    if input.contains("://") {
        return Ok(input.to_string());
    }
    let path = Path::new(input);
    if !path.exists() {
        bail!("input {input} does not exist (give a video file path or a URI)");
    }
    let abs = std::fs::canonicalize(path).with_context(|| format!("resolving {input}"))?;
    Ok(format!("file://{}", abs.display()))
}

fn default_output(input: &str) -> PathBuf {
    let stem = Path::new(input.rsplit('/').next().unwrap_or("output")).file_stem().map(|s| s.to_string_lossy().into_owned());
    PathBuf::from(format!("{}-roadseg.mp4", stem.unwrap_or_else(|| "output".into())))
}

pub fn run(args: ProcessArgs) -> Result<()> {
    let uri = to_uri(&args.input)?;
    let output = args.output.clone().unwrap_or_else(|| default_output(&args.input));
    if !args.workers.in_range() {
        bail!("--workers {} is outside 1..={MAX_WORKERS} (or auto)", args.workers);
    }
    let workers = args.workers;
    if !(1..=MAX_BATCH).contains(&args.batch) {
        bail!("--batch {} is outside 1..={MAX_BATCH}", args.batch);
    }
    let source = SourceSettings { live: SourceUri::live_by_default(&uri), ..SourceSettings::new(uri) };
    let live = source.live;
    let temporal = args.temporal()?;
    if let Some(dir) = &args.masks_out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // The model's input size comes first: given, or from the source's first frame.
    let size = match args.size {
        Some(size) => size,
        None => {
            let info = probe(&source, FIRST_FRAME_WAIT, &StopSignal::never())?;
            input_size::default_for(info.width, info.height)
        }
    };
    let gpu_time = Arc::new(Mutex::new(None::<Duration>));
    let pool = Arc::new(start_pool(&args, size, workers, gpu_time.clone())?);
    let progress = if std::io::stderr().is_terminal() { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
    progress.set_style(ProgressStyle::with_template("{spinner} {pos} frames  {per_sec}  {elapsed}  {msg}").expect("valid template"));
    progress.enable_steady_tick(Duration::from_millis(200));
    let spec = StreamSpec {
        name: "process".into(),
        source,
        ring_capacity: 8,
        infer_fps: args.infer_fps,
        temporal,
        outputs: vec![OutputSpec::File(FileTarget::single(output.clone()))],
        stats: args.stats_out.clone().map(StatsTarget::Create),
        // Road masks also give the flicker figure of the summary.
        want_masks: true,
        first_frame_timeout: FIRST_FRAME_WAIT,
        finish_timeout: Duration::from_secs(30),
        observer: Arc::new(Progress { bar: progress.clone(), masks: args.masks_out.clone() }),
    };
    let stream = spec.start(&Services { pool: pool.clone(), rtsp: None }, &StopSignal::never())?;
    let started = Instant::now();
    let interrupt = Interrupt::install()?;
    let end = follow(&stream, &interrupt.signal);
    interrupt.close();
    // Asked before the source stops; a live stream announces no end.
    let shortfall = match &end {
        End::Eos if !live => stream.source_extent().and_then(|e| e.shortfall()),
        _ => None,
    };
    let source_error = match end {
        End::Failed(e) => Some(e),
        End::Eos | End::Interrupted => None,
    };
    let drained = stream.stop(Instant::now() + Duration::from_secs(120));
    if let Ok(pool) = Arc::try_unwrap(pool) {
        pool.shutdown();
    }
    progress.finish_and_clear();
    let gpu_time = *gpu_time.lock().unwrap_or_else(PoisonError::into_inner);
    report(&args, &output, drained, (started.elapsed().as_secs_f64(), gpu_time), source_error)?;
    let Some(s) = shortfall else { return Ok(()) };
    let what = describe_shortfall(&s, &args.input);
    if args.allow_truncated {
        tracing::warn!("{what}; {} holds the frames read (--allow-truncated)", output.display());
        return Ok(());
    }
    Err(anyhow::anyhow!("{what}; {} holds the frames read (--allow-truncated accepts a partial input)", output.display()))
}

/// What was read against what was announced, and why: an MP4 whose edit list
/// explains the loss is named as the demuxer's doing, with the way round it.
fn describe_shortfall(s: &Shortfall, input: &str) -> String {
    let path = input.strip_prefix("file://").unwrap_or(input);
    let edit_start = (!path.contains("://")).then(|| video_edit(Path::new(path))).flatten().map(|e| e.start_s);
    match edit_start {
        Some(start) if s.explained_by_edit_start(start) => {
            EditListShortfall { shortfall: s, edit_start_s: start, input: path }.to_string()
        }
        _ => s.to_string(),
    }
}

/// Loads the model at `size` into `workers` workers; their GPU time (where
/// the device is timed) adds up in `gpu_time`.
fn start_pool(args: &ProcessArgs, size: (usize, usize), workers: WorkerCount, gpu_time: Arc<Mutex<Option<Duration>>>) -> Result<WorkerPool> {
    let loaded = load_engines(&args.model, size, args.model.threshold, CpuBackend::new(), workers, args.batch)?;
    let labels = loaded.engines[0].labels().to_vec();
    let annotator = Annotator {
        style: OverlayStyle {
            road_classes: loaded.engines[0].options().road_classes.clone(),
            full_palette: args.full_palette.then(|| palette(&labels)),
            show_unknown: args.show_unknown,
            road_edge: !args.no_road_edge,
            ..OverlayStyle::default()
        },
        show_text: true,
        // One input, named on the command line: no stream name or clock on it.
        show_origin: false,
    };
    let on_busy = Arc::new(move |w: WorkerWindow| {
        if let Some(gpu) = w.gpu {
            *gpu_time.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(Duration::ZERO) += gpu;
        }
    });
    // A file's frames wait in its ring (back-pressure): a batch never needs to wait for them.
    let policy = BatchPolicy { max: args.batch, wait: Duration::ZERO };
    Ok(WorkerPool::start(loaded.engines, policy, annotator, Arc::new(|_, _, _| {}), on_busy))
}

/// How the input ended.
enum End {
    Eos,
    Interrupted,
    Failed(SourceError),
}

/// Waits for the source's end, its failure or an interrupt.
fn follow(stream: &StreamHandle, interrupt: &StopSignal) -> End {
    loop {
        match interrupt.wait_on(stream.events(), Duration::from_secs(60)) {
            Wake::Stop(_) => {
                tracing::warn!("interrupted: finishing the frames decoded so far");
                return End::Interrupted;
            }
            Wake::Item(SourceEvent::Eos) => return End::Eos,
            Wake::Item(SourceEvent::Error(e)) => return End::Failed(e),
            Wake::Idle => {}
        }
    }
}

/// Prints the summary line (and writes the hood mask); the run's error, if any.
/// `(wall, gpu)`: the run's wall time in seconds and the GPU's time in its forwards.
fn report(args: &ProcessArgs, output: &Path, drained: Drained, (wall, gpu): (f64, Option<Duration>), source_error: Option<SourceError>) -> Result<()> {
    let summary = drained.outputs;
    let mean_cov = if summary.frames > 0 { summary.road_coverage_sum / summary.frames as f64 } else { 0.0 };
    if let (Some(path), Some(hood)) = (&args.hood_out, &drained.hood) {
        let png: Vec<u8> = hood.to_mask().iter().map(|&m| m * 255).collect();
        image::GrayImage::from_raw(hood.width as u32, hood.height as u32, png)
            .expect("mask matches its size")
            .save(path)
            .with_context(|| format!("writing the hood mask {}", path.display()))?;
    }
    let bars_note = drained
        .hood
        .as_ref()
        .map(|h| h.bars)
        .filter(|b| !b.is_none())
        .map(|b| format!(", bars left {} right {} top {} bottom {} px (left out)", b.left, b.right, b.top, b.bottom))
        .unwrap_or_default();
    let hood_note = drained.hood.filter(|h| !h.is_empty()).map(|h| format!(", hood {:.1}% of the frame", h.coverage() * 100.0)).unwrap_or_default();
    let hood_note = format!("{hood_note}{bars_note}");
    let flicker = summary.road_flicker().map(|f| format!(", road flicker {:.3}%", f * 100.0)).unwrap_or_default();
    let gpu_note = gpu.map(|g| format!(", GPU busy {:.0}%", g.as_secs_f64() / wall.max(1e-9) * 100.0)).unwrap_or_default();
    println!(
        "{}: {} frames ({} dropped) in {:.1} s, {:.2} frames/s{gpu_note}, mean road coverage {:.1}%{hood_note}{flicker} -> {}",
        args.input,
        summary.frames,
        summary.skipped,
        wall,
        summary.frames as f64 / wall.max(1e-9),
        mean_cov * 100.0,
        output.display()
    );
    if let Some(e) = summary.first_error {
        return Err(anyhow::Error::new(e).context("writing output failed"));
    }
    if let Some(e) = source_error {
        let what = format!("{e} ({} frames before the error were written to {})", summary.frames, output.display());
        return Err(anyhow::Error::new(e).context(what));
    }
    Ok(())
}

/// Progress on the terminal and, when asked, each frame's road mask.
struct Progress {
    bar: ProgressBar,
    masks: Option<PathBuf>,
}

impl StreamObserver for Progress {
    fn frame_out(&self, frame: &FrameBuf, _latency: Duration, stats: &FrameStats) {
        self.bar.inc(1);
        self.bar.set_message(format!("road {:.1}%", stats.road_coverage * 100.0));
        if let Some(dir) = &self.masks {
            let png: Vec<u8> = frame.road_mask.iter().map(|&m| m * 255).collect();
            let path = dir.join(format!("{:05}.png", frame.seq));
            let saved = image::GrayImage::from_raw(frame.width, frame.height, png).map(|img| img.save(&path));
            if !matches!(saved, Some(Ok(()))) {
                tracing::error!("cannot write mask {}", path.display());
            }
        }
    }
}

/// SIGINT and SIGTERM as a stop: the frames decoded so far are finished.
struct Interrupt {
    signal: StopSignal,
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<()>,
}

impl Interrupt {
    fn install() -> Result<Interrupt> {
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
            .context("installing signal handlers")?;
        let handle = signals.handle();
        let (stop, signal) = stop_channel();
        let thread = std::thread::spawn(move || {
            for _ in signals.forever() {
                stop.stop(Instant::now());
            }
        });
        Ok(Interrupt { signal, handle, thread })
    }

    fn close(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}
