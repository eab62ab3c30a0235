#!/usr/bin/env python3
"""How much of Intel's road do models find on a video no one labelled?

  tools/eval/video-agreement.py VIDEO MODEL_DIR [MODEL_DIR ...] [--every N] [--ego-outline NAME]

Every Nth frame of VIDEO (ffmpeg), Intel's road-segmentation-adas-0001 (its
torch port, tools/teacher/omz.py: P(road) + P(lane mark) > 0.5) and each
model's road (argmax class 0, the daemon's preprocessing at 1024 wide, its
exposure curve on): the pooled IoU of the two per model, and per frame.
`--ego-outline NAME` leaves out the pixels of that camera's drawn bonnet
(tools/teacher/ego-outlines.json), which Intel's model calls road.

A diagnostic for what one sees by eye (issue 35: the shadowed road of the
Udacity clip), never a selection measure: the teacher is wrong in places
(tunnels, sodium light, bonnets) and scores nothing else.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools", "teacher"))
import ego  # noqa: E402
import omz  # noqa: E402
import train as base  # noqa: E402


def frames(video: str, every: int, tmp: str) -> list[str]:
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", video, "-vf", f"select=not(mod(n\\,{every}))",
                    "-vsync", "vfr", os.path.join(tmp, "f%05d.png")], check=True)
    return sorted(glob.glob(os.path.join(tmp, "f*.png")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("video")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--ego-outline", help="a camera of tools/teacher/ego-outlines.json whose bonnet is left out")
    args = ap.parse_args()
    from transformers import SegformerForSemanticSegmentation

    torch.set_num_threads(os.cpu_count() or 1)
    teacher = omz.OmzRoadSeg(omz.default_dir()).eval()
    models = [SegformerForSemanticSegmentation.from_pretrained(m).float().eval() for m in args.models]
    inter = np.zeros(len(models))
    union = np.zeros(len(models))
    with tempfile.TemporaryDirectory() as tmp:
        paths = frames(args.video, args.every, tmp)
        if not paths:
            sys.exit(f"{args.video}: no frames decoded")
        for n, path in enumerate(paths):
            im = Image.open(path).convert("RGB")
            keep = np.ones((im.height, im.width), bool)
            if args.ego_outline:
                outline = ego.outlines()[args.ego_outline]
                keep = ego.outline_mask(outline, im.width, im.height) != ego.EGO
            with torch.no_grad():
                intel = omz.road_probability(teacher, omz._load_rgb(path))[0].numpy() > 0.5
                row = []
                for k, model in enumerate(models):
                    logits = model(pixel_values=base.preprocess_like_daemon(im, 1024, "cpu")).logits
                    logits = F.interpolate(logits, size=(im.height, im.width), mode="bilinear", align_corners=False)
                    road = (logits.argmax(1)[0] == 0).numpy()
                    i, u = int((road & intel & keep).sum()), int(((road | intel) & keep).sum())
                    inter[k] += i
                    union[k] += u
                    row.append(f"{i / max(u, 1):.3f}")
            print(f"frame {n * args.every:5d}  " + "  ".join(row), flush=True)
    for m, i, u in zip(args.models, inter, union):
        print(f"{m}: road IoU with Intel's {i / max(u, 1):.4f} over {len(paths)} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
