#!/usr/bin/env python3
"""Interpolate a product-label model (distill.py) with the CamVid model it
was fine-tuned from, in weight space (WiSE-FT, Wortsman et al. 2022):

    wise.py --fine DIR --base CAMVID_MODEL_DIR --alpha A --out DIR

theta = A * fine + (1 - A) * base for every tensor the two share, the
decode head's BatchNorm statistics included (both models come from one
trajectory, so the average stays in one basin). The base has CamVid's 11
classes: each product class's classifier row is interpolated with the mean
of the base rows it was initialised from (distill.py's INIT_ROWS), so
A = 0 is the base model read through the product label set and A = 1 the
fine-tuned one. Why: fine-tuning on the teacher and IDD bought new cameras
and a learned hood but cost some of the CamVid model's road on familiar
streets; an interpolation can keep much of both. Exported like distill.py's
steps (float16, Hugging Face layout, training.json saying how it was made).
A base with the product label set already (the shipped product model, for
a run fine-tuned from it) is interpolated tensor for tensor.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import distill  # noqa: E402


def interpolate(fine, base, alpha: float):
    own, src = fine.state_dict(), base.state_dict()
    same_labels = base.config.num_labels == fine.config.num_labels
    mixed = {}
    for name, tensor in own.items():
        if not tensor.is_floating_point():
            mixed[name] = tensor
        elif name.startswith("decode_head.classifier.") and not same_labels:
            rows = torch.stack([src[name][r].mean(0) for _, r in sorted(distill.INIT_ROWS.items())])
            mixed[name] = alpha * tensor + (1 - alpha) * rows
        else:
            if src[name].shape != tensor.shape:
                raise SystemExit(f"{name}: shapes differ ({tuple(src[name].shape)} vs {tuple(tensor.shape)}): "
                                 "not one architecture")
            mixed[name] = alpha * tensor + (1 - alpha) * src[name]
    fine.load_state_dict(mixed)
    return fine.eval()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fine", required=True, help="a distill.py export (the product label set)")
    ap.add_argument("--base", required=True,
                    help="the model it started from: the CamVid model (the bundled model before 2026-11-27: git rev e24aab2) "
                         "or a product-label model")
    ap.add_argument("--alpha", type=float, required=True, help="the fine model's share, 0..1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not 0.0 <= args.alpha <= 1.0:
        raise SystemExit(f"--alpha {args.alpha}: must be within 0..1")
    from transformers import SegformerForSemanticSegmentation
    fine = SegformerForSemanticSegmentation.from_pretrained(args.fine).float()
    base = SegformerForSemanticSegmentation.from_pretrained(args.base).float()
    labels = [fine.config.id2label[i] for i in range(fine.config.num_labels)]
    if labels != distill.CLASSES:
        raise SystemExit(f"{args.fine}: labels {labels} are not distill.py's product set {distill.CLASSES}")
    base_labels = [base.config.id2label[i] for i in range(base.config.num_labels)]
    # A product-label base (a later run from the shipped model) mixes row for row.
    if base_labels != distill.CLASSES and base.config.num_labels != 11:
        raise SystemExit(f"{args.base}: labels {base_labels}: neither CamVid's 11 nor the product set")
    model = interpolate(fine, base, args.alpha)
    distill.export(model, args.out, {"wise": {"fine": args.fine, "base": args.base, "alpha": args.alpha}})
    print(f"{args.out}: {args.alpha} x {args.fine} + {1 - args.alpha:.2f} x {args.base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
