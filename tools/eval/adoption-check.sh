#!/usr/bin/env bash
# Every figure a candidate bundled model is adopted on (issue 20; the model
# card's "Metrics" and "Unseen frames"), measured by roadseg itself on the
# CPU with its defaults, in one go, so that a trained run and the shipped
# model are compared by the same commands on the same machine:
#   tools/eval/adoption-check.sh MODEL_DIR [OUT_DIR]
# prints one line per figure and writes OUT_DIR/summary.txt (default
# target/adoption/<model folder name>). Needs target/release/roadseg,
# ../shared (or $ROADSEG_SHARED), ffmpeg, and a python with PIL and numpy
# ($PYTHON, default /usr/bin/python3: Debian's python3-pil python3-numpy).
# The model against Intel's on the same pixels: tools/eval/side-by-side.py;
# its hood on held-out real bonnets: tools/eval/hood.py.
# Against the shipped model's run of this script:
#   tools/eval/compare-unseen.py target/adoption/roadseg-camvid/unseen.json OUT_DIR/unseen.json
#   tools/eval/compare-unseen.py --hood-out ...   # the same with the drawn hood left out, as on video
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: tools/eval/adoption-check.sh MODEL_DIR [OUT_DIR]}
out=${2:-target/adoption/$(basename "$model")}
shared=${ROADSEG_SHARED:-../shared}
bin=${ROADSEG_BIN:-target/release/roadseg}
py=${PYTHON:-/usr/bin/python3}
[ -x "$bin" ] || { echo "build first: cargo build --release --locked" >&2; exit 2; }
[ -d "$shared/data/camvid" ] || { echo "no $shared/data/camvid: set ROADSEG_SHARED" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
say "model $model ($(sha256sum "$model/model.safetensors" | cut -c1-16)), $(date -u +%FT%TZ), $(nproc) cores"

# CamVid road IoU of IMAGES against LABELS (road = label 3), fast preset, 1024x768:
# by --road-labels, so any model's label set is scored the same way.
camvid() {
  local name=$1 images=$2 labels=$3 report="$out/$1.txt"
  "$bin" eval --model "$model" --images "$images" --labels "$labels" --road-labels 3 --ignore-index 11 --device cpu > "$report"
  say "$name ($(ls "$images" | wc -l) frames): $(grep '^road, pooled' "$report" | tr -s ' ')"
}

# 1. CamVid val.
camvid camvid-val "$shared/data/camvid/val" "$shared/data/camvid/valannot"

# 1b. Every 4th val frame: the subset whose figure tests/it/bundled_model.rs holds the model to.
mkdir -p "$out/camvid-subset/img" "$out/camvid-subset/lab"
ls "$shared/data/camvid/val" | LC_ALL=C sort | awk 'NR % 4 == 1' | while read -r f; do
  ln -s "$(realpath "$shared/data/camvid/val/$f")" "$out/camvid-subset/img/$f"
  ln -s "$(realpath "$shared/data/camvid/valannot/${f%.*}.png")" "$out/camvid-subset/lab/${f%.*}.png"
done
camvid camvid-val-every-4th "$out/camvid-subset/img" "$out/camvid-subset/lab"

# 1c. Every 4th frame of the IDD drives held out from training (tools/train/splits.py), road = drivable (0).
mkdir -p "$out/idd-subset/img" "$out/idd-subset/lab"
ls "$shared/data/idd-lite/train/images" | LC_ALL=C sort | awk -F_ '$1 % 7 == 0' | awk 'NR % 4 == 1' | while read -r f; do
  ln -s "$(realpath "$shared/data/idd-lite/train/images/$f")" "$out/idd-subset/img/$f"
  ln -s "$(realpath "$shared/data/idd-lite/train/labels/${f%.*}.png")" "$out/idd-subset/lab/${f%.*}.png"
done
"$bin" eval --model "$model" --images "$out/idd-subset/img" --labels "$out/idd-subset/lab" --road-labels 0 --ignore-index 255 \
  --device cpu > "$out/idd-held-out-every-4th.txt"
say "idd-held-out-every-4th ($(ls "$out/idd-subset/img" | wc -l) frames): $(grep '^road, pooled' "$out/idd-held-out-every-4th.txt" | tr -s ' ')"

# 2. The synthetic drive of tests/it/bundled_model.rs (640x360, 12 frames, seed 7), smoothing off.
"$bin" synth -o "$out/drive.mp4" --frames 12 --size 640x360 --seed 7 --masks-out "$out/drive-truth" > /dev/null
"$bin" process "$out/drive.mp4" -o "$out/drive-out.mp4" --model "$model" --device cpu --threshold 0 \
  --smooth off --masks-out "$out/drive-pred" > /dev/null
say "synthetic drive road IoU (smoothing off): $("$py" - "$out/drive-truth" "$out/drive-pred" <<'EOF'
import sys, os
import numpy as np
from PIL import Image
truth_dir, pred_dir = sys.argv[1:3]
inter = union = 0
for name in sorted(os.listdir(truth_dir)):
    t = np.asarray(Image.open(os.path.join(truth_dir, name)).convert("L")) > 127
    p = np.asarray(Image.open(os.path.join(pred_dir, name)).convert("L")) > 127
    inter += int((t & p).sum())
    union += int((t | p).sum())
print(f"{inter / union:.4f}")
EOF
)"

# 3. The hand-labelled unseen frames.
tools/eval/stage-unseen-road.sh "$out/unseen-frames" > /dev/null
"$bin" eval --model "$model" --images "$out/unseen-frames" --road-polygons tools/eval/unseen-road.json \
  --device cpu --compare-out "$out/unseen-compare" --json > "$out/unseen.txt"
# Per-frame counts, for tools/eval/compare-unseen.py (is a difference more than the frame sample?).
tail -n 1 "$out/unseen.txt" > "$out/unseen.json"
say "unseen: $(grep '^road, pooled' "$out/unseen.txt" | tr -s ' ')"

# 4. Flicker on the dashcam clip, plain and smoothed.
for smooth in off on; do
  line=$("$bin" process "$shared/data/dashcam/solidWhiteRight.mp4" -o "$out/swr-$smooth.mp4" --model "$model" \
    --device cpu --threshold 0 --smooth "$smooth")
  say "flicker (smooth $smooth): $(echo "$line" | grep -o 'road flicker [0-9.]*%')"
done

# 5. The CPU frame path at 1024x576.
"$bin" bench --model "$model" --device cpu --size 1024x576 --frame 1280x720 --frames 30 > "$out/bench.json"
say "bench: $(cat "$out/bench.json")"
