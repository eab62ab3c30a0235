#!/usr/bin/env bash
# CI check of the Debian package: build it, install it with dpkg -i on this
# machine, check the shipped config with the installed binary from a folder
# that holds no model (so the model is found under /usr/share/roadseg), run
# one inference with the default model, then remove the package again.
# Needs root (CI runs as root) and the runtime packages tools/install-deps.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/build-deb.sh
deb=$(ls target/debian/roadseg_*.deb | tail -n 1)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO dpkg -i "$deb"
trap '$SUDO dpkg --purge roadseg >/dev/null' EXIT
work=$(mktemp -d)
cd "$work"
/usr/bin/roadseg --version
/usr/bin/roadseg check-config /etc/roadseg/roadseg.toml
# The shipped example too, from the package's layout (its model by name: /usr/share/roadseg/models).
env -u ROADSEG_MODEL /usr/bin/roadseg check-config /usr/share/doc/roadseg/example-cameras.toml >/dev/null
ffmpeg -loglevel error -f lavfi -i testsrc=size=320x180 -frames:v 1 frame.png
env -u ROADSEG_MODEL /usr/bin/roadseg infer --device cpu --image frame.png --size 320x192 | tee infer.txt
grep -q "road" infer.txt
getent passwd roadseg >/dev/null || { echo "test-deb: the roadseg account was not created" >&2; exit 1; }
[ "$(stat -c %G /etc/roadseg/roadseg.toml)" = roadseg ] || { echo "test-deb: /etc/roadseg/roadseg.toml is not group roadseg" >&2; exit 1; }
cd /
rm -rf "$work"
echo "test-deb: $deb installs, its config checks and its model runs"
