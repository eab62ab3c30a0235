#!/usr/bin/env python3
"""Time HuggingFace SegFormer inference in PyTorch: the reference that
roadseg's CUDA backend is measured against.

What: for one architecture (random weights, --arch) or checkpoint (--model)
and one input size, run up to three PyTorch configurations and time the model
forward (batch 1) with CUDA events:

  eager_fp16                  model.half().cuda().eval() under inference_mode,
                              attention forced to HF's "eager" path
                              (matmul / softmax / matmul): plain PyTorch.
  channels_last_sdpa_fp16     attn_implementation="sdpa" (fused
                              scaled_dot_product_attention, flash/mem-efficient
                              kernels) where this transformers' SegFormer
                              supports it, model and input channels_last.
  compile_max_autotune_fp16   the above under torch.compile(mode="max-autotune"):
                              Triton/cuBLAS autotuned kernels, fused
                              elementwise ops and CUDA graphs; the best
                              PyTorch can do without a hand-written engine.

Why these: they bracket "what a user gets from HF out of the box" and "the
best stock PyTorch gets"; the roadseg number should be read between them.

To judge how far any of them is from the hardware, the same run measures the
GPU's dense fp16 GEMM rate (square matmul) and counts the model's FLOPs
analytically (segformer_flops); flops / gemm_rate is a "compute floor" and each
configuration's median is reported as a multiple of it. SegFormer has
memory-bound parts (depthwise convs, layer norms, softmax) so ~1x is not
reachable; the multiple is for comparing implementations, not a target.

Output: one JSON line per configuration on stdout (and all of them in
--json-out), then a summary table. Progress goes to stderr.

    python3 bench/torch_segformer.py --arch b5 --size 1024x1024 --json-out out/torch-b5.json
    python3 bench/torch_segformer.py --model /tmp/b0 --size 1024x576
    python3 bench/torch_segformer.py --arch b5 --size 1024x1024 --flops-only
    # smoke test without a GPU:
    python3 bench/torch_segformer.py --device cpu --dtype f32 --arch b0 --size 256x256 --iters 3 --warmup 1
"""

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_random_checkpoint import ARCHS, SHARED, build_model  # noqa: E402

ALL_CONFIGS = ["eager_fp16", "channels_last_sdpa_fp16", "compile_max_autotune_fp16"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------


def _conv_out(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def segformer_flops_breakdown(config, H, W):
    """FLOPs (2 x multiply-accumulates) of one SegFormer forward at input HxW,
    by part. `config` is a transformers SegformerConfig or anything with the
    same attributes (see config_from_arch).

    Counted: the overlapping patch-embed convs; per block the Q projection, the
    sequence-reduction conv (kernel = stride = sr) and the K/V projections on
    the reduced tokens, attention QK^T and AV (2*N*M*C FLOPs each, summed over
    heads), the output projection, Mix-FFN dense1, the depthwise 3x3 and
    dense2; in the decoder each linear_c at its stage's own resolution, the
    fuse 1x1 conv (4D -> D) and the classifier at H/4 x W/4. Not counted:
    norms, activations, softmax, residual adds, upsampling (all O(N*C), memory
    bound rather than compute bound)."""
    parts = dict(patch_embed=0, q_o_proj=0, sr_conv=0, kv_proj=0, attention=0, ffn_dense=0, ffn_dwconv=0,
                 decoder_linear_c=0, decoder_fuse=0, classifier=0)
    h, w, c_in = H, W, config.num_channels
    stage_tokens = []
    for s in range(config.num_encoder_blocks):
        k, st, c = config.patch_sizes[s], config.strides[s], config.hidden_sizes[s]
        # HF pads by k//2 (symmetric), so the output is ceil(h / stride).
        h, w = _conv_out(h, k, st, k // 2), _conv_out(w, k, st, k // 2)
        n = h * w
        parts["patch_embed"] += 2 * n * c * c_in * k * k
        sr = config.sr_ratios[s]
        if sr > 1:
            # Reduction conv has no padding: floor((h - sr) / sr) + 1 rows.
            m = _conv_out(h, sr, sr, 0) * _conv_out(w, sr, sr, 0)
            sr_conv = 2 * m * c * c * sr * sr
        else:
            m, sr_conv = n, 0
        ch = c * config.mlp_ratios[s]
        d = config.depths[s]
        parts["q_o_proj"] += d * 2 * (2 * n * c * c)
        parts["sr_conv"] += d * sr_conv
        parts["kv_proj"] += d * 2 * (2 * m * c * c)
        parts["attention"] += d * 2 * (2 * n * m * c)
        parts["ffn_dense"] += d * 2 * (2 * n * c * ch)
        parts["ffn_dwconv"] += d * 2 * n * ch * 9
        stage_tokens.append((n, c))
        c_in = c
    dec = config.decoder_hidden_size
    n1 = stage_tokens[0][0]  # decoder works at the first stage's grid (H/4 x W/4)
    for n, c in stage_tokens:
        parts["decoder_linear_c"] += 2 * n * c * dec
    parts["decoder_fuse"] = 2 * n1 * (config.num_encoder_blocks * dec) * dec
    parts["classifier"] = 2 * n1 * dec * config.num_labels
    return parts


def segformer_flops(config, H, W):
    """Total FLOPs of one forward at HxW (see segformer_flops_breakdown)."""
    return sum(segformer_flops_breakdown(config, H, W).values())


def config_from_arch(arch, labels=19):
    """The attributes segformer_flops needs, without importing transformers."""
    return SimpleNamespace(**SHARED, **ARCHS[arch], num_labels=labels)


# --------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------


def percentile(sorted_vals, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = (len(sorted_vals) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def stats(ms):
    s = sorted(ms)
    med = percentile(s, 0.5)
    return dict(median_ms=med, p10_ms=percentile(s, 0.1), p90_ms=percentile(s, 0.9),
                mean_ms=statistics.fmean(s), min_ms=s[0], fps=1000.0 / med)


def time_calls(fn, iters, device, before=None):
    """Per-iteration times in ms of fn(). On CUDA: events around the one call,
    then a synchronize, so each sample is one forward's GPU-timeline latency
    (including any gaps where the GPU waited for the CPU to launch kernels,
    which is what a batch-1 frame pays). Wall-clock (perf_counter, call +
    synchronize) is kept alongside as a cross-check."""
    import torch

    ev_ms, wall_ms = [], []
    for _ in range(iters):
        if before is not None:
            before()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            wall_ms.append((time.perf_counter() - t0) * 1e3)
            ev_ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            wall_ms.append((time.perf_counter() - t0) * 1e3)
            ev_ms.append(wall_ms[-1])
    return ev_ms, wall_ms


def gemm_rate(n, dtype, device, warmup=5, iters=20):
    """Dense square matmul rate in FLOP/s (median of `iters`): the practical
    peak the compute floor is measured against."""
    import torch

    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    with torch.inference_mode():
        for _ in range(warmup):
            torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        ms, _ = time_calls(lambda: torch.mm(a, b), iters, device)
    med = statistics.median(ms)
    del a, b
    return 2 * n**3 / (med / 1e3), med


# --------------------------------------------------------------------------
# Model set-up per configuration
# --------------------------------------------------------------------------


def sdpa_supported():
    from transformers.models.segformer import modeling_segformer

    return bool(getattr(modeling_segformer.SegformerPreTrainedModel, "_supports_sdpa", False))


def load_model(args, attn):
    """A fresh CPU copy of the model with the requested attention path (None:
    the library default). Fresh per configuration because channels_last and
    torch.compile change the module in place; the same seed / file gives the
    same weights every time."""
    from transformers import SegformerForSemanticSegmentation

    if args.model:
        kw = {"attn_implementation": attn} if attn else {}
        try:
            model = SegformerForSemanticSegmentation.from_pretrained(args.model, **kw)
        except (TypeError, ValueError) as e:
            # transformers older than attn_implementation, or one that rejects it.
            log(f"from_pretrained(attn_implementation={attn!r}) failed ({e}); loading with the default")
            model = SegformerForSemanticSegmentation.from_pretrained(args.model)
    else:
        model = build_model(args.arch, args.labels, args.seed, attn_implementation=attn)
    return model.eval()


def attn_of(model):
    return getattr(model.config, "_attn_implementation", None) or "n/a (single attention path)"


def run_config(name, args, x_base, torch_dtype, reference):
    """Build, warm up and time one configuration. Returns its result dict;
    raises on failure (the caller records the error and goes on)."""
    import torch

    dev = args.device
    note = []
    channels_last = name in ("channels_last_sdpa_fp16", "compile_max_autotune_fp16")
    compiled = name == "compile_max_autotune_fp16"
    if name == "eager_fp16":
        attn = "eager"
    elif sdpa_supported():
        attn = "sdpa"
    else:
        attn = None
        note.append("this transformers' SegFormer has no sdpa support: its own attention path, channels_last only")

    model = load_model(args, attn).to(device=dev, dtype=torch_dtype)
    if attn and attn_of(model) != attn:
        note.append(f"asked for attn_implementation={attn}, model uses {attn_of(model)}")
    x = x_base
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x_base.contiguous(memory_format=torch.channels_last)

    mark_step = None
    cudagraphs = False
    compile_s = None
    fn_model = model
    if compiled:
        mode = args.compile_mode
        # Inductor's max-autotune and reduce-overhead modes capture CUDA graphs
        # (cudagraph trees); each call must then be marked as a new step so the
        # previous call's output buffers may be reused.
        cudagraphs = dev == "cuda" and mode in ("max-autotune", "reduce-overhead")
        if cudagraphs and hasattr(torch, "compiler") and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            mark_step = torch.compiler.cudagraph_mark_step_begin
        try:
            from torch._dynamo.utils import counters

            counters.clear()  # graph-break / cudagraph-skip counts below are for this model only
        except Exception:
            pass
        fn_model = torch.compile(model, mode=mode, dynamic=False)
        note.append(f"torch.compile mode={mode}")

    def call():
        return fn_model(pixel_values=x).logits

    with torch.inference_mode():
        if compiled:
            why = "; max-autotune benchmarks kernel choices, can take minutes" if "max-autotune" in args.compile_mode else ""
            log(f"[{name}] compiling (mode={args.compile_mode}{why})...")
            t0 = time.perf_counter()
            if mark_step:
                mark_step()
            call()
            if dev == "cuda":
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            log(f"[{name}] first call (compile) took {compile_s:.1f} s")
        log(f"[{name}] warm-up {args.warmup} iterations")
        t0 = time.perf_counter()
        for i in range(args.warmup):
            if mark_step:
                mark_step()
            call()
            if compiled and i == 0 and dev == "cuda":
                torch.cuda.synchronize()
                log(f"[{name}] warm-up call 1 (CUDA graph recording) done after {time.perf_counter() - t0:.1f} s")
        if dev == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        log(f"[{name}] timing {args.iters} iterations")
        ev_ms, wall_ms = time_calls(call, args.iters, dev, before=mark_step)
        # One more call to look at the output (outside the timing).
        if mark_step:
            mark_step()
        logits = call().float()
        if dev == "cuda":
            torch.cuda.synchronize()

    res = dict(config=name, **stats(ev_ms))
    res["wall_median_ms"] = statistics.median(wall_ms)
    res.update(
        attn_implementation=attn_of(model),
        channels_last=channels_last,
        compiled=compiled,
        compile_mode=args.compile_mode if compiled else None,
        compile_s=compile_s,
        cudagraphs=cudagraphs,
        logits_shape=list(logits.shape),
        finite=bool(torch.isfinite(logits).all()),
    )
    if dev == "cuda":
        res["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
    # The first configuration that ran is the numerical reference for the rest
    # (same weights and input): a cheap check that a faster path is not wrong.
    logits_cpu = logits.cpu()
    if reference.get("logits") is None:
        reference["logits"], reference["config"] = logits_cpu, name
    else:
        res["max_abs_diff_vs"] = reference["config"]
        res["max_abs_diff"] = (logits_cpu - reference["logits"]).abs().max().item()
    if compiled:
        # Graph breaks split the model into several compiled pieces, and
        # inductor silently falls back to no CUDA graphs for some patterns;
        # either would make the "compiled" number not what it claims to be.
        try:
            from torch._dynamo.utils import counters

            res["graph_breaks"] = sum(counters["graph_break"].values())
            res["cudagraph_skips"] = counters["inductor"].get("cudagraph_skips", 0)
            if res["graph_breaks"]:
                note.append(f"{res['graph_breaks']} graph breaks")
            if cudagraphs and res["cudagraph_skips"]:
                res["cudagraphs"] = False
                note.append("inductor skipped CUDA graphs (see its log)")
        except Exception:
            pass
    res["note"] = "; ".join(note)
    del fn_model, model, logits
    return res


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_size(s):
    try:
        w, h = (int(v) for v in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {s!r} is not WxH (e.g. 1024x576)")
    return w, h


def versions(device):
    import torch
    import transformers

    v = dict(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version(),
             cuda=torch.version.cuda, host=platform.node())
    if device == "cuda":
        v["gpu"] = torch.cuda.get_device_name(0)
        v["cudnn"] = torch.backends.cudnn.version()
        cap = torch.cuda.get_device_capability(0)
        v["compute_capability"] = f"{cap[0]}.{cap[1]}"
        v["gpu_mem_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        v["gpu"] = None
        v["cpu_threads"] = torch.get_num_threads()
    return v


def print_flops(cfg_ns, label, W, H):
    parts = segformer_flops_breakdown(cfg_ns, H, W)
    total = sum(parts.values())
    log(f"FLOPs {label} at {W}x{H}: {total / 1e9:.1f} GFLOP "
        f"(without the fuse conv, as roadseg folds it: {(total - parts['decoder_fuse']) / 1e9:.1f})")
    log("  " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in parts.items()))
    return parts, total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--arch", choices=sorted(ARCHS), help="random-init MiT layout (default b5)")
    src.add_argument("--model", help="HF SegFormer checkpoint folder instead of random weights")
    p.add_argument("--labels", type=int, default=19, help="classes for --arch (default 19)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=parse_size, default=(1024, 1024), help="model input WxH (default 1024x1024)")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--configs", help=f"comma list of {','.join(ALL_CONFIGS)} (default: all; on CPU without compile)")
    p.add_argument("--compile-mode", default="max-autotune",
                   help="torch.compile mode for compile_max_autotune_fp16 (e.g. max-autotune-no-cudagraphs)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--dtype", choices=["f16", "f32"], default=None, help="default f16 on cuda, f32 on cpu")
    p.add_argument("--gemm-size", type=int, default=None, help="square GEMM for the rate (default 8192 cuda, 1024 cpu)")
    p.add_argument("--json-out", help="write meta + all results to this JSON file")
    p.add_argument("--flops-only", action="store_true", help="print the FLOP count and exit (no torch run)")
    args = p.parse_args()
    if not args.model and not args.arch:
        args.arch = "b5"
    W, H = args.size

    if args.flops_only:
        if args.model:
            with open(os.path.join(args.model, "config.json")) as f:
                cfg = json.load(f)
            ns = config_from_arch("b0")  # defaults, overridden by the file
            for k, v in cfg.items():
                setattr(ns, k, v)
            ns.num_labels = len(cfg.get("id2label", {})) or cfg.get("num_labels", 2)
            label = args.model
        else:
            ns, label = config_from_arch(args.arch, args.labels), args.arch
        parts, total = print_flops(ns, label, W, H)
        print(json.dumps(dict(model=label, size=[W, H], flops=total, flops_breakdown=parts)))
        return 0

    import torch

    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available (use --device cpu --dtype f32 for a smoke test)")
    dtype_name = args.dtype or ("f16" if dev == "cuda" else "f32")
    torch_dtype = torch.float16 if dtype_name == "f16" else torch.float32
    if args.configs:
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        unknown = [c for c in configs if c not in ALL_CONFIGS]
        if unknown:
            raise SystemExit(f"unknown --configs {unknown}; expected {ALL_CONFIGS}")
    else:
        # On the CPU the compile config is slow to build and not what we compare against.
        configs = ALL_CONFIGS if dev == "cuda" else ALL_CONFIGS[:2]
    if dev == "cuda":
        # cuDNN picks the fastest conv algorithm for the fixed input shape.
        torch.backends.cudnn.benchmark = True

    meta = dict(versions(dev), device=dev, dtype=dtype_name, size=[W, H], batch=1,
                arch=args.arch, model=args.model, labels=None, iters=args.iters, warmup=args.warmup,
                timing="cuda events around one forward, synchronize per iteration" if dev == "cuda"
                else "perf_counter around one forward")

    # FLOPs from the model's own config (so --model checkpoints count right).
    probe = load_model(args, None)
    meta["labels"] = probe.config.num_labels
    meta["params_m"] = sum(t.numel() for t in probe.parameters()) / 1e6
    parts, flops = print_flops(probe.config, args.model or args.arch, W, H)
    meta["flops"] = flops
    meta["flops_breakdown"] = parts
    meta["flops_folded_decoder"] = flops - parts["decoder_fuse"]
    del probe

    gemm_n = args.gemm_size or (8192 if dev == "cuda" else 1024)
    log(f"GEMM rate: {gemm_n}^3 {dtype_name} matmul, median of 20 after 5 warm-ups")
    rate, gemm_ms = gemm_rate(gemm_n, torch_dtype, dev)
    floor_ms = flops / rate * 1e3
    meta.update(gemm_size=gemm_n, gemm_ms=gemm_ms, gemm_tflops=rate / 1e12, floor_ms=floor_ms)
    log(f"GEMM {rate / 1e12:.3g} TFLOP/s -> compute floor {floor_ms:.3f} ms for {flops / 1e12:.3f} TFLOP")

    g = torch.Generator().manual_seed(args.seed + 1)
    x_base = torch.randn(1, 3, H, W, generator=g).to(device=dev, dtype=torch_dtype)

    results, reference = [], {}
    for name in configs:
        log(f"== {name}")
        row = dict(model=args.model or args.arch, config=name)
        try:
            res = run_config(name, args, x_base, torch_dtype, reference)
            res["x_floor"] = res["median_ms"] / floor_ms
            row.update(res)
        except Exception as e:  # one failing configuration must not lose the others
            traceback.print_exc()
            row["error"] = f"{type(e).__name__}: {e}"[:2000]
        finally:
            gc.collect()
            if name == "compile_max_autotune_fp16":
                try:
                    torch._dynamo.reset()
                except Exception:
                    pass
            if dev == "cuda":
                torch.cuda.empty_cache()
        line = dict(row, size=[W, H], dtype=dtype_name, device=dev, gpu=meta["gpu"], torch=meta["torch"],
                    transformers=meta["transformers"], cuda=meta["cuda"], flops=flops, gemm_tflops=meta["gemm_tflops"],
                    floor_ms=floor_ms, iters=args.iters, warmup=args.warmup)
        print(json.dumps(line), flush=True)
        results.append(row)

    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)
            f.write("\n")

    # Summary table.
    print()
    print(f"# {args.model or args.arch} {W}x{H} {dtype_name} on {meta['gpu'] or 'CPU'}; torch {meta['torch']}, "
          f"transformers {meta['transformers']}, CUDA {meta['cuda']}")
    print(f"# {flops / 1e9:.1f} GFLOP/forward; GEMM {meta['gemm_tflops']:.3g} TFLOP/s; compute floor {floor_ms:.3f} ms")
    hdr = f"{'config':<28} {'median':>8} {'p10':>8} {'p90':>8} {'mean':>8} {'fps':>8} {'x floor':>8} {'wall':>8}  note"
    print(hdr)
    for r in results:
        if "error" in r:
            print(f"{r['config']:<28} FAILED: {r['error'][:200]}")
            continue
        extra = [r["note"]] if r.get("note") else []
        extra.append(f"attn={r['attn_implementation']}")
        if "max_abs_diff" in r:
            extra.append(f"max|diff| vs {r['max_abs_diff_vs']} {r['max_abs_diff']:.3g}")
        if not r["finite"]:
            extra.append("NON-FINITE logits")
        print(f"{r['config']:<28} {r['median_ms']:8.3f} {r['p10_ms']:8.3f} {r['p90_ms']:8.3f} {r['mean_ms']:8.3f} "
              f"{r['fps']:8.1f} {r['x_floor']:8.2f} {r['wall_median_ms']:8.3f}  {'; '.join(extra)}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
