#!/usr/bin/env bash
# The GPU half of the checks, as device calls that each fit one command of
# the device tool (<= 540 s, <= 8 files in $OUT, one level of folders):
# docs/gpu-check.md has the exact calls, what each carries and how to read
# the results. On a GPU machine that has only the checkout plus the carried
# target/device (no Rust, no GStreamer, no ../shared):
#
#   bench/gpu-check.sh CALL           CALL, in order of value:
#     tests       the CUDA tests: cuda_kernels::, the memory test alone, every
#                 test with "cuda" in its path plus overlay:: (GPU), parity::
#                 (CPU) beside them; the ../shared fixtures regenerated first
#     kernels     roadseg bench of random B5 and B0 checkpoints at 1024x1024,
#                 the defaults against each alternative (no split attention,
#                 no fused decoder, naive layer norm, naive im2col, and the
#                 defaults before 2026-11-26: neither split nor fused)
#     torch       the bundled model's accurate/fast ratio (1280x720 frames),
#                 then B5 1024x1024: roadseg beside PyTorch eager,
#                 channels_last+SDPA and torch.compile (reduce-overhead)
#     ncu         Nsight Compute, one B5 forward: default kernels, then the
#                 alternatives in NCU_KERNELS (default: split attention and
#                 fused decoder off)
#     b0-compile  torch.compile max-autotune of B0 alone (~390 s of compile)
#   bench/gpu-check.sh --plan [CALL...]     each call's steps, limits and
#                 worst-case time; exit 1 when a call's is over CALL_LIMIT_S
#   bench/gpu-check.sh --dry-run [CALL...]  no GPU needed: the plan check,
#                 then every step's files, binaries, flags and test filters
#                 exercised on the CPU (CI runs it on every change)
#
# $OUT (default bench/out) receives three files, rewritten after every step
# so a call cut short still returns what it measured:
#   summary.md       every result, and per step its limit, time and status
#   gpu-check.log    the console log
#   results.tar.gz   every raw file: step logs, bench JSONs, ncu tables
#
# Time: steps run in phases; the steps of one phase run side by side. A
# step runs under `timeout` with its own limit (plus KILL_AFTER_S for a step
# that ignores TERM), capped by what is left of CALL_LIMIT_S. The worst case
# of a call is the sum over its phases of the largest limit plus
# KILL_AFTER_S, plus END_RESERVE_S for the summary; --plan prints it.
#
# Environment: OUT, GPU_CHECK_WORK (raw files; default a new /tmp folder),
# DEVICE_DIR (target/device), ROADSEG_BIN, TEST_DIR, SHARED_TOOLS, ROADSEG_SHARED
# (a folder already holding fixtures/segformer/*: reused), PYTHON, CKPT_DIR,
# FRAMES (100 per kernel bench), NCU, NCU_CLOCK_CONTROL (base), NCU_KERNELS,
# BUNDLED_SIZE (1024x576), BUNDLED_FRAME (1280x720).
#
# Never `wait` without arguments below: stdout goes through `tee`, and a bare
# `wait` waits for the tee too (the command then hangs until it is killed).
# shellcheck disable=SC2317 # the step_* functions are called as "step_$name"
set -uo pipefail # no -e: a failing step is recorded and the others still run

cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
SELF=$REPO/bench/gpu-check.sh
CALLS=(tests kernels torch ncu b0-compile)

OUT=${OUT:-bench/out}
CALL_LIMIT_S=${CALL_LIMIT_S:-540}
KILL_AFTER_S=5
END_RESERVE_S=20 # the summary, summary.md and the tarball
MIN_STEP_S=10    # a step that would get less is skipped
DEVICE_DIR=${DEVICE_DIR:-$REPO/target/device}
ROADSEG_BIN=${ROADSEG_BIN:-$DEVICE_DIR/roadseg}
TEST_DIR=${TEST_DIR:-$DEVICE_DIR}
SHARED_TOOLS=${SHARED_TOOLS:-$DEVICE_DIR/shared-tools}
PYTHON=${PYTHON:-python3}
CKPT_DIR=${CKPT_DIR:-${TMPDIR:-/tmp}/roadseg-bench-ckpt}
FRAMES=${FRAMES:-100}
NCU_CLOCK_CONTROL=${NCU_CLOCK_CONTROL:-base}
NCU_KERNELS=${NCU_KERNELS:-ROADSEG_CUDA_SPLIT_ATTENTION=0 ROADSEG_CUDA_FUSED_DECODER=0}
BUNDLED_SIZE=${BUNDLED_SIZE:-1024x576}
BUNDLED_FRAME=${BUNDLED_FRAME:-1280x720}
MEMTEST=cuda::ten_thousand_replays_do_not_grow_memory # asserts device-wide free memory: runs alone
DRY=${DRY:-0}
export ROADSEG_BIN PYTHON CKPT_DIR FRAMES DRY
if [ -d /usr/local/cuda/lib64 ]; then # libcublasLt, libnvrtc of the CUDA install
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export ROADSEG_REPO=$REPO

# ---------------------------------------------------------------------------
# The calls: one line per step, "PHASE LIMIT_S NAME STEP ARGS...". Steps of
# one phase run side by side; phases run in order.
# ---------------------------------------------------------------------------
KERNEL_CONFIGS=(
  "default|"
  "no-split-attention|ROADSEG_CUDA_SPLIT_ATTENTION=0"
  "no-fused-decoder|ROADSEG_CUDA_FUSED_DECODER=0"
  "naive-layer-norm|ROADSEG_CUDA_LAYER_NORM=naive"
  "naive-im2col|ROADSEG_CUDA_IM2COL=naive"
  "before-2026-11-26|ROADSEG_CUDA_SPLIT_ATTENTION=0 ROADSEG_CUDA_FUSED_DECODER=0"
  "spin-wait|ROADSEG_CUDA_SYNC=spin" # CUDA's spinning wait, the default until 2026-11-29: host CPU per frame
)

plan() {
  case $1 in
    tests)
      echo "1 20 header header"
      echo "2 180 fixtures fixtures"
      echo "2 90 test-cuda_kernels test cuda_kernels::"
      echo "2 120 test-cuda-memory test --exact $MEMTEST"
      echo "3 200 test-cuda test cuda overlay:: --skip cuda_kernels:: --skip cli:: --skip $MEMTEST"
      echo "3 200 test-parity test parity::"
      ;;
    kernels)
      echo "1 20 header header"
      echo "2 60 ckpt-b5 ckpt b5"
      echo "2 60 ckpt-b0 ckpt b0"
      local phase=3 arch c limit=90 # the first bench compiles the kernels (NVRTC, cached after)
      for arch in b5 b0; do
        for c in "${KERNEL_CONFIGS[@]}"; do
          echo "$phase $limit $arch-${c%%|*} bench $arch ${c%%|*}"
          phase=$((phase + 1)) limit=20
        done
      done
      ;;
    torch)
      echo "1 20 header header"
      echo "2 60 bundled-fast bundled fast 300" # the first run compiles the kernels
      echo "3 40 bundled-accurate bundled accurate 100"
      echo "4 60 ckpt-b5 ckpt b5"
      echo "5 30 b5-default bench b5 default"
      echo "6 250 torch-b5 torch b5 reduce-overhead eager_fp16,channels_last_sdpa_fp16,compile_max_autotune_fp16"
      ;;
    ncu)
      echo "1 20 header header"
      echo "2 60 ckpt-b5 ckpt b5"
      echo "3 200 ncu-default ncu default"
      echo "4 200 ncu-alternatives ncu alternatives"
      ;;
    b0-compile)
      echo "1 20 header header"
      echo "2 60 ckpt-b0 ckpt b0"
      echo "3 400 torch-b0-compile torch b0 max-autotune compile_max_autotune_fp16"
      ;;
    *) return 1 ;;
  esac
}

worst_case() { # worst_case CALL: seconds, from the plan
  plan "$1" | awk -v k="$KILL_AFTER_S" -v r="$END_RESERVE_S" '
    { if ($2 > m[$1]) m[$1] = $2 }
    END { for (p in m) s += m[p] + k; print s + r }'
}

show_plan() { # show_plan CALL: the table, and 1 when the call can overrun
  local call=$1 w
  w=$(worst_case "$call")
  echo "call $call: worst case ${w} s (limit ${CALL_LIMIT_S} s)"
  plan "$call" | awk '{ printf "  phase %-2s %4s s  %s\n", $1, $2, $3 }'
  [ "$w" -lt "$CALL_LIMIT_S" ]
}

# ---------------------------------------------------------------------------
# Steps: each runs as its own process ("$SELF __step KIND ARGS"), under
# timeout. Exit 0 ok, 77 skipped (the reason is the log's last line), else
# failed. With DRY=1 each checks on the CPU what it would use on the GPU.
# ---------------------------------------------------------------------------
need_exe() { # need_exe PATH: a carried build product
  [ -x "$1" ] && return 0
  echo "$1 not found: build it here with ./tools/device-build.sh and carry target/device"
  return 2
}

step_header() {
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname) ($(nproc) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}'))"
  if git -C "$REPO" rev-parse HEAD >/dev/null 2>&1; then
    echo "checkout: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (dirty)')"
  else
    echo "checkout: no git metadata here (see build)"
  fi
  if [ -f "$DEVICE_DIR/build-info.txt" ]; then
    echo "build: $(tr '\n' ' ' <"$DEVICE_DIR/build-info.txt")"
  else
    echo "build: $DEVICE_DIR/build-info.txt absent (not built by tools/device-build.sh?)"
  fi
  if command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | sed -n 1,4p | tr '\n' ';')"
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "python: $($PYTHON -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda, "transformers", transformers.__version__, "cuda_available", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  local ncu
  if ncu=$(find_ncu); then echo "ncu: $ncu $("$ncu" --version 2>&1 | tail -n 1)"; else echo "ncu: not found"; fi
  echo
  echo "## target/device"
  ls -la "$DEVICE_DIR" "$SHARED_TOOLS" 2>&1
  echo
  echo "## CUDA libraries (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libcublasLt\.so|libnvrtc\.so' | sed -n 1,12p
  if command -v nvidia-smi >/dev/null; then echo; nvidia-smi 2>&1; fi
  need_exe "$ROADSEG_BIN" && need_exe "$TEST_DIR/test-it"
}

find_ncu() {
  if [ -n "${NCU:-}" ]; then
    [ -x "$NCU" ] && { echo "$NCU"; return 0; }
    return 1
  fi
  local c
  for c in "$(command -v ncu 2>/dev/null)" /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

fixture_cases() { echo b0-cityscapes-1024x1024 b5-shallow-fp16-320x256 tiny-1024x576 b0-image-1024x576; }

fixtures_complete() { # fixtures_complete ROOT: ROOT/fixtures/segformer/<case>/logits.npy for every case
  local c
  for c in $(fixture_cases); do
    [ -f "$1/fixtures/segformer/$c/logits.npy" ] || return 1
  done
}

step_fixtures() {
  if [ "$FIXTURES" = reuse ]; then
    echo "reusing the fixtures in $ROADSEG_SHARED/fixtures/segformer (ROADSEG_SHARED was set)"
    return 0
  fi
  local script=$SHARED_TOOLS/make_segformer_goldens.py
  if [ ! -f "$script" ] || [ ! -f "$SHARED_TOOLS/bdd.jpg" ]; then
    echo "$script or $SHARED_TOOLS/bdd.jpg is missing: run ./tools/device-build.sh where ../shared is (it copies both into target/device/shared-tools) and carry target/device"
    return 2
  fi
  if [ "$DRY" = 1 ]; then
    "$PYTHON" -m py_compile "$script" && echo "dry run: $script compiles; the fixtures are made on the GPU machine"
    return
  fi
  local root=$ROADSEG_SHARED/fixtures/segformer
  rm -rf "$root" && mkdir -p "$root" || return 1
  echo "$PYTHON $script public $root $SHARED_TOOLS"
  "$PYTHON" "$script" public "$root" "$SHARED_TOOLS" || return 1
  fixtures_complete "$ROADSEG_SHARED" || { echo "a case is missing under $root"; return 1; }
  du -sh "$root"/* "$root"
}

step_test() { # step_test FILTER... [--skip X] [--exact]: test-it --test-threads 1 --nocapture ...
  local exe=$TEST_DIR/test-it
  need_exe "$exe" || return
  if [ "$DRY" = 1 ]; then
    local listed
    listed=$("$exe" --list "$@" | grep -c ': test$')
    echo "dry run: $exe --list $* lists $listed tests"
    [ "$listed" -gt 0 ] || { echo "no test matches $*"; return 3; }
    return 0
  fi
  local out=$WORK/tmp.$$.test
  echo "ROADSEG_REPO=$ROADSEG_REPO ROADSEG_SHARED=$ROADSEG_SHARED $exe --test-threads 1 --nocapture $*"
  "$exe" --test-threads 1 --nocapture "$@" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ] && grep -q '^running 0 tests' "$out"; then
    echo "no test ran (a filter that matches nothing?)"
    rc=3
  fi
  rm -f "$out"
  return "$rc"
}

step_ckpt() { # step_ckpt ARCH: the random checkpoint the benches use
  local arch=$1 dir=$CKPT_DIR/$1
  if [ -f "$dir/config.json" ] && [ -f "$dir/model.safetensors" ]; then
    echo "$dir exists"
    return 0
  fi
  rm -rf "$dir" "$dir.part"
  mkdir -p "$CKPT_DIR"
  if [ "$DRY" = 1 ]; then # no torch here: a small real checkpoint stands in
    "$PYTHON" -m py_compile bench/make_random_checkpoint.py || return 1
    cp -r tests/data/odd-bf16-203x141 "$dir.part" && mv "$dir.part" "$dir"
    echo "dry run: $dir is a copy of tests/data/odd-bf16-203x141"
    return
  fi
  # Into .part first: a step cut off by its limit leaves no half checkpoint.
  "$PYTHON" bench/make_random_checkpoint.py --arch "$arch" --labels 19 --dtype f16 --seed 0 --out "$dir.part" &&
    mv "$dir.part" "$dir"
}

kernel_env() { # kernel_env CONFIG: its ROADSEG_CUDA_* settings
  local c
  for c in "${KERNEL_CONFIGS[@]}"; do
    [ "${c%%|*}" = "$1" ] && { echo "${c#*|}"; return 0; }
  done
  echo "unknown kernel configuration $1" >&2
  return 1
}

roadseg_bench() { # roadseg_bench JSON ENV ARGS...: one `roadseg bench`, its JSON line kept
  local json=$1 envs=$2
  shift 2
  need_exe "$ROADSEG_BIN" || return
  local dev=(--device cuda --precision fp16)
  [ "$DRY" = 1 ] && dev=(--device cpu)
  local cmd=("$ROADSEG_BIN" bench "$@" "${dev[@]}")
  echo "${envs:+$envs }${cmd[*]}"
  local line rc
  # shellcheck disable=SC2086 # envs is a list of NAME=VALUE words
  line=$(env $envs "${cmd[@]}")
  rc=$?
  echo "$line"
  if [ "$rc" != 0 ]; then
    echo "roadseg bench exited $rc"
    return "$rc"
  fi
  mkdir -p "$(dirname "$json")"
  echo "$line" | tail -n 1 >"$json"
}

step_bench() { # step_bench ARCH CONFIG: the random checkpoint at 1024x1024 under one kernel configuration
  local arch=$1 config=$2 envs size=1024x1024 frames=$FRAMES
  envs=$(kernel_env "$config") || return 2
  [ "$DRY" = 1 ] && size=224x160 frames=2
  roadseg_bench "$BENCH/roadseg-$arch-$config.json" "$envs" --model "$CKPT_DIR/$arch" --size "$size" --frame "$size" \
    --frames "$frames" --workers 1
}

step_bundled() { # step_bundled PRESET FRAMES: the bundled model on camera-sized frames
  local preset=$1 n=$2 size=$BUNDLED_SIZE
  [ "$DRY" = 1 ] && size=256x160 n=2
  roadseg_bench "$BENCH/bundled-$preset.json" "" --model models/roadseg-camvid --size "$size" --frame "$BUNDLED_FRAME" \
    --frames "$n" --preset "$preset"
}

step_torch() { # step_torch ARCH COMPILE_MODE CONFIGS: bench/cuda.sh's PyTorch side
  local arch=$1 mode=$2 configs=$3
  if [ "$DRY" = 1 ]; then
    bash -n bench/cuda.sh && "$PYTHON" -m py_compile bench/torch_segformer.py &&
      echo "dry run: bench/cuda.sh and bench/torch_segformer.py parse; torch runs on the GPU machine"
    return
  fi
  env OUT="$BENCH/torch" COMPILE_MODE="$mode" TORCH_CONFIGS="$configs" bench/cuda.sh "torch-$arch"
}

step_ncu() { # step_ncu default|alternatives: one B5 forward profiled, per-kernel table
  local variant=$1 envs=""
  [ "$variant" = alternatives ] && envs=$NCU_KERNELS
  mkdir -p "$NCU_DIR"
  local rep=$NCU_DIR/b5-$variant table=$NCU_DIR/b5-$variant.md label="kernels: ${envs:-defaults}"
  if [ "$DRY" = 1 ]; then # the table code on a made-up profile
    printf '"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","preprocess_f16(int)","1000"\n"1","nvjet_hsh_64x8(x)","5000"\n"2","layer_norm_f16(x)","2000"\n' >"$rep.csv"
    bench/ncu_table.py "$rep.csv" base "$label (dry run, made-up profile)" >"$table" || return 1
    grep -q '| layer_norm | 1 |' "$table" || { cat "$table"; echo "the table misses a kernel"; return 1; }
    echo "dry run: bench/ncu_table.py summarised a made-up profile; ncu runs on the GPU machine"
    return 0
  fi
  local ncu
  if ! ncu=$(find_ncu); then
    echo "skipped: ncu (Nsight Compute) not found on PATH, in /usr/local/cuda/bin or /opt/nvidia/nsight-compute (set NCU)"
    return 77
  fi
  need_exe "$ROADSEG_BIN" || return
  [ -f "$CKPT_DIR/b5/model.safetensors" ] || { echo "$CKPT_DIR/b5 missing (ckpt-b5 failed?)"; return 1; }
  local clock=$NCU_CLOCK_CONTROL
  # One frame, no warm-up, no graph: the profile holds exactly one forward
  # (plus the frame's pre/postprocess kernels), each kernel timed alone.
  local app=("$ROADSEG_BIN" bench --model "$CKPT_DIR/b5" --size 1024x1024 --frame 1024x1024
    --frames 1 --warmup 0 --workers 1 --device cuda --precision fp16 --no-graph)
  local prof=("$ncu" --target-processes all --metrics gpu__time_duration.sum -f -o "$rep")
  echo "${envs:+$envs }${prof[*]} --clock-control $clock ${app[*]}"
  # shellcheck disable=SC2086 # envs is a list of NAME=VALUE words
  if ! env $envs "${prof[@]}" --clock-control "$clock" "${app[@]}"; then
    [ "$clock" = none ] && return 1
    clock=none
    echo "ncu failed with --clock-control $NCU_CLOCK_CONTROL; again with --clock-control none (the GPU's own clocks)"
    # shellcheck disable=SC2086
    env $envs "${prof[@]}" --clock-control none "${app[@]}" || return 1
  fi
  if ! "$ncu" --import "$rep.ncu-rep" --csv --page raw --print-units base --print-kernel-base function >"$rep.csv"; then
    echo "ncu --import with --print-units/--print-kernel-base failed; plain --csv --page raw"
    "$ncu" --import "$rep.ncu-rep" --csv --page raw >"$rep.csv" || return 1
  fi
  bench/ncu_table.py "$rep.csv" "$clock" "$label" >"$table" || return 1
  cat "$table"
}

# ---------------------------------------------------------------------------
# summary.md (plain python3; rewritten after every step)
# ---------------------------------------------------------------------------
write_summary() {
  mkdir -p "$OUT"
  python3 - "$WORK" "$CALL" "$(worst_case "$CALL")" "${1:-running}" >"$OUT/summary.md.part" <<'EOF' && mv "$OUT/summary.md.part" "$OUT/summary.md"
import glob, json, os, re, sys
work, call, worst, state = sys.argv[1:5]
def read(p):
    try:
        with open(p, errors="replace") as f:
            return f.read()
    except OSError:
        return ""
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
print(f"# roadseg GPU check, call `{call}` ({state}; worst case {worst} s)")
print()
print("```")
print("\n".join(read(os.path.join(work, "logs", "header.log")).splitlines()[:8]))
print("```")
print()
print("| step | status | exit | s | limit s |")
print("|---|---|---:|---:|---:|")
for f in sorted(glob.glob(os.path.join(work, "steps", "[0-9]*"))):
    name, status, rc, secs, limit = (read(f).strip().split("\t") + [""] * 5)[:5]
    print(f"| {name} | {status} | {rc} | {secs} | {limit} |")
tests = sorted(glob.glob(os.path.join(work, "logs", "test-*.log")))
if tests:
    print("\n## Tests\n")
    for t in tests:
        keep = [l for l in read(t).splitlines() if re.search(
            r"relative L2|max diff|device free|agreement|^GPU:|SKIP|panicked|test result|FAILED|failures:|not found|error", l)]
        print(f"### {os.path.basename(t)[:-4]}\n\n```\n" + "\n".join(keep[:60]) + "\n```\n")
bench = os.path.join(work, "bench")
rows = []
for arch in ("b5", "b0"):
    base = load(os.path.join(bench, f"roadseg-{arch}-default.json")) or {}
    for p in sorted(glob.glob(os.path.join(bench, f"roadseg-{arch}-*.json"))):
        r = load(p) or {}
        config = os.path.basename(p)[len(f"roadseg-{arch}-"):-5]
        vs = ""
        if r.get("median_ms") and base.get("median_ms"):
            vs = f"{r['median_ms'] / base['median_ms']:.3f}"
        rows.append(f"| {arch} | {config} | {r.get('median_ms', '-')} | {r.get('p90_ms', '-')} | {r.get('model_median_ms', '-')} | {r.get('fps', '-')} | {vs} | {r.get('host_cpu_ms_per_frame', '-')} |")
if rows:
    print("\n## roadseg bench, random checkpoints at 1024x1024, fp16, batch 1, one worker\n")
    print("`x default` < 1 means the configuration is faster than the defaults (a winner: turn it on in `CudaOptions::DEFAULT`, src/backend/cuda/options.rs).\n")
    print("| model | kernels | frame median ms | p90 ms | model median ms | fps | x default | host CPU ms a frame |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
fast, acc = load(os.path.join(bench, "bundled-fast.json")), load(os.path.join(bench, "bundled-accurate.json"))
if fast or acc:
    print("\n## Bundled model (models/roadseg-camvid), 1280x720 frames, fp16\n")
    print("| preset | frame median ms | p90 ms | model median ms | fps | host CPU ms a frame |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in (("fast", fast), ("accurate", acc)):
        r = r or {}
        print(f"| {name} | {r.get('median_ms', '-')} | {r.get('p90_ms', '-')} | {r.get('model_median_ms', '-')} | {r.get('fps', '-')} | {r.get('host_cpu_ms_per_frame', '-')} |")
    if fast and acc and fast.get("median_ms") and acc.get("median_ms"):
        ratio = acc["median_ms"] / fast["median_ms"]
        print(f"\naccurate / fast = **{ratio:.2f}x** (target <= 3.5x: {'met' if ratio <= 3.5 else 'NOT met'})")
for p in sorted(glob.glob(os.path.join(bench, "torch", "torch-*.json"))):
    t = load(p) or {}
    meta = t.get("meta", {})
    print(f"\n## PyTorch, {os.path.basename(p)[6:-5]} ({meta.get('gpu')}, torch {meta.get('torch')}, floor {meta.get('floor_ms')} ms)\n")
    print("| configuration | median ms | x floor | compile s |")
    print("|---|---:|---:|---:|")
    for r in t.get("results", []):
        if "error" in r:
            print(f"| {r.get('config')} | FAILED: {str(r['error'])[:120]} | | |")
        else:
            print(f"| {r.get('config')} {r.get('compile_mode') or ''} | {r.get('median_ms')} | {r.get('x_floor', 0):.1f} | {r.get('compile_s') or ''} |")
for p in sorted(glob.glob(os.path.join(work, "ncu", "*.md"))):
    print(f"\n## Nsight Compute ({os.path.basename(p)[:-3]})\n")
    print(read(p).strip())
print("\nresults.tar.gz (beside this file) holds every step's log (logs/), the bench JSONs (bench/) and the ncu CSVs (ncu/).")
EOF
}

snapshot() { # summary.md and results.tar.gz as they stand (a kill later still leaves them)
  write_summary "${1:-running}" || echo "summary.md: the writer failed (the step table is in results.tar.gz)"
  # Not the fixtures (regenerated) nor the ncu reports (big: the CSVs hold the numbers).
  tar czf "$WORK/results.tar.gz.part" -C "$WORK" --exclude=./shared --exclude='./*.part' --exclude='*.ncu-rep' \
    --exclude=./results.tar.gz . && mv "$WORK/results.tar.gz.part" "$OUT/results.tar.gz"
}

# ---------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------
now() { date +%s; }
left() { echo $((DEADLINE - END_RESERVE_S - $(now))); }
stamp() { echo "$(date -u +%T) +$(($(now) - START))s"; }

run_step() { # run_step INDEX NAME LIMIT KIND ARGS...: under timeout, output to $LOGS/NAME.log, status to $ST
  local idx=$1 name=$2 limit=$3
  shift 3
  local log=$LOGS/$name.log stf l t
  stf=$ST/$(printf %02d "$idx")-$name
  l=$(left)
  t=$((limit < l ? limit : l))
  if ((t < MIN_STEP_S)); then
    echo "skipped: no time left (${l}s before the deadline)" >"$log"
    printf '%s\tskipped\t-\t0\t%s\n' "$name" "$limit" >"$stf"
    echo "== $(stamp) $name: skipped, no time left"
    return 0
  fi
  echo "== $(stamp) $name (limit ${t}s)"
  local t0=$EPOCHREALTIME
  timeout -k "$KILL_AFTER_S" "$t" "$SELF" __step "$@" >"$log" 2>&1 </dev/null
  local rc=$? status dt
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124 | 137 | 143) status=TIMEOUT ;;
    *) status=FAILED ;;
  esac
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$dt" "$t" >"$stf"
  local msg="== $(stamp) $name: $status (exit $rc, ${dt}s)"
  [ "$status" != ok ] && msg+=$'\n'$(tail -n 6 "$log" | sed 's/^/   | /')
  echo "$msg" # one write: parallel steps do not interleave their tails
  [ "$status" = ok ] || [ "$status" = skipped ]
}

run_call() { # run_call CALL: its phases in order, the steps of a phase side by side
  local phase idx=0 failed=0 p pids=() line
  local -a lines
  mapfile -t lines < <(plan "$CALL")
  for phase in $(printf '%s\n' "${lines[@]}" | awk '{print $1}' | uniq); do
    pids=()
    for line in "${lines[@]}"; do
      read -r p limit name kind args <<<"$line"
      [ "$p" = "$phase" ] || continue
      idx=$((idx + 1))
      # shellcheck disable=SC2086 # args is a word list
      run_step "$idx" "$name" "$limit" "$kind" $args &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    snapshot
  done
  return "$failed"
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
if [ "${1:-}" = __step ]; then
  kind=$2
  shift 2
  "step_$kind" "$@"
  exit $?
fi

case ${1:-} in
  --plan | --dry-run)
    mode=$1
    shift
    [ $# -gt 0 ] || set -- "${CALLS[@]}"
    rc=0
    for c in "$@"; do show_plan "$c" || { echo "call $c: its worst case is over ${CALL_LIMIT_S} s"; rc=1; }; done
    [ "$mode" = --plan ] && exit "$rc"
    for c in "$@"; do
      echo "# dry run of call $c"
      DRY=1 CKPT_DIR=$(mktemp -d) GPU_CHECK_WORK=$(mktemp -d) OUT=${OUT%/}/dry-$c "$SELF" "$c" || rc=1
    done
    exit "$rc"
    ;;
  "" | -h | --help)
    sed -n '2,/^set -uo/p' "$0" | sed -n '/^#/p'
    exit 2
    ;;
esac
CALL=$1
plan "$CALL" >/dev/null || { echo "unknown call '$CALL' (calls: ${CALLS[*]})" >&2; exit 2; }

if [ -z "${GPU_CHECK_WORK:-}" ]; then
  GPU_CHECK_WORK=$(mktemp -d "${TMPDIR:-/tmp}/roadseg-gpu-check.XXXXXX") || exit 1
fi
WORK=$GPU_CHECK_WORK
LOGS=$WORK/logs ST=$WORK/steps BENCH=$WORK/bench NCU_DIR=$WORK/ncu
# Fixtures: reuse ROADSEG_SHARED when it already holds them, else regenerate into $WORK/shared.
if [ -n "${ROADSEG_SHARED:-}" ] && fixtures_complete "$ROADSEG_SHARED"; then
  FIXTURES=reuse
else
  FIXTURES=regen
  ROADSEG_SHARED=$WORK/shared
fi
export FIXTURES ROADSEG_SHARED WORK LOGS ST BENCH NCU_DIR CALL
rm -rf "$LOGS" "$ST" "$BENCH" "$NCU_DIR"
mkdir -p "$OUT" "$LOGS" "$ST" "$BENCH" "$NCU_DIR" || exit 1
OUT=$(cd "$OUT" && pwd)
START=$(now)
DEADLINE=$((START + CALL_LIMIT_S))
exec > >(tee "$OUT/gpu-check.log") 2>&1
TEE_PID=$!
echo "# $(date -u +%FT%TZ) bench/gpu-check.sh $CALL${DRY:+ (DRY=$DRY)}: worst case $(worst_case "$CALL") s, raw files in $WORK, results in $OUT"
run_call
rc=$?
total=$(($(now) - START))
snapshot "finished in ${total}s"
echo "# done in ${total}s: $OUT/summary.md, $OUT/results.tar.gz, $OUT/gpu-check.log"
cat "$OUT/summary.md"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit "$rc"
