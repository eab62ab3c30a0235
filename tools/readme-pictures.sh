#!/usr/bin/env bash
# Regenerates the README's before/after pictures from real footage the model
# never trained on (../shared/data/dashcam), with the bundled model on the CPU
# and default settings:
#   docs/before-after-highway.jpg    solidWhiteRight.mp4 frame 100 (4 s), roadseg infer
#   docs/before-after-pillarbox.jpg  the clip pillarboxed to 1280x540, roadseg process, frame 100
#   docs/before-after-city.jpg       two BDD100K stills (snowy street, white bonnet and an SUV), roadseg infer
#   docs/models-{night,rain,bonnet}.jpg  the previous bundled model beside the current one (see below)
#   tools/readme-pictures.sh         # needs target/release/roadseg and ffmpeg
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${ROADSEG_SHARED:-../shared}
bin=${ROADSEG_BIN:-target/release/roadseg}
[ -x "$bin" ] || cargo build --release --locked
clip="$shared/data/dashcam/solidWhiteRight.mp4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
frame() { ffmpeg -nostdin -v error -y -i "$1" -vf "select=eq(n\,$2)" -frames:v 1 "$3"; }
# Two pictures side by side, each W wide, 8 px of white between them.
pair() {
  ffmpeg -nostdin -v error -y -i "$1" -i "$2" -filter_complex \
    "[0:v]scale=$4:-2[a];[1:v]scale=$4:-2,pad=iw+8:ih:8:0:white[b];[a][b]hstack" -q:v 3 "$3"
}
frame "$clip" 100 "$tmp/highway.png"
"$bin" infer --image "$tmp/highway.png" --overlay-out "$tmp/highway-after.png" --device cpu
pair "$tmp/highway.png" "$tmp/highway-after.png" docs/before-after-highway.jpg 640

ffmpeg -nostdin -v error -y -i "$clip" -vf "pad=1280:540:160:0:black" -c:v libx264 -preset veryfast -pix_fmt yuv420p "$tmp/pillarbox.mp4"
"$bin" process "$tmp/pillarbox.mp4" -o "$tmp/pillarbox-out.mp4" --device cpu
frame "$tmp/pillarbox.mp4" 100 "$tmp/pillarbox.png"
frame "$tmp/pillarbox-out.mp4" 100 "$tmp/pillarbox-after.png"
pair "$tmp/pillarbox.png" "$tmp/pillarbox-after.png" docs/before-after-pillarbox.jpg 640

for still in caeb782d-4a20b7c4 cc97fab0-f9a08d07; do
  cp "$shared/data/dashcam/bdd/$still.jpg" "$tmp/$still.jpg"
  "$bin" infer --image "$tmp/$still.jpg" --overlay-out "$tmp/$still-after.png" --device cpu
  pair "$tmp/$still.jpg" "$tmp/$still-after.png" "$tmp/$still-pair.png" 640
done
ffmpeg -nostdin -v error -y -i "$tmp/caeb782d-4a20b7c4-pair.png" -i "$tmp/cc97fab0-f9a08d07-pair.png" -filter_complex \
  "[1:v]pad=iw:ih+8:0:8:white[b];[0:v][b]vstack" -q:v 3 docs/before-after-city.jpg
ls -la docs/before-after-*.jpg

# Issue 35: the model before and after, on footage from ../shared/data/clips:
#   docs/models-night.jpg    Berlin at dusk and an unlit highway at night
#   docs/models-rain.jpg     rain on the windshield
#   docs/models-bonnet.jpg   a Taiwanese street behind a white bonnet (DAD 000478, never trained on)
# Each: the previous bundled model (BEFORE, a commit; default the one before the
# product model) on the left, the current one on the right, both through
# `roadseg process` on the 3 s before the frame shown (so the hood is the
# daemon's own estimate by then).
before_rev=${BEFORE:-e45f2f3}
mkdir -p "$tmp/before-model"
git show "$before_rev:models/roadseg-camvid/config.json" > "$tmp/before-model/config.json"
git show "$before_rev:models/roadseg-camvid/model.safetensors" > "$tmp/before-model/model.safetensors"
clips="$shared/data/clips"
# One panel: MODEL over the 3 s of VIDEO that end at second AT; its last frame into OUT.
panel() {
  local model=$1 video=$2 at=$3 out=$4
  ffmpeg -nostdin -v error -y -ss "$(awk -v t="$at" 'BEGIN { print (t > 3 ? t - 3 : 0) }')" -i "$video" -t 3 \
    -c:v libx264 -preset veryfast -pix_fmt yuv420p "$tmp/excerpt.mp4"
  "$bin" process "$tmp/excerpt.mp4" -o "$tmp/excerpt-out.mp4" --model "$model" --device cpu >/dev/null
  ffmpeg -nostdin -v error -y -sseof -0.1 -i "$tmp/excerpt-out.mp4" -frames:v 1 "$out"
}
compare() {
  local video=$1 at=$2 name=$3
  panel "$tmp/before-model" "$video" "$at" "$tmp/$name-before.png"
  panel models/roadseg-camvid "$video" "$at" "$tmp/$name-after.png"
  pair "$tmp/$name-before.png" "$tmp/$name-after.png" "$tmp/$name.jpg" 640
}
ffmpeg -nostdin -v error -y -framerate 6 -pattern_type glob -i "$clips/smallcorgi__Anticipating-Accidents/images/000478/*.jpg" \
  -c:v libx264 -pix_fmt yuv420p "$tmp/dad-000478.mp4"
compare "$clips/squarra__yolo-weights/videos/mittel_nacht.mp4" 6.5 berlin
compare "$clips/tmo324__lane_detecting/videos/night.mp4" 20.3 night
compare "$clips/tmo324__lane_detecting/videos/rainy.mp4" 12.3 rain
compare "$tmp/dad-000478.mp4" 3.3 bonnet
ffmpeg -nostdin -v error -y -i "$tmp/berlin.jpg" -i "$tmp/night.jpg" -filter_complex \
  "[1:v]pad=iw:ih+8:0:8:white[b];[0:v][b]vstack" -q:v 3 docs/models-night.jpg
cp "$tmp/rain.jpg" docs/models-rain.jpg
cp "$tmp/bonnet.jpg" docs/models-bonnet.jpg
ls -la docs/models-*.jpg
