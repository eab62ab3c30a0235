//! `roadseg bench`: warm up, then time N full frames (preprocess, model,
//! postprocess) and print one JSON line.

use anyhow::Result;
use clap::Args;
use roadseg::engine::{FrameRef, PixelFormat};

use roadseg::backend::cpu::CpuBackend;

use super::common::{ModelArgs, load_engine_with, parse_size};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Model input WxH.
    #[arg(long, value_parser = parse_size, default_value = "1024x576")]
    pub size: (usize, usize),
    /// Source frame WxH that gets resized to --size (a typical camera).
    #[arg(long, value_parser = parse_size, default_value = "1280x720")]
    pub frame: (usize, usize),
    /// Timed frames.
    #[arg(long, default_value_t = 50)]
    pub frames: usize,
    /// Untimed frames first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Print time per backend op (to stderr) after the run.
    #[arg(long)]
    pub profile_ops: bool,
}

/// Resident set size in MiB, from /proc (None where that is not available).
fn rss_mib() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / (1024.0 * 1024.0))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

/// A deterministic road-like test frame (gradients and stripes, no file needed).
fn test_frame(w: usize, h: usize) -> Vec<u8> {
    let mut px = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) * 3;
            let road = y > h / 2;
            px[i] = if road { 90 + (x * 7 % 13) as u8 } else { (120 + y * 100 / h) as u8 };
            px[i + 1] = if road { 90 } else { (160 + x * 60 / w) as u8 };
            px[i + 2] = if road { 95 } else { 230 };
        }
    }
    px
}

pub fn run(args: BenchArgs) -> Result<()> {
    let frames = args.frames.max(1);
    let backend = if args.profile_ops { CpuBackend::with_profiling() } else { CpuBackend::new() };
    let mut loaded = load_engine_with(&args.model, args.size, args.model.threshold, backend)?;
    let (fw, fh) = args.frame;
    let pixels = test_frame(fw, fh);
    let frame = FrameRef::packed(&pixels, fw, fh, PixelFormat::Rgb);
    for _ in 0..args.warmup {
        loaded.engine.run_frame(&frame)?;
    }
    if let Some(b) = loaded.engine.cpu_backend() {
        b.take_profile();
    }
    let mut total = Vec::with_capacity(frames);
    let mut model = Vec::with_capacity(frames);
    let (mut rss_at_10, mut rss_peak) = (None, 0.0f64);
    let started = std::time::Instant::now();
    for i in 0..frames {
        let t = std::time::Instant::now();
        loaded.engine.run_frame(&frame)?;
        total.push(t.elapsed().as_secs_f64() * 1e3);
        model.push(loaded.engine.timings().inference_ms);
        if i + 1 == 10.min(frames) {
            rss_at_10 = rss_mib();
        }
        rss_peak = rss_peak.max(rss_mib().unwrap_or(0.0));
    }
    let wall = started.elapsed().as_secs_f64();
    total.sort_by(f64::total_cmp);
    model.sort_by(f64::total_cmp);
    let out = serde_json::json!({
        "device": loaded.device,
        "precision": loaded.precision.to_string(),
        "size": [args.size.0, args.size.1],
        "frame": [fw, fh],
        "preset": args.model.preset,
        "frames": frames,
        "median_ms": round2(percentile(&total, 0.5)),
        "p90_ms": round2(percentile(&total, 0.9)),
        "fps": round2(frames as f64 / wall),
        "model_median_ms": round2(percentile(&model, 0.5)),
        "threads": rayon::current_num_threads(),
        "rss_mib_frame10": rss_at_10.map(round2),
        "rss_mib_end": rss_mib().map(round2),
        "rss_mib_peak": round2(rss_peak),
        "model": args.model.model.display().to_string(),
    });
    for (op, ms, calls) in loaded.engine.cpu_backend().map(|b| b.take_profile()).unwrap_or_default() {
        eprintln!("{op:<12} {:>9.2} ms/frame {:>6} calls/frame", ms / frames as f64, calls / frames as u64);
    }
    println!("{out}");
    Ok(())
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
