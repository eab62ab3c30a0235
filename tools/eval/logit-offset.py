#!/usr/bin/env python3
"""A checkpoint whose CLASS logit is shifted by OFFSET everywhere, for a calibration sweep.

  tools/eval/logit-offset.py --model models/roadseg-camvid --class road --offset -0.5 --out target/bias/road-0.5
  target/release/roadseg eval --model target/bias/road-0.5 ...

The decode head ends in a 1x1 convolution and bilinear upsampling, both
linear, so adding OFFSET to that class's classifier bias is the same as
adding it to the class's logit at every pixel. tools/train/README.md holds
the sweep of 2026-12-02 (no offset moved all three selection sets up).
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

BIAS = "decode_head.classifier.bias"

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--class", dest="cls", required=True, help="label name from config.json id2label")
ap.add_argument("--offset", type=float, required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()

labels = json.load(open(os.path.join(a.model, "config.json")))["id2label"]
ids = [int(k) for k, v in labels.items() if v == a.cls]
if not ids:
    raise SystemExit(f"{a.model}: no class named {a.cls!r} (classes: {', '.join(labels.values())})")
weights = load_file(os.path.join(a.model, "model.safetensors"))
bias = weights[BIAS]
shifted = bias.astype(np.float32)
shifted[ids[0]] += a.offset
weights[BIAS] = shifted.astype(bias.dtype)
os.makedirs(a.out, exist_ok=True)
shutil.copy(os.path.join(a.model, "config.json"), a.out)
save_file(weights, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
print(f"{a.out}: {a.cls} bias {float(bias[ids[0]]):+.4f} -> {float(shifted[ids[0]]):+.4f}")
