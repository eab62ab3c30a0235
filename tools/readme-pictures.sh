#!/usr/bin/env bash
# Regenerates the README's before/after pictures from real footage the model
# never trained on (../shared/data/dashcam), with the bundled model on the CPU
# and default settings:
#   docs/before-after-highway.jpg    solidWhiteRight.mp4 frame 100 (4 s), roadseg infer
#   docs/before-after-pillarbox.jpg  the clip pillarboxed to 1280x540, roadseg process, frame 100
#   docs/before-after-city.jpg       two BDD100K stills (snowy street, white bonnet and an SUV), roadseg infer
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
