#!/usr/bin/env bash
# Stages what a training run on a lent GPU machine needs and that machine
# lacks (it receives the checkout and the carried paths, never ../shared):
# target/train-data/camvid (a copy of ../shared/data/camvid, 37 MB; in the
# ignored target/, never committed) and target/train-data/synth (24 frames
# of `roadseg synth` as JPEG with their road masks, which keep the model
# finding the synthetic drive's road). The device call then carries
# ["target/train-data"]: 47 MB with the working tree (tools/carry-size.sh).
#   tools/train/stage-data.sh          # needs target/release/roadseg and ffmpeg
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${ROADSEG_SHARED:-../shared}
out=target/train-data
rm -rf "$out"
mkdir -p "$out/synth/img"
cp -r "$shared/data/camvid" "$out/camvid"
bin=${ROADSEG_BIN:-target/release/roadseg}
[ -x "$bin" ] || cargo build --release --locked
"$bin" synth -o "$out/synth/drive.mp4" --frames 24 --size 960x540 --seed 11 --masks-out "$out/synth/masks"
ffmpeg -v error -i "$out/synth/drive.mp4" -q:v 3 "$out/synth/img/%05d.jpg"
rm "$out/synth/drive.mp4"
tools/carry-size.sh --check "$out"
