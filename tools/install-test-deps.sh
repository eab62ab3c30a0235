#!/usr/bin/env bash
# Installs what the CPU tests need beyond tools/install-deps.sh, so that on a
# fresh machine only the tests that need a GPU skip:
#   prometheus         promtool lints /metrics (tests/it/daemon.rs)
#   mosquitto(-clients) the real broker the MQTT test talks to
#   python3-numpy python3-pil  the kernel emulations and tools/train/augment.py --selftest
#   chromium-driver    drives headless Chromium for the live view test (tests/it/http.rs)
#   NVRTC              (tools/install-nvrtc.sh, a pip wheel; no GPU needed) compiles
#                      every CUDA kernel in tests/it/cuda_kernels.rs
# Each is best-effort: what fails to install is named, and its tests skip,
# saying so in tools/test-skips.sh's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
packages=(prometheus mosquitto mosquitto-clients python3-numpy python3-pil chromium-driver)
# shellcheck source=tools/apt-missing.sh
. tools/apt-missing.sh
mapfile -t missing < <(apt_missing "${packages[@]}")
if [ "${#missing[@]}" = 0 ]; then
  echo "roadseg test dependencies: all ${#packages[@]} packages are already installed"
else
  echo "roadseg test dependencies: installing ${missing[*]} with apt ..."
  # The tests run their own brokers on free ports, so the packaged services
  # must not start at install: policy-rc.d (exit 101) tells invoke-rc.d to
  # leave them down, and is removed again afterwards unless it was already there.
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy" && made_policy=1
  fi
  # Lists first only when apt cannot find a package (a fresh container has none).
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    $SUDO apt-get update -qq
  fi
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" | awk '/^Setting up / { print "  set up " $3; fflush() }' ||
    echo "warning: could not install ${missing[*]}; the tests that need them will skip" >&2
  if [ "$made_policy" = 1 ]; then $SUDO rm -f "$policy"; fi
fi
echo "installing NVRTC (tools/install-nvrtc.sh) ..."
if lib=$(./tools/install-nvrtc.sh); then
  echo "NVRTC in $lib (tools/test-skips.sh puts it on LD_LIBRARY_PATH)"
else
  echo "warning: could not install NVRTC; the kernel compilation test will skip" >&2
fi
echo "roadseg test dependencies installed"
