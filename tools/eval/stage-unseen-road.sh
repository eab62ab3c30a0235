#!/usr/bin/env bash
# Puts the frames of tools/eval/unseen-road.json in one folder under the names
# it gives them: BDD100K stills linked from ../shared/data/dashcam/bdd, video
# frames decoded with ffmpeg (frame index n, counted from 0).
#   tools/eval/stage-unseen-road.sh [OUT]      # default target/unseen-road
#   roadseg eval --images target/unseen-road --road-polygons tools/eval/unseen-road.json
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
shared=$(cd "${ROADSEG_SHARED:-$root/../shared}" 2>/dev/null && pwd) || {
  echo "no ../shared beside the project (set ROADSEG_SHARED): the unseen set's frames live in its data/dashcam" >&2
  exit 2
}
out=${1:-$root/target/unseen-road}
mkdir -p "$out"
python3 - "$root/tools/eval/unseen-road.json" <<'PY' | while IFS=$'\t' read -r name kind path frame; do
import json, sys
for f in json.load(open(sys.argv[1]))["frames"]:
    s = f["source"]
    if "image" in s:
        print(f"{f['name']}\timage\t{s['image']}\t-")
    else:
        print(f"{f['name']}\tvideo\t{s['video']}\t{s['frame']}")
PY
  src="$shared/data/dashcam/$path"
  [ -f "$src" ] || { echo "missing $src" >&2; exit 1; }
  if [ "$kind" = image ]; then
    ln -sf "$src" "$out/$name"
  else
    ffmpeg -nostdin -v error -y -i "$src" -vf "select=eq(n\,$frame)" -frames:v 1 "$out/$name"
  fi
done
echo "$out"
