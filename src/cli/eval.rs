//! `roadseg eval`: per-class IoU and mIoU on a labelled image folder, or road
//! IoU against drawn road polygons (`--road-polygons`).

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
    /// Model input WxH (default: 1024 wide, height from the first image's aspect).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(usize, usize)>,
    /// Print the result as one JSON object too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: EvalArgs) -> Result<()> {
    match (&args.labels, &args.road_polygons) {
        (_, Some(polygons)) => run_road_polygons(&args, polygons),
        (Some(labels), None) => run_label_maps(&args, labels),
        (None, None) => bail!("give --labels DIR (label maps) or --road-polygons FILE"),
    }
}

fn engine_for(args: &EvalArgs, first: &Path) -> Result<((usize, usize), Loaded)> {
    let first = images::load_rgb(first)?;
    let size = args
        .size
        .unwrap_or_else(|| roadseg::input_size::default_for(first.width(), first.height()));
    // Scores plain argmax: the confidence threshold is a display choice.
    Ok((size, load_engine(&args.model, size, 0.0)?))
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
    let (size, mut loaded) = engine_for(args, &files[0])?;
    let road_classes = loaded.engine.options().road_classes.clone();
    let mut total = RoadScore::default();
    let mut per_frame = Vec::new();
    let mut total_ms = 0.0;
    println!(
        "model {} on {} frames of {} at {}x{} ({:?} preset)",
        args.model.model.display(),
        files.len(),
        polygons.display(),
        size.0,
        size.1,
        args.model.preset
    );
    println!(
        "{:<28} {:>8} {:>8} {:>11} {:>9}  what",
        "frame", "road IoU", "recall", "false road", "hood out"
    );
    // The daemon leaves its hood estimate out of the road mask; "hood out"
    // scores the prediction the same way, with the drawn hood as the estimate.
    let mut total_hood_out = RoadScore::default();
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
        let packed = FrameRef::packed(img.as_raw(), frame.size[0], frame.size[1], PixelFormat::Rgb);
        let seg = run_still(
            &mut loaded.engine,
            &packed,
            args.connected_road != Toggle::Off,
        )
        .with_context(|| format!("running the model on {}", file.display()))?;
        let predicted = seg.road_mask(&road_classes);
        let score = RoadScore::of(&truth, predicted.iter().map(|&r| r == 1));
        let hood = frame.hood_mask().unwrap_or_default();
        let hood_out = RoadScore::of(
            &truth,
            predicted
                .iter()
                .enumerate()
                .map(|(i, &r)| r == 1 && hood.get(i) != Some(&1)),
        );
        total_hood_out.add(hood_out);
        if let Some(dir) = &args.compare_out {
            write_comparison(dir, &frame.name, &img, &truth, &predicted)?;
        }
        total_ms += frame_ms(&loaded);
        println!(
            "{:<28} {:>8.4} {:>8.4} {:>10.2}% {:>9.4}  {}",
            frame.name,
            score.iou(),
            score.recall(),
            100.0 * score.false_road_rate(),
            hood_out.iou(),
            frame.what
        );
        total.add(score);
        per_frame.push((frame.name.clone(), score, hood_out));
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
    println!(
        "mean time per image: {:.1} ms",
        total_ms / files.len() as f64
    );
    if args.json {
        let frames: serde_json::Map<String, serde_json::Value> = per_frame
            .iter()
            .map(|(n, s, h)| {
                // The counts as well as the ratios, so that frames can be
                // pooled in any subset (tools/eval/compare-unseen.py resamples them),
                // with the hood in (what a still shows) and out (what video shows).
                let scores = serde_json::json!({
                    "road_iou": s.iou(), "recall": s.recall(), "false_road": s.false_road_rate(),
                    "intersection": s.true_road, "union": s.union(),
                    "hood_out": {"road_iou": h.iou(), "intersection": h.true_road, "union": h.union()},
                });
                (n.clone(), scores)
            })
            .collect();
        let out = serde_json::json!({
            "images": files.len(), "size": [size.0, size.1], "preset": args.model.preset,
            "road_iou": total.iou(), "road_iou_mean_of_frames": mean, "recall": total.recall(),
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
