//! `roadseg infer`: run the model on images or on ready-made pixel values.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use roadseg::engine::{FrameRef, PixelFormat, chw_to_hwc, hwc_to_chw};
use roadseg::images::{self, OverlayStyle};
use roadseg::npy;

use super::common::{Loaded, ModelArgs, Toggle, load_engine, parse_size, run_still};

#[derive(Args, Debug)]
pub struct InferArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// An image file, or a folder whose images are all processed.
    #[arg(long, conflicts_with = "pixel_values", required_unless_present = "pixel_values")]
    pub image: Option<PathBuf>,
    /// Already-normalised float32 [1,3,H,W] input (.npy), fed to the model as is.
    #[arg(long)]
    pub pixel_values: Option<PathBuf>,
    /// Model input WxH (default: the longer side 1024, the other from the first image's aspect).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(usize, usize)>,
    /// Keep only road joined to the bottom of the image, as the daemon does
    /// (off with --logits-out, which writes the model's own logits).
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub connected_road: Toggle,
    /// Write logits [1,labels,H/4,W/4] as float32 .npy (single input only).
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
    /// PNG of class indices at the image's resolution (255 = below --threshold); a folder for folder input.
    #[arg(long)]
    pub classes_out: Option<PathBuf>,
    /// PNG of the image with the road tinted; a folder for folder input.
    #[arg(long)]
    pub overlay_out: Option<PathBuf>,
}

/// Output path for `input`: `out` itself for one input, else `out/<stem>.png`.
fn output_for(out: &Path, input: &Path, many: bool) -> Result<PathBuf> {
    if !many {
        return Ok(out.to_path_buf());
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating output folder {}", out.display()))?;
    let stem = input.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "image".into());
    Ok(out.join(format!("{stem}.png")))
}

fn write_logits(path: &Path, logits_hwc: &[f32], (lw, lh): (usize, usize), labels: usize) -> Result<()> {
    let chw = hwc_to_chw(logits_hwc, lh, lw, labels);
    npy::write_f32(path, &[1, labels, lh, lw], &chw)?;
    Ok(())
}

/// The engine for a run whose first readable image is `first` (it sets the
/// input size unless `--size` does), with its labels and overlay style.
fn load_for(args: &InferArgs, first: &image::RgbImage) -> Result<(Loaded, Vec<String>, OverlayStyle)> {
    let size = args.size.unwrap_or_else(|| roadseg::input_size::default_for(first.width(), first.height()));
    let mut loaded = load_engine(&args.model, size, args.model.threshold)?;
    loaded.engine.keep_logits(args.logits_out.is_some());
    let labels = loaded.engine.labels().to_vec();
    let style = OverlayStyle {
        road_classes: loaded.engine.options().road_classes.clone(),
        full_palette: None,
        ..OverlayStyle::default()
    };
    Ok((loaded, labels, style))
}

pub fn run(args: InferArgs) -> Result<()> {
    if let Some(pv) = &args.pixel_values {
        let array = npy::read_f32(pv)?;
        let [1, 3, h, w] = array.shape[..] else {
            bail!("{}: shape {:?}, expected [1, 3, H, W]", pv.display(), array.shape);
        };
        if args.classes_out.is_some() || args.overlay_out.is_some() {
            bail!("--classes-out and --overlay-out need --image (pixel values carry no image)");
        }
        let mut loaded = load_engine(&args.model, (w, h), args.model.threshold)?;
        let logits = loaded.engine.run_normalized(&chw_to_hwc(&array.data, h, w, 3))?.to_vec();
        let (lw, lh) = loaded.engine.logits_size();
        let labels = loaded.engine.num_labels();
        println!("{}: logits [1, {labels}, {lh}, {lw}] in {:.1} ms", pv.display(), loaded.engine.timings().inference_ms);
        if let Some(out) = &args.logits_out {
            write_logits(out, &logits, (lw, lh), labels)?;
        }
        return Ok(());
    }
    let input = args.image.as_ref().expect("clap requires --image without --pixel-values");
    let files = images::list_images(input)?;
    let many = input.is_dir();
    if many && args.logits_out.is_some() {
        bail!("--logits-out takes a single image, not a folder");
    }
    // One unreadable image in a folder must not cost the others their output:
    // it is named and skipped, and the run ends in an error that lists it.
    let mut unreadable: Vec<PathBuf> = Vec::new();
    // Loaded at the first readable image, which sets the input size.
    let mut model: Option<(Loaded, Vec<String>, OverlayStyle)> = None;
    for file in &files {
        let img = match images::load_rgb(file) {
            Ok(img) => img,
            Err(err) if many => {
                eprintln!("roadseg: skipped: {err}");
                unreadable.push(file.clone());
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        let (loaded, labels, style) = match &mut model {
            Some(m) => m,
            None => model.insert(load_for(&args, &img)?),
        };
        let (w, h) = (img.width() as usize, img.height() as usize);
        let frame = FrameRef::packed(img.as_raw(), w, h, PixelFormat::Rgb);
        let connected = args.connected_road != Toggle::Off && args.logits_out.is_none();
        let seg = run_still(&mut loaded.engine, &frame, connected)?.clone();
        let t = loaded.engine.timings();
        println!(
            "{}: road {:.1}%, mean confidence {:.3}, {:.1} ms (pre {:.1}, model {:.1}, post {:.1})",
            file.display(),
            seg.road_coverage * 100.0,
            seg.mean_confidence,
            t.preprocess_ms + t.inference_ms + t.postprocess_ms,
            t.preprocess_ms,
            t.inference_ms,
            t.postprocess_ms
        );
        if let Some(out) = &args.logits_out {
            write_logits(out, loaded.engine.logits(), loaded.engine.logits_size(), labels.len())?;
        }
        if let Some(out) = &args.classes_out {
            images::save_classes(&seg, &output_for(out, file, many)?)?;
        }
        if let Some(out) = &args.overlay_out {
            let mut pixels = img.into_raw();
            images::draw_overlay(&mut pixels, 3, &seg, &style, None);
            images::save_rgb(pixels, w, h, &output_for(out, file, many)?)?;
        }
    }
    if model.is_none() {
        bail!("none of the {} images in {} could be read", files.len(), input.display());
    }
    if !unreadable.is_empty() {
        let named: Vec<String> = unreadable.iter().take(5).map(|p| p.display().to_string()).collect();
        let more = unreadable.len().saturating_sub(named.len());
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        bail!(
            "{} of {} images could not be read and were skipped: {}{more} (the other {} were written; replace or remove the unreadable files)",
            unreadable.len(),
            files.len(),
            named.join(", "),
            files.len() - unreadable.len()
        );
    }
    Ok(())
}
