#!/usr/bin/env python3
"""Write a randomly initialised HuggingFace SegFormer checkpoint folder.

What: `config.json` + `model.safetensors` for one of the published MiT layouts
(B0..B5) with N classes, as `SegformerForSemanticSegmentation.save_pretrained`
writes them.

Why: the GPU benchmark (bench/cuda.sh) runs on a machine without internet, so
it cannot download `nvidia/segformer-b5-...`. Speed does not depend on the
weight values, only on the layout, so a random checkpoint of the same shape is
an honest stand-in for timing both PyTorch and roadseg on the same model.

The file is checked after saving: the tensor names must be the published
(legacy) ones that roadseg reads (`segformer.encoder.block.S.I.attention.self.
query.weight`, `decode_head.linear_c.S.proj.weight`, ...). transformers 5.x
renames them in memory (`stages.S.blocks.I.attention.q_proj`, ...) and maps
them back on save; should some version not do so, the names are mapped back
here. The checkpoint is then reloaded with `from_pretrained` and run once on
the CPU to prove it is complete and produces finite logits.

    python3 bench/make_random_checkpoint.py --arch b5 --labels 19 --out /tmp/b5
"""

import argparse
import json
import os
import re
import struct
import sys

# MiT encoder layouts from the SegFormer paper / the nvidia/mit-bX configs.
# Everything else (patch sizes 7/3/3/3, strides 4/2/2/2, heads 1/2/5/8,
# sr ratios 8/4/2/1, mlp ratio 4) is shared by all six.
ARCHS = {
    "b0": dict(hidden_sizes=[32, 64, 160, 256], depths=[2, 2, 2, 2], decoder_hidden_size=256),
    "b1": dict(hidden_sizes=[64, 128, 320, 512], depths=[2, 2, 2, 2], decoder_hidden_size=256),
    "b2": dict(hidden_sizes=[64, 128, 320, 512], depths=[3, 4, 6, 3], decoder_hidden_size=768),
    "b3": dict(hidden_sizes=[64, 128, 320, 512], depths=[3, 4, 18, 3], decoder_hidden_size=768),
    "b4": dict(hidden_sizes=[64, 128, 320, 512], depths=[3, 8, 27, 3], decoder_hidden_size=768),
    "b5": dict(hidden_sizes=[64, 128, 320, 512], depths=[3, 6, 40, 3], decoder_hidden_size=768),
}
SHARED = dict(
    num_channels=3,
    num_encoder_blocks=4,
    patch_sizes=[7, 3, 3, 3],
    strides=[4, 2, 2, 2],
    num_attention_heads=[1, 2, 5, 8],
    sr_ratios=[8, 4, 2, 1],
    mlp_ratios=[4, 4, 4, 4],
    hidden_act="gelu",
)

# transformers 5.x in-memory names -> published names (the inverse of its
# conversion_mapping for Segformer). Applied in order, only if needed.
MODERN_TO_LEGACY = [
    (r"\.stages\.(\d+)\.patch_embeddings\.", r".encoder.patch_embeddings.\1."),
    (r"\.stages\.(\d+)\.blocks\.", r".encoder.block.\1."),
    (r"\.stages\.(\d+)\.layer_norm\.", r".encoder.layer_norm.\1."),
    (r"attention\.q_proj", "attention.self.query"),
    (r"attention\.k_proj", "attention.self.key"),
    (r"attention\.v_proj", "attention.self.value"),
    (r"attention\.sequence_reduction\.sequence_reduction", "attention.self.sr"),
    (r"attention\.sequence_reduction\.layer_norm", "attention.self.layer_norm"),
    (r"attention\.o_proj", "attention.output.dense"),
    (r"mlp\.fc1", "mlp.dense1"),
    (r"mlp\.fc2", "mlp.dense2"),
    (r"layernorm_before", "layer_norm_1"),
    (r"layernorm_after", "layer_norm_2"),
    (r"decode_head\.linear_projections", "decode_head.linear_c"),
]
LEGACY_PROBE = "segformer.encoder.block.0.0.attention.self.query.weight"


def make_config(arch, labels=19):
    """A transformers SegformerConfig for `arch` with `labels` classes class_0..."""
    from transformers import SegformerConfig

    if arch not in ARCHS:
        raise SystemExit(f"unknown --arch {arch!r}; expected one of {', '.join(ARCHS)}")
    id2label = {i: f"class_{i}" for i in range(labels)}
    return SegformerConfig(
        **SHARED,
        **ARCHS[arch],
        num_labels=labels,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )


def build_model(arch, labels=19, seed=0, attn_implementation=None):
    """Random-init model in f32 on the CPU, eval mode. The same seed gives the
    same weights, so several benchmark configurations can each build their own
    copy of one model."""
    import torch
    from transformers import SegformerForSemanticSegmentation

    config = make_config(arch, labels)
    if attn_implementation is not None:
        # Read by transformers >= 4.4x when the model is built; older SegFormer
        # code has a single attention path and ignores it.
        config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return SegformerForSemanticSegmentation(config).eval()


def safetensors_header(path):
    """Tensor name -> {dtype, shape, ...} from a .safetensors file (no torch)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def ensure_legacy_names(path):
    """Rewrite `path` with the published tensor names if it has the new ones.
    Returns True when it had to rewrite."""
    names = safetensors_header(path)
    if LEGACY_PROBE in names:
        return False
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    renamed = {}
    for name, t in tensors.items():
        for pat, rep in MODERN_TO_LEGACY:
            name = re.sub(pat, rep, name)
        renamed[name] = t.contiguous()
    if LEGACY_PROBE not in renamed:
        raise SystemExit(f"{path}: unexpected tensor names (e.g. {sorted(tensors)[:3]}); roadseg could not load it")
    save_file(renamed, path, metadata={"format": "pt"})
    return True


def save(model, out):
    """save_pretrained as safetensors; transformers 4.x needs safe_serialization
    (its default changed over time), 5.x always writes safetensors and dropped
    the argument."""
    import inspect

    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(out, **kwargs)
    st = os.path.join(out, "model.safetensors")
    if not os.path.exists(st):
        raise SystemExit(f"{out}: save_pretrained wrote no model.safetensors ({os.listdir(out)})")
    return st


def verify(model, out, size=128):
    """Reload `out` and compare one CPU forward (f32) with the in-memory model.
    Both hold the same (possibly fp16-rounded) weights, so the logits must
    agree to float rounding; missing or unexpected keys would mean roadseg and
    PyTorch see different models."""
    import torch
    from transformers import SegformerForSemanticSegmentation

    loaded, info = SegformerForSemanticSegmentation.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise SystemExit(f"{out}: reload reports {bad}")
    loaded = loaded.float().eval()
    ref = model.float().eval()  # in place; the file is already written
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a = ref(pixel_values=x).logits
        b = loaded(pixel_values=x).logits
    diff = (a - b).abs().max().item()
    if not torch.isfinite(a).all() or diff > 1e-4:
        raise SystemExit(f"{out}: reload check failed (finite={bool(torch.isfinite(a).all())}, max diff {diff:.3g})")
    return tuple(a.shape), diff


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", required=True, choices=sorted(ARCHS))
    p.add_argument("--labels", type=int, default=19, help="number of classes (id2label class_0..)")
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--dtype", choices=["f16", "f32"], default="f16", help="f16 halves the file (B5: ~170 MB)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-verify", action="store_true", help="skip the reload + CPU forward check")
    args = p.parse_args()

    import torch

    model = build_model(args.arch, args.labels, args.seed)
    if args.dtype == "f16":
        model = model.half()  # BatchNorm running stats stay mean 0 / var 1
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    st = save(model, args.out)
    renamed = ensure_legacy_names(st)
    params = sum(t.numel() for t in model.parameters())
    msg = f"{args.arch}: {params / 1e6:.2f} M parameters, {args.labels} labels, {args.dtype}, seed {args.seed} -> {args.out}"
    msg += f" ({os.path.getsize(st) / 2**20:.1f} MiB{', tensor names mapped to the published ones' if renamed else ''})"
    print(msg)
    if not args.no_verify:
        torch.set_grad_enabled(False)
        shape, diff = verify(model, args.out)
        print(f"verified: reload complete, CPU forward 128x128 -> logits {list(shape)}, finite, max diff {diff:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
