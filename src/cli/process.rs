//! `roadseg process`: one file (or URI) through the whole pipeline into an
//! annotated MP4, every input frame in order with its timestamps.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use roadseg::backend::cpu::CpuBackend;
use roadseg::images::{OverlayStyle, palette};
use roadseg::temporal::{DEFAULT_WEIGHT, TemporalSettings};
use roadseg::video::annotate::Annotator;
use roadseg::video::output::{NoObserver, StatsWriter};
use roadseg::video::pool::WorkerPool;
use roadseg::video::ring::FrameRing;
use roadseg::video::source::SourceSettings;
use roadseg::video::stream::{
    FileOutput, FileTarget, PipelineParts, RingFeeder, SourceEvent, StreamPipeline, no_decode_observer, open_file_sink, start_source,
};

use super::common::{ModelArgs, default_size, load_engines, parse_size};

#[derive(Args, Debug)]
pub struct ProcessArgs {
    /// A video file, or a URI (file://, http(s)://, rtsp://, test://...).
    pub input: String,
    /// Annotated MP4 to write (default: <input name>-roadseg.mp4 in the current folder).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Per-frame JSON lines: frame, pts, road_coverage, mean_confidence, inference_ms, dropped_before.
    #[arg(long)]
    pub stats_out: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Model input WxH (default: 1024 wide, height from the video's aspect).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(usize, usize)>,
    /// Inference workers (each a model instance; weights are shared).
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Tint every class with its palette colour, not only the road.
    #[arg(long)]
    pub full_palette: bool,
    /// Folder for per-frame road masks (PNG, 255 = road, frame-sized), named by frame number.
    #[arg(long)]
    pub masks_out: Option<PathBuf>,
    /// Smooth class logits over time so masks do not flicker (auto: on for
    /// live sources, off for files).
    #[arg(long, value_enum, default_value_t = Toggle::Auto)]
    pub smooth: Toggle,
    /// Weight of the newest frame in the smoothed logits, (0, 1].
    #[arg(long, default_value_t = DEFAULT_WEIGHT)]
    pub smooth_weight: f32,
    /// Estimate the ego vehicle's hood (kept out of road coverage and masks, drawn in blue).
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub hood: Toggle,
    /// Write the final hood estimate here (PNG, 255 = hood, frame-sized).
    #[arg(long)]
    pub hood_out: Option<PathBuf>,
    /// Infer at most this many frames a second; the others are dropped
    /// (default: every frame).
    #[arg(long)]
    pub infer_fps: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Toggle {
    Auto,
    On,
    Off,
}

impl ProcessArgs {
    fn temporal(&self, live: bool) -> Result<TemporalSettings> {
        if !(self.smooth_weight > 0.0 && self.smooth_weight <= 1.0) {
            bail!("--smooth-weight {} must be in (0, 1] (1 = no smoothing)", self.smooth_weight);
        }
        let smooth = match self.smooth {
            Toggle::Auto => live,
            toggle => toggle == Toggle::On,
        };
        Ok(TemporalSettings { smoothing: smooth.then_some(self.smooth_weight), hood: self.hood != Toggle::Off })
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
    let workers = args.workers.clamp(1, 16);
    let live = uri.starts_with("rtsp") || uri.starts_with("test://") || uri.starts_with("v4l2");
    let temporal = args.temporal(live)?;
    let ring = Arc::new(FrameRing::new(8, workers + 8, live));
    let (output_tx, output_rx) = crossbeam_channel::unbounded();
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let mut pool = WorkerPool::new();
    let feeder = Arc::new(RingFeeder::new(
        ring.clone(),
        output_tx.clone(),
        Box::new(pool.waker()),
        events_tx,
        live.then(Instant::now),
        no_decode_observer(),
    )
    .with_rate_limit(args.infer_fps));
    let mut settings = SourceSettings::new(uri.clone());
    settings.live = live;
    let source = start_source(settings, feeder.clone())?;
    let info = match source.wait_info(Duration::from_secs(30)) {
        Some(info) => info,
        None => {
            // The source may end a moment before its error reaches us.
            let err = match events_rx.recv_timeout(Duration::from_secs(2)) {
                Ok(SourceEvent::Error(e)) => anyhow::Error::new(e),
                Ok(SourceEvent::Eos) => anyhow!("{uri} ended before its first video frame"),
                Err(_) => anyhow!("no video frame from {uri} within 30 s"),
            };
            source.stop();
            return Err(err);
        }
    };
    let size = args.size.unwrap_or_else(|| default_size(info.width as usize, info.height as usize));
    let loaded = load_engines(&args.model, size, args.model.threshold, CpuBackend::new(), workers)?;
    let labels = loaded.engines[0].labels().to_vec();
    let annotator = Annotator {
        style: OverlayStyle {
            road_classes: loaded.engines[0].options().road_classes.clone(),
            full_palette: args.full_palette.then(|| palette(&labels)),
            ..OverlayStyle::default()
        },
        show_text: true,
    };
    pool.spawn_workers(loaded.engines, annotator, Arc::new(|_, _, _| {}), Arc::new(|_, _| {}));

    let file = open_file_sink(&FileTarget::single(output.clone()), info)?;
    let stats = args.stats_out.as_deref().map(StatsWriter::create).transpose()?;
    let progress = if std::io::stderr().is_terminal() { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
    progress.set_style(ProgressStyle::with_template("{spinner} {pos} frames  {per_sec}  {elapsed}  {msg}").expect("valid template"));
    progress.enable_steady_tick(Duration::from_millis(200));
    let bar = progress.clone();
    if let Some(dir) = &args.masks_out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let masks_dir = args.masks_out.clone();
    let started = Instant::now();
    let pipeline = StreamPipeline::start(
        PipelineParts {
            name: "process".into(),
            ring: ring.clone(),
            output_tx,
            output_rx,
            sinks: vec![Box::new(FileOutput::once(file))],
            stats,
            observer: Arc::new(NoObserver),
            finish_timeout: Duration::from_secs(30),
            on_frame: Some(Box::new(move |frame, stats| {
                bar.inc(1);
                bar.set_message(format!("road {:.1}%", stats.road_coverage * 100.0));
                if let Some(dir) = &masks_dir {
                    let png: Vec<u8> = frame.road_mask.iter().map(|&m| m * 255).collect();
                    let path = dir.join(format!("{:05}.png", frame.seq));
                    let saved = image::GrayImage::from_raw(frame.width, frame.height, png).map(|img| img.save(&path));
                    if !matches!(saved, Some(Ok(()))) {
                        tracing::error!("cannot write mask {}", path.display());
                    }
                }
            })),
            // Road masks also give the flicker figure of the summary.
            want_masks: true,
            temporal,
        },
        &pool,
    );
    let stream_temporal = pipeline.input.clone();

    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone()).context("installing signal handlers")?;
    }
    let mut source_error = None;
    loop {
        if interrupted.load(Ordering::SeqCst) {
            tracing::warn!("interrupted: finishing the frames decoded so far");
            break;
        }
        match events_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(SourceEvent::Eos) => break,
            Ok(SourceEvent::Error(e)) => {
                source_error = Some(e);
                break;
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
    feeder.stop();
    let summary = pipeline.drain_and_finish(&pool, Instant::now() + Duration::from_secs(120));
    source.stop();
    pool.shutdown();
    progress.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let mean_cov = if summary.frames > 0 { summary.road_coverage_sum / summary.frames as f64 } else { 0.0 };
    let hood = stream_temporal.temporal.hood();
    if let (Some(path), Some(hood)) = (&args.hood_out, &hood) {
        let png: Vec<u8> = hood.to_mask().iter().map(|&m| m * 255).collect();
        image::GrayImage::from_raw(hood.width as u32, hood.height as u32, png)
            .expect("mask matches its size")
            .save(path)
            .with_context(|| format!("writing the hood mask {}", path.display()))?;
    }
    let hood_note = hood.filter(|h| !h.is_empty()).map(|h| format!(", hood {:.1}% of the frame", h.coverage() * 100.0)).unwrap_or_default();
    let flicker = summary.road_flicker().map(|f| format!(", road flicker {:.3}%", f * 100.0)).unwrap_or_default();
    println!(
        "{}: {} frames ({} dropped) in {:.1} s, {:.2} frames/s, mean road coverage {:.1}%{hood_note}{flicker} -> {}",
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
