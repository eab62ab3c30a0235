#!/usr/bin/env bash
# The GPU half of the checks in one command (issue 9): on a GPU machine that
# has only the checkout plus the carried target/device (no Rust, no GStreamer,
# no ../shared), in under 9 minutes:
#
#   1. environment header (nvidia-smi, torch/transformers, CUDA libraries,
#      build and checkout revisions)
#   2. the ../shared SegFormer fixtures, regenerated with the copy of
#      ../shared/tools/make_segformer_goldens.py that tools/device-build.sh puts
#      into target/device/shared-tools (with its one input image)
#   3. the CUDA tests (modules of target/device/test-it): cuda_kernels::,
#      every test with "cuda" in its path (cuda::, cuda_annotate::,
#      frame_path::cuda_frame_path, ...; --test-threads 1) and parity::,
#      --nocapture, each its own log; a failure stops nothing
#   4. bench/cuda.sh: PyTorch vs roadseg on random B5 / B0 checkpoints (B5 with
#      COMPILE_MODE=reduce-overhead: max-autotune does not compile B5 within
#      10 minutes; B0 with max-autotune, see "B0 compile" below), and roadseg
#      bench of the bundled model (models/roadseg-camvid, 1280x720 frames),
#      fast and accurate presets, for "accurate <= 3.5x fast"; then the
#      opt-in kernels, 100 frames each: split-KV attention (B5 only) and the
#      fused decode tail
#   5. Nsight Compute: one B5 1024x1024 forward (--no-graph, one frame, no
#      warm-up), summarised per kernel (calls, total us, share)
#   6. $OUT/summary.md: every result, and per step its time limit, the time it
#      took and whether it failed, timed out or was skipped
#
# Usage (from anywhere; it runs in the repository root):
#   ./tools/device-build.sh                      # here, where Rust is
#   OUT=$OUT bench/gpu-check.sh                  # there (device tool: carry ["target/device"])
#
# $OUT (default bench/out) receives only three files, because a device run
# returns at most 8 files from $OUT:
#   summary.md       everything that matters, rewritten after every step
#   gpu-check.log    the console log (steps, limits, failures' last lines)
#   results.tar.gz   every raw file: env.txt, each step's log, bench/cuda.sh's
#                    JSONs and summary.txt, the ncu report/CSV/table
#                    (tar xzf results.tar.gz; also rewritten after every step)
# The raw files live in $GPU_CHECK_WORK (default: a new /tmp/roadseg-gpu-check.*).
#
# Time: every step runs under `timeout` with its own limit, capped by what is
# left of BUDGET_S (default 525 s = 8 min 45 s); a step that would get less
# than 15 s is skipped. Each limit below is a ceiling for a hung step, not the
# expected time.
#
# B0 compile: torch.compile(mode="max-autotune") took 390 s to compile B0 on an
# H100 (../shared/perf/h100-2026-11-22.md), about as long as everything else
# together, so it cannot run after the rest. With B0_COMPILE=background (the
# default) it runs (only the compile_max_autotune_fp16 configuration; eager and
# channels_last+SDPA are a foreground step) in the background at nice 19 from
# early on, and so that nothing it does is measured as something else, nor
# anything else as it:
#   * it starts after the test that asserts the device-wide free memory is
#     unchanged over 10,000 graph replays (that test runs first, alone);
#   * it is paused (SIGSTOP on its process group) once, for the roadseg
#     bench steps and the ncu profile, which come last (a pause that lands
#     inside one of Inductor's autotuning timings makes that candidate look
#     slow, so there is one pause, not one per step);
#   * when its compile is done it is paused until the step in progress ends,
#     then its timing runs alone (the next step waits for it).
# The PyTorch baseline steps (torch B5, torch B0 eager) and the tests may
# overlap its compile; summary.md says which did. It may not finish within the
# budget (it gets ~6 of the 8.75 minutes, shared with the CPU work); then
# summary.md says so, and `bench/cuda.sh ckpt torch-b0 summary` as a command
# of its own measures it. B0_COMPILE=skip leaves it out (the run then ends
# when the other steps do).
#
# Environment knobs: OUT, BUDGET_S, GPU_CHECK_WORK, DEVICE_DIR (target/device),
# ROADSEG_BIN ($DEVICE_DIR/roadseg), TEST_DIR ($DEVICE_DIR), SHARED_TOOLS
# ($DEVICE_DIR/shared-tools), ROADSEG_SHARED (set to a folder that already
# holds fixtures/segformer/* to reuse it instead of regenerating), PYTHON
# (python3), CKPT_DIR, FRAMES (300, roadseg bench per case), ITERS/WARMUP
# (bench/cuda.sh's), B0_COMPILE, NCU (path of ncu), NCU_CLOCK_CONTROL (base, as
# the perf notes; "none" for the GPU's own clocks), BUNDLED_SIZE (1024x576),
# BUNDLED_FRAME (1280x720).
#
# Never `wait` without arguments below: stdout goes through `tee`, and a bare
# `wait` waits for the tee too (the command then hangs until it is killed).
# shellcheck disable=SC2317 # the step_* functions are called as "step_$name"
set -uo pipefail # no -e: a failing step is recorded and the others still run

cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
SELF=$REPO/bench/gpu-check.sh

# ---------------------------------------------------------------------------
# Configuration (the step processes, started as "$SELF __step ...", inherit it)
# ---------------------------------------------------------------------------
OUT=${OUT:-bench/out}
BUDGET_S=${BUDGET_S:-525}
DEVICE_DIR=${DEVICE_DIR:-$REPO/target/device}
ROADSEG_BIN=${ROADSEG_BIN:-$DEVICE_DIR/roadseg}
TEST_DIR=${TEST_DIR:-$DEVICE_DIR}
SHARED_TOOLS=${SHARED_TOOLS:-$DEVICE_DIR/shared-tools}
PYTHON=${PYTHON:-python3}
CKPT_DIR=${CKPT_DIR:-${TMPDIR:-/tmp}/roadseg-bench-ckpt}
FRAMES=${FRAMES:-300}
B0_COMPILE=${B0_COMPILE:-background}
NCU_CLOCK_CONTROL=${NCU_CLOCK_CONTROL:-base}
BUNDLED_SIZE=${BUNDLED_SIZE:-1024x576}
BUNDLED_FRAME=${BUNDLED_FRAME:-1280x720}
MIN_STEP_S=15   # a step that would get less is skipped
END_RESERVE_S=20 # kept for the bench summary, summary.md and the tarball
MEMTEST=cuda::ten_thousand_replays_do_not_grow_memory # tests/it/cuda.rs; asserts device-wide free memory
export ROADSEG_BIN PYTHON CKPT_DIR FRAMES
[ -n "${ITERS:-}" ] && export ITERS
[ -n "${WARMUP:-}" ] && export WARMUP
if [ -d /usr/local/cuda/lib64 ]; then # libcublasLt, libnvrtc of the CUDA install
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export ROADSEG_REPO=$REPO
case $B0_COMPILE in background | skip) ;; *) echo "B0_COMPILE must be background or skip" >&2; exit 2 ;; esac

if [ -z "${GPU_CHECK_WORK:-}" ]; then
  GPU_CHECK_WORK=$(mktemp -d "${TMPDIR:-/tmp}/roadseg-gpu-check.XXXXXX") || exit 1
fi
export GPU_CHECK_WORK
WORK=$GPU_CHECK_WORK
LOGS=$WORK/logs       # one log per step
ST=$WORK/steps        # one status line per step
BENCH=$WORK/bench     # bench/cuda.sh's OUT: torch-*.json, roadseg-*.json, summary.txt
NCU_DIR=$WORK/ncu

# ---------------------------------------------------------------------------
# Steps: each runs as its own process ("$SELF __step NAME ARGS"), under timeout.
# Exit 0 ok, 77 skipped (the reason is the log's last line), else failed.
# ---------------------------------------------------------------------------

step_header() {
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname) ($(nproc) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}'))"
  echo "kernel: $(uname -srm)"
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
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "python: $($PYTHON -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda, "transformers", transformers.__version__, "cuda_available", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  local ncu
  if ncu=$(find_ncu); then
    echo "ncu: $ncu $("$ncu" --version 2>&1 | tail -n 1)"
  else
    echo "ncu: not found"
  fi
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n 1 || echo 'not found')"
  echo
  echo "## target/device"
  ls -la "$DEVICE_DIR" "$SHARED_TOOLS" 2>&1
  echo
  echo "## CUDA libraries (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libcublasLt\.so|libnvrtc\.so' | head -n 12
  ls /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null
  echo
  echo "## nvidia-smi"
  nvidia-smi 2>&1 || true
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
  local root=$ROADSEG_SHARED/fixtures/segformer
  rm -rf "$root" && mkdir -p "$root" || return 1
  echo "$PYTHON $script public $root $SHARED_TOOLS"
  # The script writes each case folder; IMGDIR must hold the image as bdd.jpg.
  "$PYTHON" "$script" public "$root" "$SHARED_TOOLS" || return 1
  fixtures_complete "$ROADSEG_SHARED" || { echo "a case is missing under $root"; return 1; }
  du -sh "$root"/* "$root"
}

step_test() { # step_test MODULE ARGS...: $TEST_DIR/test-it --nocapture MODULE:: ARGS
  local exe=$TEST_DIR/test-it module=$1
  shift
  # --exact names a whole test path, which carries its module already.
  # "cuda" is every GPU test: cuda::, cuda_annotate::, cuda_attention::,
  # frame_path::cuda_frame_path, ... (any path with "cuda" in it) but the
  # NVRTC-only cuda_kernels::, which has its own step, and cli:: (it runs
  # the roadseg binary, which target/device does not carry).
  case " $* " in
    *" --exact "*) ;;
    *) if [ "$module" = cuda ]; then set -- cuda --skip cuda_kernels:: --skip cli:: "$@"; else set -- "$module::" "$@"; fi ;;
  esac
  if [ ! -x "$exe" ]; then
    echo "$exe not found: build it here with ./tools/device-build.sh and carry target/device"
    return 2
  fi
  local out=$WORK/tmp.$$.test
  echo "ROADSEG_REPO=$ROADSEG_REPO ROADSEG_SHARED=$ROADSEG_SHARED $exe --nocapture $*"
  "$exe" --nocapture "$@" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ] && grep -q '^running 0 tests' "$out"; then
    echo "no test ran (a filter that matches nothing?)"
    rc=3
  fi
  rm -f "$out"
  return "$rc"
}

step_ckpt() { # step_ckpt ARCH: the random checkpoint bench/cuda.sh uses (same arguments as its ckpt step)
  local arch=$1 dir=$CKPT_DIR/$1
  if [ -f "$dir/config.json" ] && [ -f "$dir/model.safetensors" ]; then
    echo "$dir exists"
    return 0
  fi
  rm -rf "$dir" "$dir.part"
  mkdir -p "$CKPT_DIR"
  # Into .part first: a step killed by its timeout leaves no half checkpoint
  # that bench/cuda.sh would take for a complete one.
  "$PYTHON" bench/make_random_checkpoint.py --arch "$arch" --labels 19 --dtype f16 --seed 0 --out "$dir.part" &&
    mv "$dir.part" "$dir"
}

step_bundled() { # step_bundled PRESET FRAMES: roadseg bench of the bundled model
  local preset=$1 n=$2 json=$BENCH/bundled-$1.json
  if [ ! -x "$ROADSEG_BIN" ]; then
    echo "$ROADSEG_BIN not found: build it here with ./tools/device-build.sh and carry target/device"
    return 2
  fi
  mkdir -p "$BENCH"
  local cmd=("$ROADSEG_BIN" bench --model models/roadseg-camvid --device cuda --precision fp16
    --size "$BUNDLED_SIZE" --frame "$BUNDLED_FRAME" --frames "$n" --preset "$preset")
  echo "${cmd[*]}"
  local line
  line=$("${cmd[@]}") || { local rc=$?; echo "roadseg bench exited $rc"; return "$rc"; }
  echo "$line"
  echo "$line" | tail -n 1 >"$json"
}

step_ncu() {
  local ncu
  if ! ncu=$(find_ncu); then
    echo "skipped: ncu (Nsight Compute) not found on PATH, in /usr/local/cuda/bin or /opt/nvidia/nsight-compute (set NCU)"
    return 77
  fi
  if [ ! -x "$ROADSEG_BIN" ]; then
    echo "$ROADSEG_BIN not found: build it here with ./tools/device-build.sh and carry target/device"
    return 2
  fi
  if [ ! -f "$CKPT_DIR/b5/model.safetensors" ]; then
    echo "$CKPT_DIR/b5 missing (ckpt-b5 failed?): making it"
    step_ckpt b5 || return 1
  fi
  mkdir -p "$NCU_DIR"
  local rep=$NCU_DIR/b5-1024x1024 clock=$NCU_CLOCK_CONTROL
  # One frame, no warm-up, no graph: the profile holds exactly one forward
  # (plus the frame's pre/postprocess kernels), each kernel timed alone.
  local app=("$ROADSEG_BIN" bench --model "$CKPT_DIR/b5" --size 1024x1024 --frame 1024x1024
    --frames 1 --warmup 0 --workers 1 --device cuda --precision fp16 --no-graph)
  local prof=("$ncu" --target-processes all --metrics gpu__time_duration.sum -f -o "$rep")
  echo "${prof[*]} --clock-control $clock ${app[*]}"
  if ! "${prof[@]}" --clock-control "$clock" "${app[@]}"; then
    [ "$clock" = none ] && return 1
    clock=none
    echo "ncu failed with --clock-control $NCU_CLOCK_CONTROL; again with --clock-control none (the GPU's own clocks)"
    "${prof[@]}" --clock-control none "${app[@]}" || return 1
  fi
  echo "$clock" >"$NCU_DIR/clock-control.txt"
  local csv=$NCU_DIR/b5-1024x1024.csv
  if ! "$ncu" --import "$rep.ncu-rep" --csv --page raw --print-units base --print-kernel-base function >"$csv"; then
    echo "ncu --import with --print-units/--print-kernel-base failed; plain --csv --page raw"
    "$ncu" --import "$rep.ncu-rep" --csv --page raw >"$csv" || return 1
  fi
  python3 - "$csv" "$clock" >"$NCU_DIR/b5-1024x1024.md" <<'EOF' || return 1
import collections, csv, re, sys
path, clock = sys.argv[1], sys.argv[2]
rows = [r for r in csv.reader(open(path, newline="")) if r]
hi = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if hi is None:
    sys.exit(f"{path}: no 'Kernel Name' column")
hdr, data = rows[hi], rows[hi + 1:]
k = hdr.index("Kernel Name")
t = next(i for i, h in enumerate(hdr) if h.startswith("gpu__time_duration"))
to_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
scale = 1e-3  # ncu's base unit for durations is ns
m = re.search(r"\[(\w+)\]", hdr[t])
if m:
    scale = to_us.get(m.group(1), scale)
if data and data[0][k] == "":  # the units row
    scale = to_us.get(data[0][t].strip(), scale)
    data = data[1:]
kernels = []  # (name, us) in launch order
for r in data:
    try:
        kernels.append((re.sub(r"\(.*$", "", r[k]).strip() or "?", float(r[t].replace(",", "")) * scale))
    except (ValueError, IndexError):
        continue
# The frame starts with the preprocess kernel; anything before it ran while
# the model loaded (weight conversion), not in the forward.
first = next((i for i, (n, _) in enumerate(kernels) if n.startswith("preprocess")), None)
dropped = kernels[:first] if first else []
if first:
    kernels = kernels[first:]
calls, total = collections.Counter(), collections.Counter()
for name, v in kernels:
    calls[name] += 1
    total[name] += v
def family(n):
    if re.match(r"(nvjet|sm\d+_|cutlass|ampere_|hopper_|gemm|xmma|cublas)", n, re.I):
        return "cuBLASLt GEMM kernels"
    return re.sub(r"_(f16|bf16|f32|half|bfloat16|float)$", "", n)
fam_calls, fam_total = collections.Counter(), collections.Counter()
for n in total:
    fam_calls[family(n)] += calls[n]
    fam_total[family(n)] += total[n]
s = sum(total.values())
print(f"B5 1024x1024, one roadseg forward (roadseg bench --frames 1 --warmup 0 --no-graph) under ncu "
      f"--clock-control {clock}: {sum(calls.values())} kernels, {s:.0f} us in all "
      f"(kernel time, each kernel timed alone; {'base clocks, slower than a normal run' if clock == 'base' else 'the GPU own clocks'}).")
if dropped:
    print(f"Left out: {len(dropped)} kernels ({sum(v for _, v in dropped):.0f} us) launched before the frame's preprocess kernel, while the model loaded.")
elif first is None:
    print("No preprocess kernel found: every profiled kernel is counted, model loading included.")
print()
print("By kernel family:")
print()
print("| kernel | calls | total us | share | mean us |")
print("|---|---:|---:|---:|---:|")
for n, v in fam_total.most_common():
    print(f"| {n} | {fam_calls[n]} | {v:.1f} | {100 * v / s if s else 0:.1f}% | {v / fam_calls[n]:.1f} |")
print()
print("By kernel (top 30):")
print()
print("| kernel | calls | total us | share | mean us |")
print("|---|---:|---:|---:|---:|")
top = total.most_common()
for n, v in top[:30]:
    print(f"| {n} | {calls[n]} | {v:.1f} | {100 * v / s if s else 0:.1f}% | {v / calls[n]:.1f} |")
if len(top) > 30:
    rest = sum(v for _, v in top[30:])
    print(f"| ({len(top) - 30} other kernels) | {sum(calls[n] for n, _ in top[30:])} | {rest:.1f} | {100 * rest / s if s else 0:.1f}% | |")
EOF
  cat "$NCU_DIR/b5-1024x1024.md"
}

step_bench_summary() {
  # B0 in background mode: eager + channels_last in one JSON, the compiled
  # configuration in another; bench/cuda.sh's summary reads one per case.
  mkdir -p "$BENCH"
  python3 - "$WORK/bench-b0-eager/torch-b0-1024x1024.json" "$WORK/bench-b0-compile/torch-b0-1024x1024.json" \
    "$BENCH/torch-b0-1024x1024.json" <<'EOF'
import json, os, sys
parts = []
for p in sys.argv[1:3]:
    try:
        with open(p) as f:
            parts.append(json.load(f))
    except (OSError, ValueError):
        pass
if not parts:
    sys.exit(0)
meta = parts[0]["meta"]  # the eager run's GEMM rate and floor where there is one
results = []
for part in parts:
    for r in part.get("results", []):
        if "median_ms" in r and meta.get("floor_ms"):
            r["x_floor"] = r["median_ms"] / meta["floor_ms"]
        results.append(r)
with open(sys.argv[3], "w") as f:
    json.dump(dict(meta=meta, results=results), f, indent=1)
print(f"merged {len(results)} B0 results into {sys.argv[3]}")
EOF
  # PYTHON=true: bench/cuda.sh's header then skips its torch import (seconds);
  # its summary table is plain python3.
  env OUT="$BENCH" PYTHON=true bench/cuda.sh summary
}

# ---------------------------------------------------------------------------
# summary.md (plain python3; rewritten after every step)
# ---------------------------------------------------------------------------
write_summary() {
  local tmp=$WORK/summary.md.tmp
  if ! python3 - "$WORK" "$BUDGET_S" "$B0_COMPILE" "$FIXTURES" "$BUNDLED_SIZE" "$BUNDLED_FRAME" "${1:-running}" >"$tmp" 2>"$WORK/summary-error.txt" <<'EOF'; then
import glob, json, os, re, sys, time
work, budget, b0mode, fixtures, bsize, bframe, state = sys.argv[1:8]
logs, bench = os.path.join(work, "logs"), os.path.join(work, "bench")
def read(p, default=""):
    try:
        with open(p, errors="replace") as f:
            return f.read()
    except OSError:
        return default
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
start = float(read(os.path.join(work, "start"), "0") or 0)
steps = []
for p in sorted(glob.glob(os.path.join(work, "steps", "[0-9]*"))):
    f = read(p).rstrip("\n").split("\t")
    if len(f) >= 8:
        steps.append(dict(name=f[0], status=f[1], rc=f[2], secs=f[3], limit=f[4], t0=f[5], t1=f[6], note=f[7]))
header = read(os.path.join(logs, "header.log"))
key = {}
for line in header.splitlines():
    m = re.match(r"(\w+): (.*)", line)
    if m and m.group(1) not in key:
        key[m.group(1)] = m.group(2)
out = []
p = out.append
title = key.get("gpu", "?").split(",")[0] if "gpu" in key else "?"
p(f"# roadseg GPU check: {title}")
p("")
p(f"`bench/gpu-check.sh`, {key.get('date', time.strftime('%FT%TZ', time.gmtime()))}; state: **{state}**"
  + (f", {time.time() - start:.0f} s of the {budget} s budget used" if start else ""))
p("")
for k in ("gpu", "python", "build", "checkout", "ncu", "host"):
    if k in key:
        p(f"- {k}: {key[k]}")
p(f"- fixtures: {'regenerated with make_segformer_goldens.py' if fixtures == 'regen' else 'reused from ROADSEG_SHARED'}; B0 compile mode: {b0mode}")
p("")
p("## Steps")
p("")
p("| step | status | seconds | limit | note |")
p("|---|---|---:|---:|---|")
def test_note(name):
    text = read(os.path.join(logs, name + ".log"))
    skips = [l for l in text.splitlines() if "SKIP" in l]
    res = [l.strip() for l in text.splitlines() if l.startswith("test result:")]
    bits = []
    if res:
        bits.append(res[-1].replace("test result: ", "").split("; finished")[0])
    if skips:
        bits.append(f"**{len(skips)} SKIP lines**")
    return "; ".join(bits)
def why(name):
    """The line of a step's log that most likely says what went wrong."""
    lines = [l.strip() for l in read(os.path.join(logs, name + ".log")).splitlines() if l.strip()]
    for l in reversed(lines):
        if re.search(r"Error|error:|panicked|not found|missing|skipped:|FAILED|timed out", l) and not l.startswith("# failed"):
            return l[:160]
    return lines[-1][:160] if lines else ""
for s in steps:
    st = s["status"]
    shown = {"ok": "ok", "skipped": "skipped"}.get(st, f"**{st}**")
    if st == "FAILED":
        shown += f" (exit {s['rc']})"
    notes = [s["note"]]
    if s["name"].startswith("test-"):
        notes.insert(0, test_note(s["name"]))
    if st != "ok":
        notes.append(why(s["name"]))
    note = "; ".join(x for x in notes if x).replace("|", "\\|")
    p(f"| {s['name']} | {shown} | {s['secs']} | {s['limit']} | {note} |")
timed_out = [s["name"] for s in steps if s["status"] == "TIMEOUT"]
failed = [s["name"] for s in steps if s["status"] == "FAILED"]
skipped = [s["name"] for s in steps if s["status"] == "skipped"]
p("")
p(f"Timed out: {', '.join(timed_out) or 'none'}. Failed: {', '.join(failed) or 'none'}. Skipped: {', '.join(skipped) or 'none'}.")
if "torch-b0-compile" in timed_out:
    p("")
    p("The B0 torch.compile (max-autotune) did not finish within the budget, so the B0 'torch compile' column is empty; "
      "`ROADSEG_BIN=target/device/roadseg bench/cuda.sh ckpt torch-b0 summary` as a command of its own measures it "
      "(390 s of compile on an H100 before).")
ev = read(os.path.join(work, "bg-events")).strip()
if ev:
    p("")
    p("B0 background compile events (seconds since the start): " + "; ".join(
        f"{float(l.split()[0]) - start:.0f} {' '.join(l.split()[1:])}" for l in ev.splitlines() if l.split()))
p("")
p("## CUDA tests")
for name in ("test-cuda_kernels", "test-cuda-memory", "test-cuda", "test-parity"):
    text = read(os.path.join(logs, name + ".log"))
    if not text:
        continue
    keep = [l for l in text.splitlines() if re.search(
        r"relative L2|max diff|device free|class agreement|^GPU:|^NVRTC|SKIP|panicked|test result|FAILED|failures:|not found|error", l)]
    p("")
    p(f"### {name}")
    p("")
    p("```")
    out.extend(keep[:80] or text.strip().splitlines()[-15:])
    p("```")
p("")
p("## bench/cuda.sh (PyTorch vs roadseg, random weights, batch 1, fp16)")
p("")
summ = read(os.path.join(bench, "summary.txt")).strip()
p("```")
p(summ or "(no summary.txt: the bench summary step did not run or failed)")
p("```")
notes = []
for case in ("b5-1024x1024", "b0-1024x1024"):
    t = load(os.path.join(bench, f"torch-{case}.json")) or {}
    for r in t.get("results", []):
        if r.get("compiled"):
            notes.append(f"{case} torch compile: mode {r.get('compile_mode')}, compile {r.get('compile_s') or 0:.0f} s, "
                         f"CUDA graphs {r.get('cudagraphs')}, graph breaks {r.get('graph_breaks', '?')}")
        elif r.get("config") == "compile_max_autotune_fp16" and "error" in r:
            notes.append(f"{case} torch compile: FAILED ({r['error'][:200]})")
for case in ("b5-1024x1024", "b0-1024x1024", "b0-1024x576"):
    r = load(os.path.join(bench, f"roadseg-{case}.json"))
    if r and "median_ms" in r:
        w = f"; {r['workers']} workers: {r.get('fps_all_workers')} fps in all" if (r.get("workers") or 1) > 1 else ""
        notes.append(f"{case} roadseg: frame {r['median_ms']} ms (p90 {r.get('p90_ms')}), model {r.get('model_median_ms')} ms, "
                     f"{r.get('fps')} fps{w}")
for case in ("b5-1024x1024", "b0-1024x1024", "b0-1024x576"):
    a = load(os.path.join(bench, f"roadseg-{case}.json")) or {}
    f = load(os.path.join(work, "bench-fused", f"roadseg-{case}.json")) or {}
    if a.get("median_ms") and f.get("median_ms"):
        notes.append(f"{case} roadseg with the fused decode tail (ROADSEG_CUDA_FUSED_DECODER=1, 100 frames): frame {f['median_ms']} ms "
                     f"vs {a['median_ms']} ms separate ops ({f['median_ms'] / a['median_ms']:.2f}x)")
    sp = load(os.path.join(work, "bench-split", f"roadseg-{case}.json")) or {}
    if a.get("median_ms") and sp.get("median_ms"):
        notes.append(f"{case} roadseg with split-KV attention (ROADSEG_CUDA_SPLIT_ATTENTION=1, 100 frames): frame {sp['median_ms']} ms "
                     f"(model {sp.get('model_median_ms')} ms) vs {a['median_ms']} ms (model {a.get('model_median_ms')} ms) flash "
                     f"({sp['median_ms'] / a['median_ms']:.2f}x)")
    elif sp.get("error"):
        notes.append(f"{case} roadseg with split-KV attention: FAILED ({sp['error'][:200]})")
for n in notes:
    p(f"- {n}")
p("")
p(f"## Bundled model (models/roadseg-camvid), {bframe} frames at {bsize}, CUDA fp16")
p("")
fast, acc = load(os.path.join(bench, "bundled-fast.json")), load(os.path.join(bench, "bundled-accurate.json"))
p("| preset | frame median ms | p90 ms | model median ms | fps | frames |")
p("|---|---:|---:|---:|---:|---:|")
for name, r in (("fast", fast), ("accurate", acc)):
    if r and "median_ms" in r:
        p(f"| {name} | {r['median_ms']} | {r.get('p90_ms')} | {r.get('model_median_ms')} | {r.get('fps')} | {r.get('frames')} |")
    else:
        p(f"| {name} | - | - | - | - | - |")
if fast and acc and fast.get("median_ms") and acc.get("median_ms"):
    ratio = acc["median_ms"] / fast["median_ms"]
    p("")
    p(f"accurate / fast = **{ratio:.2f}x** (target <= 3.5x: {'met' if ratio <= 3.5 else 'NOT met'})")
p("")
p("## Nsight Compute: where B5 1024x1024 spends its kernel time")
p("")
p(read(os.path.join(work, "ncu", "b5-1024x1024.md")).strip() or "(no table: see the ncu step above)")
p("")
p("## Files")
p("")
p("results.tar.gz (beside this file) holds env/step logs (logs/), bench/cuda.sh's JSONs and summary.txt (bench/), "
  "the ncu report, CSV and table (ncu/); gpu-check.log is the console log.")
print("\n".join(out))
EOF
    { # never lose the step table to a bug in the above
      echo "# roadseg GPU check (summary.md writer failed: the step table is raw)"
      echo '```'
      cat "$WORK/summary-error.txt" "$ST"/[0-9]* 2>/dev/null
      echo '```'
    } >"$tmp"
  fi
  mkdir -p "$OUT"
  cp "$tmp" "$OUT/summary.md.part" && mv "$OUT/summary.md.part" "$OUT/summary.md"
}

snapshot() { # summary.md and results.tar.gz as they stand (a kill later still leaves them)
  write_summary "${1:-running}"
  # Not the fixtures (91 MB, regenerated); the rest is logs, JSONs and the ncu report.
  if tar czf "$WORK/results.tar.gz.part" -C "$WORK" --exclude=./shared --exclude='./*.part' --exclude='./*.tmp' --exclude=./results.tar.gz . 2>/dev/null; then
    if [ "$(stat -c %s "$WORK/results.tar.gz.part")" -gt $((15 * 1024 * 1024)) ]; then # a device run returns files <= 16 MiB
      tar czf "$WORK/results.tar.gz.part" -C "$WORK" --exclude=./shared --exclude='./*.part' --exclude='./*.tmp' --exclude=./results.tar.gz --exclude='*.ncu-rep' . 2>/dev/null
    fi
    cp "$WORK/results.tar.gz.part" "$OUT/results.tar.gz.part" && mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
  fi
}

# ---------------------------------------------------------------------------
# Step runner and the background B0 compile
# ---------------------------------------------------------------------------
now() { date +%s; }
left() { echo $((DEADLINE - END_RESERVE_S - $(now))); }
stamp() { echo "$(date -u +%T) +$(($(now) - START))s"; }

run_step() { # run_step INDEX NAME LIMIT CMD...: CMD under timeout, output to $LOGS/NAME.log, status to $ST
  local idx=$1 name=$2 limit=$3
  shift 3
  local log=$LOGS/$name.log stf
  stf=$ST/$(printf %02d "$idx")-$name
  local l t
  l=$(left)
  t=$((limit < l ? limit : l))
  if ((t < MIN_STEP_S)); then
    echo "skipped: no time left (${l}s before the deadline)" >"$log"
    printf '%s\tskipped\t-\t0\t%s\t%s\t%s\t%s\n' "$name" "$limit" "$EPOCHREALTIME" "$EPOCHREALTIME" "no time left" >"$stf"
    echo "== $(stamp) $name: skipped, no time left"
    return 0
  fi
  echo "== $(stamp) $name (limit ${t}s)${NOTE:+ [$NOTE]}"
  local t0=$EPOCHREALTIME
  timeout -k 10 "$t" "$@" >"$log" 2>&1 </dev/null &
  local tp=$!
  echo "$tp" >"$ST/$name.pid" # timeout leads its own process group: -$tp signals the whole step
  wait "$tp"
  local rc=$? t1=$EPOCHREALTIME status
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124 | 137 | 143) status=TIMEOUT ;;
    *) status=FAILED ;;
  esac
  local dt
  dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$dt" "$t" "$t0" "$t1" "${NOTE:-}" >"$stf"
  local msg
  msg="== $(stamp) $name: $status (exit $rc, ${dt}s)"
  if [ "$status" != ok ]; then msg+=$'\n'$(tail -n 6 "$log" | sed 's/^/   | /'); fi
  echo "$msg" # one write: parallel steps do not interleave their tails
  return 0
}

STEP_N=0
par_step() { # par_step NAME LIMIT CMD...: in the background; the caller waits for $!
  STEP_N=$((STEP_N + 1))
  run_step "$STEP_N" "$@" &
}

BG_SUB='' WATCH_PID=''
bg_running() { [ -n "$BG_SUB" ] && kill -0 "$BG_SUB" 2>/dev/null; }
bg_signal() { # bg_signal SIG EVENT: to the background compile's whole process group
  local pg
  pg=$(cat "$ST/torch-b0-compile.pid" 2>/dev/null) || return 0
  [ -n "$pg" ] && kill "-$1" -- "-$pg" 2>/dev/null && [ -n "$2" ] && echo "$EPOCHREALTIME $2" >>"$WORK/bg-events"
  return 0
}
bg_gate() { # between steps: once its compile is done, the B0 timing runs alone
  if bg_running && [ -e "$WORK/bg-compiled" ]; then
    echo "== $(stamp) B0 compile done: waiting while its timing runs alone"
    bg_signal CONT "resumed for its timing (alone)"
    wait "$BG_SUB"
    BG_SUB=
    echo "== $(stamp) B0 torch.compile step finished"
  fi
}

fg_step() { # fg_step NAME LIMIT CMD...: one step in the foreground
  bg_gate
  local NOTE=
  if bg_running; then
    if ((BG_PAUSED)); then
      NOTE="B0 compile paused meanwhile"
    else
      NOTE="overlapped the B0 torch.compile (background, nice 19)"
    fi
  fi
  STEP_N=$((STEP_N + 1))
  run_step "$STEP_N" "$@"
  bg_gate
  snapshot
}

# One pause for all the steps that must not share the GPU: each pause may land
# inside one of Inductor's autotuning timings (that candidate then looks slow
# and is not chosen), so pause once rather than per step.
BG_PAUSED=0
bg_pause() { bg_gate; if bg_running; then bg_signal STOP "$1"; BG_PAUSED=1; fi; }
bg_resume() { if ((BG_PAUSED)); then BG_PAUSED=0; bg_running && bg_signal CONT "$1"; fi; return 0; }

bg_start() {
  STEP_N=$((STEP_N + 1))
  local log=$LOGS/torch-b0-compile.log
  # Limit: up to the deadline (its own pauses do not extend it).
  NOTE="background, nice 19" run_step "$STEP_N" torch-b0-compile "$(left)" \
    nice -n 19 env OUT="$WORK/bench-b0-compile" TORCH_CONFIGS=compile_max_autotune_fp16 COMPILE_MODE=max-autotune \
    bench/cuda.sh torch-b0 &
  BG_SUB=$!
  echo "$EPOCHREALTIME started" >>"$WORK/bg-events"
  # Watcher: when torch_segformer.py logs the end of its compile, pause it
  # until the foreground is between steps (bg_gate lets it time alone).
  (
    while kill -0 "$BG_SUB" 2>/dev/null; do
      if grep -q 'first call (compile) took' "$log" 2>/dev/null; then
        bg_signal STOP "compile done, paused until the step in progress ends"
        echo "$EPOCHREALTIME" >"$WORK/bg-compiled"
        exit 0
      fi
      sleep 0.2
    done
  ) &
  WATCH_PID=$!
}

bg_finish() { # at the end: let it finish by the deadline, else stop it
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null
  bg_running || return 0
  echo "== $(stamp) waiting for the B0 torch.compile (until $((DEADLINE - END_RESERVE_S - START))s)"
  [ -e "$WORK/bg-compiled" ] && echo "   (compile done; its timing runs alone)"
  bg_signal CONT "" # in case the watcher stopped it after the last step
  while bg_running && (($(left) > 0)); do sleep 1; done
  if bg_running; then
    bg_signal TERM "stopped at the deadline"
    sleep 3
    bg_signal KILL "killed at the deadline"
  fi
  wait "$BG_SUB"
  BG_SUB=
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
# Fixtures: reuse ROADSEG_SHARED when it already holds them, else regenerate
# into $WORK/shared (the tests read $ROADSEG_SHARED/fixtures/segformer/<case>).
if [ -z "${FIXTURES:-}" ]; then
  if [ -n "${ROADSEG_SHARED:-}" ] && fixtures_complete "$ROADSEG_SHARED"; then
    FIXTURES=reuse
  else
    FIXTURES=regen
    ROADSEG_SHARED=$WORK/shared
  fi
fi
export FIXTURES ROADSEG_SHARED

if [ "${1:-}" = __step ]; then
  name=$2
  shift 2
  "step_$name" "$@"
  exit $?
fi

# A GPU_CHECK_WORK given again starts clean (stale step files would show up).
rm -rf "$LOGS" "$ST" "$BENCH" "$NCU_DIR" "$WORK"/bench-b0-* "$WORK"/bench-fused "$WORK"/bench-split "$WORK"/bg-* "$WORK"/summary*
mkdir -p "$OUT" "$LOGS" "$ST" "$BENCH" "$NCU_DIR" || exit 1
OUT=$(cd "$OUT" && pwd)
START=$(now)
DEADLINE=$((START + BUDGET_S))
echo "$START" >"$WORK/start"
exec > >(tee "$OUT/gpu-check.log") 2>&1
TEE_PID=$!

echo "# $(date -u +%FT%TZ) bench/gpu-check.sh: budget ${BUDGET_S}s, raw files in $WORK, results in $OUT"
fg_step header 60 "$SELF" __step header
cp "$LOGS/header.log" "$WORK/env.txt"
sed -n '1,12p' "$LOGS/header.log"

# Phase A: CPU work in parallel with the one test that must have the GPU to itself.
par_step test-cuda-memory 150 "$SELF" __step test cuda --test-threads 1 --exact "$MEMTEST"
p_mem=$!
par_step ckpt-b0 150 "$SELF" __step ckpt b0
p_b0=$!
par_step fixtures 240 "$SELF" __step fixtures
p_fix=$!
par_step test-cuda_kernels 150 "$SELF" __step test cuda_kernels
p_ker=$!
par_step ckpt-b5 240 "$SELF" __step ckpt b5
p_b5=$!
wait "$p_mem" "$p_b0"
if [ "$B0_COMPILE" = background ]; then bg_start; fi
wait "$p_fix" "$p_ker" "$p_b5"
snapshot

# Phase B: the other CUDA tests (GPU) beside the CPU parity tests.
par_step test-cuda 240 "$SELF" __step test cuda --test-threads 1 --skip "$MEMTEST"
p_cuda=$!
par_step test-parity 240 "$SELF" __step test parity
p_par=$!
wait "$p_cuda" "$p_par"
snapshot

# The PyTorch baselines (bench/cuda.sh) may overlap the B0 compile ...
fg_step torch-b5 240 env OUT="$BENCH" COMPILE_MODE=reduce-overhead bench/cuda.sh torch-b5
fg_step torch-b0-eager 120 env OUT="$WORK/bench-b0-eager" TORCH_CONFIGS=eager_fp16,channels_last_sdpa_fp16 bench/cuda.sh torch-b0
# ... roadseg's own numbers and the kernel profile may not: it is paused.
bg_pause "paused for roadseg, bundled-*, ncu"
fg_step roadseg 180 env OUT="$BENCH" bench/cuda.sh roadseg
fg_step bundled-fast 60 "$SELF" __step bundled fast 300
fg_step bundled-accurate 90 "$SELF" __step bundled accurate 100
fg_step ncu 180 "$SELF" __step ncu
# Split-KV attention (opt-in until timed): B5 alone, where attention was
# 7.5 of 15.4 ms; short, so the budget is unchanged.
fg_step roadseg-split-attention 45 env OUT="$WORK/bench-split" FRAMES=100 ROADSEG_CUDA_SPLIT_ATTENTION=1 bench/cuda.sh roadseg-b5
# Last of the GPU-alone steps: it only gets what the budget has left.
fg_step roadseg-fused-decoder 75 env OUT="$WORK/bench-fused" FRAMES=100 ROADSEG_CUDA_FUSED_DECODER=1 bench/cuda.sh roadseg
bg_resume "resumed (no foreground step left)"
bg_finish
# Past the deadline if need be: a few seconds, no torch.
END_RESERVE_S=-30 MIN_STEP_S=1 fg_step bench-summary 30 "$SELF" __step bench_summary

total=$(($(now) - START))
snapshot "finished in ${total}s"
echo "# done in ${total}s (budget ${BUDGET_S}s): $OUT/summary.md, $OUT/results.tar.gz, $OUT/gpu-check.log"
echo
cat "$OUT/summary.md"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit 0
