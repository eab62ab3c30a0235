#!/usr/bin/env bash
# Stages a compact copy of target/train-data (tools/train/stage-data.sh) for a
# training call on a lent GPU machine, which receives only the checkout and
# at most 64 MiB of carried paths: target/gpu-train, frames re-encoded as
# JPEG quality 70 (the student sees compressed video anyway), the teacher's
# frames every 3rd one at most 512 wide, label maps re-packed, the
# teacher's IR (its road labels are made again there, on the GPU, by the
# torch port: tools/train/gpu-tests-then-train.sh), the ego outlines'
# frames, the synthetic drive. The device call carries ["target/gpu-train"].
#   tools/train/stage-gpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
src=target/train-data
out=target/gpu-train
py=${PYTHON:-python3}
[ -f "$src/teacher/index.tsv" ] || { echo "run tools/train/stage-data.sh first" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
"$py" - "$src" "$out" <<'PY'
import os, shutil, sys
from PIL import Image
src, out = sys.argv[1:3]

Q = 70

def jpeg(a, b, width=None):
    """Re-encoded; resized only for unlabelled frames (labels keep their frame's size)."""
    im = Image.open(a).convert("RGB")
    if width and im.width > width:
        im = im.resize((width, round(im.height * width / im.width)), Image.BILINEAR)
    os.makedirs(os.path.dirname(b), exist_ok=True)
    im.save(b, quality=Q)

def copytree_jpeg(a, b):
    for root, _, files in os.walk(a):
        for f in files:
            s = os.path.join(root, f)
            d = os.path.join(b, os.path.relpath(s, a))
            os.makedirs(os.path.dirname(d), exist_ok=True)
            if f.lower().endswith((".jpg", ".jpeg")):
                jpeg(s, d)
            elif f.lower().endswith(".png"):
                Image.open(s).save(d, optimize=True)
            else:
                shutil.copy(s, d)

copytree_jpeg(os.path.join(src, "camvid"), os.path.join(out, "camvid"))
copytree_jpeg(os.path.join(src, "idd-lite"), os.path.join(out, "idd-lite"))
copytree_jpeg(os.path.join(src, "synth"), os.path.join(out, "synth"))
# ego: the masks, and every 4th frame of each camera (what distill.py pastes)
for name in sorted(os.listdir(os.path.join(src, "ego"))):
    p = os.path.join(src, "ego", name)
    os.makedirs(os.path.join(out, "ego"), exist_ok=True)
    if name.endswith(".png"):
        shutil.copy(p, os.path.join(out, "ego", name))
    elif os.path.isdir(p):
        for f in sorted(os.listdir(p))[::4]:
            jpeg(os.path.join(p, f), os.path.join(out, "ego", name, f), width=1280)
# teacher: every 3rd frame; its labels are made on the GPU
rows = open(os.path.join(src, "teacher", "index.tsv")).read().splitlines()
keep = [rows[0]] + rows[1:][::3]
os.makedirs(os.path.join(out, "teacher", "img"))
for r in keep[1:]:
    name = r.split("\t")[0]
    jpeg(os.path.join(src, "teacher", "img", name + ".jpg"), os.path.join(out, "teacher", "img", name + ".jpg"), width=512)
with open(os.path.join(out, "teacher", "index.tsv"), "w") as f:
    f.write("\n".join(keep) + "\n")
PY
ir=${ROADSEG_SHARED:-../shared}/models/omz-road-segmentation-adas-0001/FP32
mkdir -p "$out/teacher-ir"
cp "$ir"/road-segmentation-adas-0001.{xml,bin} "$out/teacher-ir/"
tools/carry-size.sh --check "$out"
