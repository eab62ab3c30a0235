//! The inference worker pool: N threads, each owning an engine (weights
//! shared), taking frames from every stream's ring in turn so no stream can
//! starve another, and annotating the frame in place before handing it to its
//! stream's output stage. With `workers.batch` > 1 a worker takes up to that
//! many ready frames at once and runs them as one batch (`pool/batch.rs`).

mod batch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;

use self::batch::{Job, take_ready};
pub use self::batch::BatchPolicy;
use crate::annotate::{Annotator, FrameStats, Origin};
use crate::video::demand::PixelDemand;
use super::ring::{Doorbell, FrameBuf, FrameRing};
use crate::engine::{AnyEngine, Segmentation, UNKNOWN};
use crate::temporal::{HoodMask, StreamTemporal, scene_coverage};

/// Why a frame never reached the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    RingFull,
    InferenceError,
    /// Over the stream's inference rate cap (`infer_fps`).
    RateLimited,
    /// Still waiting for inference when a shutdown's drain time ran out.
    Shutdown,
}

impl SkipReason {
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::RingFull => "ring_full",
            SkipReason::InferenceError => "inference_error",
            SkipReason::RateLimited => "rate_limited",
            SkipReason::Shutdown => "shutdown",
        }
    }
}

/// What a stream's output stage receives, in any order.
#[derive(Debug)]
pub enum OutputItem {
    Frame { buf: FrameBuf, stats: FrameStats },
    Skipped { seq: u64, reason: SkipReason },
    /// Everything before this has been sent: finish the sinks, within
    /// `finish_by` if given (a shutdown's deadline). Sent once the ring is
    /// closed and drained, since the source side may still hold a sender and
    /// the channel would never disconnect.
    End { finish_by: Option<Instant> },
}

/// Per-stream counters the workers update and the status line reads.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Raised before a worker looks in the ring and lowered once the frame is
    /// handed on, so "ring empty and nothing in flight" really means drained.
    pub in_flight: AtomicU64,
    pub inferred: AtomicU64,
    pub failed: AtomicU64,
    /// Output frame rate (frames/s * 1000), written by the output stage.
    pub fps_milli: AtomicU64,
}

/// A stream as the workers see it.
pub struct StreamInput {
    pub name: String,
    pub ring: Arc<FrameRing>,
    pub output: Sender<OutputItem>,
    pub counters: Arc<StreamCounters>,
    /// Fill each frame's `road_mask` (costs a pass over the class map).
    pub want_masks: bool,
    /// Hood estimate and logit smoothing across this stream's frames
    /// (shared with the intake, which observes each frame on arrival).
    pub temporal: Arc<StreamTemporal>,
    /// Whether its frames get the road drawn on them (someone looks).
    pub pixels: Arc<PixelDemand>,
}

impl StreamInput {
    /// The hood and bars as of `buf`'s frame: observed on arrival by the
    /// stream's intake, else (a ring fed directly) observed now.
    pub(crate) fn unseen_in(&self, buf: &mut FrameBuf) -> Arc<HoodMask> {
        match buf.unseen.take() {
            Some(unseen) => unseen,
            None => self.temporal.observe(buf.seq, buf.timing.pts, &buf.frame()).hood,
        }
    }

    /// Frames taken from the ring and not yet handed to the output stage.
    pub fn in_flight(&self) -> u64 {
        self.counters.in_flight.load(Ordering::SeqCst)
    }
}

/// Called by workers after each inference (metrics hook): stream, milliseconds, frame stats.
pub type InferenceObserver = Arc<dyn Fn(&str, f64, &FrameStats) + Send + Sync>;
/// What a worker did over its last window (about a second).
#[derive(Clone, Copy, Debug)]
pub struct WorkerWindow {
    pub worker: usize,
    pub length: Duration,
    /// Spent on frames (inference, annotation, hand-off).
    pub busy: Duration,
    /// The GPU's time in this worker's forwards (None where not timed).
    pub gpu: Option<Duration>,
}

impl WorkerWindow {
    pub fn busy_share(&self) -> f64 {
        self.busy.as_secs_f64() / self.length.as_secs_f64().max(1e-9)
    }

    pub fn gpu_share(&self) -> Option<f64> {
        self.gpu.map(|g| g.as_secs_f64() / self.length.as_secs_f64().max(1e-9))
    }
}

/// Called by each worker about once a second.
pub type BusyObserver = Arc<dyn Fn(WorkerWindow) + Send + Sync>;

struct Shared {
    streams: RwLock<Vec<Arc<StreamInput>>>,
    generation: AtomicU64,
    work: Doorbell,
    stop: AtomicBool,
}

pub struct WorkerPool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// One worker thread per engine, before any stream is added: the model
    /// (and so its input size) is settled first. Each worker forms batches
    /// by `policy` ([`BatchPolicy::SINGLE`]: one frame at a time).
    pub fn start(engines: Vec<AnyEngine>, policy: BatchPolicy, annotator: Annotator, on_inference: InferenceObserver, on_busy: BusyObserver) -> Self {
        let shared = Arc::new(Shared {
            streams: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            work: Doorbell::default(),
            stop: AtomicBool::new(false),
        });
        let handles = engines
            .into_iter()
            .enumerate()
            .map(|(index, engine)| {
                let worker = Worker {
                    index,
                    stall_after: std::env::var(STALL_HOOK_ENV).ok().and_then(|v| v.parse().ok()),
                    slow: std::env::var(SLOW_HOOK_ENV).ok().and_then(|v| v.parse().ok()).map(Duration::from_millis),
                    policy: BatchPolicy { max: policy.max.max(1), ..policy },
                    engine,
                    annotator: annotator.clone(),
                    shared: shared.clone(),
                    on_inference: on_inference.clone(),
                    on_busy: on_busy.clone(),
                };
                std::thread::Builder::new()
                    .name(format!("roadseg-worker-{index}"))
                    .spawn(move || worker.run())
                    .expect("spawning a worker thread")
            })
            .collect();
        WorkerPool { shared, handles }
    }

    pub fn workers(&self) -> usize {
        self.handles.len()
    }

    pub fn add_stream(&self, stream: Arc<StreamInput>) {
        self.shared.streams.write().unwrap_or_else(|e| e.into_inner()).push(stream);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn remove_stream(&self, name: &str) {
        self.shared.streams.write().unwrap_or_else(|e| e.into_inner()).retain(|s| s.name != name);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// A source queued a frame: wake an idle worker.
    pub fn notify(&self) {
        self.shared.work.ring();
    }

    /// A handle sources can ring without holding the pool.
    pub fn waker(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.work.ring()
    }

    pub fn shutdown(self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.work.ring();
        for h in self.handles {
            let _ = h.join();
        }
    }
}

/// Test hook: each worker stops taking frames (but stays alive, like a
/// wedged GPU call) after this many, so tests can see stall detection work.
pub const STALL_HOOK_ENV: &str = "ROADSEG_TEST_STALL_AFTER_FRAMES";
/// Test hook: each worker sleeps this many milliseconds per batch it takes,
/// a CPU too slow for its streams, so tests can see overload reported.
pub const SLOW_HOOK_ENV: &str = "ROADSEG_TEST_SLOW_INFERENCE_MS";

struct Worker {
    index: usize,
    /// From [`STALL_HOOK_ENV`]; None in normal runs.
    stall_after: Option<u64>,
    /// From [`SLOW_HOOK_ENV`]; None in normal runs.
    slow: Option<Duration>,
    /// How many frames are taken and run at once, and how long to wait for them.
    policy: BatchPolicy,
    engine: AnyEngine,
    annotator: Annotator,
    shared: Arc<Shared>,
    on_inference: InferenceObserver,
    on_busy: BusyObserver,
}

impl Worker {
    fn run(mut self) {
        let mut streams: Vec<Arc<StreamInput>> = Vec::new();
        let mut seen_generation = u64::MAX;
        let mut next = 0usize;
        let (mut window_start, mut busy, mut gpu_ms) = (Instant::now(), Duration::ZERO, None::<f64>);
        let mut processed = 0u64;
        let mut jobs: Vec<Job> = Vec::with_capacity(self.policy.max);
        // One run of a policy size at a time, reusing its allocation.
        let mut batch: Vec<Job> = Vec::with_capacity(self.policy.max);
        while !self.shared.stop.load(Ordering::SeqCst) {
            if self.stall_after.is_some_and(|n| processed >= n) {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let generation = self.shared.generation.load(Ordering::SeqCst);
            if generation != seen_generation {
                streams = self.shared.streams.read().unwrap_or_else(|e| e.into_inner()).clone();
                seen_generation = generation;
            }
            // The stall hook counts frames: never take past it.
            let room = self.stall_after.map_or(self.policy.max, |n| self.policy.max.min((n - processed) as usize));
            take_ready(&streams, &mut next, room, &mut jobs);
            if !jobs.is_empty() && jobs.len() < room && !self.policy.wait.is_zero() {
                self.fill_within_budget(&streams, &mut next, room, &mut jobs);
            }
            if jobs.is_empty() {
                self.shared.work.wait(Duration::from_millis(20));
            } else {
                processed += jobs.len() as u64;
                let t = Instant::now();
                if let Some(slow) = self.slow {
                    std::thread::sleep(slow);
                }
                while !jobs.is_empty() {
                    let run = self.policy.run_for(jobs.len());
                    batch.extend(jobs.drain(..run));
                    let inferred = if run == 1
                        && let Some(Job { stream, buf }) = batch.pop()
                    {
                        // One frame: exactly the single-frame path.
                        let inferred = self.process(&stream, buf);
                        stream.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
                        inferred
                    } else {
                        self.process_batch(&mut batch)
                    };
                    if inferred && let Some(ms) = self.engine.timings().gpu_ms {
                        *gpu_ms.get_or_insert(0.0) += ms;
                    }
                }
                busy += t.elapsed();
            }
            if window_start.elapsed() >= Duration::from_secs(1) {
                let gpu = gpu_ms.map(|ms| Duration::from_secs_f64(ms / 1000.0));
                (self.on_busy)(WorkerWindow { worker: self.index, length: window_start.elapsed(), busy, gpu });
                (window_start, busy) = (Instant::now(), Duration::ZERO);
                // A device that was timed once stays on the gauge: an idle second reads 0.
                gpu_ms = gpu_ms.map(|_| 0.0);
            }
        }
        // The last, partial window, so totals kept from these reports add up.
        let gpu = gpu_ms.map(|ms| Duration::from_secs_f64(ms / 1000.0));
        (self.on_busy)(WorkerWindow { worker: self.index, length: window_start.elapsed(), busy, gpu });
    }

    /// Waits for more ready frames until `jobs` holds `room` or the policy's
    /// budget, counted from now (the first frame's taking), runs out.
    fn fill_within_budget(&self, streams: &[Arc<StreamInput>], next: &mut usize, room: usize, jobs: &mut Vec<Job>) {
        let deadline = Instant::now() + self.policy.wait;
        while jobs.len() < room && !self.shared.stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            self.shared.work.wait(deadline - now);
            take_ready(streams, next, room, jobs);
        }
    }

    /// Infers, annotates and hands on one frame; false when inference failed
    /// (the frame is then dropped and counted).
    fn process(&mut self, stream: &StreamInput, mut buf: FrameBuf) -> bool {
        let hood = stream.unseen_in(&mut buf);
        let frame = buf.frame();
        let temporal = &stream.temporal;
        let seq = buf.seq;
        let draw = stream.pixels.draw_next();
        if self.engine.annotates_frames() {
            match draw {
                true => self.engine.set_overlays(&[self.annotator.overlay(&hood, frame.width, frame.height)]),
                false => self.engine.set_overlays(&[]),
            }
        }
        let mut road_cut = 0.0;
        let mut hood = hood;
        let ego = self.engine.options().ego_class;
        let result = if temporal.filters_logits(ego) {
            let grid = self.engine.logits_grid();
            let road = self.engine.options().road_classes.clone();
            let unseen = hood.clone();
            let mut learned = None;
            let result = self.engine.run_frame_filtered(
                &frame,
                Some(&mut |logits: &mut [f32]| {
                    let f = temporal.filter_logits(seq, logits, grid, &road, ego, &unseen);
                    (road_cut, learned) = (f.road_cut, f.hood);
                }),
            );
            if let Some(learned) = learned {
                hood = learned;
            }
            result
        } else {
            self.engine.run_frame(&frame)
        };
        if let Err(err) = result {
            drop_failed(stream, buf, &err);
            return false;
        }
        buf.stages.inferred = Instant::now();
        let t = self.engine.timings();
        let inference_ms = t.preprocess_ms + t.inference_ms + t.postprocess_ms;
        let done = Done { annotator: &self.annotator, on_inference: &self.on_inference, road: &self.engine.options().road_classes };
        let seen = Seen { hood: &hood, road_cut, draw };
        done.deliver(stream, buf, self.engine.segmentation(), seen, inference_ms, self.engine.annotated(0));
        true
    }
}

/// A frame whose inference failed: counted, its buffer recycled, a gap sent.
fn drop_failed(stream: &StreamInput, buf: FrameBuf, err: &dyn std::fmt::Display) {
    let seq = buf.seq;
    tracing::warn!(stream = %stream.name, seq, "frame dropped: inference failed: {err}");
    stream.counters.failed.fetch_add(1, Ordering::Relaxed);
    stream.ring.recycle(buf);
    let _ = stream.output.send(OutputItem::Skipped { seq, reason: SkipReason::InferenceError });
}

/// What a worker does with an inferred frame, apart from the engine (so a
/// batch's segmentations can stay borrowed from it).
struct Done<'a> {
    annotator: &'a Annotator,
    on_inference: &'a InferenceObserver,
    road: &'a [usize],
}

/// What the stream's temporal filters made of one frame.
#[derive(Clone, Copy)]
struct Seen<'a> {
    hood: &'a HoodMask,
    /// Share of the logits grid whose road the grounded-road rule cut.
    road_cut: f32,
    /// Draw the road on the frame (someone looks at its pixels).
    draw: bool,
}

impl Done<'_> {
    /// Stats, the metrics hook, the road mask, annotation, then the output
    /// stage. `inference_ms` is what the frame waited for its segmentation
    /// (its whole batch's time when batched). `annotated`: the frame as the
    /// engine's backend drew it (then only the status line is drawn here).
    fn deliver(&self, stream: &StreamInput, mut buf: FrameBuf, seg: &Segmentation, seen: Seen<'_>, inference_ms: f64, annotated: Option<&[u8]>) {
        let (road, hood) = (self.road, seen.hood);
        let (road_coverage, hood_coverage) = scene_coverage(seg, hood, road);
        let stats = FrameStats {
            road_coverage,
            hood_coverage,
            road_cut: seen.road_cut,
            mean_confidence: seg.mean_confidence,
            brightened: seg.brightened,
            inference_ms,
            fps: stream.counters.fps_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        };
        (self.on_inference)(&stream.name, inference_ms, &stats);
        if stream.want_masks {
            buf.road_mask.clear();
            buf.road_mask.extend(seg.classes.iter().map(|&c| u8::from(c != UNKNOWN && road.contains(&(c as usize)))));
            hood.for_each_unseen_pixel(|i| buf.road_mask[i] = 0);
        }
        let origin = Origin { stream: &stream.name, decoded_at: SystemTime::now() - buf.stages.decoded.elapsed() };
        match annotated {
            _ if !seen.draw => {}
            Some(pixels) => {
                let n = pixels.len().min(buf.data.len());
                buf.data[..n].copy_from_slice(&pixels[..n]);
                self.annotator.draw_status(&mut buf.data, buf.format, seg.width, seg.height, hood, &stats, origin);
            }
            None => self.annotator.draw(&mut buf.data, buf.format, seg, hood, &stats, origin),
        }
        buf.annotated = seen.draw;
        buf.stages.annotated = Instant::now();
        stream.counters.inferred.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = stream.output.send(OutputItem::Frame { buf, stats }) {
            // The output stage is gone (stream stopping): give the buffer back.
            if let OutputItem::Frame { buf, .. } = e.into_inner() {
                stream.ring.recycle(buf);
            }
        }
    }
}
