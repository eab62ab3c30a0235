//! `roadseg eval`: per-class IoU and mIoU on a labelled image folder, road
//! IoU against the road values of any label maps (`--road-labels`), or road
//! IoU against drawn road polygons (`--road-polygons`). `--masks` scores road
//! masks made elsewhere (another model's) by the very same code, so that two
//! models are compared on the same pixels (tools/eval/side-by-side.py).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use roadseg::engine::{FrameRef, PixelFormat};
use roadseg::eval::Confusion;
use roadseg::eval::road_polygons::{RoadPolygonSet, RoadScore};
use roadseg::images;

use super::common::{Loaded, ModelArgs, Toggle, load_engine, parse_size, run_still};

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Folder of images.
    #[arg(long)]
    pub images: PathBuf,
    /// Folder of label PNGs (class index per pixel), named like the images.
    #[arg(
        long,
        required_unless_present = "road_polygons",
        conflicts_with = "road_polygons"
    )]
    pub labels: Option<PathBuf>,
    /// Score road only: the label values that are road (e.g. 3 for CamVid,
    /// 0 for IDD), against the model's road classes. Works whatever the
    /// label set of the maps and of the model; the JSON has per-frame counts.
    #[arg(long, value_delimiter = ',', requires = "labels")]
    pub road_labels: Vec<u8>,
    /// Score these road masks instead of running a model: `DIR/<image
    /// stem>.png`, non-zero = road, the image's size (with --road-labels or
    /// --road-polygons).
    #[arg(long)]
    pub masks: Option<PathBuf>,
    /// Road-only truth: a JSON file of road / not-road / ignore polygons per
    /// image (format: tools/eval/unseen-road.json). Scores road IoU, recall
    /// and false road; only the images it names are used.
    #[arg(long)]
    pub road_polygons: Option<PathBuf>,
    /// With --road-polygons: write each frame as a picture of the score
    /// (green found road, red false road, blue missed road, grey not scored).
    #[arg(long, requires = "road_polygons")]
    pub compare_out: Option<PathBuf>,
    /// Keep only road joined to the bottom of the image, as the daemon does.
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub connected_road: Toggle,
    /// Label value that is not scored.
    #[arg(long, default_value_t = 255)]
    pub ignore_index: u8,
    /// Model input WxH (default: the longer side 1024, the other from the first image's aspect).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(usize, usize)>,
    /// Print the result as one JSON object too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: EvalArgs) -> Result<()> {
    match (&args.labels, &args.road_polygons) {
        (_, Some(polygons)) => run_road_polygons(&args, polygons),
        (Some(labels), None) if !args.road_labels.is_empty() => run_road_labels(&args, labels),
        (Some(_), None) if args.masks.is_some() => {
            bail!("--masks holds road masks only: score them with --road-labels VALUES or --road-polygons FILE")
        }
        (Some(labels), None) => run_label_maps(&args, labels),
        (None, None) => bail!("give --labels DIR (label maps) or --road-polygons FILE"),
    }
}

/// Where each image's road mask comes from: the model, run as the daemon
/// runs a still, or a folder of masks made elsewhere.
enum RoadSource {
    Model { loaded: Loaded, road_classes: Vec<usize>, connected: bool },
    Masks(PathBuf),
}

impl RoadSource {
    fn new(args: &EvalArgs, first: &Path) -> Result<((usize, usize), RoadSource)> {
        if let Some(dir) = &args.masks {
            if !dir.is_dir() {
                bail!("--masks {}: not a folder of road masks", dir.display());
            }
            let img = images::load_rgb(first)?;
            return Ok(((img.width() as usize, img.height() as usize), RoadSource::Masks(dir.clone())));
        }
        let (size, loaded) = engine_for(args, first)?;
        let road_classes = loaded.engine.options().road_classes.clone();
        Ok((size, RoadSource::Model { loaded, road_classes, connected: args.connected_road != Toggle::Off }))
    }

    /// What the header names as the thing scored.
    fn describe(&self, args: &EvalArgs) -> String {
        match self {
            RoadSource::Model { .. } => format!("model {} ({:?} preset)", args.model.model.display(), args.model.preset),
            RoadSource::Masks(dir) => format!("road masks {}", dir.display()),
        }
    }

    /// 1 = road, 0 = not, one byte per pixel of `img`.
    fn road_mask(&mut self, file: &Path, img: &image::RgbImage) -> Result<Vec<u8>> {
        match self {
            RoadSource::Model { loaded, road_classes, connected } => {
                let frame = FrameRef::packed(img.as_raw(), img.width() as usize, img.height() as usize, PixelFormat::Rgb);
                let seg = run_still(&mut loaded.engine, &frame, *connected)
                    .with_context(|| format!("running the model on {}", file.display()))?;
                Ok(seg.road_mask(road_classes))
            }
            RoadSource::Masks(dir) => {
                let stem = file.file_stem().unwrap_or_default().to_string_lossy().into_owned();
                let path = dir.join(format!("{stem}.png"));
                if !path.exists() {
                    bail!("no road mask {} for image {}", path.display(), file.display());
                }
                let mask = images::load_labels(&path)?;
                if mask.dimensions() != img.dimensions() {
                    bail!("road mask {} is {:?} but its image is {:?}", path.display(), mask.dimensions(), img.dimensions());
                }
                Ok(mask.as_raw().iter().map(|&v| u8::from(v != 0)).collect())
            }
        }
    }

    fn ms(&self) -> f64 {
        match self {
            RoadSource::Model { loaded, .. } => frame_ms(loaded),
            RoadSource::Masks(_) => 0.0,
        }
    }
}

/// Road IoU against label maps of any label set: pixels whose label is one
/// of `--road-labels` are road, `--ignore-index` is not scored, the rest is
/// not road.
fn run_road_labels(args: &EvalArgs, labels_dir: &Path) -> Result<()> {
    use roadseg::eval::road_polygons::{TRUTH_IGNORE, TRUTH_NOT_ROAD, TRUTH_ROAD};
    let files = images::list_images(&args.images)?;
    let (size, mut source) = RoadSource::new(args, &files[0])?;
    println!(
        "{} on {} images of {} at {}x{}, road = label {:?}",
        source.describe(args),
        files.len(),
        args.images.display(),
        size.0,
        size.1,
        args.road_labels
    );
    let mut per_frame = Vec::new();
    let mut total_ms = 0.0;
    for file in &files {
        let stem = file.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let label_path = labels_dir.join(format!("{stem}.png"));
        if !label_path.exists() {
            bail!("no label map {} for image {}", label_path.display(), file.display());
        }
        let img = images::load_rgb(file)?;
        let labels = images::load_labels(&label_path)?;
        if labels.dimensions() != img.dimensions() {
            bail!("{} is {:?} but its image is {:?}", label_path.display(), labels.dimensions(), img.dimensions());
        }
        let truth: Vec<u8> = labels
            .as_raw()
            .iter()
            .map(|&v| match v {
                v if v == args.ignore_index => TRUTH_IGNORE,
                v if args.road_labels.contains(&v) => TRUTH_ROAD,
                _ => TRUTH_NOT_ROAD,
            })
            .collect();
        let predicted = source.road_mask(file, &img)?;
        let score = RoadScore::of(&truth, predicted.iter().map(|&r| r == 1));
        total_ms += source.ms();
        per_frame.push((file.file_name().unwrap_or_default().to_string_lossy().into_owned(), score, None));
    }
    print_road_scores(args, size, &per_frame, total_ms)
}

fn engine_for(args: &EvalArgs, first: &Path) -> Result<((usize, usize), Loaded)> {
    let first = images::load_rgb(first)?;
    let size = args
        .size
        .unwrap_or_else(|| roadseg::input_size::default_for(first.width(), first.height()));
    // Scores the road as the daemon paints it: a pixel under the confidence
    // threshold is unknown, not road (`--threshold 0`: plain argmax).
    Ok((size, load_engine(&args.model, size, args.model.threshold)?))
}

fn run_label_maps(args: &EvalArgs, labels_dir: &Path) -> Result<()> {
    let files = images::list_images(&args.images)?;
    let (size, mut loaded) = engine_for(args, &files[0])?;
    let labels = loaded.engine.labels().to_vec();
    let mut confusion = Confusion::new(labels.len());
    let mut total_ms = 0.0;
    for file in &files {
        let stem = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let label_path = labels_dir.join(format!("{stem}.png"));
        if !label_path.exists() {
            bail!(
                "no label map {} for image {}",
                label_path.display(),
                file.display()
            );
        }
        let img = images::load_rgb(file)?;
        let truth = images::load_labels(&label_path)?;
        if truth.dimensions() != img.dimensions() {
            bail!(
                "{} is {:?} but its image is {:?}",
                label_path.display(),
                truth.dimensions(),
                img.dimensions()
            );
        }
        let frame = FrameRef::packed(
            img.as_raw(),
            img.width() as usize,
            img.height() as usize,
            PixelFormat::Rgb,
        );
        let seg = run_still(
            &mut loaded.engine,
            &frame,
            args.connected_road != Toggle::Off,
        )?;
        confusion.add(truth.as_raw(), &seg.classes, Some(args.ignore_index));
        total_ms += frame_ms(&loaded);
    }
    let iou = confusion.iou();
    println!(
        "model {} on {} images at {}x{} ({:?} preset)",
        args.model.model.display(),
        files.len(),
        size.0,
        size.1,
        args.model.preset
    );
    println!("{:<16} {:>8}", "class", "IoU");
    for (name, v) in labels.iter().zip(&iou) {
        match v {
            Some(v) => println!("{name:<16} {v:>8.4}"),
            None => println!("{name:<16} {:>8}", "n/a"),
        }
    }
    println!("{:<16} {:>8.4}", "mIoU", confusion.mean_iou());
    println!(
        "{:<16} {:>8.4}",
        "pixel accuracy",
        confusion.pixel_accuracy()
    );
    println!(
        "mean time per image: {:.1} ms",
        total_ms / files.len() as f64
    );
    if args.json {
        let per_class: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .zip(&iou)
            .map(|(n, v)| (n.clone(), serde_json::json!(v)))
            .collect();
        let out = serde_json::json!({
            "images": files.len(), "size": [size.0, size.1], "preset": args.model.preset,
            "miou": confusion.mean_iou(), "pixel_accuracy": confusion.pixel_accuracy(), "iou": per_class,
        });
        println!("{out}");
    }
    Ok(())
}

fn run_road_polygons(args: &EvalArgs, polygons: &Path) -> Result<()> {
    let set = RoadPolygonSet::load(polygons)?;
    let files: Vec<PathBuf> = set
        .frames
        .iter()
        .map(|f| args.images.join(&f.name))
        .collect();
    if let Some(missing) = files.iter().find(|f| !f.exists()) {
        bail!(
            "{} is named in {} but is not there; stage the frames first (tools/eval/stage-unseen-road.sh)",
            missing.display(),
            polygons.display()
        );
    }
    let (size, mut source) = RoadSource::new(args, &files[0])?;
    let mut per_frame = Vec::new();
    let mut total_ms = 0.0;
    println!(
        "{} on {} frames of {} at {}x{}",
        source.describe(args),
        files.len(),
        polygons.display(),
        size.0,
        size.1,
    );
    println!(
        "{:<28} {:>8} {:>8} {:>11} {:>9}  what",
        "frame", "road IoU", "recall", "false road", "hood out"
    );
    for (frame, file) in set.frames.iter().zip(&files) {
        let img = images::load_rgb(file)?;
        if [img.width() as usize, img.height() as usize] != frame.size {
            bail!(
                "{} is {}x{} but {} draws it as {:?}",
                file.display(),
                img.width(),
                img.height(),
                polygons.display(),
                frame.size
            );
        }
        let truth = frame.rasterise();
        let predicted = source.road_mask(file, &img)?;
        let score = RoadScore::of(&truth, predicted.iter().map(|&r| r == 1));
        // The daemon leaves its hood estimate out of the road mask; "hood out"
        // scores the prediction the same way, with the drawn hood as the estimate.
        let hood = frame.hood_mask().unwrap_or_default();
        let hood_out = RoadScore::of(
            &truth,
            predicted
                .iter()
                .enumerate()
                .map(|(i, &r)| r == 1 && hood.get(i) != Some(&1)),
        );
        if let Some(dir) = &args.compare_out {
            write_comparison(dir, &frame.name, &img, &truth, &predicted)?;
        }
        total_ms += source.ms();
        println!(
            "{:<28} {:>8.4} {:>8.4} {:>10.2}% {:>9.4}  {}",
            frame.name,
            score.iou(),
            score.recall(),
            100.0 * score.false_road_rate(),
            hood_out.iou(),
            frame.what
        );
        per_frame.push((frame.name.clone(), score, Some(hood_out)));
    }
    print_road_scores(args, size, &per_frame, total_ms)
}

/// A frame's name, its road score and, where a hood is drawn, the score
/// with the hood left out.
type FrameScore = (String, RoadScore, Option<RoadScore>);

/// The pooled and mean road figures, and with --json one object whose
/// per-frame counts let frames be pooled in any subset
/// (tools/eval/compare-unseen.py and side-by-side.py resample them).
fn print_road_scores(args: &EvalArgs, size: (usize, usize), per_frame: &[FrameScore], total_ms: f64) -> Result<()> {
    if per_frame.is_empty() {
        bail!("no frames to score in {}", args.images.display());
    }
    let mut total = RoadScore::default();
    let mut total_hood_out = RoadScore::default();
    for (_, s, h) in per_frame {
        total.add(*s);
        total_hood_out.add(h.unwrap_or(*s));
    }
    let mean = per_frame.iter().map(|(_, s, _)| s.iou()).sum::<f64>() / per_frame.len() as f64;
    println!(
        "{:<28} {:>8.4} {:>8.4} {:>10.2}% {:>9.4}  (all pixels of all frames)",
        "road, pooled",
        total.iou(),
        total.recall(),
        100.0 * total.false_road_rate(),
        total_hood_out.iou()
    );
    println!("{:<28} {:>8.4}", "road, mean of frames", mean);
    println!("mean time per image: {:.1} ms", total_ms / per_frame.len() as f64);
    if args.json {
        let frames: serde_json::Map<String, serde_json::Value> = per_frame
            .iter()
            .map(|(n, s, h)| {
                let h = h.unwrap_or(*s);
                let scores = serde_json::json!({
                    "road_iou": s.iou(), "recall": s.recall(), "false_road": s.false_road_rate(),
                    "intersection": s.true_road, "union": s.union(),
                    "hood_out": {"road_iou": h.iou(), "intersection": h.true_road, "union": h.union()},
                });
                (n.clone(), scores)
            })
            .collect();
        let out = serde_json::json!({
            "images": per_frame.len(), "size": [size.0, size.1], "preset": args.model.preset,
            "masks": args.masks, "road_iou": total.iou(), "road_iou_mean_of_frames": mean, "recall": total.recall(),
            "false_road": total.false_road_rate(), "road_iou_hood_out": total_hood_out.iou(), "frames": frames,
        });
        println!("{out}");
    }
    Ok(())
}

/// The frame dimmed, with each scored pixel tinted by its outcome.
fn write_comparison(
    dir: &Path,
    name: &str,
    img: &image::RgbImage,
    truth: &[u8],
    predicted: &[u8],
) -> Result<()> {
    use roadseg::eval::road_polygons::{TRUTH_IGNORE, TRUTH_ROAD};
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = img.clone();
    for ((px, &t), &p) in out.pixels_mut().zip(truth).zip(predicted) {
        let tint: Option<[u8; 3]> = match (t, p == 1) {
            (TRUTH_IGNORE, _) => Some([128, 128, 128]),
            (TRUTH_ROAD, true) => Some([0, 220, 0]),
            (TRUTH_ROAD, false) => Some([0, 80, 255]),
            (_, true) => Some([255, 0, 0]),
            _ => None,
        };
        if let Some(tint) = tint {
            for (c, t) in px.0.iter_mut().zip(tint) {
                *c = ((*c as u16 + t as u16) / 2) as u8;
            }
        }
    }
    let stem = Path::new(name)
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let path = dir.join(format!("{stem}.jpg"));
    out.save(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn frame_ms(loaded: &Loaded) -> f64 {
    let t = loaded.engine.timings();
    t.preprocess_ms + t.inference_ms + t.postprocess_ms
}
