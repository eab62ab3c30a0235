#!/usr/bin/env python3
"""Makes the small HF-reference fixtures under tests/data/ that cover shapes the
shared fixtures do not: odd input sizes, 3 encoder stages, bf16/fp16 weights,
other label counts. Run from the repository root:

    python3 tools/make_test_fixtures.py

Needs torch + transformers (tools/train/requirements.txt). The reference is
float32 arithmetic on the stored weight values, like ../shared's fixtures.
"""
import json
import pathlib

import numpy as np
import torch
from transformers import SegformerConfig, SegformerForSemanticSegmentation

CASES = {
    "odd-bf16-203x141": dict(
        cfg=dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 2, 1, 1], num_attention_heads=[1, 2, 3, 4],
                 sr_ratios=[8, 4, 2, 1], decoder_hidden_size=24, mlp_ratios=[4, 4, 4, 4], num_labels=7),
        dtype=torch.bfloat16, size=(203, 141), seed=11),
    "three-stage-fp16-161x97": dict(
        cfg=dict(num_encoder_blocks=3, hidden_sizes=[16, 32, 48], depths=[1, 1, 1], num_attention_heads=[1, 2, 2],
                 sr_ratios=[4, 2, 1], patch_sizes=[7, 3, 3], strides=[4, 2, 2], mlp_ratios=[2, 4, 3],
                 decoder_hidden_size=32, num_labels=3),
        dtype=torch.float16, size=(161, 97), seed=12),
}


def perturb(model, gen):
    """Random but non-trivial weights: norms and BN statistics off their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.2) + (1.0 if "norm" in name and name.endswith("weight") else 0.0))
        bn = model.decode_head.batch_norm
        bn.running_mean.copy_(torch.randn(bn.running_mean.shape, generator=gen) * 0.2)
        bn.running_var.copy_(torch.rand(bn.running_var.shape, generator=gen) + 0.5)


def main():
    root = pathlib.Path("tests/data")
    for name, case in CASES.items():
        gen = torch.Generator().manual_seed(case["seed"])
        config = SegformerConfig(**case["cfg"], id2label={i: f"label_{i}" for i in range(case["cfg"]["num_labels"])})
        model = SegformerForSemanticSegmentation(config).eval()
        perturb(model, gen)
        # Round the weights to the storage dtype so the reference uses exactly the stored values.
        state = {k: v.to(case["dtype"]) for k, v in model.state_dict().items() if v.is_floating_point()}
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
        w, h = case["size"]
        pixel_values = torch.randn(1, 3, h, w, generator=gen)
        with torch.no_grad():
            logits = model(pixel_values=pixel_values).logits
        out = root / name
        out.mkdir(parents=True, exist_ok=True)
        # save_pretrained writes HF's published tensor names (state_dict() of
        # transformers 5 uses internal ones).
        model.to(case["dtype"]).save_pretrained(out, safe_serialization=True)
        np.save(out / "pixel_values.npy", pixel_values.numpy().astype(np.float32))
        np.save(out / "logits.npy", logits.numpy().astype(np.float32))
        (out / "case.json").write_text(json.dumps({"width": w, "height": h, "weights_dtype": str(case["dtype"]),
                                                   "logits_shape": list(logits.shape)}, indent=1))
        print(name, list(logits.shape), "abs max", float(logits.abs().max()))


if __name__ == "__main__":
    main()
