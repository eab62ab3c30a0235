//! `roadseg eval`: per-class IoU and mIoU on a labelled image folder.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use roadseg::engine::{FrameRef, PixelFormat};
use roadseg::eval::Confusion;
use roadseg::images;

use super::common::{ModelArgs, load_engine, parse_size};

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Folder of images.
    #[arg(long)]
    pub images: PathBuf,
    /// Folder of label PNGs (class index per pixel), named like the images.
    #[arg(long)]
    pub labels: PathBuf,
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
    let files = images::list_images(&args.images)?;
    let first = images::load_rgb(&files[0])?;
    let size = args.size.unwrap_or_else(|| roadseg::input_size::default_for(first.width(), first.height()));
    // Scores plain argmax: the confidence threshold is a display choice.
    let mut loaded = load_engine(&args.model, size, 0.0)?;
    let labels = loaded.engine.labels().to_vec();
    let mut confusion = Confusion::new(labels.len());
    let mut total_ms = 0.0;
    for file in &files {
        let stem = file.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let label_path = args.labels.join(format!("{stem}.png"));
        if !label_path.exists() {
            bail!("no label map {} for image {}", label_path.display(), file.display());
        }
        let img = images::load_rgb(file)?;
        let truth = images::load_labels(&label_path)?;
        if truth.dimensions() != img.dimensions() {
            bail!("{} is {:?} but its image is {:?}", label_path.display(), truth.dimensions(), img.dimensions());
        }
        let frame = FrameRef::packed(img.as_raw(), img.width() as usize, img.height() as usize, PixelFormat::Rgb);
        let seg = loaded.engine.run_frame(&frame)?;
        confusion.add(truth.as_raw(), &seg.classes, Some(args.ignore_index));
        let t = loaded.engine.timings();
        total_ms += t.preprocess_ms + t.inference_ms + t.postprocess_ms;
    }
    let iou = confusion.iou();
    println!("model {} on {} images at {}x{} ({:?} preset)", args.model.model.display(), files.len(), size.0, size.1, args.model.preset);
    println!("{:<16} {:>8}", "class", "IoU");
    for (name, v) in labels.iter().zip(&iou) {
        match v {
            Some(v) => println!("{name:<16} {v:>8.4}"),
            None => println!("{name:<16} {:>8}", "n/a"),
        }
    }
    println!("{:<16} {:>8.4}", "mIoU", confusion.mean_iou());
    println!("{:<16} {:>8.4}", "pixel accuracy", confusion.pixel_accuracy());
    println!("mean time per image: {:.1} ms", total_ms / files.len() as f64);
    if args.json {
        let per_class: serde_json::Map<String, serde_json::Value> =
            labels.iter().zip(&iou).map(|(n, v)| (n.clone(), serde_json::json!(v))).collect();
        let out = serde_json::json!({
            "images": files.len(), "size": [size.0, size.1], "preset": args.model.preset,
            "miou": confusion.mean_iou(), "pixel_accuracy": confusion.pixel_accuracy(), "iou": per_class,
        });
        println!("{out}");
    }
    Ok(())
}
