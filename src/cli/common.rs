//! Arguments and set-up shared by the engine subcommands.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use roadseg::backend::Precision;
use roadseg::backend::cpu::CpuBackend;
use roadseg::device::{self, DeviceRequest};
use roadseg::engine::{AnyEngine, ModelSpec, Preset};

use roadseg::checkpoint::BUNDLED_MODEL;
use roadseg::worker_count::WorkerCount;

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// HuggingFace SegFormer checkpoint folder (config.json + model.safetensors),
    /// or a Hub model `org/name[@revision]` fetched into the Hugging Face cache
    /// (HF_HOME, HF_TOKEN, HF_HUB_OFFLINE as in transformers).
    /// The default is looked for in $ROADSEG_MODEL, ./models/roadseg-camvid,
    /// /usr/share/roadseg/models/roadseg-camvid, then beside the binary.
    #[arg(long, default_value = BUNDLED_MODEL, value_parser = parse_model_path)]
    pub model: PathBuf,
    /// cpu, cuda, cuda:0,1 or auto (CUDA when usable, else CPU with a warning).
    #[arg(long, default_value = "auto")]
    pub device: DeviceRequest,
    /// f32, fp16 or bf16 (default: fp16 on CUDA; the CPU always computes in f32).
    #[arg(long)]
    pub precision: Option<Precision>,
    /// fast: one pass; accurate: scales 0.9/1.0/1.1 averaged.
    #[arg(long, value_enum, default_value = "fast")]
    pub preset: Preset,
    /// Class names counted as road (repeatable).
    #[arg(long = "road-class", default_value = "road")]
    pub road_classes: Vec<String>,
    /// CUDA: run the kernels eagerly instead of replaying a recorded graph (debugging).
    #[arg(long)]
    pub no_graph: bool,
    /// Pixels whose top softmax probability is below this are marked unknown (255): not road.
    #[arg(long, default_value_t = roadseg::engine::DEFAULT_CONFIDENCE_THRESHOLD)]
    pub threshold: f32,
    /// Frames whose mean luma (0..1) is under this are brightened by a gamma
    /// curve before inference (night, dusk); the output video is untouched. 0: off.
    #[arg(long, default_value_t = roadseg::exposure::DEFAULT_TARGET)]
    pub exposure_target: f32,
}

pub fn parse_size(s: &str) -> Result<(usize, usize), String> {
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(|| format!("size '{s}' is not WxH (e.g. 1024x576)"))?;
    let parse = |v: &str| v.trim().parse::<usize>().map_err(|_| format!("size '{s}' is not WxH (e.g. 1024x576)"));
    let (w, h) = (parse(w)?, parse(h)?);
    if w < 32 || h < 32 || w > 8192 || h > 8192 {
        return Err(format!("size {w}x{h} is outside 32..=8192 per side"));
    }
    Ok((w, h))
}

pub struct Loaded {
    pub engine: AnyEngine,
    pub device: String,
    pub precision: Precision,
}

pub fn load_engine(args: &ModelArgs, size: (usize, usize), threshold: f32) -> Result<Loaded> {
    load_engine_with(args, size, threshold, CpuBackend::new())
}

pub fn load_engine_with(args: &ModelArgs, size: (usize, usize), threshold: f32, backend: CpuBackend) -> Result<Loaded> {
    let mut engines = load_engines(args, size, threshold, backend, WorkerCount::Fixed(1), 1)?;
    let engine = engines.engines.pop().expect("one engine");
    Ok(Loaded { engine, device: engines.device, precision: engines.precision })
}

pub struct LoadedMany {
    pub engines: Vec<AnyEngine>,
    pub device: String,
    pub precision: Precision,
}

/// Loads the model once and builds `count` engines sharing its weights.
/// Each engine builds its batch sizes up to `max_batch` frames now.
pub fn load_engines(args: &ModelArgs, size: (usize, usize), threshold: f32, backend: CpuBackend, workers: WorkerCount, max_batch: usize) -> Result<LoadedMany> {
    let resolved = device::resolve(&args.device, args.precision)?;
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    if !(0.0..=1.0).contains(&threshold) {
        bail!("--threshold {threshold} is outside 0..=1");
    }
    let exposure = roadseg::exposure::Exposure { target: args.exposure_target };
    if let Err(e) = exposure.validate() {
        bail!("--exposure-target: {e}");
    }
    let origin = roadseg::hub::resolve_model(&args.model)?;
    let spec = ModelSpec {
        path: origin.dir(),
        size,
        preset: args.preset,
        road_classes: &args.road_classes,
        confidence_threshold: threshold,
        cuda_graphs: !args.no_graph,
        max_batch,
        exposure,
    };
    let (engines, _) = roadseg::engine::load_engines_for(&spec, &resolved, workers, backend)?;
    if workers == WorkerCount::Auto {
        tracing::info!("{} inference worker(s) on {} (--workers auto)", engines.len(), resolved.device);
    }
    Ok(LoadedMany { engines, device: resolved.device, precision: resolved.precision })
}

/// The bundled default as found; when it is nowhere, the default stays and
/// `load_engines` reports every place searched (one line, exit 1, like
/// other load errors) rather than clap failing on a default value.
fn parse_model_path(s: &str) -> Result<PathBuf, String> {
    let path = std::path::Path::new(s);
    Ok(roadseg::checkpoint::locate_model(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// Runs one still image as the daemon runs a frame, with no hood known:
/// with `connected_road`, road that no path of road joins to the bottom of
/// the image goes to its next class (see `roadseg::temporal::reach`).
pub fn run_still<'e>(
    engine: &'e mut roadseg::engine::AnyEngine,
    frame: &roadseg::engine::FrameRef<'_>,
    connected_road: bool,
) -> Result<&'e roadseg::engine::Segmentation> {
    if !connected_road {
        return Ok(engine.run_frame(frame)?);
    }
    let grid = engine.logits_grid();
    let road = engine.options().road_classes.clone();
    let unseen = roadseg::temporal::HoodMask::none(frame.width, frame.height);
    let mut cut = |logits: &mut [f32]| {
        roadseg::temporal::keep_grounded_road(logits, grid, &road, &unseen);
    };
    Ok(engine.run_frame_filtered(frame, Some(&mut cut))?)
}

/// An on/off switch on the command line; `auto` lets the command decide
/// (e.g. smoothing: on for live sources, off for files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Toggle {
    Auto,
    On,
    Off,
}
