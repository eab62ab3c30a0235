#!/usr/bin/env bash
# Cameras per GPU, measured as a fleet would (issue 36): the daemon from the
# portable bundle (tools/device-bundle.sh) runs N live camera stand-ins, N
# stepping up (STEPS, default 16 32 64 96 128), and the run stops at the
# first N that drops frames. Each camera is a looping H.264 clip of RES at FPS,
# paced at its own rate (`loop = true`): decoded as a camera's stream is
# (NVDEC where the bundle's GStreamer has nvcodec), not drawn by a test source.
#
#   BUNDLE=target/device-bundle OUT=$OUT bench/scale-gpu.sh     # device tool:
#                                                               # carry ["target/device-bundle"]
#   bench/scale-gpu.sh --plan                                   # the worst case against BUDGET_S
#   DEVICE=cpu RES=320x240 FPS=5 STEPS="1 2" STEP_S=5 SIZE=256x192 bench/scale-gpu.sh   # CPU dry run (CI)
#
# For every N, over STEP_S seconds after /readyz: frames/s inferred, frames
# dropped (all reasons), p99 of roadseg_latency_seconds, GPU busy
# (roadseg_gpu_busy_ratio, the workers' own CUDA-event time), host CPU per
# camera (the daemon's utime+stime from /proc), GPU memory used (nvidia-smi),
# the daemon's RSS. RECORD (`[streams.output] record`: none, the default;
# source; masks; or annotated) says what each stream writes besides the JSONL
# stats sidecar: none = nothing more; source = the camera's own H.264 remuxed
# into an MP4, no encode; masks = each stats line with its road mask;
# annotated = the annotated MP4, encoded (at RECORD_FPS frames/s when set:
# `record_fps`).
#
# $OUT gets summary.md (a row per N, rewritten after each), scale.log, and
# the last step's config.toml, metrics.txt and daemon.log (its last MiB).
#
# Environment: BUNDLE (target/device-bundle), OUT (bench/out-scale), DEVICE
# (cuda), MODEL (the bundled one), SIZE (model input, 1024x576), WORKERS
# (auto), BATCH (8: [workers] batch), WAIT_MS (5: max_batch_wait_ms), RES
# (1920x1080), FPS (15), STEPS, STEP_S (30), RECORD (none), RECORD_FPS,
# BUDGET_S (540), PORT (19484), WORK (default a new /tmp/roadseg-scale.*).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
abspath() { case $1 in /*) echo "$1" ;; *) echo "$REPO/$1" ;; esac; }
BUNDLE=$(abspath "${BUNDLE:-target/device-bundle}")
OUT=$(abspath "${OUT:-bench/out-scale}")
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-1024x576}
WORKERS=${WORKERS:-auto}
BATCH=${BATCH:-8}
WAIT_MS=${WAIT_MS:-5}
RES=${RES:-1920x1080}
FPS=${FPS:-15}
STEPS=${STEPS:-16 32 64 96 128}
STEP_S=${STEP_S:-30}
RECORD=${RECORD:-none}
RECORD_FPS=${RECORD_FPS:-}
case $RECORD in none | source | masks | annotated) ;; *) echo "RECORD=$RECORD: use none, source, masks or annotated"; exit 2 ;; esac
BUDGET_S=${BUDGET_S:-540}
PORT=${PORT:-19484}
START=$(date +%s)
# Per step, at most: check-config (CHECK_S), start and /readyz (READY_S), 3 s
# and the window between two scrapes (15 s each at most), SIGTERM and
# finalising (STOP_S). A step starts only with that much budget left.
CHECK_S=20
READY_S=60
STOP_S=30
SYNTH_S=90
SUMMARY_RESERVE_S=10
step_worst() { echo $((CHECK_S + READY_S + 3 + STEP_S + 30 + STOP_S)); }
worst_case() {
  local n=0 _
  for _ in $STEPS; do n=$((n + 1)); done
  echo $((SYNTH_S + n * $(step_worst) + SUMMARY_RESERVE_S))
}
if [ "${1:-}" = --plan ]; then
  echo "synth ${SYNTH_S} s; each of the steps ($STEPS) up to $(step_worst) s (check ${CHECK_S} + ready ${READY_S} + window ${STEP_S} + scrapes 30 + stop ${STOP_S}; ~50 s expected);"
  echo "worst case $(worst_case) s if no step drops; steps that do not fit the budget (${BUDGET_S} s) are skipped"
  # Not every step need fit: the run stops at the first that drops, or at the budget.
  [ $((SYNTH_S + $(step_worst) + SUMMARY_RESERVE_S)) -lt "$BUDGET_S" ]
  exit
fi

if [ -z "${MODEL:-}" ]; then
  MODEL=$REPO/models/roadseg-camvid
  [ -f "$MODEL/config.json" ] || MODEL=$BUNDLE/share/roadseg/models/roadseg-camvid
fi
R=$BUNDLE/roadseg
[ -x "$R" ] || { echo "$R is missing: run tools/device-bundle.sh and carry the bundle"; exit 1; }
mkdir -p "$OUT" || exit 1
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/roadseg-scale.XXXXXX") || exit 1
  trap 'rm -rf "$WORK"' EXIT
fi
if [ -d /usr/local/cuda/lib64 ]; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export ROADSEG_LOG=${ROADSEG_LOG:-info}
: >"$OUT/scale.log"
exec > >(tee -a "$OUT/scale.log") 2>&1

left() { echo $((BUDGET_S - ($(date +%s) - START) - SUMMARY_RESERVE_S)); }
fetch() { timeout 15 curl -fsS -m 10 -o "$2" "$1" 2>/dev/null || timeout 15 python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' "$1" "$2" 2>/dev/null; }
gpu_mem() {
  command -v nvidia-smi >/dev/null || { echo n/a; return; }
  timeout 10 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | awk '{ s += $1 } END { print (NR ? s : "n/a") }'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Sum of a metric over every series (all streams / workers / reasons).
total() { awk -v m="$2" '$1 ~ "^" m "([{ ]|$)" { s += $NF } END { printf "%.0f", s + 0 }' "$1"; }
# p99 of the latency histogram summed over streams, bucket deltas between two scrapes.
p99() {
  awk '/^roadseg_latency_seconds_bucket/ {
         le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le)
         d[le] += (FILENAME == ARGV[1] ? -1 : 1) * $NF
       }
       END {
         n = 0; for (le in d) if (le != "+Inf") b[++n] = le + 0
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
         tot = d["+Inf"]; if (tot <= 0) { print "n/a"; exit }
         rank = 0.99 * tot; pb = 0; pc = 0
         for (i = 1; i <= n; i++) {
           c = 0; for (le in d) if (le != "+Inf" && le + 0 == b[i]) c = d[le]
           if (c >= rank) { printf "%.3f s\n", pb + (b[i] - pb) * ((c > pc) ? (rank - pc) / (c - pc) : 1); exit }
           pb = b[i]; pc = c
         }
         print "> " b[n] " s"
       }' "$1" "$2"
}

ROWS=()
summary() {
  {
    echo "# Cameras per GPU (bench/scale-gpu.sh)"
    echo
    echo "$(date -u +%FT%TZ), $(uname -n), $(nproc) CPUs, device \`$DEVICE\`; each camera a looping ${RES}@${FPS} H.264 clip;"
    echo "model input $SIZE, workers $WORKERS, batch $BATCH (wait ${WAIT_MS} ms), record \`$RECORD\`${RECORD_FPS:+ at ${RECORD_FPS} fps}, ${STEP_S} s a step"
    echo
    echo "| cameras | inferred frames/s | of offered | dropped | p99 latency | GPU busy | host CPU per camera | GPU memory MiB | RSS MiB | status |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    local r
    for r in "${ROWS[@]}"; do echo "$r"; done
  } >"$OUT/summary.md"
}

echo "== synth: a ${RES}@${FPS} clip of 20 s"
timeout "$SYNTH_S" "$R" synth -o "$WORK/cam.mp4" --frames $((FPS * 20)) --size "$RES" --fps "$FPS" >/dev/null 2>"$WORK/synth.err" ||
  { tail -n 5 "$WORK/synth.err"; echo "synth failed"; exit 1; }

config() { # config N
  local w=${SIZE%x*} h=${SIZE#*x} i
  cat <<EOF
# Generated by bench/scale-gpu.sh: $1 looping ${RES}@${FPS} cameras.
[model]
path = "$MODEL"
width = $w
height = $h
device = "$DEVICE"

[workers]
count = $(case $WORKERS in *[!0-9]*) echo "\"$WORKERS\"" ;; *) echo "$WORKERS" ;; esac)
batch = $BATCH
max_batch_wait_ms = $WAIT_MS

[metrics]
listen = "127.0.0.1:$PORT"

[rtsp]
listen = ""

[daemon]
shutdown_timeout_s = 20
min_free_bytes = 0
EOF
  for i in $(seq 0 $(($1 - 1))); do
    printf '\n[[streams]]\nname = "cam%d"\nuri = "file://%s"\nloop = true\n[streams.output]\nstats = "%s/stats/{stream}.jsonl"\n' "$i" "$WORK/cam.mp4" "$WORK"
    printf 'record = "%s"\n' "$RECORD"
    case $RECORD in annotated | source) printf 'file = "%s/rec/{stream}.mp4"\nsegment_seconds = 3600\n' "$WORK" ;; esac
    [ "$RECORD" = annotated ] && [ -n "$RECORD_FPS" ] && printf 'record_fps = %s\n' "$RECORD_FPS"
  done
}

status=ok
for n in $STEPS; do
  if [ "$(left)" -lt "$(step_worst)" ]; then
    echo "== $n cameras: skipped (budget: $(left) s left, a step may take $(step_worst) s)"
    ROWS+=("| $n | | | | | | | | | skipped (budget) |")
    summary
    break
  fi
  echo "== $n cameras"
  rm -rf "$WORK/stats" "$WORK/rec"
  mkdir -p "$WORK/stats" "$WORK/rec"
  config "$n" >"$OUT/config.toml"
  timeout "$CHECK_S" "$R" check-config --no-estimate "$OUT/config.toml" >/dev/null || { echo "check-config failed"; status=failed; break; }
  setsid "$R" run --config "$OUT/config.toml" >"$WORK/daemon.log" 2>&1 &
  pid=$!
  ready=0
  for t in $(seq 1 "$READY_S"); do
    kill -0 "$pid" 2>/dev/null || break
    if fetch "http://127.0.0.1:$PORT/readyz" "$WORK/readyz"; then ready=1; break; fi
    sleep 1
  done
  row="| $n | | | | | | | | | not ready in ${READY_S} s |"
  if [ "$ready" = 1 ]; then
    sleep 3 # past the first frames' start-up
    fetch "http://127.0.0.1:$PORT/metrics" "$WORK/m0.txt"
    c0=$(cpu_ticks "$pid")
    sleep "$STEP_S"
    fetch "http://127.0.0.1:$PORT/metrics" "$WORK/m1.txt"
    c1=$(cpu_ticks "$pid")
    mem=$(gpu_mem)
    rss=$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null)
    cp "$WORK/m1.txt" "$OUT/metrics.txt"
    inferred=$(($(total "$WORK/m1.txt" roadseg_frames_inferred_total) - $(total "$WORK/m0.txt" roadseg_frames_inferred_total)))
    dropped=$(($(total "$WORK/m1.txt" roadseg_frames_dropped_total) - $(total "$WORK/m0.txt" roadseg_frames_dropped_total)))
    hz=$(getconf CLK_TCK)
    row=$(awk -v n="$n" -v inf="$inferred" -v drop="$dropped" -v s="$STEP_S" -v fps="$FPS" -v c="$((c1 - c0))" -v hz="$hz" \
      -v p99="$(p99 "$WORK/m0.txt" "$WORK/m1.txt")" -v mem="$mem" -v rss="${rss:-n/a}" \
      -v busy="$(awk '/^roadseg_gpu_busy_ratio/ { s += $NF; k++ } END { if (k) printf "%.0f%%", 100 * s / k; else print "n/a" }' "$WORK/m1.txt")" \
      'BEGIN { printf "| %d | %.0f | %.1f%% | %d | %s | %s | %.3f cores | %s | %s |", n, inf / s, 100 * inf / (n * fps * s), drop, p99, busy, c / hz / s / n, mem, rss }')
  fi
  stop_rc=0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 "$STOP_S"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; stop_rc=137; }
  wait "$pid" || stop_rc=$?
  tail -c 1048576 "$WORK/daemon.log" >"$OUT/daemon.log"
  if [ "$ready" != 1 ]; then
    ROWS+=("$row")
    status=failed
    summary
    break
  fi
  verdict="ok"
  [ "$dropped" -gt 0 ] && verdict="drops: stop"
  [ "$stop_rc" != 0 ] && verdict="$verdict; exit $stop_rc"
  ROWS+=("$row $verdict |")
  summary
  echo "${ROWS[-1]}"
  [ "$dropped" -gt 0 ] && break
done
summary
cat "$OUT/summary.md"
[ "$status" = ok ]
