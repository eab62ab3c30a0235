#!/usr/bin/env python3
"""Road IoU per CamVid drive, a model against Intel's road-segmentation-adas-0001.

  tools/eval/camvid-drives.py MODEL_DIR [--split train|val] [--every K] [--only PREFIX]

CamVid val is one daylight drive (0016E5); the training split also holds the
dusk drive 0001TP, where the bundled model reads dark near road as pavement.
This prints, per drive (the file name's first six characters), the pooled
road IoU of the model (PyTorch, the daemon's preprocessing at 1024 wide,
plain argmax: distill.py's validation measure, not `roadseg eval`'s grounded
road) and of Intel's model (its argmax of road or lane mark, through the
torch port in tools/teacher/omz.py), then, pooled over the frames, where
the model sends the labelled road (road read as another class) and what it
paints road (other classes read as road), in pixels, and what Intel's
model paints road: the road/pavement
border moved outward in every fine-tune of issue 35. On the training split
it is a measure of fit, a diagnostic, never a selection set.

Needs torch, transformers, PIL, numpy and ../shared (or $ROADSEG_SHARED).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools", "teacher"))
import distill as D  # noqa: E402
import omz  # noqa: E402
import train as base  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--split", default="train", choices=["train", "val"])
    ap.add_argument("--every", type=int, default=1, help="every K-th frame")
    ap.add_argument("--only", default="", help="drives whose names start with this")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import SegformerForSemanticSegmentation

    root = os.path.join(D.SHARED, "data", "camvid")
    if not os.path.isdir(root):
        print(f"no {root}: set ROADSEG_SHARED to the shared data folder", file=sys.stderr)
        return 2
    paths = sorted(glob.glob(os.path.join(root, args.split, "*.jpg")) + glob.glob(os.path.join(root, args.split, "*.png")))
    drives = [os.path.basename(p)[:6] for p in paths]
    frames = D.load_camvid(root, args.split)
    model = SegformerForSemanticSegmentation.from_pretrained(args.model).float().eval()
    intel = omz.OmzRoadSeg(omz.default_dir()).eval()
    acc: dict[str, list[int]] = {}
    conf = torch.zeros(D.N, D.N, dtype=torch.long)
    peer_painted = torch.zeros(D.N, dtype=torch.long)  # Intel's road, by labelled class
    with torch.no_grad():
        for i in range(0, len(frames), args.every):
            if not drives[i].startswith(args.only):
                continue
            im, lab = frames[i]
            gt = torch.from_numpy(lab.astype(np.int64))
            valid = gt < D.N
            road = (gt == D.ROAD) & valid
            logits = model(pixel_values=base.preprocess_like_daemon(im, 1024, "cpu")).logits.float()
            pred = F.interpolate(logits, size=lab.shape, mode="bilinear", align_corners=False).argmax(1)[0]
            conf += torch.bincount(gt[valid] * D.N + pred[valid], minlength=D.N * D.N).view(D.N, D.N)
            ours = (pred == D.ROAD) & valid
            rgb = torch.from_numpy(np.asarray(im, dtype=np.float32)).permute(2, 0, 1)[None]
            peer = (omz.road_probability(intel, rgb, size=lab.shape)[0] > 0.5) & valid
            peer_painted += torch.bincount(gt[peer], minlength=D.N)[: D.N]
            a = acc.setdefault(drives[i], [0, 0, 0, 0, 0])
            a[0] += int((ours & road).sum())
            a[1] += int((ours | road).sum())
            a[2] += int((peer & road).sum())
            a[3] += int((peer | road).sum())
            a[4] += 1
    for drive, a in sorted(acc.items()):
        print(f"{args.split} {drive} ({a[4]} frames): ours {a[0] / max(a[1], 1):.4f}  intel {a[2] / max(a[3], 1):.4f}", flush=True)
    lost = ", ".join(f"{D.CLASSES[c]} {int(conf[D.ROAD, c])}" for c in range(D.N) if c != D.ROAD)
    painted = ", ".join(f"{D.CLASSES[c]} {int(conf[c, D.ROAD])}" for c in range(D.N) if c != D.ROAD)
    print(f"road read as: {lost}")
    print(f"painted road: {painted}")
    print("Intel's painted road: " + ", ".join(f"{D.CLASSES[c]} {int(peer_painted[c])}" for c in range(D.N) if c != D.ROAD))
    return 0


if __name__ == "__main__":
    sys.exit(main())
