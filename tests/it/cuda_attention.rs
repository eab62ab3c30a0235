//! Rule: the split-KV flash attention (kernels/attention_split.cu, on with
//! `CudaOptions::split_attention`) computes what the simple reference kernel
//! and the flash kernel compute at every (head_dim, queries, keys, heads,
//! splits) class it serves, in fp16 and bf16; it records into a CUDA graph
//! whose replays equal the eager run; and whole models with it on give the
//! logits of the same models with it off. Skips with a message on machines
//! without a usable NVIDIA GPU; fails where one is found but does not open.

#![cfg(feature = "cuda")]

use std::path::Path;
use std::sync::Arc;

use crate::common::gpu::{backend, gpu_or_skip};
use crate::common::*;
use cudarc::cublaslt::{CudaBlasLT, Matmul};
use half::{bf16, f16};
use roadseg::backend::cuda::{CudaBackend, CudaDevice, CudaOptions, GemmElem, plan_split};
use roadseg::backend::{AttnDims, Backend};
use roadseg::engine::{chw_to_hwc, hwc_to_chw};
use roadseg::npy;

const SIMPLE: CudaOptions = CudaOptions { flash_attention: false, fused_decoder: false, split_attention: false, ..CudaOptions::DEFAULT };
const FLASH: CudaOptions = CudaOptions { flash_attention: true, fused_decoder: false, split_attention: false, ..CudaOptions::DEFAULT };
const SPLIT: CudaOptions = CudaOptions { flash_attention: true, fused_decoder: false, split_attention: true, ..CudaOptions::DEFAULT };

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

/// One attention op on `b` (workspace as the backend asks for it), read back as f32.
fn attention<B: Backend>(b: &B, q: &[f32], kv: &[f32], d: AttnDims) -> Vec<f32> {
    let tensor = |v: &[f32]| {
        let mut t = b.tensor(v.len()).unwrap();
        b.write(&mut t, v).unwrap();
        t
    };
    let (q, kv) = (tensor(q), tensor(kv));
    let n = d.batch * d.queries * d.heads * d.head_dim;
    let (mut y, mut ws) = (b.tensor(n).unwrap(), b.tensor(b.attention_workspace(d)).unwrap());
    b.attention(&q, &kv, &mut y, &mut ws, d).unwrap();
    let mut out = vec![0.0; n];
    b.sync().unwrap();
    b.read(&y, &mut out).unwrap();
    out
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// (queries, keys, heads, batch), each at head_dim 32 and 64. The small ones
/// pin the split count whatever the GPU (few blocks: the keys decide), the
/// last ones are SegFormer's stages 2-4 at 1024x1024 and 1024x576.
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (100, 17, 1, 1),    // one split, fewer keys than a tile, partial query tile
    (70, 1, 8, 1),      // a single key
    (1, 1, 2, 1),       // one query, one key
    (130, 100, 2, 2),   // one split ending in a partial tile; two images share the workspace
    (70, 256, 2, 1),    // 2 splits of 2 tiles
    (33, 384, 5, 1),    // 3 splits of 2 tiles
    (100, 512, 8, 2),   // 4 splits of 2 tiles, two images
    (65, 300, 1, 1),    // 2 splits of 3 tiles, the last split's last tile partial
    (17, 1000, 2, 1),   // 6 splits of 3 tiles, the last one tile of 40 keys
    (4096, 1024, 5, 1), // B5/B0 stage 3 at 1024x1024
    (1024, 1024, 8, 1), // stage 4 at 1024x1024
    (9216, 576, 2, 1),  // stage 2 at 1024x576
    (2304, 576, 5, 1),  // stage 3 at 1024x576
    (576, 576, 8, 1),   // stage 4 at 1024x576
];

fn split_matches_references<T: GemmElem>(d: &Arc<CudaDevice>, vs_simple: f32, vs_flash: f32) -> Vec<(usize, bool)>
where
    CudaBlasLT: Matmul<T>,
{
    let (simple, flash, split) = (backend::<T>(d, SIMPLE), backend::<T>(d, FLASH), backend::<T>(d, SPLIT));
    let mut covered = Vec::new();
    for (i, &(queries, keys, heads, batch)) in SHAPES.iter().enumerate() {
        for head_dim in [32, 64] {
            let ad = AttnDims { batch, queries, keys, heads, head_dim };
            let c = heads * head_dim;
            // Queries scaled up so the softmax is peaked, not near uniform.
            let q: Vec<f32> = values(batch * queries * c, 2 * i as u64 + 1).iter().map(|v| v * 4.0).collect();
            let kv = values(batch * keys * 2 * c, 2 * i as u64 + 2);
            let plan = plan_split(queries, keys, heads, d.sm_count);
            let want = attention(&*simple, &q, &kv, ad);
            let (by_flash, by_split) = (attention(&*flash, &q, &kv, ad), attention(&*split, &q, &kv, ad));
            let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-3);
            let (e_simple, e_flash) = (max_diff(&by_split, &want) / scale, max_diff(&by_split, &by_flash) / scale);
            let partial_last = plan.splits > 1 && !keys.is_multiple_of(64);
            eprintln!(
                "{} hd {head_dim} queries {queries} keys {keys} heads {heads} batch {batch}: {plan:?}, {} blocks; vs simple {e_simple:.2e}, vs flash {e_flash:.2e}{}",
                T::PRECISION,
                plan.blocks(heads),
                if by_split == by_flash { " (bit-identical)" } else { "" }
            );
            assert!(by_split.iter().all(|v| v.is_finite()), "hd {head_dim} {queries}x{keys}x{heads}: non-finite output");
            assert!(e_simple <= vs_simple, "hd {head_dim} {queries}x{keys}x{heads}: split vs simple {e_simple} > {vs_simple}");
            assert!(e_flash <= vs_flash, "hd {head_dim} {queries}x{keys}x{heads}: split vs flash {e_flash} > {vs_flash}");
            covered.push((plan.splits, partial_last));
        }
    }
    covered
}

#[test]
fn split_attention_matches_the_simple_and_flash_kernels() {
    // Rule: at every (head_dim 32/64, queries, keys, heads, splits) class (1, 2, 3, 4 and more splits, a split ending in a partial tile, single keys and queries, batches sharing the workspace, SegFormer's stage shapes) the split kernel's output is within fp16 (bf16) rounding of the simple kernel's and the flash kernel's, relative to the output's largest magnitude.
    let Some(d) = gpu_or_skip() else { return };
    let covered = split_matches_references::<f16>(&d, 1e-2, 4e-3);
    split_matches_references::<bf16>(&d, 4e-2, 2e-2);
    for splits in 1..=4 {
        assert!(covered.iter().any(|&(s, _)| s == splits), "no case ran with {splits} splits on this GPU: {covered:?}");
    }
    assert!(covered.iter().any(|&(_, partial)| partial), "no case split keys that end in a partial tile");
}

#[test]
fn split_attention_records_into_a_graph_and_replays_it() {
    // Rule: the split kernels (partials, then the combine) are captured into a CUDA graph with the workspace allocated beforehand; replays after new queries are written give exactly what the eager launches give for those queries.
    let Some(d) = gpu_or_skip() else { return };
    let b = backend::<f16>(&d, SPLIT);
    for ad in [AttnDims { batch: 2, queries: 100, keys: 512, heads: 8, head_dim: 64 }, AttnDims { batch: 1, queries: 130, keys: 100, heads: 2, head_dim: 32 }] {
        let c = ad.heads * ad.head_dim;
        let kv_host = values(ad.batch * ad.keys * 2 * c, 7);
        let (mut q, mut kv) = (b.tensor(ad.batch * ad.queries * c).unwrap(), b.tensor(kv_host.len()).unwrap());
        b.write(&mut kv, &kv_host).unwrap();
        let n = ad.batch * ad.queries * c;
        let (mut y, mut ws) = (b.tensor(n).unwrap(), b.tensor(b.attention_workspace(ad)).unwrap());
        let recording = b.recording();
        for round in 0..3u64 {
            let q_host: Vec<f32> = values(n, 20 + round).iter().map(|v| v * 4.0).collect();
            b.write(&mut q, &q_host).unwrap();
            b.run_recorded(&recording, &mut || b.attention(&q, &kv, &mut y, &mut ws, ad)).unwrap();
            let mut replayed = vec![0.0; n];
            b.sync().unwrap();
            b.read(&y, &mut replayed).unwrap();
            let eager = attention(&*b, &q_host, &kv_host, ad);
            eprintln!("{ad:?} round {round}: {:?}, graph vs eager max diff {}", plan_split(ad.queries, ad.keys, ad.heads, d.sm_count), max_diff(&replayed, &eager));
            assert!(replayed == eager, "{ad:?} round {round}: the graph's output differs from the eager launches'");
        }
        assert_eq!(b.recordings(), 1, "one graph, replayed");
        drop(recording);
        assert_eq!(b.recordings(), 0);
    }
}

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

/// CHW logits of three runs of one engine (eager + capture, then replays).
fn three_runs<T: GemmElem>(b: Arc<CudaBackend<T>>, dir: &Path) -> (Vec<Vec<f32>>, usize)
where
    CudaBlasLT: Matmul<T>,
{
    let pv = npy::read_f32(dir.join("pixel_values.npy")).unwrap();
    let (h, w) = (pv.shape[2], pv.shape[3]);
    let hwc = chw_to_hwc(&pv.data, h, w, 3);
    let mut e = engine(b.clone(), dir, w, h, vec![1.0]);
    let (lw, lh) = e.logits_size();
    let labels = e.num_labels();
    let runs = (0..3).map(|_| hwc_to_chw(e.run_normalized(&hwc).unwrap(), lh, lw, labels)).collect();
    assert_eq!(b.recordings(), 1, "{}: one graph for the model", dir.display());
    (runs, labels)
}

#[test]
fn models_with_split_attention_match_them_without() {
    // Rule: an engine with split attention on records its forward into a graph whose replays are identical, and its logits match the same engine's with it off (relative L2 <= 5e-3, argmax 99.5%) and the HF reference (<= 1e-2, 99.5%), fp16, on every fixture: the local ones (head sizes the split kernel leaves to the simple one) and, where ../shared is present, B0 at 1024x1024 and 1024x576 (split stages 3-4), B5-shallow (head_dim 64) and tiny.
    let Some(d) = gpu_or_skip() else { return };
    let local = LOCAL_CASES.iter().map(|c| Some(repo().join("tests/data").join(c)));
    let shared_dirs = SHARED_CASES.iter().map(|c| shared(&format!("fixtures/segformer/{c}")));
    for dir in local.chain(shared_dirs).flatten() {
        let reference = npy::read_f32(dir.join("logits.npy")).unwrap();
        let (off, labels) = three_runs(backend::<f16>(&d, FLASH), &dir);
        let (on, _) = three_runs(backend::<f16>(&d, SPLIT), &dir);
        for (i, run) in on.iter().enumerate() {
            assert!(run == &on[0], "{}: replay {i} differs from the first run", dir.display());
        }
        let (rel, agree) = compare(&on[0], &off[0], labels);
        let (rel_hf, agree_hf) = compare(&on[0], &reference.data, labels);
        eprintln!("split fp16 {}: vs flash rel L2 {rel:.3e} argmax {:.4}%; vs HF {rel_hf:.3e} {:.4}%", dir.display(), agree * 100.0, agree_hf * 100.0);
        assert!(rel <= 5e-3 && agree >= 0.995, "{}: split vs flash rel L2 {rel}, argmax {agree}", dir.display());
        assert!(rel_hf <= 1e-2 && agree_hf >= 0.995, "{}: split vs HF rel L2 {rel_hf}, argmax {agree_hf}", dir.display());
    }
}
