#!/usr/bin/env bash
# Installs what roadseg needs to build and run on a fresh Debian/Ubuntu machine:
# GStreamer (dev files, plugins incl. x264 and the RTSP server), ffmpeg (ffprobe
# for the tests), Chromium (the status page's browser test; headless) and a
# Rust toolchain when cargo is missing.
# It says what it installs before apt runs, and names each package as apt sets
# it up: on a fresh machine this takes a few minutes.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential pkg-config ca-certificates curl
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstrtspserver-1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools gstreamer1.0-rtsp
  ffmpeg chromium
)
# Only the missing ones are named (apt would skip the others anyway).
# shellcheck source=tools/apt-missing.sh
. "$(dirname "$0")/apt-missing.sh"
mapfile -t missing < <(apt_missing "${packages[@]}")
if [ "${#missing[@]}" = 0 ]; then
  echo "roadseg dependencies: all ${#packages[@]} packages are already installed"
else
  echo "roadseg dependencies: installing ${#missing[@]} of ${#packages[@]} packages with apt (with what they need, a few minutes on a fresh machine):"
  echo "  ${missing[*]}"
  echo "updating the package lists (apt-get update) ..."
  $SUDO apt-get update -qq
  echo "installing ..."
  # apt's own output is long; each package it sets up is named as it goes.
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" |
    awk '/^Setting up / { print "  set up " $3; fflush() }'
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "installing a Rust toolchain with rustup (minimal profile, into ~/.cargo) ..."
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
echo "roadseg dependencies installed"
