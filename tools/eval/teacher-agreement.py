#!/usr/bin/env python3
"""How much of the teacher's road does a model find on clips with no labels?

  tools/eval/teacher-agreement.py MODEL_DIR CLIP_SUBSTRING[,...] [--every N] [--exposure-targets 0.25,0]

For each clip of target/train-data/teacher (tools/teacher/label.py: frames of
../shared's clips with Intel's road-segmentation-adas-0001 P(road)) whose
source path contains one of the substrings: the pooled IoU of the model's
road (argmax, class 0, PyTorch, the daemon's preprocessing at 1024 wide)
with the teacher's road (P > 0.5), once per exposure target (the daemon's
`[model] exposure_target`; 0 = off), and the clip's mean luma. A diagnostic
for dark and odd footage (issue 35), not a selection measure: the teacher is
wrong in places (tunnels, sodium light), and its frames were in training on
the teacher's own channel.
"""
import argparse
import collections
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import train as base  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("clips", help="comma-separated substrings of the clips' source paths")
    ap.add_argument("--every", type=int, default=6, help="every Nth labelled frame of a clip")
    ap.add_argument("--exposure-targets", default=f"{base.EXPOSURE_TARGET},0")
    ap.add_argument("--teacher", default=os.path.join(ROOT, "target", "train-data", "teacher"))
    args = ap.parse_args()
    from transformers import SegformerForSemanticSegmentation

    torch.set_num_threads(os.cpu_count() or 1)
    model = SegformerForSemanticSegmentation.from_pretrained(args.model).float().eval()
    index = os.path.join(args.teacher, "index.tsv")
    if not os.path.exists(index):
        sys.exit(f"{index}: no teacher labels (ROADSEG_SHARED=../shared python3 tools/teacher/label.py --out {args.teacher})")
    by_clip = collections.defaultdict(list)
    for row in open(index).read().splitlines()[1:]:
        name, source = row.split("\t")[:2]
        by_clip[source].append(name)
    targets = [float(t) for t in args.exposure_targets.split(",")]
    keys = args.clips.split(",")
    for source in sorted(s for s in by_clip if any(k in s for k in keys)):
        inter = {t: 0 for t in targets}
        union = {t: 0 for t in targets}
        lumas = []
        for name in by_clip[source][:: args.every]:
            im = Image.open(os.path.join(args.teacher, "img", name + ".jpg")).convert("RGB")
            teacher = np.asarray(Image.open(os.path.join(args.teacher, "road", name + ".png")).resize(im.size, Image.BILINEAR)) > 127
            lumas.append(base.mean_luma(np.asarray(im)))
            for t in targets:
                with torch.no_grad():
                    logits = model(pixel_values=base.preprocess_like_daemon(im, 1024, "cpu", exposure_target=t)).logits
                    logits = F.interpolate(logits, size=(im.height, im.width), mode="bilinear", align_corners=False)
                road = (logits.argmax(1)[0] == 0).numpy()
                inter[t] += int((road & teacher).sum())
                union[t] += int((road | teacher).sum())
        figures = "  ".join(f"target {t:g}: {inter[t] / max(union[t], 1):.3f}" for t in targets)
        print(f"{os.path.basename(source)} ({len(lumas)} frames, mean luma {np.mean(lumas):.3f})  {figures}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
