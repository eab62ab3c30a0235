//! `roadseg bench`: warm up, then time N full frames (preprocess, model,
//! postprocess) and print one JSON line. With `--batch N` each step runs N
//! copies of the frame as one batched forward, as a worker does with frames
//! from N streams.

use anyhow::{Result, bail};
use clap::Args;
use roadseg::annotate::Annotator;
use roadseg::engine::{AnyEngine, FrameRef, PixelFormat};
use roadseg::model::MAX_BATCH;
use roadseg::temporal::{DEFAULT_WEIGHT, StreamTemporal, TemporalSettings};

use roadseg::backend::cpu::CpuBackend;
use roadseg::worker_count::WorkerCount;

use super::common::{ModelArgs, load_engine_with, load_engines, parse_size};

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
    /// Timed frames (rounded up to whole batches).
    #[arg(long, default_value_t = 50)]
    pub frames: usize,
    /// Frames per batched forward, 1..=16: N copies of the frame run as one
    /// batch; "fps" counts every frame, "median_ms" and "p90_ms" are per batch.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Untimed batches first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Print time per backend op (to stderr) after the run.
    #[arg(long)]
    pub profile_ops: bool,
    /// After the single-engine run, also run this many engines concurrently
    /// (one thread each, as the daemon's workers) and report their total fps.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Run each frame as a stream does by default: the hood and bars observed
    /// (in the daemon on the source's thread), the overlay staged (on a
    /// backend that draws it), the logits smoothed and cut to grounded road on
    /// the host. Reports the host's part
    /// ("temporal_median_ms": observing and filtering; "temporal_cpu_median_ms":
    /// the same in the thread's CPU time) and where the frame's time went
    /// ("worker_phases_median_ms").
    #[arg(long)]
    pub temporal: bool,
    /// Pixel format of the frames handed in: decoders hand the daemon NV12
    /// (what the host's per-frame work on a GPU box sees); rgb is what the
    /// figures recorded before 2026-11-29 used.
    #[arg(long, value_enum, default_value_t = BenchPixels::Rgb)]
    pub pixel_format: BenchPixels,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchPixels {
    Rgb,
    Rgba,
    Nv12,
}

impl BenchPixels {
    fn format(self) -> PixelFormat {
        match self {
            BenchPixels::Rgb => PixelFormat::Rgb,
            BenchPixels::Rgba => PixelFormat::Rgba,
            BenchPixels::Nv12 => PixelFormat::Nv12,
        }
    }
}

/// Resident set size in MiB, from /proc (None where that is not available).
fn rss_mib() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / (1024.0 * 1024.0))
}

/// CPU time (user + system) this process has used so far, in milliseconds:
/// with the wall time, what one frame costs the host's cores (a worker that
/// spins while the GPU works shows it here, not in the wall time).
fn process_cpu_ms() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the pointer it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: initialised by the successful call above.
    let usage = unsafe { usage.assume_init() };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Some(ms(usage.ru_utime) + ms(usage.ru_stime))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

/// What a `--temporal` stream runs: the daemon's defaults.
const STREAM_DEFAULTS: TemporalSettings = TemporalSettings { smoothing: Some(DEFAULT_WEIGHT), hood: true, connected_road: true };
/// Timestamp step of the benchmark's frames (25 fps).
const FRAME_NS: u64 = 40_000_000;

/// Distinct frames a `--temporal` run cycles through: its road texture
/// moves from one to the next while the sky stays, so the hood and edge
/// estimators work as they do on a moving car, not on a still picture.
const MOVING_FRAMES: usize = 4;

/// A deterministic road-like test frame (gradients and stripes, no file
/// needed); `shift` moves the road's texture sideways.
fn test_frame(w: usize, h: usize, shift: usize, format: PixelFormat) -> Vec<u8> {
    let rgb: Vec<[u8; 3]> = (0..w * h)
        .map(|i| {
            let (x, y) = (i % w, i / w);
            if y > h / 2 { [90 + ((x + shift) * 7 % 13) as u8, 90, 95] } else { [(120 + y * 100 / h) as u8, (160 + x * 60 / w) as u8, 230] }
        })
        .collect();
    match format {
        PixelFormat::Rgb => rgb.concat(),
        PixelFormat::Rgba => rgb.iter().flat_map(|&[r, g, b]| [r, g, b, 255]).collect(),
        PixelFormat::Nv12 => nv12_of(&rgb, w, h),
    }
}

/// BT.601 limited-range NV12 of packed RGB (`w`, `h` even), as a decoder hands it over.
fn nv12_of(rgb: &[[u8; 3]], w: usize, h: usize) -> Vec<u8> {
    let yuv = |[r, g, b]: [u8; 3]| {
        let (r, g, b) = (r as f32, g as f32, b as f32);
        let y = 16.0 + 0.257 * r + 0.504 * g + 0.098 * b;
        let u = 128.0 - 0.148 * r - 0.291 * g + 0.439 * b;
        let v = 128.0 + 0.439 * r - 0.368 * g - 0.071 * b;
        [y, u, v].map(|c| c.round().clamp(0.0, 255.0) as u8)
    };
    let mut out: Vec<u8> = rgb.iter().map(|&p| yuv(p)[0]).collect();
    for y in (0..h).step_by(2) {
        for x in (0..w).step_by(2) {
            let [_, u, v] = yuv(rgb[y * w + x]);
            out.extend([u, v]);
        }
    }
    out
}

/// Where one frame's time goes on a stream worker's path (ms): `observe`
/// (hood and bars, and the overlay staged), `to_logits` (staging, the model
/// and the logits brought to the host), `filter` (smoothing and the
/// grounded-road cut on the host), `after_filter` (logits back, classes,
/// overlay and results collected).
#[derive(Clone, Copy, Debug, Default)]
struct WorkerPhases {
    observe: f64,
    to_logits: f64,
    filter: f64,
    after_filter: f64,
    /// CPU time of the calling thread in `observe` and in `filter`: what the
    /// host's share costs a core, whatever else competes for the cores.
    observe_cpu: f64,
    filter_cpu: f64,
}

/// CPU time this thread has used, in milliseconds.
fn thread_cpu_ms() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the pointer it is given.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    if ok { t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6 } else { f64::NAN }
}

/// One frame as a live stream's worker runs it (`pool.rs`), timed by phase.
fn worker_step(engine: &mut AnyEngine, temporal: &StreamTemporal, annotator: &Annotator, frame: &FrameRef<'_>, seq: u64) -> Result<WorkerPhases> {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let started = std::time::Instant::now();
    let cpu_started = thread_cpu_ms();
    let unseen = temporal.observe(seq, Some(seq * FRAME_NS), frame).hood;
    let observe_cpu = thread_cpu_ms() - cpu_started;
    if engine.annotates_frames() {
        engine.set_overlays(&[annotator.overlay(&unseen, frame.width, frame.height)]);
    }
    let observed = std::time::Instant::now();
    let grid = engine.logits_grid();
    let road = engine.options().road_classes.clone();
    let ego = engine.options().ego_class;
    let mut filtered = None;
    engine.run_frame_filtered(
        frame,
        Some(&mut |logits: &mut [f32]| {
            let (at, cpu_at) = (std::time::Instant::now(), thread_cpu_ms());
            temporal.filter_logits(seq, logits, grid, &road, ego, &unseen);
            filtered = Some((at, std::time::Instant::now(), thread_cpu_ms() - cpu_at));
        }),
    )?;
    let done = std::time::Instant::now();
    let (filter_start, filter_end, filter_cpu) = filtered.unwrap_or((done, done, 0.0));
    Ok(WorkerPhases {
        observe: ms(observed - started),
        to_logits: ms(filter_start - observed),
        filter: ms(filter_end - filter_start),
        after_filter: ms(done - filter_end),
        observe_cpu,
        filter_cpu,
    })
}

/// One step of the benchmark: one frame, or `copies.len()` of them as a batch.
fn step(engine: &mut AnyEngine, copies: &[FrameRef<'_>]) -> Result<()> {
    match copies {
        [frame] => engine.run_frame(frame).map(|_| ())?,
        _ => engine.run_batch(copies, None).map(|_| ())?,
    }
    Ok(())
}

pub fn run(args: BenchArgs) -> Result<()> {
    if !(1..=MAX_BATCH).contains(&args.batch) {
        bail!("--batch {} is outside 1..={MAX_BATCH}", args.batch);
    }
    if args.temporal && args.batch > 1 {
        bail!("--temporal times one stream's work: use it with --batch 1");
    }
    let batches = args.frames.max(1).div_ceil(args.batch);
    let frames = batches * args.batch;
    let backend = if args.profile_ops { CpuBackend::with_profiling() } else { CpuBackend::new() };
    let mut loaded = load_engine_with(&args.model, args.size, args.model.threshold, backend)?;
    let (fw, fh) = args.frame;
    let format = args.pixel_format.format();
    if format == PixelFormat::Nv12 && (fw % 2 != 0 || fh % 2 != 0) {
        bail!("--pixel-format nv12 needs an even --frame size, not {fw}x{fh}");
    }
    let moving: Vec<Vec<u8>> = (0..if args.temporal { MOVING_FRAMES } else { 1 }).map(|i| test_frame(fw, fh, 3 * i, format)).collect();
    let frames_in: Vec<FrameRef<'_>> = moving.iter().map(|p| FrameRef::packed(p, fw, fh, format)).collect();
    let frame = frames_in[0];
    let copies = vec![frame; args.batch];
    for _ in 0..args.warmup {
        step(&mut loaded.engine, &copies)?;
    }
    if let Some(b) = loaded.engine.cpu_backend() {
        b.take_profile();
    }
    let mut total = Vec::with_capacity(batches);
    let mut model = Vec::with_capacity(batches);
    let mut phases: Vec<WorkerPhases> = Vec::with_capacity(frames);
    let temporal = args.temporal.then(|| StreamTemporal::new(STREAM_DEFAULTS));
    let annotator = Annotator { style: Default::default(), show_text: true, show_origin: false };
    let (mut rss_at_10, mut rss_peak) = (None, 0.0f64);
    let started = std::time::Instant::now();
    let cpu_before = process_cpu_ms();
    for i in 0..batches {
        let t = std::time::Instant::now();
        match &temporal {
            Some(temporal) => phases.push(worker_step(&mut loaded.engine, temporal, &annotator, &frames_in[i % frames_in.len()], i as u64)?),
            None => step(&mut loaded.engine, &copies)?,
        }
        total.push(t.elapsed().as_secs_f64() * 1e3);
        model.push(loaded.engine.timings().inference_ms);
        if i + 1 == 10.min(batches) {
            rss_at_10 = rss_mib();
        }
        rss_peak = rss_peak.max(rss_mib().unwrap_or(0.0));
    }
    let wall = started.elapsed().as_secs_f64();
    let host_cpu_ms = cpu_before.zip(process_cpu_ms()).map(|(before, after)| (after - before) / frames as f64);
    let observe_alone = args.temporal.then(|| observe_alone_cpu_ms(&frames_in));
    let backend = loaded.engine.describe();
    let profile = loaded.engine.cpu_backend().map(|b| b.take_profile()).unwrap_or_default();
    drop(loaded.engine);
    let concurrent = if args.workers > 1 { Some(run_workers(&args, &copies, batches)?) } else { None };
    total.sort_by(f64::total_cmp);
    model.sort_by(f64::total_cmp);
    let phase = |pick: fn(&WorkerPhases) -> f64| {
        let mut ms: Vec<f64> = phases.iter().map(pick).collect();
        ms.sort_by(f64::total_cmp);
        round2(percentile(&ms, 0.5))
    };
    let worker_phases = (!phases.is_empty()).then(|| {
        serde_json::json!({
            "observe": phase(|p| p.observe),
            "to_logits": phase(|p| p.to_logits),
            "filter": phase(|p| p.filter),
            "after_filter": phase(|p| p.after_filter),
        })
    });
    let temporal_cpu = (!phases.is_empty()).then(|| {
        serde_json::json!({
            "observe": phase(|p| p.observe_cpu),
            "filter": phase(|p| p.filter_cpu),
        })
    });
    let out = serde_json::json!({
        "device": loaded.device,
        "precision": loaded.precision.to_string(),
        "size": [args.size.0, args.size.1],
        "frame": [fw, fh],
        "pixel_format": format!("{:?}", args.pixel_format).to_lowercase(),
        "preset": args.model.preset,
        "frames": frames,
        "batch": args.batch,
        "median_ms": round2(percentile(&total, 0.5)),
        "p90_ms": round2(percentile(&total, 0.9)),
        "fps": round2(frames as f64 / wall),
        "model_median_ms": round2(percentile(&model, 0.5)),
        "host_cpu_ms_per_frame": host_cpu_ms.map(round2),
        "threads": rayon::current_num_threads(),
        "rss_mib_frame10": rss_at_10.map(round2),
        "rss_mib_end": rss_mib().map(round2),
        "rss_mib_peak": round2(rss_peak),
        "model": args.model.model.display().to_string(),
        "backend": backend,
        "workers": args.workers,
        "fps_all_workers": concurrent.map(round2),
        "temporal_median_ms": (!phases.is_empty()).then(|| phase(|p| p.observe + p.filter)),
        "worker_phases_median_ms": worker_phases,
        "temporal_cpu_median_ms": temporal_cpu,
        "observe_alone_cpu_median_ms": observe_alone.map(round2),
    });
    for (op, ms, calls) in profile {
        eprintln!("{op:<12} {:>9.2} ms/frame {:>6} calls/batch", ms / frames as f64, calls / batches as u64);
    }
    println!("{out}");
    Ok(())
}

/// Frames observed alone by [`observe_alone_cpu_ms`].
const OBSERVE_ALONE_FRAMES: usize = 120;

/// Median thread CPU time of `StreamTemporal::observe` on a fresh stream,
/// over frames cycling through `frames` with nothing else running between
/// them: the intake thread's cost per frame, without the noise that the
/// model's passes leave in the caches and on the memory bus.
fn observe_alone_cpu_ms(frames: &[FrameRef<'_>]) -> f64 {
    let temporal = StreamTemporal::new(STREAM_DEFAULTS);
    let mut ms: Vec<f64> = (0..OBSERVE_ALONE_FRAMES)
        .map(|i| {
            let start = thread_cpu_ms();
            temporal.observe(i as u64, Some(i as u64 * FRAME_NS), &frames[i % frames.len()]);
            thread_cpu_ms() - start
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    percentile(&ms, 0.5)
}

/// Frames per second of `args.workers` engines each running `batches`
/// batches of `copies` at once after their warm-up (the daemon's worker pool
/// without the video).
fn run_workers(args: &BenchArgs, copies: &[FrameRef<'_>], batches: usize) -> Result<f64> {
    // Single frames only at load: the bench runs exactly `--batch` frames a
    // step, whose instance its warm-up builds; a worker's smaller sizes would
    // only add to the memory it reports.
    let loaded = load_engines(&args.model, args.size, args.model.threshold, CpuBackend::new(), WorkerCount::Fixed(args.workers), 1)?;
    let barrier = std::sync::Barrier::new(loaded.engines.len());
    let started = std::sync::Mutex::new(None::<std::time::Instant>);
    std::thread::scope(|scope| {
        let handles: Vec<_> = loaded
            .engines
            .into_iter()
            .map(|mut engine| {
                let (barrier, started) = (&barrier, &started);
                scope.spawn(move || -> Result<()> {
                    for _ in 0..args.warmup.max(1) {
                        step(&mut engine, copies)?;
                    }
                    if barrier.wait().is_leader() {
                        *started.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
                    }
                    for _ in 0..batches {
                        step(&mut engine, copies)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a bench worker panicked"))))
    })?;
    let start = started.into_inner().unwrap_or_else(|e| e.into_inner()).expect("workers started");
    Ok((batches * copies.len() * args.workers) as f64 / start.elapsed().as_secs_f64())
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
