#!/usr/bin/env python3
"""The ego vehicle's real bonnets and dashboards, cut from the footage (issue 35).

  python3 tools/teacher/ego.py [--out target/train-data/ego]     # masks + frames to train on
  python3 tools/teacher/ego.py --draw NAME [--from 0.8] [--to 1.0] [--out PNG]

Each camera's ego vehicle (bonnet, dashboard, dash mount) was drawn by hand
into tools/teacher/ego-outlines.json: its top edge, in percent of the
frame, over the camera's mean frame (the ego vehicle stays sharp while the
scene blurs) and one frame, on a percent grid (`--draw`, which shows the
current outline in green). A first automatic try (per-pixel stillness over
the clip) missed white and mirror-like bonnets, which reflect the passing
scene as much as the road moves (spread 0.2-0.45 of the scene's), and took
pillarbox bars for bonnets; drawing 11 outlines by hand was quicker to get
right.

The default writes, for every "train" source, OUT/<name>.png (255 = ego,
128 = pillarbox bars, 0 = scene) and its frames OUT/<name>/NNN.jpg (at most
40, spread over the clip) for the trainer: in place, with the teacher's
road labels, and cut out and pasted onto other footage.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SHARED = os.environ.get("ROADSEG_SHARED", os.path.join(ROOT, "..", "shared"))
OUTLINES = os.path.join(HERE, "ego-outlines.json")
SAMPLES = 40
EGO, BARS = 255, 128


def outlines() -> dict:
    with open(OUTLINES) as f:
        data = json.load(f)
    return {**{k: dict(v, split="train") for k, v in data["train"].items()},
            **{k: dict(v, split="eval") for k, v in data["eval"].items()}}


def load_frames(spec: str, tmp: str, samples: int = SAMPLES) -> list[Image.Image]:
    path = os.path.join(SHARED, spec)
    if spec.endswith(".mp4"):
        out = os.path.join(tmp, os.path.basename(spec))
        os.makedirs(out, exist_ok=True)
        n = int(subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                                "stream=nb_read_frames", "-of", "csv=p=0", path],
                               check=True, capture_output=True, text=True).stdout.strip())
        every = max(1, n // samples)
        subprocess.run(["ffmpeg", "-loglevel", "error", "-i", path, "-vf", f"select=not(mod(n\\,{every}))",
                        "-vsync", "0", "-q:v", "2", os.path.join(out, "%04d.jpg")], check=True)
        files = sorted(glob.glob(os.path.join(out, "*.jpg")))
    else:
        files = sorted(glob.glob(path))
    if not files:
        raise FileNotFoundError(f"no frames for {spec} under {SHARED}")
    return [Image.open(f).convert("RGB") for f in files]


def outline_mask(source: dict, w: int, h: int) -> np.ndarray:
    """uint8 h x w: EGO below the drawn edge, BARS in pillarbox columns, 0 elsewhere."""
    edge = [(x / 100 * w, y / 100 * h) for x, y in source["edge"]]
    x0, x1 = edge[0][0], edge[-1][0]
    im = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(im)
    d.polygon(edge + [(x1, h), (x0, h)], fill=EGO)
    for b0, b1 in source.get("bars", []):
        d.rectangle([b0 / 100 * w, 0, b1 / 100 * w - 1, h], fill=BARS)
    return np.asarray(im).copy()


def draw(name: str, source: dict, y0s: float, y1s: float, out: str) -> None:
    """The drawing aid: mean frame over one frame, a percent grid, the outline."""
    with tempfile.TemporaryDirectory() as tmp:
        frames = load_frames(source["frames"], tmp)
    w, h = frames[0].size
    mean = np.mean([np.asarray(f, np.float32) for f in frames], 0)
    one = np.asarray(frames[len(frames) // 3], np.float32)
    y0, y1 = int(h * y0s), int(h * y1s)
    a = np.concatenate([mean[y0:y1], one[y0:y1]], 0).astype(np.uint8)
    s = 1200 / w
    vs = min(4.0, 330 / ((y1 - y0) * s))  # stretch thin bands vertically
    im = Image.fromarray(a).resize((1200, int(a.shape[0] * s * vs)))
    d = ImageDraw.Draw(im)
    panel = (y1 - y0) * s * vs
    for i in range(101):
        x = i / 100 * w * s
        if i % 5 == 0:
            d.line([(x, 0), (x, im.height)], fill=(255, 0, 255))
            d.text((x + 2, 2), str(i), fill=(255, 255, 0))
    for ys in np.arange(0, 1.0001, 0.005):
        if ys < y0s - 1e-9 or ys > y1s + 1e-9:
            continue
        y = (ys * h - y0) * s * vs
        whole = abs(ys * 100 - round(ys * 100)) < 1e-6
        for off in (0, panel):
            d.line([(0, y + off), (25 if whole else 10, y + off)], fill=(255, 255, 0))
            if whole:
                d.text((28, y + off - 6), f"{ys * 100:.0f}", fill=(255, 255, 0))
    for off in (0, panel):
        pts = [(x / 100 * w * s, (y / 100 * h - y0) * s * vs + off) for x, y in source["edge"]]
        d.line(pts, fill=(0, 255, 0), width=2)
    im.save(out)
    print(f"{name}: {w}x{h}, {len(frames)} frames -> {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--draw", metavar="NAME")
    ap.add_argument("--from", dest="y0", type=float, default=0.8, help="--draw: top of the band (share of height)")
    ap.add_argument("--to", dest="y1", type=float, default=1.0)
    args = ap.parse_args()
    sources = outlines()
    if args.draw:
        draw(args.draw, sources[args.draw], args.y0, args.y1, args.out or f"/tmp/ego-{args.draw}.png")
        return 0
    out = args.out or os.path.join(ROOT, "target", "train-data", "ego")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in sources.items():
            if source["split"] != "train":
                continue
            frames = load_frames(source["frames"], tmp)
            w, h = frames[0].size
            mask = outline_mask(source, w, h)
            Image.fromarray(mask).save(os.path.join(out, name + ".png"))
            fdir = os.path.join(out, name)
            os.makedirs(fdir, exist_ok=True)
            for i, f in enumerate(frames):
                f.save(os.path.join(fdir, f"{i:03d}.jpg"), quality=92)
            print(f"{name}: {len(frames)} frames {w}x{h}, ego {100 * (mask == EGO).mean():.1f}% of the frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
