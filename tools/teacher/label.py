#!/usr/bin/env python3
"""Teacher labels for the frames that have none (issue 35).

  python3 tools/teacher/label.py [--out target/train-data/teacher] [--every 8]
  python3 tools/teacher/label.py --relabel DIR [--device cuda]   # DIR/img + DIR/index.tsv -> DIR/road
  python3 tools/teacher/label.py --idd DIR [--idd-images IMAGES]  # IDD train frames' P(road) -> DIR/<frame>.png

Frames: every clip and still of ../shared/data/clips, the Udacity bonnet
stills, and IDD Lite's unlabelled frames, less those that judge the model
(tools/train/splits.py: held-out IDD drives, the BDD stills and
solidWhiteRight.mp4, the Udacity bonnet clip, the hood-eval DAD sequence).
Videos give every `--every`th frame.

For each frame it writes, under OUT:
  img/<name>.jpg    the frame (at most 1280 wide, quality 92)
  road/<name>.png   Intel's P(road) + P(lane mark), 0..255, at the teacher's
                    896x512 input (the trainer resizes it with the frame)
  index.tsv         name, source file, frame number, width, height, road share

The teacher runs on the clean frame. The trainer applies each geometric
augmentation (scale, crop, flip, roll, mixing two frames) to frame and
soft label alike, and light augmentations (night, glare, tunnel light) to
the frame only: the student must find at night the road the teacher finds
by day, not copy the teacher's failures on dark frames (docs in
tools/train/README.md, "Product model").
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import omz  # noqa: E402
import splits  # noqa: E402

SHARED = os.environ.get("ROADSEG_SHARED", os.path.join(ROOT, "..", "shared"))
VIDEO = (".mp4", ".mov", ".mkv", ".avi")
STILL = (".jpg", ".jpeg", ".png")
MAX_WIDTH = 1280


def sources(shared: str) -> list[str]:
    found = []
    for base in ("data/clips", "data/dashcam/udacity", "data/idd-lite/unlabelled"):
        for path in sorted(glob.glob(os.path.join(shared, base, "**", "*"), recursive=True)):
            if path.lower().endswith(VIDEO + STILL) and not splits.never_trains(path):
                found.append(path)
    return found


def slug(shared: str, path: str) -> str:
    rel = os.path.relpath(path, os.path.join(shared, "data"))
    return re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.splitext(rel)[0])


def video_frames(path: str, every: int, tmp: str) -> list[tuple[int, str]]:
    out = os.path.join(tmp, "f")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", path, "-vf", f"select=not(mod(n\\,{every}))",
                    "-vsync", "0", "-q:v", "2", os.path.join(out, "%05d.jpg")], check=True)
    files = sorted(os.listdir(out))
    return [(i * every, os.path.join(out, f)) for i, f in enumerate(files)]


class Teacher:
    def __init__(self, device: str | None = None):
        if device:  # the torch port, on that device (the GPU machine has no OpenVINO)
            import torch
            model = omz.OmzRoadSeg().to(device)
            self.run = lambda xs: [model(torch.from_numpy(xs[0]).to(device)).cpu().numpy()]
            self.kind = f"torch on {device}"
            return
        try:
            import openvino as ov
            core = ov.Core()
            xml = os.path.join(omz.default_dir(), omz.XML_NAME)
            self.run = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            self.kind = "openvino (f32)"
        except ImportError:
            import torch
            model = omz.OmzRoadSeg()
            self.run = lambda xs: [model(torch.from_numpy(xs[0])).numpy()]
            self.kind = "torch"

    def road(self, img: Image.Image) -> np.ndarray:
        small = img.resize((omz.INPUT_W, omz.INPUT_H), Image.BILINEAR)
        bgr = np.asarray(small, dtype=np.float32)[:, :, ::-1].transpose(2, 0, 1)[None].copy()
        p = self.run([bgr])[0][0]
        return np.clip((p[1] + p[3]) * 255 + 0.5, 0, 255).astype(np.uint8)


def relabel(teacher: Teacher, root: str) -> int:
    names = [l.split("\t")[0] for l in open(os.path.join(root, "index.tsv")).read().splitlines()[1:]]
    os.makedirs(os.path.join(root, "road"), exist_ok=True)
    for name in names:
        img = Image.open(os.path.join(root, "img", name + ".jpg")).convert("RGB")
        Image.fromarray(teacher.road(img)).save(os.path.join(root, "road", name + ".png"))
    print(f"teacher ({teacher.kind}): {len(names)} frames relabelled in {root}")
    return 0


def label_idd(teacher: Teacher, out: str, images: str) -> int:
    """P(road) for IDD Lite's labelled training frames in `images` (held-out
    drives left out), one PNG a frame named as the frame, for distill.py
    --idd-teacher-min."""
    os.makedirs(out, exist_ok=True)
    frames = [p for p in sorted(glob.glob(os.path.join(images, "*.jpg"))) if not splits.never_trains(p)]
    if not frames:
        raise SystemExit(f"no IDD Lite frames in {images}")
    for p in frames:
        road = teacher.road(Image.open(p).convert("RGB"))
        Image.fromarray(road).save(os.path.join(out, os.path.splitext(os.path.basename(p))[0] + ".png"))
    print(f"teacher ({teacher.kind}): {len(frames)} IDD training frames labelled into {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "train-data", "teacher"))
    ap.add_argument("--every", type=int, default=8, help="every Nth frame of a video")
    ap.add_argument("--relabel", metavar="DIR", help="label the frames already in DIR/img (a staged copy)")
    ap.add_argument("--idd", metavar="DIR", help="label IDD Lite's training frames into DIR (their real labels' disputed road)")
    ap.add_argument("--idd-images", metavar="DIR", default=os.path.join(SHARED, "data", "idd-lite", "train", "images"),
                    help="with --idd: where the frames are (a staged copy's idd-lite/train/images on a GPU machine)")
    ap.add_argument("--device", help="run the torch port on this device (cuda, cpu) instead of OpenVINO")
    args = ap.parse_args()
    teacher = Teacher(args.device)
    if args.relabel:
        return relabel(teacher, args.relabel)
    if args.idd:
        return label_idd(teacher, args.idd, args.idd_images)
    os.makedirs(os.path.join(args.out, "img"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "road"), exist_ok=True)
    rows = []
    srcs = sources(SHARED)
    print(f"teacher: {teacher.kind}; {len(srcs)} source files")
    with tempfile.TemporaryDirectory() as tmp:
        for path in srcs:
            frames = video_frames(path, args.every, tmp) if path.lower().endswith(VIDEO) else [(0, path)]
            base = slug(SHARED, path)
            for n, fpath in frames:
                name = f"{base}__{n:05d}" if path.lower().endswith(VIDEO) else base
                img = Image.open(fpath).convert("RGB")
                if img.width > MAX_WIDTH:
                    img = img.resize((MAX_WIDTH, round(img.height * MAX_WIDTH / img.width)), Image.BILINEAR)
                road = teacher.road(img)
                img.save(os.path.join(args.out, "img", name + ".jpg"), quality=92)
                Image.fromarray(road).save(os.path.join(args.out, "road", name + ".png"))
                rows.append((name, os.path.relpath(path, SHARED), n, img.width, img.height, float((road > 127).mean())))
            print(f"{os.path.relpath(path, SHARED)}: {len(frames)} frames", flush=True)
    with open(os.path.join(args.out, "index.tsv"), "w") as f:
        f.write("name\tsource\tframe\twidth\theight\troad_share\n")
        for r in rows:
            f.write("\t".join(str(v) for v in r[:5]) + f"\t{r[5]:.4f}\n")
    print(f"{len(rows)} frames labelled into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
