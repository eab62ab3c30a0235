//! `roadseg synth`: renders the deterministic synthetic drive into an MP4
//! (and its ground-truth road masks), for demos and end-to-end tests.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use roadseg::synth::{SynthDrive, SynthSpec};
use roadseg::video::frame::{FrameTiming, PixelFormat, VideoInfo};
use roadseg::video::stream::FileTarget;

use super::common::parse_size;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// MP4 to write.
    #[arg(short, long)]
    pub output: PathBuf,
    #[arg(long, default_value_t = 150)]
    pub frames: u32,
    #[arg(long, value_parser = parse_size, default_value = "1280x720")]
    pub size: (usize, usize),
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = 25)]
    pub fps: u32,
    /// Leave out the car bonnet at the bottom of the frame.
    #[arg(long)]
    pub no_hood: bool,
    /// Folder for the ground-truth road masks (PNG per frame, 255 = road).
    #[arg(long)]
    pub masks_out: Option<PathBuf>,
    /// PNG of the bonnet's ground truth (255 = bonnet; the same every frame),
    /// for training a model's ego-vehicle class on the drive.
    #[arg(long, conflicts_with = "no_hood")]
    pub hood_mask_out: Option<PathBuf>,
}

pub fn run(args: SynthArgs) -> Result<()> {
    let spec = SynthSpec {
        width: args.size.0 as u32,
        height: args.size.1 as u32,
        frames: args.frames,
        seed: args.seed,
        fps: args.fps,
        hood: !args.no_hood,
    };
    let drive = SynthDrive::new(spec.clone())?;
    let info = VideoInfo { width: spec.width, height: spec.height, fps_num: spec.fps as i32, fps_den: 1, format: PixelFormat::Rgba };
    let sink = FileTarget::single(args.output.clone()).open(info)?;
    if let Some(dir) = &args.masks_out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (w, h) = (spec.width as usize, spec.height as usize);
    if let Some(path) = &args.hood_mask_out {
        let png: Vec<u8> = roadseg::synth::hood_mask(w, h).iter().map(|&m| m * 255).collect();
        let img = image::GrayImage::from_raw(w as u32, h as u32, png).expect("mask matches frame size");
        img.save(path).with_context(|| format!("writing {}", path.display()))?;
    }
    let (mut rgb, mut mask, mut rgba) = (vec![0u8; w * h * 3], vec![0u8; w * h], vec![255u8; w * h * 4]);
    let frame_ns = 1_000_000_000u64 / spec.fps as u64;
    for i in 0..spec.frames {
        drive.render(i, &mut rgb, &mut mask)?;
        for (px, c) in rgba.chunks_exact_mut(4).zip(rgb.chunks_exact(3)) {
            px[..3].copy_from_slice(c);
        }
        let timing = FrameTiming { pts: Some(i as u64 * frame_ns), duration: Some(frame_ns) };
        sink.push(&rgba, w * 4, timing)?;
        if let Some(dir) = &args.masks_out {
            let png: Vec<u8> = mask.iter().map(|&m| if m > 0 { 255 } else { 0 }).collect();
            let img = image::GrayImage::from_raw(w as u32, h as u32, png).expect("mask matches frame size");
            let path = dir.join(format!("{i:05}.png"));
            img.save(&path).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let files = sink.finish(Duration::from_secs(30))?;
    println!("{}: {} frames of {}x{} at {} fps", args.output.display(), files.frames, w, h, spec.fps);
    Ok(())
}
