#!/usr/bin/env bash
# Host CPU per camera of each `[streams.output] record` mode (issue 36): the
# daemon runs CAMERAS live-paced looping H.264 clips of RES@FPS (`loop = true`,
# decoded as a camera's stream is), every frame inferred by the bundled model
# at a small input (SIZE) so that a 2-core machine keeps up: the recording,
# not the model, is what differs between the runs. (INFER_FPS caps inference;
# an annotated recording then holds only the inferred frames.)
# For each mode (MODES, default: none source masks annotated) it reports the
# daemon's CPU (utime+stime from /proc) over STEP_S seconds after its first frames,
# in cores per camera, and the mode's cost over `none`.
#
#   bench/record-cost.sh                       # 1280x720@30, 1 camera, 30 s a mode
#   RES=320x240 FPS=10 STEP_S=4 bench/record-cost.sh    # quick look
#
# Environment: ROADSEG (target/release/roadseg), MODEL (the bundled one),
# SIZE (model input, 160x96), RES (1280x720), FPS (30), CAMERAS (1),
# INFER_FPS (none: every frame), STEP_S (30 s a mode), MODES, PORT (19514), OUT (bench/out-record-cost).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
R=${ROADSEG:-target/release/roadseg}
MODEL=${MODEL:-$PWD/models/roadseg-camvid}
SIZE=${SIZE:-160x96}
RES=${RES:-1280x720}
FPS=${FPS:-30}
CAMERAS=${CAMERAS:-1}
INFER_FPS=${INFER_FPS:-}
SECONDS_EACH=${STEP_S:-30}
MODES=${MODES:-none source masks annotated}
PORT=${PORT:-19514}
OUT=${OUT:-bench/out-record-cost}
[ -x "$R" ] || { echo "$R is missing: cargo build --release"; exit 1; }
mkdir -p "$OUT" || exit 1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/roadseg-record-cost.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

echo "== synth: a ${RES}@${FPS} clip of 10 s"
"$R" synth -o "$WORK/cam.mp4" --frames $((FPS * 10)) --size "$RES" --fps "$FPS" >/dev/null 2>"$WORK/synth.err" ||
  { tail -n 5 "$WORK/synth.err"; exit 1; }

config() { # config MODE
  cat <<EOF
[model]
path = "$MODEL"
width = ${SIZE%x*}
height = ${SIZE#*x}
device = "cpu"

[metrics]
listen = "127.0.0.1:$PORT"

[rtsp]
listen = ""
EOF
  for i in $(seq 0 $((CAMERAS - 1))); do
    printf '\n[[streams]]\nname = "cam%d"\nuri = "file://%s"\nloop = true\n' "$i" "$WORK/cam.mp4"
    [ -n "$INFER_FPS" ] && printf 'infer_fps = %s\n' "$INFER_FPS"
    printf '[streams.output]\n'
    printf 'stats = "%s/out/{stream}.jsonl"\nrecord = "%s"\n' "$WORK" "$1"
    case $1 in annotated | source) printf 'file = "%s/out/{stream}.mp4"\nsegment_seconds = 3600\n' "$WORK" ;; esac
  done
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK)
declare -A COST
{
  echo "# Host CPU per camera by record mode (bench/record-cost.sh)"
  echo
  echo "$(date -u +%FT%TZ), $(uname -n), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); $CAMERAS cameras, each a looping ${RES}@${FPS} H.264 clip, inferred ${INFER_FPS:+at $INFER_FPS fps }at $SIZE, ${SECONDS_EACH} s a mode"
  echo
  echo "| record | cores per camera | over none | recorded MiB per camera-minute | frames inferred / dropped |"
  echo "|---|---:|---:|---:|---:|"
} >"$OUT/summary.md"
for mode in $MODES; do
  rm -rf "$WORK/out" && mkdir -p "$WORK/out"
  config "$mode" >"$WORK/config.toml"
  "$R" run --config "$WORK/config.toml" >"$WORK/$mode.log" 2>&1 &
  pid=$!
  sleep 5 # start-up and first frames
  c0=$(cpu_ticks "$pid")
  b0=$(du -sb "$WORK/out" | cut -f1)
  sleep "$SECONDS_EACH"
  c1=$(cpu_ticks "$pid")
  b1=$(du -sb "$WORK/out" | cut -f1)
  metrics=$(curl -fsS -m 5 "http://127.0.0.1:$PORT/metrics" 2>/dev/null)
  sum() { awk -v m="$1" '$1 ~ "^" m "([{ ]|$)" { s += $NF } END { printf "%.0f", s + 0 }' <<<"$metrics"; }
  inferred=$(sum roadseg_frames_inferred_total)
  dropped=$(sum roadseg_frames_dropped_total)
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  cores=$(awk -v c=$((c1 - c0)) -v hz="$hz" -v s="$SECONDS_EACH" -v n="$CAMERAS" 'BEGIN { printf "%.3f", c / hz / s / n }')
  mib=$(awk -v b=$((b1 - b0)) -v s="$SECONDS_EACH" -v n="$CAMERAS" 'BEGIN { printf "%.1f", b / 1048576 / n * 60 / s }')
  COST[$mode]=$cores
  over=$(awk -v a="$cores" -v b="${COST[none]:-}" 'BEGIN { if (b == "") print "n/a"; else printf "%+.3f", a - b }')
  echo "| $mode | $cores | $over | $mib | $inferred / $dropped |" >>"$OUT/summary.md"
  echo "$mode: $cores cores per camera (exit $rc)"
  [ "$rc" = 0 ] || { tail -n 20 "$WORK/$mode.log"; exit 1; }
done
cat "$OUT/summary.md"
