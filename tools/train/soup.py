#!/usr/bin/env python3
"""Average the weights of SegFormer checkpoints that share one training
trajectory (a "weight soup": SWA, WiSE-FT) and export the result like
train.py's exports (float16, Hugging Face layout).

    soup.py --out DIR [--bn-batches N --data D --synth S] WEIGHT:DIR_OR_GLOB ...

Each ingredient is WEIGHT:PATH, where PATH is a checkpoint folder or a glob
of them; the folders a glob matches share its weight equally. The weights
must sum to 1; a negative one subtracts (task arithmetic: 1:F 1:P -1:S).
Every float tensor is averaged; the decode head's BatchNorm running statistics do not follow from averaged weights, so with --bn-batches
N they are recomputed by forwarding N training batches (train.py's own batch
builder and recipe flags, given after --) in train mode with a cumulative
average, every other layer in eval mode. Without it they are averaged too.

Example (run 9, tools/train/logs/run9-plan.md):
    soup.py --out /tmp/run9 --data target/train-data/camvid --synth target/train-data/synth \\
      --bn-batches 300 0.5:models/roadseg-camvid '0.5:/tmp/run8-snap/epoch-02[0-6]' \\
      -- --batch-size 4 --crop-w 384 --crop-h 288 --scale-min 0.5 --scale-max 1.5 --road-augment 0.5
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402  (tools/train/train.py, beside this file)


def ingredients(specs: list[str]) -> list[tuple[float, str]]:
    """WEIGHT:PATH specs -> (weight, folder) pairs, globs expanded."""
    out = []
    for spec in specs:
        weight, sep, pattern = spec.partition(":")
        if not sep:
            raise SystemExit(f"ingredient {spec!r}: expected WEIGHT:PATH")
        folders = sorted(p for p in glob.glob(pattern)
                         if os.path.exists(os.path.join(p, "model.safetensors")))
        if not folders:
            raise SystemExit(f"ingredient {spec!r}: no checkpoint folder matches {pattern!r}")
        out += [(float(weight) / len(folders), f) for f in folders]
    total = sum(w for w, _ in out)
    if abs(total - 1.0) > 1e-6:
        raise SystemExit(f"ingredient weights sum to {total}, not 1")
    return out


def average(parts: list[tuple[float, str]]):
    """The first folder's model with every float tensor replaced by the
    weighted mean over all folders (in float32)."""
    from transformers import SegformerForSemanticSegmentation
    models = [(w, SegformerForSemanticSegmentation.from_pretrained(f).float()) for w, f in parts]
    soup = models[0][1]
    states = [(w, m.state_dict()) for w, m in models]
    mixed = {}
    for name, tensor in soup.state_dict().items():
        if not tensor.is_floating_point():
            mixed[name] = tensor  # num_batches_tracked
            continue
        for _, s in states:
            if s[name].shape != tensor.shape:
                raise SystemExit(f"{name}: shapes differ ({tuple(s[name].shape)} vs "
                                 f"{tuple(tensor.shape)}): not one architecture")
        mixed[name] = sum(w * s[name] for w, s in states)
    soup.load_state_dict(mixed)
    return soup.eval()


@torch.no_grad()
def recompute_batch_norm(model, recipe, batches: int) -> int:
    """Fresh running statistics for every BatchNorm from ``batches`` training
    batches of ``recipe`` (train.py's flags). Returns the BatchNorm count."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over all batches
        bn.train()
    imgs, labs = train.load_pairs(train.list_pairs(recipe.data, "train", recipe.limit_train))
    synth = train.load_synth(recipe.synth) if recipe.synth else ([], [])
    batches_of = train.TrainBatches(imgs, labs, *synth, recipe)
    per_epoch = len(batches_of)
    for k in range(batches):
        x, _ = batches_of[(1 + k // per_epoch, k % per_epoch)]
        model(pixel_values=train.normalize(x.float()))
    for bn in bns:
        bn.eval()
    return len(bns)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    recipe_flags = []
    if "--" in argv:
        cut = argv.index("--")
        argv, recipe_flags = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="export folder")
    ap.add_argument("--bn-batches", type=int, default=0,
                    help="recompute BatchNorm statistics from N training batches (0: average them)")
    ap.add_argument("--data", default="/work/shared/data/camvid", help="CamVid root (for --bn-batches)")
    ap.add_argument("--synth", default=None, help="synthetic frames, as train.py --synth")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("ingredient", nargs="*", help="WEIGHT:CHECKPOINT_DIR_OR_GLOB")
    # A negative weight (task arithmetic: F + P - S) looks like an option to argparse.
    args, unknown = ap.parse_known_args(argv)
    negatives = [a for a in unknown if re.match(r"^-[0-9.]+:", a)]
    if len(negatives) != len(unknown):
        ap.error(f"unrecognized arguments: {' '.join(a for a in unknown if a not in negatives)}")
    args.ingredient += negatives
    if not args.ingredient:
        ap.error("no ingredient given")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    parts = ingredients(args.ingredient)
    for w, f in parts:
        digest = hashlib.sha256(open(os.path.join(f, "model.safetensors"), "rb").read()).hexdigest()
        print(f"ingredient {w:.4f} {f} ({digest[:16]})")
    soup = average(parts)
    if args.bn_batches > 0:
        recipe = train.build_parser().parse_args(
            ["--data", args.data] + (["--synth", args.synth] if args.synth else []) + recipe_flags)
        n = recompute_batch_norm(soup, recipe, args.bn_batches)
        print(f"recomputed {n} BatchNorm(s) from {args.bn_batches} batches of "
              f"{json.dumps({k: getattr(recipe, k) for k in ('batch_size', 'crop_w', 'crop_h', 'scale_min', 'scale_max', 'road_augment', 'road_augment_skip', 'synth_per_batch', 'seed')})}")
    # train.export writes train.CLASSES as the label maps: keep the ingredients' own
    # (the product label set of distill.py's exports, CamVid's of train.py's).
    train.CLASSES[:] = [soup.config.id2label[i] for i in range(len(soup.config.id2label))]
    train.IGNORE = soup.config.semantic_loss_ignore_index
    size = train.export(soup, args.out)
    print(f"exported {args.out} (model.safetensors {size / 1e6:.2f} MB) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
