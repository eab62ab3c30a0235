#!/usr/bin/env bash
# Stages what a training run needs into the ignored target/train-data (never
# committed), from ../shared: what a lent GPU machine lacks (it receives the
# checkout and the carried paths, never ../shared), and what the CPU runs
# read too.
#   camvid/    a copy of ../shared/data/camvid (37 MB)
#   idd-lite/  a copy of ../shared/data/idd-lite/train (tools/train/splits.py holds drives out)
#   synth/     24 frames of `roadseg synth` as JPEG, their road masks, and the bonnet (hood.png)
#   teacher/   frames without labels and Intel's P(road) for them (tools/teacher/label.py;
#              kept when present: it takes minutes; TEACHER=1 remakes it)
#   idd-teacher/  Intel's P(road) on IDD's training frames (distill.py --idd-teacher-min)
#   ego/       the drawn ego vehicles and their frames (tools/teacher/ego.py)
#   tools/train/stage-data.sh          # needs target/release/roadseg, ffmpeg, python with PIL + numpy (+ openvino or torch)
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${ROADSEG_SHARED:-../shared}
out=target/train-data
py=${PYTHON:-python3}
mkdir -p "$out"
rm -rf "$out/camvid" "$out/synth" "$out/idd-lite" "$out/ego"
mkdir -p "$out/synth/img" "$out/idd-lite"
cp -r "$shared/data/camvid" "$out/camvid"
cp -r "$shared/data/idd-lite/train" "$out/idd-lite/train"
bin=${ROADSEG_BIN:-target/release/roadseg}
[ -x "$bin" ] || cargo build --release --locked
"$bin" synth -o "$out/synth/drive.mp4" --frames 24 --size 960x540 --seed 11 --masks-out "$out/synth/masks" \
  --hood-mask-out "$out/synth/hood.png"
ffmpeg -v error -i "$out/synth/drive.mp4" -q:v 3 "$out/synth/img/%05d.jpg"
rm "$out/synth/drive.mp4"
if [ ! -f "$out/teacher/index.tsv" ] || [ "${TEACHER:-0}" = 1 ]; then
  rm -rf "$out/teacher"
  ROADSEG_SHARED="$shared" "$py" tools/teacher/label.py --out "$out/teacher"
fi
if [ ! -d "$out/idd-teacher" ] || [ "${TEACHER:-0}" = 1 ]; then
  rm -rf "$out/idd-teacher"
  ROADSEG_SHARED="$shared" "$py" tools/teacher/label.py --idd "$out/idd-teacher"
fi
ROADSEG_SHARED="$shared" "$py" tools/teacher/ego.py --out "$out/ego"
