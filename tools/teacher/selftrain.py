#!/usr/bin/env python3
"""Self-training with temporal agreement (issue 35): a trained student
relabels the video frames where the teacher is unsure or finds no road.

  python3 tools/teacher/selftrain.py --student DIR [--teacher target/train-data/teacher] [--out target/train-data/selftrain]

For each teacher frame that came from a video (label.py's `<clip>__NNNNN`)
and where the teacher is unsure (over 15% of its pixels between 0.15 and
0.85) or finds almost no road (under 3%, as in the dark), the student runs
on the frame and on frames n-2 and n+2 of the clip (1/15 s apart at 30
fps: the scene barely moves). Where the three agree
(the same road decision in all three, their P(road) within 0.15 of their
mean) on road, the label becomes the student's mean P(road) wherever the
teacher is unsure, and everywhere on frames where the teacher found no
road; elsewhere the teacher's label stays. The student only adds road:
where it says "no road", the teacher's label stands. The frames and new labels go to OUT in
label.py's layout (img/ links, road/, index.tsv), a source distill.py mixes
in as `selftrain:N`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import train as base  # noqa: E402  (the daemon's preprocessing)

SHARED = os.environ.get("ROADSEG_SHARED", os.path.join(ROOT, "..", "shared"))
UNSURE, UNSURE_SHARE, NO_ROAD_SHARE, SPREAD = (0.15, 0.85), 0.15, 0.03, 0.15


def neighbours(video: str, n: int, tmp: str) -> list[Image.Image]:
    lo = max(0, n - 2)
    out = os.path.join(tmp, "n")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    # n-2, n, n+2: three views 1/15 s apart at 30 fps (five cost two thirds more on 2 cores)
    subprocess.run(["ffmpeg", "-v", "error", "-i", video, "-vf",
                    f"select=between(n\\,{lo}\\,{n + 2})*not(mod(n-{n}\\,2))", "-vsync", "0",
                    os.path.join(out, "%02d.png")], check=True)
    return [Image.open(os.path.join(out, f)).convert("RGB") for f in sorted(os.listdir(out))]


@torch.no_grad()
def road_prob(model, im: Image.Image, size: tuple[int, int], road: int) -> np.ndarray:
    x = base.preprocess_like_daemon(im, 1024, "cpu")
    logits = model(pixel_values=x).logits
    p = torch.softmax(F.interpolate(logits, size=size, mode="bilinear", align_corners=False), dim=1)[0, road]
    return p.numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--student", required=True)
    ap.add_argument("--teacher", default=os.path.join(ROOT, "target", "train-data", "teacher"))
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "train-data", "selftrain"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="at most this many frames (a quick look)")
    args = ap.parse_args()
    from transformers import SegformerForSemanticSegmentation
    torch.set_num_threads(args.threads)
    model = SegformerForSemanticSegmentation.from_pretrained(args.student).float().eval()
    road = model.config.label2id["road"]
    rows = [l.split("\t") for l in open(os.path.join(args.teacher, "index.tsv")).read().splitlines()]
    header, rows = rows[0], rows[1:]
    os.makedirs(os.path.join(args.out, "img"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "road"), exist_ok=True)
    kept, changed_px = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            name, source, frame = row[0], row[1], int(row[2])
            if not source.lower().endswith(".mp4"):
                continue
            t = np.asarray(Image.open(os.path.join(args.teacher, "road", name + ".png")), np.float32) / 255
            unsure = (t > UNSURE[0]) & (t < UNSURE[1])
            no_road = (t > 0.5).mean() < NO_ROAD_SHARE
            if unsure.mean() <= UNSURE_SHARE and not no_road:
                continue
            if args.limit and len(kept) >= args.limit:
                break
            done = os.path.join(args.out, "road", name + ".png")
            if os.path.exists(done) and os.path.lexists(os.path.join(args.out, "img", name + ".jpg")):
                # A run cut short resumes: a frame written is a frame done (same student, same rule).
                kept.append(row)
                changed_px.append(float((np.asarray(Image.open(done), np.float32) / 255 != t).mean()))
                continue
            frames = neighbours(os.path.join(SHARED, source), frame, tmp)
            probs = np.stack([road_prob(model, f, t.shape, road) for f in frames])
            mean = probs.mean(0)
            agree = ((probs > 0.5).all(0) | (probs <= 0.5).all(0)) & (np.abs(probs - mean).max(0) < SPREAD)
            # The student only adds road the teacher missed: a first look at p1's
            # student showed it also agreeing, frame after frame, that the sunlit
            # half of a road was none, where the teacher was rightly unsure.
            take = agree & (mean > 0.5) & (t < UNSURE[1]) & (np.ones_like(unsure) if no_road else unsure)
            new = np.where(take, mean, t)
            Image.fromarray(np.clip(new * 255 + 0.5, 0, 255).astype(np.uint8)).save(os.path.join(args.out, "road", name + ".png"))
            link = os.path.join(args.out, "img", name + ".jpg")
            if not os.path.lexists(link):
                os.symlink(os.path.realpath(os.path.join(args.teacher, "img", name + ".jpg")), link)
            kept.append(row)
            changed_px.append(float(take.mean()))
            print(f"{name}: {len(frames)} frames, {100 * agree.mean():.0f}% agree, {100 * take.mean():.1f}% relabelled"
                  f"{' (teacher found no road)' if no_road else ''}", flush=True)
    with open(os.path.join(args.out, "index.tsv"), "w") as f:
        f.write("\t".join(header) + "\n")
        for r in kept:
            f.write("\t".join(r) + "\n")
    print(f"{len(kept)} frames relabelled by the student {args.student}; "
          f"{100 * float(np.mean(changed_px or [0])):.1f}% of their pixels on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
