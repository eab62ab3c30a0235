#!/usr/bin/env bash
# Installs NVIDIA's runtime compiler (NVRTC, from the nvidia-cuda-nvrtc-cu12
# wheel) into a private virtualenv, with no GPU or driver needed, so that
# tests/it/cuda_kernels.rs can compile every kernel in kernels/ for sm_80/sm_90,
# and numpy beside it for the kernels' lane-by-lane emulations (tools/emulate_*.py).
# Prints the library folder to put on LD_LIBRARY_PATH. Usage:
#   export LD_LIBRARY_PATH="$(tools/install-nvrtc.sh):${LD_LIBRARY_PATH:-}"
set -euo pipefail
VENV="${NVRTC_VENV:-$HOME/.cache/roadseg/nvrtc-venv}"
VERSION="${NVRTC_VERSION:-12.9.86}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv python3-pip >&2
fi
if [ ! -x "$VENV/bin/pip" ]; then
  python3 -m venv "$VENV" >&2
fi
"$VENV/bin/pip" install -q --disable-pip-version-check "nvidia-cuda-nvrtc-cu12==$VERSION" >&2
# numpy for tools/emulate_*.py, which tests/it/cuda_kernels.rs runs (it skips them without numpy).
"$VENV/bin/pip" install -q --disable-pip-version-check numpy >&2 || echo "warning: numpy not installed; the kernel emulations will skip" >&2
lib=$(ls -d "$VENV"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib | sed -n 1p)
test -e "$lib/libnvrtc.so.12"
echo "$lib"
