//! Rule: the CUDA backend computes what the CPU reference computes, within
//! fp16 tolerance (relative L2 of logits <= 1e-2, argmax agreement >= 99.5%
//! on the HF fixtures), its graph replay is bit-identical to the eager run of
//! the same kernels, and replaying does not grow memory. Skips with a message
//! on machines without a usable NVIDIA GPU; fails where one is found but does
//! not open.

#![cfg(feature = "cuda")]


use std::path::Path;
use std::sync::Arc;

use crate::common::gpu::{backend, gpu_or_skip, test_frames};
use crate::common::*;
use cudarc::cublaslt::{CudaBlasLT, Matmul};
use half::{bf16, f16};
use roadseg::backend::cuda::{CudaBackend, CudaDevice, CudaOptions, GemmElem};
use roadseg::backend::{Affine, AttnDims, Backend, ConvDims, DwConvDims, GemmDims, NormDims, ResizeDims};
use roadseg::engine::chw_to_hwc;
use roadseg::npy;


/// (relative L2 error, argmax agreement over pixels) of CHW logits.
fn compare(ours: &[f32], reference: &[f32], labels: usize) -> (f64, f64) {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in ours.iter().zip(reference) {
        num += ((a - b) as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    let pixels = reference.len() / labels;
    let argmax = |v: &[f32], p: usize| (0..labels).max_by(|&i, &j| v[i * pixels + p].total_cmp(&v[j * pixels + p])).unwrap();
    let agree = (0..pixels).filter(|&p| argmax(ours, p) == argmax(reference, p)).count();
    ((num / den.max(1e-30)).sqrt(), agree as f64 / pixels as f64)
}

fn check_fixtures<T: GemmElem>(d: &Arc<CudaDevice>, max_rel_l2: f64, min_argmax: f64)
where
    CudaBlasLT: Matmul<T>,
{
    let local = LOCAL_CASES.iter().map(|c| Some(repo().join("tests/data").join(c)));
    let shared_dirs = SHARED_CASES.iter().map(|c| shared(&format!("fixtures/segformer/{c}")));
    for dir in local.chain(shared_dirs).flatten() {
        let reference = npy::read_f32(dir.join("logits.npy")).unwrap();
        let (ours, shape) = fixture_logits(backend::<T>(d, CudaOptions::default()), &dir);
        assert_eq!(shape, reference.shape);
        let (rel, agree) = compare(&ours, &reference.data, shape[1]);
        eprintln!("{} {}: relative L2 {rel:.3e}, argmax agreement {:.4}%", T::PRECISION, dir.display(), agree * 100.0);
        assert!(rel <= max_rel_l2, "{}: relative L2 {rel} > {max_rel_l2}", dir.display());
        assert!(agree >= min_argmax, "{}: argmax agreement {agree} < {min_argmax}", dir.display());
    }
}

#[test]
fn fp16_matches_hf_reference() {
    let Some(d) = gpu_or_skip() else { return };
    check_fixtures::<f16>(&d, 1e-2, 0.995);
}

#[test]
fn f32_matches_hf_reference() {
    // cuBLASLt runs f32 GEMMs on TF32 tensor cores: the fp16 bar still applies.
    let Some(d) = gpu_or_skip() else { return };
    check_fixtures::<f32>(&d, 1e-2, 0.995);
}

#[test]
fn bf16_stays_close_to_hf_reference() {
    // bf16 keeps 8 mantissa bits (fp16: 11): a looser bar, reported for comparison.
    let Some(d) = gpu_or_skip() else { return };
    check_fixtures::<bf16>(&d, 4e-2, 0.98);
}

fn run_fixture<T: GemmElem>(b: Arc<CudaBackend<T>>, dir: &Path, times: usize) -> Vec<Vec<f32>>
where
    CudaBlasLT: Matmul<T>,
{
    run_fixture_then(b, dir, times, || {})
}

/// As `run_fixture`, calling `before_drop` after the runs, while the engine
/// (and so its graphs) still exists.
fn run_fixture_then<T: GemmElem>(b: Arc<CudaBackend<T>>, dir: &Path, times: usize, before_drop: impl FnOnce()) -> Vec<Vec<f32>>
where
    CudaBlasLT: Matmul<T>,
{
    let pv = npy::read_f32(dir.join("pixel_values.npy")).unwrap();
    let (h, w) = (pv.shape[2], pv.shape[3]);
    let hwc = chw_to_hwc(&pv.data, h, w, 3);
    let mut e = engine(b, dir, w, h, vec![1.0]);
    let out = (0..times).map(|_| e.run_normalized(&hwc).unwrap().to_vec()).collect();
    before_drop();
    out
}

#[test]
fn graph_replay_is_bit_identical_to_eager() {
    let Some(d) = gpu_or_skip() else { return };
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let eager = run_fixture(backend::<f16>(&d, CudaOptions { graphs: false, ..CudaOptions::default() }), &dir, 2);
    let graphed_backend = backend::<f16>(&d, CudaOptions::default());
    // Counted while the engine lives: dropping it drops its graph (on the
    // first H100 run this was counted after the drop and read 0).
    let mut graphs_while_running = 0;
    let graphed = run_fixture_then(graphed_backend.clone(), &dir, 3, || graphs_while_running = graphed_backend.recordings());
    assert_eq!(eager[0], eager[1], "eager runs are deterministic");
    for (i, g) in graphed.iter().enumerate() {
        assert!(g == &eager[0], "graph run {i} differs from the eager run");
    }
    assert_eq!(graphs_while_running, 1, "one graph for the one model instance");
    assert_eq!(graphed_backend.recordings(), 0, "the engine's graph went with it");
}

#[test]
fn ten_thousand_replays_do_not_grow_memory() {
    let Some(d) = gpu_or_skip() else { return };
    let dir = repo().join("tests/data/three-stage-fp16-161x97");
    let pv = npy::read_f32(dir.join("pixel_values.npy")).unwrap();
    let (h, w) = (pv.shape[2], pv.shape[3]);
    let hwc = chw_to_hwc(&pv.data, h, w, 3);
    let mut e = engine(backend::<f16>(&d, CudaOptions::default()), &dir, w, h, vec![1.0]);
    let first = e.run_normalized(&hwc).unwrap().to_vec();
    for _ in 0..10 {
        e.run_normalized(&hwc).unwrap();
    }
    let (free_before, _) = d.memory().unwrap();
    let rss_before = rss_kib();
    for _ in 0..10_000 {
        e.run_normalized(&hwc).unwrap();
    }
    let (free_after, _) = d.memory().unwrap();
    let rss_after = rss_kib();
    eprintln!("device free {free_before} -> {free_after} bytes; RSS {rss_before} -> {rss_after} KiB");
    assert_eq!(free_before, free_after, "device memory changed over 10,000 replays");
    assert!(rss_after <= rss_before + 1024, "host RSS grew by {} KiB", rss_after - rss_before);
    assert_eq!(e.run_normalized(&hwc).unwrap(), &first[..], "replay 10,011 still gives the first result");
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Runs one op on the CPU and on CUDA (fp16 and f32) from the same inputs
/// and compares the outputs.
fn op_matches_cpu(name: &str, out_len: usize, op: &dyn Fn(&dyn OpRunner) -> Vec<f32>, d: &Arc<CudaDevice>) {
    let cpu = op(&Generic(&roadseg::backend::cpu::CpuBackend::new()));
    let fp16 = op(&Generic(&*backend::<f16>(d, CudaOptions::default())));
    let f32 = op(&Generic(&*backend::<f32>(d, CudaOptions::default())));
    for (label, gpu, tol) in [("fp16", fp16, 2e-2), ("f32", f32, 5e-3)] {
        assert_eq!(gpu.len(), out_len);
        let (max, _) = diff(&gpu, &cpu);
        let bound = tol * abs_max(&cpu).max(1.0);
        eprintln!("{name} {label}: max diff {max:.3e} (bound {bound:.3e})");
        assert!(max <= bound, "{name} {label}: max diff {max} > {bound}");
    }
}

/// The ops under test, on any backend, with f32 host data in and out.
trait OpRunner {
    fn linear(&self, x: &[f32], w: &[f32], b: &[f32], y0: &[f32], d: GemmDims, acc: bool) -> Vec<f32>;
    fn conv(&self, x: &[f32], w: &[f32], b: &[f32], d: ConvDims) -> Vec<f32>;
    fn layer_norm(&self, x: &[f32], g: &[f32], b: &[f32], d: NormDims) -> Vec<f32>;
    fn attention(&self, q: &[f32], kv: &[f32], d: AttnDims) -> Vec<f32>;
    fn dwconv(&self, x: &[f32], w: &[f32], b: &[f32], d: DwConvDims) -> Vec<f32>;
    fn resize(&self, x: &[f32], y0: &[f32], d: ResizeDims, acc: bool) -> Vec<f32>;
}

struct Generic<'a, B: Backend>(&'a B);

impl<B: Backend> Generic<'_, B> {
    fn t(&self, v: &[f32]) -> B::Tensor {
        let mut t = self.0.tensor(v.len()).unwrap();
        self.0.write(&mut t, v).unwrap();
        t
    }
    fn affine(&self, weight: &[f32], bias: &[f32]) -> Affine<B::Param> {
        Affine { weight: self.0.param(weight).unwrap(), bias: self.0.param(bias).unwrap() }
    }
    fn out(&self, t: &B::Tensor, n: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        self.0.sync().unwrap();
        self.0.read(t, &mut v).unwrap();
        v
    }
}

impl<B: Backend> OpRunner for Generic<'_, B> {
    fn linear(&self, x: &[f32], w: &[f32], b: &[f32], y0: &[f32], d: GemmDims, acc: bool) -> Vec<f32> {
        let (x, mut y) = (self.t(x), self.t(y0));
        let (w, b) = (self.0.param(w).unwrap(), self.0.param(b).unwrap());
        self.0.linear(&x, &w, Some(&b), &mut y, d, acc).unwrap();
        self.out(&y, d.rows * d.n)
    }
    fn conv(&self, x: &[f32], w: &[f32], b: &[f32], d: ConvDims) -> Vec<f32> {
        let x = self.t(x);
        let n = d.out_rows() * d.c_out;
        let (mut y, mut ws) = (self.0.tensor(n).unwrap(), self.0.tensor(self.0.conv2d_workspace(d)).unwrap());
        self.0.conv2d(&x, &self.affine(w, b), &mut y, &mut ws, d).unwrap();
        self.out(&y, n)
    }
    fn layer_norm(&self, x: &[f32], g: &[f32], b: &[f32], d: NormDims) -> Vec<f32> {
        let (x, mut y) = (self.t(x), self.0.tensor(d.rows * d.dim).unwrap());
        self.0.layer_norm(&x, &self.affine(g, b), &mut y, d).unwrap();
        self.out(&y, d.rows * d.dim)
    }
    fn attention(&self, q: &[f32], kv: &[f32], d: AttnDims) -> Vec<f32> {
        let (q, kv) = (self.t(q), self.t(kv));
        let n = d.batch * d.queries * d.heads * d.head_dim;
        let (mut y, mut ws) = (self.0.tensor(n).unwrap(), self.0.tensor(self.0.attention_workspace(d)).unwrap());
        self.0.attention(&q, &kv, &mut y, &mut ws, d).unwrap();
        self.out(&y, n)
    }
    fn dwconv(&self, x: &[f32], w: &[f32], b: &[f32], d: DwConvDims) -> Vec<f32> {
        let n = d.batch * d.h * d.w * d.channels;
        let (x, mut y) = (self.t(x), self.0.tensor(n).unwrap());
        self.0.dwconv3x3_gelu(&x, &self.affine(w, b), &mut y, d).unwrap();
        self.out(&y, n)
    }
    fn resize(&self, x: &[f32], y0: &[f32], d: ResizeDims, acc: bool) -> Vec<f32> {
        let (x, mut y) = (self.t(x), self.t(y0));
        self.0.resize_bilinear(&x, &mut y, d, acc).unwrap();
        self.out(&y, d.batch * d.dst_h * d.dst_w * d.channels)
    }
}

#[test]
fn each_op_matches_the_cpu_backend() {
    let Some(d) = gpu_or_skip() else { return };
    // Odd sizes on purpose: partial tiles, masking and bounds in every kernel.
    let g = GemmDims { rows: 301, k: 67, n: 45 };
    let (x, w, b, y0) = (values(g.rows * g.k, 1), values(g.k * g.n, 2), values(g.n, 3), values(g.rows * g.n, 4));
    for acc in [false, true] {
        op_matches_cpu("linear", g.rows * g.n, &|r| r.linear(&x, &w, &b, &y0, g, acc), &d);
    }
    // Batches of 2 and 3 too: per-image offsets in every op that looks across pixels.
    for cd in [
        ConvDims { batch: 1, h: 37, w: 53, c_in: 3, c_out: 32, kernel: 7, stride: 4, pad: 3 },
        ConvDims { batch: 2, h: 19, w: 23, c_in: 32, c_out: 64, kernel: 3, stride: 2, pad: 1 },
        ConvDims { batch: 3, h: 24, w: 40, c_in: 64, c_out: 64, kernel: 8, stride: 8, pad: 0 },
        // im2col_vec in f32 only (12 = three 4-float chunks, not whole 8-half ones); B0's 160 -> 256 patch embedding.
        ConvDims { batch: 1, h: 11, w: 9, c_in: 12, c_out: 16, kernel: 3, stride: 2, pad: 1 },
        ConvDims { batch: 2, h: 17, w: 13, c_in: 160, c_out: 256, kernel: 3, stride: 2, pad: 1 },
    ] {
        let x = values(cd.batch * cd.h * cd.w * cd.c_in, 5);
        let (w, b) = (values(cd.kernel * cd.kernel * cd.c_in * cd.c_out, 6), values(cd.c_out, 7));
        op_matches_cpu("conv2d", cd.out_rows() * cd.c_out, &|r| r.conv(&x, &w, &b, cd), &d);
    }
    // Every layer norm form: 16-bit rows of 1, 2 and up to 4 chunks per lane
    // (SegFormer's 32..512 channels, and 1000), and rows the scalar kernel
    // takes (not whole chunks; too long).
    for dim in [32, 64, 160, 256, 320, 512, 1000, 36, 2056] {
        let nd = NormDims { rows: 173, dim };
        let (x, gm, bt) = (values(nd.rows * nd.dim, 8), values(nd.dim, 9), values(nd.dim, 10));
        op_matches_cpu(&format!("layer_norm dim {dim}"), nd.rows * nd.dim, &|r| r.layer_norm(&x, &gm, &bt, nd), &d);
    }
    for ad in [
        AttnDims { batch: 1, queries: 1000, keys: 130, heads: 1, head_dim: 32 },
        AttnDims { batch: 2, queries: 333, keys: 77, heads: 2, head_dim: 64 },
        AttnDims { batch: 3, queries: 100, keys: 100, heads: 5, head_dim: 32 },
        AttnDims { batch: 2, queries: 50, keys: 50, heads: 3, head_dim: 48 },
    ] {
        let c = ad.heads * ad.head_dim;
        let (q, kv) = (values(ad.batch * ad.queries * c, 11), values(ad.batch * ad.keys * 2 * c, 12));
        op_matches_cpu("attention", ad.batch * ad.queries * c, &|r| r.attention(&q, &kv, ad), &d);
    }
    let dd = DwConvDims { batch: 2, h: 13, w: 29, channels: 96 };
    let n = dd.batch * dd.h * dd.w * dd.channels;
    let (x, w, b) = (values(n, 13), values(9 * dd.channels, 14), values(dd.channels, 15));
    op_matches_cpu("dwconv3x3_gelu", n, &|r| r.dwconv(&x, &w, &b, dd), &d);
    let rd = ResizeDims { batch: 3, src_h: 9, src_w: 17, dst_h: 36, dst_w: 68, channels: 24 };
    let (src, dst) = (rd.batch * rd.src_h * rd.src_w * rd.channels, rd.batch * rd.dst_h * rd.dst_w * rd.channels);
    let (x, y0) = (values(src, 16), values(dst, 17));
    for acc in [false, true] {
        op_matches_cpu("resize_bilinear", dst, &|r| r.resize(&x, &y0, rd, acc), &d);
    }
}

#[test]
fn tiled_dwconv_matches_the_cpu_at_every_shape_it_serves() {
    // Rule: the vectorised depthwise 3x3 + GELU kernel equals the CPU reference at each SegFormer Mix-FFN shape it specialises (B0 and B5 stages at 1024x1024 input), at edge shapes (one row or column, strips cut short, 4 channels), and widths not divisible by 4 take the plain kernel.
    let Some(d) = gpu_or_skip() else { return };
    let shapes = [
        // B0 stages 1-4 (hidden 128, 256, 640, 1024) and B5 (256, 512, 1280, 2048).
        (256, 256, 128), (128, 128, 256), (64, 64, 640), (32, 32, 1024),
        (256, 256, 256), (128, 128, 512), (64, 64, 1280), (32, 32, 2048),
        // Edges: a single row / column, rows not a multiple of the 8-row strip, c = 4, c not divisible by 4.
        (1, 37, 8), (29, 1, 12), (13, 29, 4), (9, 7, 36), (17, 33, 30),
    ];
    for (seed, (h, w_, c)) in shapes.into_iter().enumerate() {
        let seed = 100 + 3 * seed as u64;
        let (x, w, b) = (values(h * w_ * c, seed), values(9 * c, seed + 1), values(c, seed + 2));
        let dd = DwConvDims { batch: 1, h, w: w_, channels: c };
        op_matches_cpu(&format!("dwconv3x3_gelu {h}x{w_}x{c}"), h * w_ * c, &|r| r.dwconv(&x, &w, &b, dd), &d);
    }
}

#[test]
fn gpu_frame_path_matches_the_cpu_frame_path() {
    // Rule: the GPU's frame path (pre- and postprocessing kernels, every scale of a multi-scale preset and the logit averaging inside one graph) segments a frame as the CPU does: classes agree on >= 99% of pixels, confidence within 5e-2 (fp16 model), replays are identical.
    use roadseg::engine::{FrameRef, PixelFormat};
    let Some(d) = gpu_or_skip() else { return };
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let (rgba, nv12, fw, fh, stride) = test_frames();
    let frames = [FrameRef { data: &rgba, width: fw, height: fh, stride, format: PixelFormat::Rgba }, FrameRef::packed(&nv12, fw, fh, PixelFormat::Nv12)];
    for scales in [vec![1.0], vec![0.9, 1.0, 1.1], vec![0.75]] {
        let mut gpu = engine(backend::<f16>(&d, CudaOptions::default()), &dir, 224, 160, scales.clone());
        let mut cpu = engine(std::sync::Arc::new(roadseg::backend::cpu::CpuBackend::new()), &dir, 224, 160, scales.clone());
        for frame in frames {
            let first = gpu.run_frame(&frame).unwrap().clone();
            let again = gpu.run_frame(&frame).unwrap().clone();
            let reference = cpu.run_frame(&frame).unwrap().clone();
            assert_eq!((first.width, first.height), (fw, fh));
            assert_eq!(first.classes, again.classes, "replays of the same frame agree");
            assert_eq!(first.confidence, again.confidence, "replays of the same frame agree");
            let agree = first.classes.iter().zip(&reference.classes).filter(|(a, b)| a == b).count() as f64 / first.classes.len() as f64;
            let (max, _) = diff(&first.confidence, &reference.confidence);
            eprintln!("{scales:?} {:?}: class agreement with the CPU {:.4}%, confidence max diff {max:.3e}", frame.format, agree * 100.0);
            assert!(agree >= 0.99, "{scales:?} {:?}: class agreement {agree}", frame.format);
            assert!(max <= 5e-2, "{scales:?} {:?}: confidence max diff {max}", frame.format);
            assert!((first.mean_confidence - reference.mean_confidence).abs() <= 1e-2);
            assert!((first.road_coverage - reference.road_coverage).abs() <= 1e-2);
        }
    }
}

#[test]
fn every_frame_path_reports_the_gpu_time_of_its_forwards() {
    // Rule: on the GPU each frame's timings carry the device time of its forwards (CUDA events), more than zero and no more than the frame's wall time, with the logits kept on the host or not; the CPU reports none.
    use roadseg::engine::{FrameRef, PixelFormat};
    let Some(d) = gpu_or_skip() else { return };
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let (_, nv12, fw, fh, _) = test_frames();
    let frame = FrameRef::packed(&nv12, fw, fh, PixelFormat::Nv12);
    let mut e = engine(backend::<f16>(&d, CudaOptions::default()), &dir, 224, 160, vec![1.0]);
    for keep_logits in [false, true] {
        e.set_keep_logits(keep_logits);
        for _ in 0..3 {
            let wall = std::time::Instant::now();
            e.run_frame(&frame).unwrap();
            let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
            let gpu_ms = e.timings().gpu_ms.expect("GPU time measured");
            assert!(gpu_ms > 0.0 && gpu_ms <= wall_ms, "logits kept {keep_logits}: GPU {gpu_ms} ms, wall {wall_ms} ms");
        }
    }
    let mut cpu = engine(std::sync::Arc::new(roadseg::backend::cpu::CpuBackend::new()), &dir, 224, 160, vec![1.0]);
    cpu.run_frame(&frame).unwrap();
    assert_eq!(cpu.timings().gpu_ms, None);
}

#[test]
fn dropping_a_frame_slot_drops_its_graphs() {
    // Rule: graphs belong to the buffers they use: past MAX_BATCH + 8 frame geometries the least recently used slot goes with its graph, and dropping the engine leaves no graph behind.
    use roadseg::engine::{FrameRef, PixelFormat};
    let Some(d) = gpu_or_skip() else { return };
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let b = backend::<f16>(&d, CudaOptions::default());
    let mut e = engine(b.clone(), &dir, 224, 160, vec![1.0]);
    let most = roadseg::model::MAX_BATCH + 8;
    let mut counts = Vec::new();
    for i in 0..most + 3 {
        let (w, h) = (64 + 2 * i, 48);
        let rgb = vec![(i * 7) as u8; w * h * 3];
        e.run_frame(&FrameRef::packed(&rgb, w, h, PixelFormat::Rgb)).unwrap();
        counts.push(b.recordings());
    }
    let expected: Vec<usize> = (1..=most).chain([most; 3]).collect();
    assert_eq!(counts, expected, "one graph per geometry, at most {most}");
    drop(e);
    assert_eq!(b.recordings(), 0, "the engine's graphs went with it");
}

#[test]
fn frames_in_pinned_memory_are_copied_up_directly_with_the_same_result() {
    // Rule: with the CUDA host allocator installed, frame buffers are pinned and the engine copies them to the GPU from where they are; the segmentation equals that of the same frame in pageable memory (staged), frame after frame.
    use roadseg::backend::cuda::PinnedFrames;
    use roadseg::engine::{FrameRef, PixelFormat};
    use roadseg::host_memory::FrameMemory;
    let Some(d) = gpu_or_skip() else { return };
    roadseg::host_memory::install(Arc::new(PinnedFrames::new(&d)));
    let dir = repo().join("tests/data/odd-bf16-203x141");
    let mut e = engine(backend::<f16>(&d, CudaOptions::default()), &dir, 224, 160, vec![1.0]);
    let (_, nv12, fw, fh, _) = test_frames();
    let mut pinned = FrameMemory::default();
    pinned.resize(nv12.len());
    assert!(pinned.is_pinned(), "the allocator hands out pinned memory");
    for shift in [0u8, 40, 0] {
        let frame: Vec<u8> = nv12.iter().map(|v| v.wrapping_add(shift)).collect();
        pinned.copy_from_slice(&frame);
        let direct = e.run_frame(&FrameRef::packed(&pinned, fw, fh, PixelFormat::Nv12)).unwrap().clone();
        let staged = e.run_frame(&FrameRef::packed(&frame, fw, fh, PixelFormat::Nv12)).unwrap().clone();
        assert_eq!(direct.classes, staged.classes, "shift {shift}");
        assert_eq!(direct.confidence, staged.confidence, "shift {shift}");
    }
}

#[test]
fn fused_decoder_matches_the_separate_ops_and_hf_reference() {
    // Rule: the fused decode tail (kernels/decoder.cu) gives the separate ops' logits (relative L2 <= 5e-3, argmax 99.5%) and still meets the fp16 HF bar, on every fixture (three-stage models fall back to the separate ops), in fp16 and bf16.
    let Some(d) = gpu_or_skip() else { return };
    let local = LOCAL_CASES.iter().map(|c| Some(repo().join("tests/data").join(c)));
    let shared_dirs = SHARED_CASES.iter().map(|c| shared(&format!("fixtures/segformer/{c}")));
    let fused = CudaOptions { fused_decoder: true, ..CudaOptions::default() };
    let separate_ops = CudaOptions { fused_decoder: false, ..CudaOptions::default() };
    for dir in local.chain(shared_dirs).flatten() {
        let reference = npy::read_f32(dir.join("logits.npy")).unwrap();
        let labels = reference.shape[1];
        let (separate, _) = fixture_logits(backend::<f16>(&d, separate_ops), &dir);
        let (one_kernel, shape) = fixture_logits(backend::<f16>(&d, fused), &dir);
        assert_eq!(shape, reference.shape);
        let (rel, agree) = compare(&one_kernel, &separate, labels);
        let (rel_hf, agree_hf) = compare(&one_kernel, &reference.data, labels);
        eprintln!("fused fp16 {}: vs separate ops rel L2 {rel:.3e} argmax {:.4}%; vs HF {rel_hf:.3e} {:.4}%", dir.display(), agree * 100.0, agree_hf * 100.0);
        assert!(rel <= 5e-3 && agree >= 0.995, "{}: fused vs separate rel L2 {rel}, argmax {agree}", dir.display());
        assert!(rel_hf <= 1e-2 && agree_hf >= 0.995, "{}: fused vs HF rel L2 {rel_hf}, argmax {agree_hf}", dir.display());
        let (bf_separate, _) = fixture_logits(backend::<bf16>(&d, separate_ops), &dir);
        let (bf_fused, _) = fixture_logits(backend::<bf16>(&d, fused), &dir);
        let (rel, agree) = compare(&bf_fused, &bf_separate, labels);
        assert!(rel <= 4e-2 && agree >= 0.98, "{}: bf16 fused vs separate rel L2 {rel}, argmax {agree}", dir.display());
    }
}

/// Batch-3 logits and classes against three single-frame runs on one engine.
fn batch_matches_singles_on<T: GemmElem>(d: &Arc<CudaDevice>, dir: &Path, (w, h): (usize, usize), max_rel_l2: f64, min_agree: f64)
where
    CudaBlasLT: Matmul<T>,
{
    use crate::batch::{TestFrames, batch_vs_singles};
    let owned = TestFrames::new();
    let frames = owned.frames();
    let mut e = engine(backend::<T>(d, CudaOptions::default()), dir, w, h, vec![1.0]);
    // Twice: the first batch records the batch-3 graph, the second replays it.
    for round in 0..2 {
        let (batched, singles) = batch_vs_singles(&mut e, &frames);
        for (i, ((bl, bs), (sl, ss))) in batched.iter().zip(&singles).enumerate() {
            let (rel, _) = compare(bl, sl, 1);
            let same = bs.classes.iter().zip(&ss.classes).filter(|(a, b)| a == b).count() as f64 / ss.classes.len() as f64;
            eprintln!("{} {} round {round} frame {i}: relative L2 {rel:.3e}, classes agree {:.4}%", T::PRECISION, dir.display(), same * 100.0);
            assert!(rel <= max_rel_l2, "frame {i}: batched logits off by relative L2 {rel}");
            assert!(same >= min_agree, "frame {i}: classes agree on {same}");
        }
    }
}

#[test]
fn batch_of_three_equals_three_single_frames() {
    // Rule: batch-N output equals N single-frame runs on the GPU too. cuBLASLt
    // may pick another GEMM algorithm for 3x the rows, so the two agree to the
    // GEMMs' precision: f32 GEMMs run as TF32 (cudarc's compute type for f32:
    // 10-bit mantissa, unit roundoff 4.9e-4; the first H100 run measured
    // relative L2 4.9e-4 and 99.98% of classes), fp16 to its own.
    let Some(d) = gpu_or_skip() else { return };
    let mut cases = vec![(repo().join("tests/data/odd-bf16-203x141"), (224, 160))];
    cases.extend(shared("fixtures/segformer/tiny-1024x576").map(|dir| (dir, (1024, 576))));
    for (dir, size) in &cases {
        batch_matches_singles_on::<f32>(&d, dir, *size, 2e-3, 0.999);
        batch_matches_singles_on::<f16>(&d, dir, *size, 5e-3, 0.995);
    }
}
