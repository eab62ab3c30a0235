#!/usr/bin/env bash
# A contact sheet to judge models by eye, as a user would judge them on video:
#   tools/eval/look.sh OUT.jpg MODEL_DIR[@ARGS] [MODEL_DIR[@ARGS] ...]
# ARGS: extra `roadseg process` arguments for that column, comma-separated
# (models/roadseg-camvid@--exposure-target=0: the same model, exposure off).
# One row per scene (dusk and night in Berlin, an unlit highway, rain, snow, a white
# bonnet, the Udacity bonnet, India, a US city), one column per model, in the
# order given. Each panel is the last frame of `roadseg process` (CPU, the
# daemon's defaults: smoothing, hood, grounded road) over the 3 s of video
# ending at the scene's second, so the temporal filters have warmed up as
# they would on a live feed. Needs target/release/roadseg, ffmpeg, ../shared
# (or $ROADSEG_SHARED). About 50 s per panel on 2 cores. LOOK_ONLY=REGEX keeps
# the scenes whose video path matches (LOOK_ONLY='nacht|night': the dark ones).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: tools/eval/look.sh OUT.jpg MODEL_DIR [MODEL_DIR ...]}
shift
[ $# -ge 1 ] || { echo "name at least one model folder" >&2; exit 2; }
shared=${ROADSEG_SHARED:-../shared}
bin=${ROADSEG_BIN:-target/release/roadseg}
width=${LOOK_WIDTH:-480}
[ -x "$bin" ] || { echo "build first: cargo build --release --locked" >&2; exit 2; }
clips="$shared/data/clips"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ffmpeg -nostdin -v error -y -framerate 6 -pattern_type glob \
  -i "$clips/smallcorgi__Anticipating-Accidents/images/000478/*.jpg" -c:v libx264 -pix_fmt yuv420p "$tmp/dad-000478.mp4"
# scene: video, second
scenes=(
  "$clips/squarra__yolo-weights/videos/mittel_nacht.mp4 6.5"
  "$clips/squarra__yolo-weights/videos/wenig_nacht.mp4 6"
  "$clips/tmo324__lane_detecting/videos/night.mp4 20.3"
  "$clips/tmo324__lane_detecting/videos/rainy.mp4 12.3"
  "$clips/tmo324__lane_detecting/videos/seattlestreet1.mp4 15"
  "$tmp/dad-000478.mp4 3.3"
  "$shared/data/dashcam/udacity/bonnet-test-video.mp4 4"
  "$clips/PayalBari1010__AI-Intelligent-Road-Monitoring-System/road2.mp4 8"
  "$clips/Tarun140806__smart-cattle-collision-prevention/videos/day.mp4 5"
)

panel() {
  local model=${1%%@*} video=$2 at=$3 png=$4 label
  local -a extra=()
  [[ $1 == *@* ]] && IFS=, read -r -a extra <<<"${1#*@}"
  label=$(basename "$model")${extra[*]:+ ${extra[*]}}
  ffmpeg -nostdin -v error -y -ss "$(awk -v t="$at" 'BEGIN { print (t > 3 ? t - 3 : 0) }')" -i "$video" -t 3 \
    -c:v libx264 -preset veryfast -pix_fmt yuv420p "$tmp/excerpt.mp4"
  "$bin" process "$tmp/excerpt.mp4" -o "$tmp/excerpt-out.mp4" --model "$model" --device cpu ${extra[@]+"${extra[@]}"} >/dev/null 2>"$tmp/log" ||
    { cat "$tmp/log" >&2; exit 1; }
  # The last frame: every frame of the last second written over the one before (a 6 fps clip has none in its last 0.1 s).
  ffmpeg -nostdin -v error -y -sseof -1 -i "$tmp/excerpt-out.mp4" -update 1 \
    -vf "scale=$width:$((width * 9 / 16)):force_original_aspect_ratio=decrease,pad=$width:$((width * 9 / 16)):(ow-iw)/2:(oh-ih)/2:black,drawtext=text='${label//:/\\:}':x=6:y=6:fontcolor=white:box=1:boxcolor=black@0.6" \
    "$png" 2>/dev/null ||
    ffmpeg -nostdin -v error -y -sseof -1 -i "$tmp/excerpt-out.mp4" -update 1 \
      -vf "scale=$width:$((width * 9 / 16)):force_original_aspect_ratio=decrease,pad=$width:$((width * 9 / 16)):(ow-iw)/2:(oh-ih)/2:black" "$png"
}

rows=()
r=0
for scene in "${scenes[@]}"; do
  read -r video at <<<"$scene"
  [ -f "$video" ] || { echo "skipping $video: not found" >&2; continue; }
  [[ -z ${LOOK_ONLY:-} || $video =~ $LOOK_ONLY ]] || continue
  cols=()
  c=0
  for model in "$@"; do
    panel "$model" "$video" "$at" "$tmp/p-$r-$c.png"
    cols+=("-i" "$tmp/p-$r-$c.png")
    c=$((c + 1))
  done
  if [ "$c" -gt 1 ]; then
    ffmpeg -nostdin -v error -y "${cols[@]}" -filter_complex "hstack=inputs=$c" "$tmp/row-$r.png"
  else
    cp "$tmp/p-$r-0.png" "$tmp/row-$r.png"
  fi
  rows+=("-i" "$tmp/row-$r.png")
  r=$((r + 1))
done
[ "$r" -gt 0 ] || { echo "no scene matches LOOK_ONLY=${LOOK_ONLY:-}" >&2; exit 2; }
if [ "$r" -gt 1 ]; then
  ffmpeg -nostdin -v error -y "${rows[@]}" -filter_complex "vstack=inputs=$r" -q:v 3 "$out"
else # vstack takes two inputs at least
  ffmpeg -nostdin -v error -y "${rows[@]}" -q:v 3 "$out"
fi
echo "$out: $r scenes x $# models"
