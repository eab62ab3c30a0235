//! A worker's batches: up to `workers.batch` frames that are ready now, from
//! any streams, through one batched forward, then each frame handled as a
//! single one would be. Order per stream is restored downstream by the output
//! stage (by `seq`); timestamps travel in each `FrameBuf`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Done, Seen, StreamInput, Worker, drop_failed};
use crate::engine::FrameRef;
use crate::video::ring::FrameBuf;

/// How a worker forms batches: up to `max` frames from any streams; when
/// fewer are ready it waits up to `wait` (from its first frame) for more, so
/// a live frame is held back by that much at most (`[workers]
/// max_batch_wait_ms`; zero never waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPolicy {
    pub max: usize,
    pub wait: Duration,
}

impl BatchPolicy {
    /// One frame at a time, never waiting.
    pub const SINGLE: BatchPolicy = BatchPolicy { max: 1, wait: Duration::ZERO };

    /// The batch sizes a worker runs ([`crate::engine::batch_sizes`]), whose
    /// model instances its engine built at load.
    pub fn sizes(&self) -> Vec<usize> {
        crate::engine::batch_sizes(self.max)
    }

    /// The largest of [`BatchPolicy::sizes`] that `n` (>= 1) frames fill.
    pub fn run_for(&self, n: usize) -> usize {
        let max = self.max.max(1);
        if n >= max { max } else { 1 << (usize::BITS - 1 - n.max(1).leading_zeros()) }
    }

    /// `n` taken frames as runs of those sizes, largest first (13 of 16:
    /// 8, 4, 1).
    pub fn split(&self, mut n: usize) -> Vec<usize> {
        let mut runs = Vec::new();
        while n > 0 {
            let k = self.run_for(n);
            runs.push(k);
            n -= k;
        }
        runs
    }
}

/// A frame taken from a stream's ring, the stream's in-flight count raised.
pub(super) struct Job {
    pub stream: Arc<StreamInput>,
    pub buf: FrameBuf,
}

/// Takes up to `max` frames that are ready now into `jobs`, round-robin from
/// stream `next`: one frame per stream per sweep, sweeping again while the
/// last sweep found any, so a busy stream cannot crowd out the others and
/// nothing waits for a batch to fill. Raises a stream's in-flight count before
/// looking in its ring (lowered again when the ring is empty), as the drain
/// check needs; each taken frame's count stays raised until it is handed on.
pub(super) fn take_ready(streams: &[Arc<StreamInput>], next: &mut usize, max: usize, jobs: &mut Vec<Job>) {
    let mut found = true;
    while found && jobs.len() < max {
        found = false;
        let start = *next;
        for k in 0..streams.len() {
            if jobs.len() >= max {
                break;
            }
            let i = (start + k) % streams.len();
            let counters = &streams[i].counters;
            counters.in_flight.fetch_add(1, Ordering::SeqCst);
            match streams[i].ring.pop() {
                Some(buf) => {
                    jobs.push(Job { stream: streams[i].clone(), buf });
                    *next = i + 1;
                    found = true;
                }
                None => {
                    counters.in_flight.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }
}

impl Worker {
    /// Runs every job as one batch and hands each frame on (or drops them all
    /// when inference fails: false), lowering each stream's in-flight count
    /// per frame.
    pub(super) fn process_batch(&mut self, jobs: &mut Vec<Job>) -> bool {
        // Hood estimates first, per frame, as the single-frame path does.
        let mut observed: Vec<_> = jobs.iter_mut().map(|j| j.stream.unseen_in(&mut j.buf)).collect();
        let frames: Vec<FrameRef<'_>> = jobs.iter().map(|j| j.buf.frame()).collect();
        // Filtering streams (smoothing, connected road) get their own frames'
        // logits, in batch (so seq) order.
        let grid = self.engine.logits_grid();
        let road = self.engine.options().road_classes.clone();
        let ego = self.engine.options().ego_class;
        let mut road_cut = vec![0.0f32; jobs.len()];
        let mut learned = vec![None; jobs.len()];
        let mut smooth = |i: usize, logits: &mut [f32]| {
            let j: &Job = &jobs[i];
            if j.stream.temporal.filters_logits(ego) {
                let f = j.stream.temporal.filter_logits(j.buf.seq, logits, grid, &road, ego, &observed[i]);
                (road_cut[i], learned[i]) = (f.road_cut, f.hood);
            }
        };
        let any_smooths = jobs.iter().any(|j| j.stream.temporal.filters_logits(ego));
        let draw: Vec<bool> = jobs.iter().map(|j| j.stream.pixels.draw_next()).collect();
        if self.engine.annotates_frames() {
            // An engine that draws records one piece of work per set of drawn
            // frames: all or none, or a mix of watched and unwatched streams
            // would record (and evict) one for every pattern. Drawing a frame
            // nobody asked for costs the device little; the host skips it.
            let any = draw.iter().any(|&d| d);
            let overlays: Vec<_> = frames.iter().zip(&observed).map(|(f, o)| any.then(|| self.annotator.overlay(o, f.width, f.height))).collect();
            self.engine.set_overlays_where(&overlays);
        }
        let result = self.engine.run_batch(&frames, if any_smooths { Some(&mut smooth) } else { None }).map(|_| ());
        drop(frames);
        for (o, l) in observed.iter_mut().zip(learned) {
            if let Some(l) = l {
                *o = l;
            }
        }
        if let Err(err) = result {
            for Job { stream, buf } in jobs.drain(..) {
                drop_failed(&stream, buf, &err);
                stream.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
            return false;
        }
        let inferred = Instant::now();
        let t = self.engine.timings();
        let inference_ms = t.preprocess_ms + t.inference_ms + t.postprocess_ms;
        let done = Done { annotator: &self.annotator, on_inference: &self.on_inference, road: &self.engine.options().road_classes };
        let segs = self.engine.batch_segmentations();
        for (i, ((Job { stream, mut buf }, seg), observed)) in jobs.drain(..).zip(segs).zip(observed).enumerate() {
            buf.stages.inferred = inferred;
            let seen = Seen { hood: &observed, road_cut: road_cut[i], draw: draw[i] };
            done.deliver(&stream, buf, seg, seen, inference_ms, self.engine.annotated(i));
            stream.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use crossbeam_channel::{Receiver, unbounded};

    use super::{BatchPolicy, Job, take_ready};
    use crate::backend::cpu::CpuBackend;
    use crate::engine::{AnyEngine, ModelSpec, Preset, load_cpu_engines};
    use crate::frame::PixelFormat;
    use crate::temporal::{DEFAULT_WEIGHT, HoodMask, StreamTemporal, TemporalSettings, keep_grounded_road};
    use crate::annotate::Annotator;
    use crate::video::frame::DecodedFrame;
    use crate::video::pool::{OutputItem, StreamCounters, StreamInput, WorkerPool};
    use crate::video::ring::FrameRing;

    const FRAME_NS: u64 = 40_000_000;

    /// Frame `i` of a stream: 64x48 RGBA stripes, distinct per frame and offset.
    fn pixels(i: u64, offset: u64) -> Vec<u8> {
        (0..64 * 48 * 4).map(|p| (p as u64 * (i + 3) + offset) as u8).collect()
    }

    /// A file-like stream whose ring already holds `frames` distinct 64x48
    /// RGBA frames, pts `i * FRAME_NS + offset`.
    fn stream(name: &str, frames: u64, offset: u64, smoothing: bool) -> (Arc<StreamInput>, Receiver<OutputItem>) {
        let smoothing = smoothing.then_some(DEFAULT_WEIGHT);
        stream_with(name, frames, offset, TemporalSettings { smoothing, hood: false, connected_road: false })
    }

    fn stream_with(name: &str, frames: u64, offset: u64, settings: TemporalSettings) -> (Arc<StreamInput>, Receiver<OutputItem>) {
        stream_drawn(name, frames, offset, settings, true)
    }

    /// `stream_with`, its frames drawn only if `wanted` (else one a second).
    fn stream_drawn(name: &str, frames: u64, offset: u64, settings: TemporalSettings, wanted: bool) -> (Arc<StreamInput>, Receiver<OutputItem>) {
        let ring = Arc::new(FrameRing::new(16, 16, false));
        for i in 0..frames {
            let data = pixels(i, offset);
            let pts = Some(i * FRAME_NS + offset);
            ring.push(&DecodedFrame { data: &data, width: 64, height: 48, stride: 256, format: PixelFormat::Rgba, chroma: None, pts, duration: None });
        }
        let (output, rx) = unbounded();
        let temporal = StreamTemporal::new(settings);
        let input = StreamInput { name: name.into(), ring, output, counters: Arc::new(StreamCounters::default()), want_masks: true, temporal: Arc::new(temporal), pixels: Arc::new(crate::video::demand::PixelDemand::new(wanted)) };
        (Arc::new(input), rx)
    }

    #[test]
    fn ready_frames_are_taken_round_robin_up_to_the_batch() {
        // Rule: a worker takes one ready frame per stream per sweep until the batch is full or nothing is ready, never waiting, and counts each taken frame in flight (and nothing else).
        let (a, _ra) = stream("a", 3, 0, false);
        let (b, _rb) = stream("b", 1, 7, false);
        let streams = [a.clone(), b.clone()];
        let (mut next, mut jobs) = (0, Vec::new());
        take_ready(&streams, &mut next, 4, &mut jobs);
        let taken: Vec<_> = jobs.iter().map(|j: &Job| (j.stream.name.as_str(), j.buf.seq)).collect();
        assert_eq!(taken, [("a", 0), ("b", 0), ("a", 1), ("a", 2)]);
        assert_eq!((a.in_flight(), b.in_flight()), (3, 1));
        jobs.clear();
        take_ready(&streams, &mut next, 4, &mut jobs);
        assert!(jobs.is_empty());
        assert_eq!((a.in_flight(), b.in_flight()), (3, 1), "empty rings leave the counts alone");
        // A batch of 2 from a fuller stream stops at 2.
        let (c, _rc) = stream("c", 5, 0, false);
        take_ready(std::slice::from_ref(&c), &mut 0, 2, &mut jobs);
        assert_eq!(jobs.iter().map(|j| j.buf.seq).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(c.in_flight(), 2);
    }

    /// One CPU engine of the small test model at 96x64, `road` its road class.
    fn test_model_engine(road: &str) -> AnyEngine {
        test_model_engine_with(road, Preset::Fast, 1).expect("the test model loads")
    }

    fn test_model_engine_with(road: &str, preset: Preset, max_batch: usize) -> Result<AnyEngine, crate::engine::LoadError> {
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/odd-bf16-203x141");
        let road = [road.to_string()];
        let spec = ModelSpec { path: &model, size: (96, 64), preset, road_classes: &road, confidence_threshold: 0.3, cuda_graphs: false, max_batch, exposure: crate::exposure::Exposure::DEFAULT };
        let (engines, _) = load_cpu_engines(&spec, CpuBackend::new(), 1)?;
        Ok(AnyEngine::from(engines.into_iter().next().expect("one engine")))
    }

    #[test]
    fn every_batch_size_a_worker_runs_is_built_at_load_and_no_other() {
        // Rule: an engine loaded for batches of up to N holds the model instance of each of the policy's sizes before its first frame, and running any number of ready frames as the policy splits them builds no other; a preset of several scales runs frames one at a time and builds none; over 16 fails the load, naming the limit.
        let mut engine = test_model_engine_with("label_0", Preset::Fast, 6).unwrap();
        assert_eq!(engine.batch_sizes_ready(), [1, 2, 4, 6]);
        let policy = BatchPolicy { max: 6, wait: Duration::ZERO };
        assert_eq!(engine.batch_sizes_ready(), policy.sizes(), "the table is the policy's sizes");
        let data: Vec<Vec<u8>> = (0..6).map(|i| pixels(i, 0)).collect();
        let frames: Vec<crate::engine::FrameRef<'_>> =
            data.iter().map(|d| crate::engine::FrameRef { data: d, width: 64, height: 48, stride: 256, format: PixelFormat::Rgba }).collect();
        for n in 1..=6 {
            let mut at = 0;
            for run in policy.split(n) {
                engine.run_batch(&frames[at..at + run], None).unwrap();
                at += run;
            }
        }
        assert_eq!(engine.batch_sizes_ready(), [1, 2, 4, 6], "no size built on the way");
        assert_eq!(test_model_engine_with("label_0", Preset::Accurate, 6).unwrap().batch_sizes_ready(), [1]);
        assert_eq!(test_model_engine("label_0").batch_sizes_ready(), [1]);
        let err = test_model_engine_with("label_0", Preset::Fast, 17).err().expect("17 is over the limit").to_string();
        assert!(err.contains("over 16"), "{err}");
    }

    /// Share of frame `i`'s logits grid that the grounded-road rule cuts
    /// (no hood, no bars), run apart from any pool.
    fn reference_cut(engine: &mut AnyEngine, i: u64, offset: u64) -> f32 {
        let data = pixels(i, offset);
        let frame = crate::engine::FrameRef { data: &data, width: 64, height: 48, stride: 256, format: PixelFormat::Rgba };
        let grid = engine.logits_grid();
        let road = engine.options().road_classes.clone();
        let mut cut = 0;
        engine
            .run_frame_filtered(&frame, Some(&mut |logits: &mut [f32]| cut = keep_grounded_road(logits, grid, &road, &HoodMask::none(64, 48))))
            .expect("the reference frame runs");
        cut as f32 / (grid.width * grid.height) as f32
    }

    #[test]
    fn the_grounded_road_cut_is_reported_per_frame_batched_or_not() {
        // Rule: the share of each frame's road that the grounded-road rule cuts reaches the metrics hook and the output's stats, the same whether the frame ran alone or in a batch, and equal to the rule's own count on that frame.
        let offset = 0;
        // A road class for which the test model's stripes leave road islands high in the picture.
        let (road, expected) = (0..7)
            .map(|k| format!("label_{k}"))
            .find_map(|road| {
                let mut engine = test_model_engine(&road);
                let cuts: Vec<f32> = (0..4).map(|i| reference_cut(&mut engine, i, offset)).collect();
                cuts.iter().any(|&c| c > 0.0).then_some((road, cuts))
            })
            .expect("some class of the test model leaves islands to cut");
        let settings = TemporalSettings { smoothing: None, hood: false, connected_road: true };
        for batch in [1, 4] {
            let reported = Arc::new(std::sync::Mutex::new(Vec::new()));
            let on_inference = {
                let reported = reported.clone();
                Arc::new(move |_: &str, _: f64, stats: &crate::annotate::FrameStats| reported.lock().unwrap().push(stats.road_cut))
            };
            let annotator = Annotator { style: Default::default(), show_text: false, show_origin: false };
            let pool = WorkerPool::start(vec![test_model_engine(&road)], BatchPolicy { max: batch, wait: Duration::ZERO }, annotator, on_inference, Arc::new(|_| {}));
            let (s, rx) = stream_with("cut", 4, offset, settings);
            pool.add_stream(s.clone());
            pool.notify();
            let mut out = Vec::new();
            for i in 0..4 {
                match rx.recv_timeout(Duration::from_secs(60)) {
                    Ok(OutputItem::Frame { buf, stats }) => {
                        out.push(stats.road_cut);
                        s.ring.recycle(buf);
                    }
                    other => panic!("batch {batch} frame {i}: {other:?}"),
                }
            }
            pool.shutdown();
            for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                assert!((got - want).abs() < 1e-6, "batch {batch} frame {i}: stats say {got}, the rule cuts {want}");
            }
            assert_eq!(*reported.lock().unwrap(), out, "batch {batch}: the metrics hook saw what the output saw");
        }
    }

    #[test]
    fn frames_nobody_looks_at_are_not_drawn_batched_or_not() {
        // Rule: a stream whose outputs want no pixels gets its first frame drawn (for its snapshot) and the next ones (well within a second) handed on as decoded, bit for bit, while a watched stream gets every frame drawn; the same alone or in a batch.
        let annotator = || Annotator { style: Default::default(), show_text: true, show_origin: false };
        let settings = TemporalSettings { smoothing: None, hood: false, connected_road: false };
        for batch in [1, 4] {
            let pool = WorkerPool::start(vec![test_model_engine("label_0")], BatchPolicy { max: batch, wait: Duration::ZERO }, annotator(), Arc::new(|_, _, _| {}), Arc::new(|_| {}));
            let (quiet, rq) = stream_drawn("quiet", 6, 0, settings, false);
            let (watched, rw) = stream_drawn("watched", 6, 0, settings, true);
            pool.add_stream(quiet.clone());
            pool.add_stream(watched.clone());
            pool.notify();
            for (input, rx, wanted) in [(&quiet, &rq, false), (&watched, &rw, true)] {
                for i in 0..6 {
                    let Ok(OutputItem::Frame { buf, .. }) = rx.recv_timeout(Duration::from_secs(60)) else { panic!("batch {batch}: {} frame {i}", input.name) };
                    let drawn = wanted || i == 0;
                    assert_eq!(buf.annotated, drawn, "batch {batch}: {} frame {i}", input.name);
                    assert_eq!(&buf.data[..] == &pixels(i, 0)[..], !drawn, "batch {batch}: {} frame {i}: drawn on only if annotated", input.name);
                    input.ring.recycle(buf);
                }
            }
            pool.shutdown();
        }
    }

    #[test]
    fn two_streams_in_batches_of_four_keep_every_frame_in_order_with_its_timestamps() {
        // Rule: with workers.batch = 4, frames from two streams (one smoothing its logits) run in shared batches, and each stream's output gets every frame once, in order, with its own pts and a frame-sized mask; the in-flight counts return to 0.
        let annotator = Annotator { style: Default::default(), show_text: true, show_origin: false };
        let policy = BatchPolicy { max: 4, wait: Duration::ZERO };
        let pool = WorkerPool::start(vec![test_model_engine("label_0")], policy, annotator, Arc::new(|_, _, _| {}), Arc::new(|_| {}));
        // Every frame is queued before its stream is added, so the first take
        // finds at least four frames ready.
        let (a, ra) = stream("a", 7, 0, true);
        let (b, rb) = stream("b", 6, 1_000, false);
        pool.add_stream(a.clone());
        pool.add_stream(b.clone());
        pool.notify();
        let mut inferred_at: HashMap<Instant, usize> = HashMap::new();
        for (input, rx, count, offset) in [(&a, &ra, 7, 0), (&b, &rb, 6, 1_000)] {
            for i in 0..count {
                match rx.recv_timeout(Duration::from_secs(60)) {
                    Ok(OutputItem::Frame { buf, .. }) => {
                        assert_eq!(buf.seq, i, "{}: frames in order", input.name);
                        assert_eq!(buf.timing.pts, Some(i * FRAME_NS + offset), "{} frame {i}: its own pts", input.name);
                        assert_eq!(buf.road_mask.len(), 64 * 48);
                        *inferred_at.entry(buf.stages.inferred).or_default() += 1;
                        input.ring.recycle(buf);
                    }
                    other => panic!("{} frame {i}: {other:?}", input.name),
                }
            }
        }
        assert!(ra.is_empty() && rb.is_empty(), "nothing more than the frames");
        // Frames of one batch share its inference instant; single runs never do.
        assert!(inferred_at.values().any(|&n| n >= 2), "some frames ran as a batch: {inferred_at:?}");
        assert!(inferred_at.values().all(|&n| n <= 4), "no batch over 4: {inferred_at:?}");
        // A worker hands a frame on before it stops counting it as in flight
        // (so a draining stream never sees 0 while a frame is still on its
        // way), so the last frame can arrive a moment before its count drops.
        let deadline = Instant::now() + Duration::from_secs(5);
        while (a.in_flight(), b.in_flight()) != (0, 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!((a.in_flight(), b.in_flight()), (0, 0));
        assert_eq!((a.counters.inferred.load(Ordering::SeqCst), b.counters.inferred.load(Ordering::SeqCst)), (7, 6));
        pool.shutdown();
    }

    #[test]
    fn batches_run_in_a_few_fixed_sizes() {
        // Rule: a worker's batch sizes are the powers of two up to workers.batch and workers.batch itself; n frames run as the largest sizes that fit, in turn.
        let policy = |max| BatchPolicy { max, wait: Duration::ZERO };
        assert_eq!(policy(16).sizes(), [1, 2, 4, 8, 16]);
        assert_eq!(policy(6).sizes(), [1, 2, 4, 6]);
        assert_eq!(policy(1).sizes(), [1]);
        assert_eq!(BatchPolicy::SINGLE.split(3), [1, 1, 1]);
        assert_eq!(policy(16).split(13), [8, 4, 1]);
        assert_eq!(policy(16).split(16), [16]);
        assert_eq!(policy(6).split(6), [6]);
        assert_eq!(policy(6).split(5), [4, 1]);
        for n in 1..=16 {
            assert_eq!(policy(16).split(n).iter().sum::<usize>(), n);
        }
    }

    /// Runs `frames` of stream `name`, pushed `gap` apart after the first,
    /// through a one-worker pool with `policy`: each frame's inference
    /// instant and how long after its push it came out.
    fn run_spaced(policy: BatchPolicy, frames: u64, gap: Duration) -> Vec<(Instant, Duration)> {
        let annotator = Annotator { style: Default::default(), show_text: false, show_origin: false };
        let pool = WorkerPool::start(vec![test_model_engine("label_0")], policy, annotator, Arc::new(|_, _, _| {}), Arc::new(|_| {}));
        let (s, rx) = stream("spaced", 0, 0, false);
        pool.add_stream(s.clone());
        let mut pushed = Vec::new();
        for i in 0..frames {
            if i > 0 {
                std::thread::sleep(gap);
            }
            let data = pixels(i, 0);
            s.ring.push(&DecodedFrame { data: &data, width: 64, height: 48, stride: 256, format: PixelFormat::Rgba, chroma: None, pts: Some(i * FRAME_NS), duration: None });
            pushed.push(Instant::now());
            pool.notify();
        }
        let out = (0..frames as usize)
            .map(|i| match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(OutputItem::Frame { buf, .. }) => {
                    let at = buf.stages.inferred;
                    s.ring.recycle(buf);
                    (at, Instant::now().duration_since(pushed[i]))
                }
                other => panic!("frame {i}: {other:?}"),
            })
            .collect();
        pool.shutdown();
        out
    }

    #[test]
    fn a_worker_waits_within_its_budget_for_a_fuller_batch_and_no_longer() {
        // Rule: with max_batch_wait_ms, frames arriving within the budget after the first join its batch; a frame alone waits about the budget, never much more; zero never waits.
        let wait = Duration::from_millis(300);
        let spaced = run_spaced(BatchPolicy { max: 4, wait }, 4, Duration::from_millis(40));
        let first = spaced[0].0;
        assert!(spaced.iter().all(|(at, _)| *at == first), "four frames 40 ms apart within a 300 ms budget run as one batch: {spaced:?}");
        let alone = run_spaced(BatchPolicy { max: 4, wait }, 1, Duration::ZERO);
        assert!(alone[0].1 >= wait && alone[0].1 < wait + Duration::from_secs(2), "a lone frame waits the budget: {:?}", alone[0].1);
        let eager = run_spaced(BatchPolicy { max: 4, wait: Duration::ZERO }, 2, Duration::from_millis(200));
        assert_ne!(eager[0].0, eager[1].0, "no budget: the first frame does not wait for the second");
    }
}
