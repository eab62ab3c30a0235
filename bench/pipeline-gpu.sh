#!/usr/bin/env bash
# The GPU half of issue 10 as one command: the whole video pipeline (decode,
# inference, annotation, encode) on a GPU machine, run from the portable bundle
# (tools/device-bundle.sh), which carries its own GStreamer:
#
#   tools/device-bundle.sh                                   # here (Rust, GStreamer)
#   BUNDLE=target/device-bundle OUT=$OUT bench/pipeline-gpu.sh   # there (device tool:
#                                                            # carry ["target/device-bundle"])
#
# Steps, each under `timeout` (its limit capped by what is left of BUDGET_S):
#   header   nvidia-smi, the bundle's MANIFEST, host glibc
#   synth    roadseg synth: a FRAMES-frame 1280x720 H.264 clip
#   cudamem  issue 36's open half, asked of the bundle's own GStreamer: does
#            nvh264dec hand the clip's frames over in CUDA memory
#            (memory:CUDAMemory caps, to a fakesink, gst-launch-1.0 -v), and
#            which CUDA elements (cudaupload, cudascale, ...) it registers
#            (DEVICE=cpu: the same launch with openh264dec, system memory)
#   bench    roadseg bench --frame 1280x720 --size SIZE --device DEVICE: the
#            model alone (preprocess + model + postprocess), frames/s; then
#            the same with --temporal: a stream worker's whole path (hood
#            observed, overlay, logits smoothed and cut on the host), with the
#            median of each phase (worker_phases_median_ms)
#   process  roadseg process of the clip --device DEVICE: decode, infer,
#            annotate, encode; frames/s from its summary, and ratio
#            process/bench (1.0 = the video edges cost nothing); the decoder
#            and encoder GStreamer picked (GST_DEBUG=GST_ELEMENT_FACTORY:4)
#   daemon   roadseg run with STREAMS live test://smpte 1280x720@30 streams,
#            each recorded to MP4, metrics on 127.0.0.1:PORT, for SECONDS
#            seconds after /readyz: per stream over that window frames
#            decoded/inferred/written, roadseg_frames_dropped_total by reason,
#            and p99 of roadseg_latency_seconds (from the histogram's bucket
#            deltas, interpolated as Prometheus' histogram_quantile)
#
# Time: each step's limit is in LIMITS below; a step that ignores TERM is
# killed KILL_AFTER_S later (the daemon step gets DAEMON_GRACE_S to finalise
# its recordings first). `bench/pipeline-gpu.sh --plan` prints the worst case,
# the sum of those, and fails when it is not under BUDGET_S (540 s, what one
# device call may take).
#
# $OUT (default bench/out) gets at most 8 files (a device run returns 8):
#   summary.md  every result and each step's limit, time and status (rewritten
#               after every step, so a run cut short still says what it did)
#   pipeline-gpu.log  the console;  bench.json;  process.log;  config.toml;
#   daemon.log (its last MiB);  metrics.txt (/metrics at the end);  streams.json
#
# Environment (defaults for DEVICE=cuda; DEVICE=cpu picks small ones):
#   BUNDLE (target/device-bundle), OUT, DEVICE (cuda), FRAMES (1000),
#   STREAMS (16; cpu: 8), SECONDS (60), SIZE (model input, 1024x576; cpu:
#   512x288), BENCH_FRAMES (300; cpu: 10), WORKERS (the daemon's
#   workers.count: auto, the default, or a number; cpu: 1; `process` always
#   runs its own default, auto), PORT (19464), MODEL (models/roadseg-camvid, else the bundle's),
#   BUDGET_S (540), WORK (the clip and recordings; default a new
#   /tmp/roadseg-pipeline.*, removed at the end unless KEEP_WORK=1).
# Dry run on a machine without a GPU (CI runs it on every change):
#   DEVICE=cpu FRAMES=30 STREAMS=2 SECONDS=10 bench/pipeline-gpu.sh
#
# Never `wait` without arguments below: stdout goes through `tee`, and a bare
# `wait` would wait for it too.
# shellcheck disable=SC2317 # the s_* functions run through `step` (bash -c)
set -uo pipefail # no -e: a failed step is recorded and the rest still runs

# SECONDS is bash's own clock (seconds since the shell started, never empty),
# so the caller's value is read from this process's original environment.
RUN_S=$(tr '\0' '\n' </proc/$$/environ 2>/dev/null | sed -n 's/^SECONDS=//p' | head -n 1)
RUN_S=${RUN_S:-${RUN_SECONDS:-60}}
START=$(date +%s)

cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
abspath() { case $1 in /*) echo "$1" ;; *) echo "$REPO/$1" ;; esac; }
BUNDLE=$(abspath "${BUNDLE:-target/device-bundle}")
OUT=$(abspath "${OUT:-bench/out}")
DEVICE=${DEVICE:-cuda}
FRAMES=${FRAMES:-1000}
PORT=${PORT:-19464}
BUDGET_S=${BUDGET_S:-540}
if [ "$DEVICE" = cpu ]; then
  SIZE=${SIZE:-512x288} BENCH_FRAMES=${BENCH_FRAMES:-10} WORKERS=${WORKERS:-1} STREAMS=${STREAMS:-8}
else
  # 16 live streams: the load at which 2 workers dropped a third of the
  # frames and 4 kept up on an H200 (docs/benchmarks.md).
  SIZE=${SIZE:-1024x576} BENCH_FRAMES=${BENCH_FRAMES:-300} WORKERS=${WORKERS:-auto} STREAMS=${STREAMS:-16}
fi
if [ -z "${MODEL:-}" ]; then
  MODEL=$REPO/models/roadseg-camvid
  [ -f "$MODEL/config.json" ] || MODEL=$BUNDLE/share/roadseg/models/roadseg-camvid
fi
R=$BUNDLE/roadseg
mkdir -p "$OUT" || exit 1
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/roadseg-pipeline.XXXXXX") || exit 1
  [ "${KEEP_WORK:-0}" = 1 ] || CLEAN_WORK=1
fi
mkdir -p "$WORK" || exit 1
if [ -d /usr/local/cuda/lib64 ]; then # libcublasLt and libnvrtc of the CUDA install
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export ROADSEG_LOG=${ROADSEG_LOG:-info}

# Each step's limit in seconds (a ceiling for a hung step, not its expected time).
KILL_AFTER_S=10
DAEMON_GRACE_S=30 # the daemon's shutdown_timeout_s (20) and some
SUMMARY_RESERVE_S=15
declare -A LIMITS=([header]=20 [synth]=60 [cudamem]=20 [bench]=60 [process]=120 [daemon]=$((RUN_S + 90)))
ORDER=(header synth cudamem bench process daemon)
worst_case() {
  local n s=$SUMMARY_RESERVE_S
  for n in "${ORDER[@]}"; do s=$((s + LIMITS[$n] + KILL_AFTER_S)); done
  echo $((s + DAEMON_GRACE_S))
}
if [ "${1:-}" = --plan ]; then
  for n in "${ORDER[@]}"; do printf '  %-8s %4s s\n' "$n" "${LIMITS[$n]}"; done
  echo "worst case $(worst_case) s (each step + ${KILL_AFTER_S} s to kill, the daemon + ${DAEMON_GRACE_S} s to finalise, ${SUMMARY_RESERVE_S} s summary); budget ${BUDGET_S} s"
  [ "${CLEAN_WORK:-0}" = 1 ] && rm -rf "$WORK"
  [ "$(worst_case)" -lt "$BUDGET_S" ]
  exit
fi

: >"$OUT/pipeline-gpu.log"
exec > >(tee -a "$OUT/pipeline-gpu.log") 2>&1

STEPS=()  # "name|limit|seconds|status"

remaining() { echo $((BUDGET_S - ($(date +%s) - START))); }
limit_for() { # limit_for WANTED: WANTED capped by the budget left (less the summary's reserve)
  local left=$(($(remaining) - SUMMARY_RESERVE_S))
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

# step NAME FUNCTION: runs FUNCTION under `timeout` (its limit from LIMITS) in a subshell.
step() {
  local name=$1 lim t0 rc status kill_after=$KILL_AFTER_S
  [ "$name" = daemon ] && kill_after=$((DAEMON_GRACE_S + KILL_AFTER_S))
  lim=$(limit_for "${LIMITS[$name]}")
  if [ "$lim" -lt 10 ]; then
    echo "== $name: skipped (budget spent)"
    STEPS+=("$name|0|0|skipped (budget)")
    write_summary
    return 1
  fi
  echo "== $name (limit ${lim} s)"
  t0=$(date +%s)
  timeout -k "$kill_after" "$lim" bash -c "$(declare -f "$2" fetch stop_daemon); $2"
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status=TIMEOUT ;;
    *) status="FAILED (exit $rc)" ;;
  esac
  STEPS+=("$name|$lim|$(($(date +%s) - t0))|$status")
  echo "== $name: $status in $(($(date +%s) - t0)) s"
  return "$rc"
}

fetch() { # fetch URL FILE
  if command -v curl >/dev/null; then
    timeout 15 curl -fsS -m 10 -o "$2" "$1"
  elif command -v wget >/dev/null; then
    timeout 15 wget -q -T 10 -O "$2" "$1"
  else
    timeout 15 python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' "$1" "$2"
  fi
}
export -f fetch
export R BUNDLE OUT WORK DEVICE FRAMES STREAMS PORT SIZE BENCH_FRAMES WORKERS MODEL RUN_S DAEMON_GRACE_S

# ---------------------------------------------------------------- steps
stop_daemon() { # stop_daemon PID: one TERM, then up to DAEMON_GRACE_S to finalise; its exit status
  kill -TERM "$1" 2>/dev/null || return 1
  local i
  for i in $(seq 1 "$DAEMON_GRACE_S"); do
    kill -0 "$1" 2>/dev/null || break
    sleep 1
  done
  kill -0 "$1" 2>/dev/null && { echo "daemon still running ${DAEMON_GRACE_S} s after TERM: killed"; kill -KILL "$1"; }
  wait "$1"
}

s_header() {
  echo "date: $(date -u +%FT%TZ), host $(uname -n), $(nproc) CPUs, $(getconf GNU_LIBC_VERSION 2>/dev/null)"
  echo "checkout: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "bundle: $BUNDLE"
  head -n 6 "$BUNDLE/MANIFEST.txt" 2>/dev/null || echo "(no MANIFEST.txt: not made by tools/device-bundle.sh?)"
  echo "settings: DEVICE=$DEVICE FRAMES=$FRAMES STREAMS=$STREAMS SECONDS=$RUN_S SIZE=$SIZE BENCH_FRAMES=$BENCH_FRAMES WORKERS=$WORKERS MODEL=$MODEL"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  # NVENC: nvcodec registers nvh264enc only where the driver's encode library loads.
  echo "NVIDIA video libraries: $( (ldconfig -p 2>/dev/null | grep -oE 'lib(nvidia-encode|nvcuvid)\.so[.0-9]*' | sort -u | tr '\n' ' ') || true)"
  [ -x "$R" ] || { echo "$R is missing: run tools/device-bundle.sh and carry the bundle"; return 1; }
}

s_synth() {
  # The first GStreamer use scans the plugins: nvcodec says here why an element
  # (nvh264enc) is missing.
  GST_DEBUG=nvcodec:4,nvenc:4 GST_DEBUG_NO_COLOR=1 "$R" synth -o "$WORK/clip.mp4" --frames "$FRAMES" --size 1280x720 --fps 30 \
    2>"$WORK/synth.err"
  local rc=$?
  grep -v -iE 'nvenc|nvcodec' "$WORK/synth.err" | tail -n 5
  return "$rc"
}

s_cudamem() {
  local inspect="$BUNDLE/bin/gst-inspect-1.0" launch="$BUNDLE/bin/gst-launch-1.0" e dec=nvh264dec
  local caps='video/x-raw(memory:CUDAMemory),format=NV12'
  [ -x "$launch" ] || { echo "no gst-launch-1.0 in the bundle (made before 2026-11-30): rebuild it"; return 1; }
  if [ "$DEVICE" = cpu ]; then dec=openh264dec caps='video/x-raw,format=I420'; fi
  "$R" --bundle-exec "$inspect" --version | head -n 2
  for e in $dec nvh265dec cudaupload cudadownload cudaconvert cudascale; do
    if "$R" --bundle-exec "$inspect" --exists "$e"; then echo "element $e: registered"; else echo "element $e: absent"; fi
  done
  "$R" --bundle-exec "$inspect" "$dec" 2>&1 | sed -n '/Pad Templates/,/^Element has no clocking/p' | grep -E 'SRC|SINK|video/x-raw|format:' | head -n 12
  "$R" --bundle-exec "$launch" -v filesrc location="$WORK/clip.mp4" ! qtdemux ! h264parse ! "$dec" ! "$caps" \
    ! fakesink num-buffers=60 >"$WORK/cudamem.log" 2>&1
  local rc=$?
  grep -E "$dec[0-9]*\.GstPad:src: caps|ERROR|WARNING|Execution ended" "$WORK/cudamem.log" | cut -c1-300 | head -n 6
  if grep -q "$dec[0-9]*\.GstPad:src: caps = video/x-raw(memory:CUDAMemory)" "$WORK/cudamem.log"; then
    echo "cudamem: $dec hands decoded frames over in CUDA memory"
  else
    echo "cudamem: $dec did not negotiate CUDA memory here (exit $rc)"
  fi
  return "$rc"
}

s_bench() {
  "$R" bench --model "$MODEL" --device "$DEVICE" --frame 1280x720 --size "$SIZE" --frames "$BENCH_FRAMES" \
    >"$OUT/bench.json" 2>"$WORK/bench.err"
  local rc=$?
  tail -n 5 "$WORK/bench.err"
  cat "$OUT/bench.json"
  "$R" bench --model "$MODEL" --device "$DEVICE" --frame 1280x720 --size "$SIZE" --frames "$BENCH_FRAMES" --temporal \
    >"$WORK/bench-temporal.json" 2>>"$WORK/bench.err" || rc=$?
  cat "$WORK/bench-temporal.json"
  return "$rc"
}

s_process() {
  GST_DEBUG=GST_ELEMENT_FACTORY:4 GST_DEBUG_NO_COLOR=1 "$R" process "$WORK/clip.mp4" -o "$WORK/annotated.mp4" \
    --model "$MODEL" --device "$DEVICE" --size "$SIZE" >"$OUT/process.log" 2>&1
  local rc=$?
  grep -v GST_ELEMENT_FACTORY "$OUT/process.log" | tail -n 8
  return "$rc"
}

s_daemon() {
  local w=${SIZE%x*} h=${SIZE#*x} i pid ready=0 t=0
  {
    echo "# Generated by bench/pipeline-gpu.sh: $STREAMS live 1280x720@30 test streams, each recorded."
    echo "[model]"
    echo "path = \"$MODEL\""
    echo "width = $w"
    echo "height = $h"
    echo "device = \"$DEVICE\""
    echo
    echo "[workers]"
    case $WORKERS in
      *[!0-9]*) echo "count = \"$WORKERS\"" ;;
      *) echo "count = $WORKERS" ;;
    esac
    echo
    echo "[metrics]"
    echo "listen = \"127.0.0.1:$PORT\""
    echo
    echo "[rtsp]"
    echo "listen = \"\""
    echo
    echo "[daemon]"
    echo "shutdown_timeout_s = 20"
    echo "min_free_bytes = 0"
    for i in $(seq 0 $((STREAMS - 1))); do
      echo
      echo "[[streams]]"
      echo "name = \"cam$i\""
      echo "uri = \"test://smpte?width=1280&height=720&fps=30\""
      echo "[streams.output]"
      echo "file = \"$WORK/rec/{stream}-{start}.mp4\""
      echo "segment_seconds = 3600"
    done
  } >"$OUT/config.toml"
  mkdir -p "$WORK/rec"
  timeout 60 "$R" check-config "$OUT/config.toml" || return 1

  # The daemon runs in a session of its own: the step's `timeout` signals its
  # whole process group, and a second TERM means "exit at once" (outputs not
  # finalised). So the only TERM it gets is stop_daemon's, on the way out of
  # this step, even when the step is cut short.
  setsid "$R" run --config "$OUT/config.toml" >"$WORK/daemon.log" 2>&1 &
  pid=$!
  trap 'stop_daemon "$pid"; tail -c 1048576 "$WORK/daemon.log" >"$OUT/daemon.log"; exit 143' TERM INT
  # Ready: the model is loaded (CUDA kernels compiled) and every stream is up.
  for t in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    if fetch "http://127.0.0.1:$PORT/readyz" "$WORK/readyz" 2>/dev/null; then ready=1; break; fi
    sleep 1
  done
  if [ "$ready" = 1 ]; then
    echo "ready after ${t} s; running ${RUN_S} s"
    fetch "http://127.0.0.1:$PORT/metrics" "$WORK/metrics-start.txt"
    sleep "$RUN_S"
    fetch "http://127.0.0.1:$PORT/metrics" "$OUT/metrics.txt"
    fetch "http://127.0.0.1:$PORT/api/v1/streams" "$OUT/streams.json"
  else
    echo "not ready after 60 s (or exited): see daemon.log"
  fi
  trap - TERM INT
  stop_daemon "$pid"
  local rc=$?
  echo "daemon exit status $rc"
  tail -c 1048576 "$WORK/daemon.log" >"$OUT/daemon.log"
  grep -E 'WARN|ERROR' "$WORK/daemon.log" | tail -n 5
  # Every recording plays (frames counted by an independent reader).
  local f n
  for f in "$WORK"/rec/*.mp4; do
    [ -f "$f" ] || continue
    n="(no ffprobe here)"
    command -v ffprobe >/dev/null &&
      n="$(timeout 60 ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$f" 2>&1 | tr '\n' ' ')frames"
    echo "${f##*/} $(stat -c %s "$f") B, $n"
  done | tee "$WORK/recordings.txt"
  [ "$ready" = 1 ] && [ -s "$OUT/metrics.txt" ] && [ "$rc" = 0 ]
}

# ---------------------------------------------------------------- results
json_num() { grep -o "\"$2\":[0-9.eE+-]*" "$1" 2>/dev/null | head -n 1 | cut -d: -f2; }

# Per stream over the daemon's window (metrics-start -> metrics): decoded,
# inferred, written, dropped (all reasons, and the non-zero reasons), inferred
# frames/s, latency p99 (histogram_quantile over the bucket deltas).
stream_table() {
  awk -v run_s="$RUN_S" '
    function labels(s, key,   m) { if (match(s, key "=\"[^\"]*\"")) { m = substr(s, RSTART + length(key) + 2, RLENGTH - length(key) - 3); return m } return "" }
    /^#/ { next }
    {
      split($0, parts, " "); name = parts[1]; v = parts[2] + 0
      metric = name; sub(/\{.*/, "", metric)
      st = labels(name, "stream"); if (st == "") next
      sign = (FILENAME ~ /metrics-start/) ? -1 : 1
      if (sign == 1) streams[st] = 1
      if (metric == "roadseg_frames_decoded_total") dec[st] += sign * v
      else if (metric == "roadseg_frames_inferred_total") inf[st] += sign * v
      else if (metric == "roadseg_frames_written_total") wr[st] += sign * v
      else if (metric == "roadseg_frames_dropped_total") { r = labels(name, "reason"); drop[st] += sign * v; dropr[st, r] += sign * v; reasons[r] = 1 }
      else if (metric == "roadseg_latency_seconds_bucket") { le = labels(name, "le"); bucket[st, le] += sign * v; les[le] = 1 }
      else if (metric == "roadseg_latency_seconds_count") lcount[st] += sign * v
    }
    END {
      n = 0; for (le in les) if (le != "+Inf") { bounds[++n] = le + 0 }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (bounds[j] < bounds[i]) { t = bounds[i]; bounds[i] = bounds[j]; bounds[j] = t }
      printf "| stream | decoded | inferred | inferred fps | written | dropped | dropped by reason | latency p99 |\n"
      printf "|---|---:|---:|---:|---:|---:|---|---:|\n"
      for (st in streams) {
        rs = ""; for (r in reasons) if (dropr[st, r] > 0) rs = rs (rs == "" ? "" : ", ") r " " dropr[st, r]
        total = bucket[st, "+Inf"]; p99 = "n/a"
        if (total > 0) {
          rank = 0.99 * total; prev_b = 0; prev_c = 0; p99 = "> " bounds[n] " s"
          for (i = 1; i <= n; i++) {
            c = 0; for (le in les) if (le != "+Inf" && le + 0 == bounds[i]) c = bucket[st, le]
            if (c >= rank) { p99 = sprintf("%.3f s", prev_b + (bounds[i] - prev_b) * ((c > prev_c) ? (rank - prev_c) / (c - prev_c) : 1)); break }
            prev_b = bounds[i]; prev_c = c
          }
        }
        printf "| %s | %d | %d | %.1f | %d | %d | %s | %s |\n", st, dec[st], inf[st], inf[st] / run_s, wr[st], drop[st], (rs == "" ? "-" : rs), p99
      }
    }' "$WORK/metrics-start.txt" "$OUT/metrics.txt" | { read -r h1; read -r h2; echo "$h1"; echo "$h2"; sort -t'|' -k2,2V; }
}

write_summary() {
  local bench_fps process_fps process_gpu ratio elements
  bench_fps=$(json_num "$OUT/bench.json" fps)
  process_fps=$(grep -o '[0-9.]* frames/s' "$OUT/process.log" 2>/dev/null | tail -n 1 | cut -d' ' -f1)
  process_gpu=$(grep -o 'GPU busy [0-9]*%' "$OUT/process.log" 2>/dev/null | tail -n 1 | cut -d' ' -f3)
  ratio=n/a
  if [ -n "$bench_fps" ] && [ -n "$process_fps" ]; then
    ratio=$(awk -v p="$process_fps" -v b="$bench_fps" 'BEGIN { if (b > 0) printf "%.2f", p / b; else print "n/a" }')
  fi
  elements=$(grep -o 'creating element "[^"]*"' "$OUT/process.log" 2>/dev/null | cut -d'"' -f2 | grep -E 'dec$|enc$|demux$|parse$' | sort -u | tr '\n' ' ')
  {
    echo "# Pipeline check (bench/pipeline-gpu.sh)"
    echo
    echo "$(date -u +%FT%TZ), $(uname -n), device \`$DEVICE\`, bundle \`$BUNDLE\`"
    echo "(FRAMES=$FRAMES STREAMS=$STREAMS SECONDS=$RUN_S SIZE=$SIZE BENCH_FRAMES=$BENCH_FRAMES WORKERS=$WORKERS)"
    echo
    echo "| step | limit s | took s | status |"
    echo "|---|---:|---:|---|"
    local s
    for s in "${STEPS[@]}"; do echo "| ${s//|/ | } |"; done
    echo
    echo "## Throughput"
    echo
    echo "| what | frames/s |"
    echo "|---|---:|"
    echo "| \`roadseg bench\` (1280x720 frames, model $SIZE, $BENCH_FRAMES frames) | ${bench_fps:-n/a} |"
    echo "| \`roadseg process\` ($FRAMES-frame 1280x720 H.264 clip) | ${process_fps:-n/a} |"
    echo "| ratio process / bench | $ratio |"
    echo "| \`roadseg bench --temporal\` (a stream worker's whole path) | $(json_num "$WORK/bench-temporal.json" fps) |"
    echo
    echo "A worker's frame by phase (\`bench --temporal\`, medians in ms; observe = hood, bars and"
    echo "overlay; to_logits = staging, model, logits to the host; filter = smoothing and the"
    echo "grounded-road cut; after_filter = logits back, classes, overlay, results collected):"
    echo
    echo '```'
    grep -o '"worker_phases_median_ms":{[^}]*}' "$WORK/bench-temporal.json" 2>/dev/null || echo "(none)"
    echo '```'
    echo
    echo "NVENC (why nvh264enc is or is not there):"
    echo
    echo '```'
    grep -iE 'nvenc|libnvidia-encode' "$WORK/synth.err" 2>/dev/null | grep -v GST_ELEMENT_FACTORY | cut -c1-220 | head -n 6 |
      grep . || echo "(nvcodec said nothing about NVENC: the plugin is not loaded here)"
    echo '```'
    echo
    echo "Decoded frames in CUDA memory (issue 36; the \`cudamem\` step, \`$DEVICE\`):"
    echo
    echo '```'
    grep -E '^(cudamem:|element )|GstPad:src: caps' "$OUT/pipeline-gpu.log" 2>/dev/null | cut -c1-200 | tail -n 9 | grep . || echo "(not run)"
    echo '```'
    echo
    echo "GPU busy during \`roadseg process\` (CUDA events around its forwards / wall time; target >= 80%): ${process_gpu:-n/a}"
    echo
    echo "GStreamer elements of \`process\` (decoder, encoder, ...): ${elements:-n/a}"
    echo
    echo '```'
    grep -v GST_ELEMENT_FACTORY "$OUT/process.log" 2>/dev/null | grep -E 'frames/s|device|backend|encoder|ffprobe' | tail -n 5
    echo '```'
    echo
    echo "## Daemon: $STREAMS live 1280x720@30 streams, recorded, ${RUN_S} s after ready"
    echo
    if [ -s "$OUT/metrics.txt" ] && [ -s "$WORK/metrics-start.txt" ]; then
      stream_table
      echo
      echo "Counts are over the ${RUN_S} s window (metrics at ready subtracted); p99 is interpolated"
      echo "within roadseg_latency_seconds' buckets (0.005 ... 10 s) like histogram_quantile."
      echo
      echo '```'
      grep -E '^roadseg_(worker_busy_ratio|gpu_busy_ratio|gpu_utilization_ratio|gpu_memory_used_bytes|device_fallback_total)' "$OUT/metrics.txt" | head -n 12
      echo '```'
      echo
      echo "Where the latency went (roadseg_stage_seconds, mean per frame since the daemon started, all streams):"
      echo
      echo '```'
      awk '/^roadseg_stage_seconds_(sum|count)/ { split($0, p, " "); st = p[1]; sub(/.*stage="/, "", st); sub(/".*/, "", st);
             if (p[1] ~ /_sum/) s[st] += p[2]; else c[st] += p[2] }
           END { for (k in c) if (c[k] > 0) printf "%-16s %8.2f ms over %d frames\n", k, 1000 * s[k] / c[k], c[k] }' "$OUT/metrics.txt" | sort
      echo '```'
    else
      echo "no metrics (the daemon step did not get that far)"
    fi
    echo
    echo "Recordings (ffprobe):"
    echo
    if [ -s "$WORK/recordings.txt" ]; then sed 's/^/    /' "$WORK/recordings.txt"; else echo "    none"; fi
  } >"$OUT/summary.md"
}

# ---------------------------------------------------------------- run
echo "pipeline-gpu: OUT=$OUT WORK=$WORK budget ${BUDGET_S} s"
step header s_header
write_summary
step synth s_synth && [ -s "$WORK/clip.mp4" ]
have_clip=$?
write_summary
if [ "$have_clip" = 0 ]; then step cudamem s_cudamem; else STEPS+=("cudamem|0|0|skipped (no clip)"); fi
write_summary
step bench s_bench
write_summary
if [ "$have_clip" = 0 ]; then
  step process s_process
  if [ -s "$WORK/annotated.mp4" ] && command -v ffprobe >/dev/null; then
    n=$(timeout 120 ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$WORK/annotated.mp4")
    echo "annotated.mp4: $n frames (input $FRAMES)"
    echo "annotated.mp4 frames (ffprobe): $n of $FRAMES" >>"$OUT/process.log"
  fi
else
  STEPS+=("process|0|0|skipped (no clip)")
fi
write_summary
step daemon s_daemon
write_summary
echo
cat "$OUT/summary.md"
echo "pipeline-gpu: done in $(($(date +%s) - START)) s; $OUT/summary.md"
[ "${CLEAN_WORK:-0}" = 1 ] && rm -rf "$WORK"
# Exit status: 0 when every step was ok.
for s in "${STEPS[@]}"; do
  case $s in *"|ok") ;; *) exit 1 ;; esac
done
exit 0
