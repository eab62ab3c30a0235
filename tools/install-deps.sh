#!/usr/bin/env bash
# Installs what roadseg needs to build and run on a fresh Debian/Ubuntu machine:
# GStreamer (dev files, plugins incl. x264 and the RTSP server), ffmpeg (ffprobe
# for the tests), Chromium (the status page's browser test; headless) and a
# Rust toolchain when cargo is missing.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential pkg-config ca-certificates curl \
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstrtspserver-1.0-dev \
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad \
  gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools gstreamer1.0-rtsp \
  ffmpeg chromium >/dev/null
if ! command -v cargo >/dev/null 2>&1; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
echo "roadseg dependencies installed"
